#include "base/output.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include <boost/asio/write.hpp>
#include <spdlog/details/null_mutex.h>
#include <spdlog/sinks/base_sink.h>

#include "trainlet/agent/base/metrics.h"

namespace trainlet::agent {

namespace asio = boost::asio;

namespace {
std::shared_ptr<OutputSink>& Slot(int fd) {
  static std::shared_ptr<OutputSink> out, err;
  return fd == STDERR_FILENO ? err : out;
}
}  // namespace

void WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 1000);
    } else {
      return;  // EPIPE, EBADF, ...: output is best effort
    }
  }
}

OutputSink::OutputSink(asio::any_io_executor executor, int fd) : fd_(fd) {
  struct stat st{};
  if (::fstat(fd, &st) != 0 || S_ISREG(st.st_mode)) return;  // direct writes
  // A new open file description of the same pipe/tty: O_NONBLOCK stays ours.
  int own = ::open(("/proc/self/fd/" + std::to_string(fd)).c_str(),
                   O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (own < 0) return;  // a socket, or /proc missing: direct writes
  stream_.emplace(executor, own);
}

void OutputSink::Install(asio::any_io_executor executor) {
  Slot(STDOUT_FILENO) = std::make_shared<OutputSink>(executor, STDOUT_FILENO);
  struct stat out{}, err{};
  if (::fstat(STDOUT_FILENO, &out) == 0 && ::fstat(STDERR_FILENO, &err) == 0 &&
      out.st_dev == err.st_dev && out.st_ino == err.st_ino) {
    // `2>&1`: one queue, so the two streams never split each other's lines.
    Slot(STDERR_FILENO) = Slot(STDOUT_FILENO);
  } else {
    Slot(STDERR_FILENO) = std::make_shared<OutputSink>(executor, STDERR_FILENO);
  }
}

std::shared_ptr<OutputSink> OutputSink::For(int fd) { return Slot(fd); }

void OutputSink::DrainAndUninstall(asio::io_context& io, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  auto busy = [] {
    for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
      if (Slot(fd) && !Slot(fd)->idle()) return true;
    }
    return false;
  };
  io.restart();
  while (busy() && std::chrono::steady_clock::now() < deadline) {
    io.run_for(std::chrono::milliseconds(10));
    if (io.stopped()) io.restart();
  }
  Slot(STDOUT_FILENO).reset();
  Slot(STDERR_FILENO).reset();
}

void OutputSink::Write(std::string data) {
  if (data.empty()) return;
  auto dropped = [&] {
    OutputCounters(fd_).dropped_lines.fetch_add(
        static_cast<std::uint64_t>(std::count(data.begin(), data.end(), '\n')),
        std::memory_order_relaxed);
  };
  if (broken_) {
    dropped();
    return;
  }
  if (!stream_) {
    WriteAll(fd_, data);
    return;
  }
  if (queued_ + data.size() > kMaxQueued) {
    dropped();
    return;  // the reader stalls: never grow without bound
  }
  queued_ += data.size();
  queue_.push_back(std::move(data));
  if (!writing_) WriteNext();
}

void OutputSink::WriteNext() {
  if (queue_.empty()) {
    writing_ = false;
    return;
  }
  writing_ = true;
  // At most PIPE_BUF bytes ending on a line break: such a write to a pipe is
  // atomic (pipe(7)), so other writers of the same pipe (other agents, the
  // container runtime's other stream) never land in the middle of a line.
  const std::string& front = queue_.front();
  std::size_t n = std::min<std::size_t>(front.size(), PIPE_BUF);
  if (n < front.size()) {
    std::size_t nl = front.rfind('\n', n - 1);
    if (nl != std::string::npos) n = nl + 1;  // else one line longer than PIPE_BUF
  }
  stream_->async_write_some(
      asio::buffer(front.data(), n),
      [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
        if (ec) {
          // The reader is gone: drop output rather than block or spin.
          self->broken_ = true;
          self->queue_.clear();
          self->queued_ = 0;
        } else {
          self->queued_ -= n;
          std::string& front = self->queue_.front();
          if (n == front.size()) {
            self->queue_.pop_front();
          } else {
            front.erase(0, n);
          }
        }
        self->WriteNext();
      });
}

namespace {
class LogSink : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    std::string line(formatted.data(), formatted.size());
    if (auto sink = OutputSink::For(STDERR_FILENO)) {
      sink->Write(std::move(line));
    } else {
      WriteAll(STDERR_FILENO, line);
    }
  }
  void flush_() override {}
};
}  // namespace

std::shared_ptr<spdlog::sinks::sink> MakeLogSink() { return std::make_shared<LogSink>(); }

}  // namespace trainlet::agent
