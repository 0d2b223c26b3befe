// Private: the agent's stdout and stderr, written without ever blocking the
// event loop.
//
// PID 1 must keep reaping, forwarding signals and timing the grace period even
// when whoever reads the container's output stalls (a log pipe under
// backpressure). So worker lines and trainlet's own log lines go into an
// OutputSink: a queue drained by non-blocking writes on a private open file
// description of the same pipe or terminal (/proc/self/fd/N), so the
// O_NONBLOCK flag never leaks to other processes sharing the fd. When the queue
// passes a high-water mark, producers (the worker pumps) pause reading until it
// drains: the workers feel the backpressure, not the agent. Regular files are
// written directly (they do not stall). One event-loop thread only.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <spdlog/sinks/sink.h>

namespace trainlet::agent {

class OutputSink : public std::enable_shared_from_this<OutputSink> {
 public:
  static constexpr std::size_t kHighWater = 4 << 20;  // bytes queued before producers pause
  static constexpr std::size_t kLowWater = 1 << 20;   // bytes queued when they resume

  // Sinks for fd 1 and fd 2 on `executor`, used by For() and by the log sink.
  static void Install(boost::asio::any_io_executor executor);
  // The installed sink for fd 1 or 2, or nullptr (then write directly).
  static std::shared_ptr<OutputSink> For(int fd);
  // Runs `io` until every installed sink is empty or `limit` passes, then
  // uninstalls them (later writes go straight to the fds).
  static void DrainAndUninstall(boost::asio::io_context& io, std::chrono::milliseconds limit);

  OutputSink(boost::asio::any_io_executor executor, int fd);
  void Write(std::string data);
  bool congested() const { return queued_ > kHighWater; }
  bool idle() const { return queued_ == 0; }
  // Runs `resume` once the queue is back under kLowWater (inline if it is).
  void WhenDrained(std::function<void()> resume);

 private:
  void WriteNext();
  int fd_;
  std::optional<boost::asio::posix::stream_descriptor> stream_;  // nullopt: direct writes
  std::deque<std::string> queue_;
  std::size_t queued_ = 0;
  bool writing_ = false;
  bool broken_ = false;  // EPIPE or similar: output is dropped from now on
  std::vector<std::function<void()>> waiters_;
};

// Installs the sinks for a scope; on exit drains them (bounded) and uninstalls.
class ScopedOutputSinks {
 public:
  explicit ScopedOutputSinks(boost::asio::io_context& io,
                             std::chrono::milliseconds drain_limit = std::chrono::seconds(1))
      : io_(io), limit_(drain_limit) {
    OutputSink::Install(io.get_executor());
  }
  ~ScopedOutputSinks() { OutputSink::DrainAndUninstall(io_, limit_); }
  ScopedOutputSinks(const ScopedOutputSinks&) = delete;
  ScopedOutputSinks& operator=(const ScopedOutputSinks&) = delete;

 private:
  boost::asio::io_context& io_;
  std::chrono::milliseconds limit_;
};

// An spdlog sink that formats lines to stderr through the installed sink (or
// directly before one is installed). For the one event-loop thread only.
std::shared_ptr<spdlog::sinks::sink> MakeLogSink();

// Blocking write of all of `data` (EINTR/EAGAIN handled); for start-up, exit and
// regular files.
void WriteAll(int fd, std::string_view data);

}  // namespace trainlet::agent
