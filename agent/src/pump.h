// Private: copies one worker stream (the read end of the worker's stdout or
// stderr pipe) to one of the agent's fds, line by line, with the rank prefix.
//
// Each pump has its own thread. The agent's one event-loop thread then never
// touches worker output, so a stalled reader of the container's output cannot
// hold up reaping, signal forwarding or the grace period, and the copying of
// several busy workers runs on several cores (bench/logs.py: one thread for
// every worker was half of direct throughput; see bench/HISTORY.md).
//
// Backpressure: when the agent's output does not take more (a pipe whose reader
// stalls), the pump waits and stops reading, so the worker blocks on its own
// writes. Lines are never torn: writes to a pipe are at most PIPE_BUF bytes and
// end on a line break, which pipe(7) makes atomic against other writers, and
// the pumps sharing an output take turns, so a line longer than PIPE_BUF is
// not interleaved with another rank's either.
//
// The pump thread logs nothing and touches no state but its own (the agent's
// spdlog sink belongs to the event-loop thread).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include <boost/asio/any_io_executor.hpp>

namespace trainlet::agent {

// Puts a prefix before every line of a byte stream, fed in pieces as they are
// read. The output accumulates in an internal buffer until ClearOutput().
// One per stream; not thread-safe.
class LinePrefixer {
 public:
  // max_line: an unfinished line that reaches this many bytes is cut there (it
  // goes out with a '\n' added and the rest becomes the next line): long lines
  // are split, never dropped, and memory stays bounded.
  LinePrefixer(std::string prefix, std::size_t max_line);
  // Appends every line that `data` completes to output(), each after the
  // prefix; the first one starts with what earlier calls left unfinished. The
  // unfinished end of `data` is kept for the next call.
  void Feed(std::string_view data);
  // Appends the unfinished line, if any, with a '\n' added (at end of stream).
  void Finish();
  std::string_view output() const { return {out_.get(), size_}; }
  void ClearOutput() { size_ = 0; }

 private:
  // Sends out the unfinished line in max_line_ pieces while it is that long.
  void CutLongLine();
  // Makes room for `n` more bytes of output.
  char* Reserve(std::size_t n);
  void Put(const char* p, std::size_t n) {
    std::memcpy(Reserve(n), p, n);
    size_ += n;
  }
  std::string prefix_;
  std::size_t max_line_;
  std::string partial_;
  std::unique_ptr<char[]> out_;  // not zeroed: only what is written is touched
  std::size_t size_ = 0, capacity_ = 0;
};

class OutputPump {
 public:
  static constexpr std::size_t kReadBytes = 64 * 1024;  // one read of the worker's pipe
  static constexpr std::size_t kMaxLine = 64 * 1024;    // longer lines are split, never dropped

  // read_fd: the pipe's read end, owned (closed by the pump). out_fd: the agent's
  // fd 1 or 2, not owned. prefix: put before every line, e.g. "[rank3]: ".
  // tail_bytes: how much of the stream's end Tail() keeps (0: none).
  OutputPump(int read_fd, int out_fd, std::string prefix, std::size_t tail_bytes = 0);
  // Stops the thread (Stop()) and joins it: returns within one write to a
  // regular file, never waits for a stalled reader or an open pipe.
  ~OutputPump();
  OutputPump(const OutputPump&) = delete;
  OutputPump& operator=(const OutputPump&) = delete;

  // Starts the thread. Once the stream has reached EOF (every writer closed it)
  // and everything read has been written, or once Stop() made it give up,
  // `on_close` is posted to `executor` (never called on the pump's thread).
  void Start(boost::asio::any_io_executor executor, std::function<void()> on_close);
  // Makes the thread give up at its next wait (read or output) and end; what
  // the worker still writes is not forwarded. Never blocks; idempotent.
  void Stop();
  // The last `tail_bytes` bytes read (lines without prefix). Thread-safe.
  std::string Tail() const;

 private:
  void Run();
  // Writes the prefixer's output; false when Stop() interrupted the wait.
  bool Emit();
  // Waits until `fd` is ready for `events` or Stop(); false on Stop().
  bool WaitFor(int fd, short events);

  int read_fd_;
  int out_fd_;
  LinePrefixer lines_;
  std::size_t tail_limit_;
  int wake_fd_ = -1;      // eventfd, readable after Stop()
  int private_fd_ = -1;   // non-blocking description of out_fd_'s pipe/tty, or -1
  bool regular_ = false;  // out_fd_ is a regular file: write it directly
  bool socket_ = false;   // out_fd_ is a socket: send(MSG_DONTWAIT) on it
  bool broken_ = false;   // the output failed (EPIPE, ...): drop, but keep reading
  std::shared_ptr<std::mutex> out_lock_;  // not for a regular file (see pump.cc)
  std::unique_ptr<char[]> buf_;  // kReadBytes, not zeroed: a quiet worker leaves it unbacked
  mutable std::mutex tail_mu_;
  std::string tail_;  // guarded by tail_mu_
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace trainlet::agent
