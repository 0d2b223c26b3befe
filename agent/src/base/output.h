// Private: the agent's stdout and stderr, written without ever blocking the
// event loop.
//
// PID 1 must keep reaping, forwarding signals and timing the grace period even
// when whoever reads the container's output stalls (a log pipe under
// backpressure). Worker lines never pass through the loop (pump.h: a thread per
// worker stream, which feels the backpressure itself). trainlet's own log lines
// go into an OutputSink: a queue drained by non-blocking writes on a private
// open file description of the same pipe or terminal (/proc/self/fd/N), so the
// O_NONBLOCK flag never leaks to other processes sharing the fd. Past kMaxQueued
// bytes, new lines are dropped rather than held. Regular files are
// written directly (they do not stall). One event-loop thread only.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <spdlog/sinks/sink.h>

namespace trainlet::agent {

class OutputSink : public std::enable_shared_from_this<OutputSink> {
 public:
  static constexpr std::size_t kMaxQueued = 4 << 20;  // bytes queued before lines are dropped

  // Sinks for fd 1 and fd 2 on `executor`, used by For() and by the log sink.
  static void Install(boost::asio::any_io_executor executor);
  // The installed sink for fd 1 or 2, or nullptr (then write directly).
  static std::shared_ptr<OutputSink> For(int fd);
  // Runs `io` until every installed sink is empty or `limit` passes, then
  // uninstalls them (later writes go straight to the fds).
  static void DrainAndUninstall(boost::asio::io_context& io, std::chrono::milliseconds limit);

  OutputSink(boost::asio::any_io_executor executor, int fd);
  // Queues `data` (whole lines) for the fd; dropped when the output failed or
  // kMaxQueued bytes already wait.
  void Write(std::string data);
  bool idle() const { return queued_ == 0; }

 private:
  void WriteNext();
  int fd_;
  std::optional<boost::asio::posix::stream_descriptor> stream_;  // nullopt: direct writes
  std::deque<std::string> queue_;
  std::size_t queued_ = 0;
  bool writing_ = false;
  bool broken_ = false;  // EPIPE or similar: output is dropped from now on
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
