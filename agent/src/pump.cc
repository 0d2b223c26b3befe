#include "pump.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include <boost/asio/post.hpp>

namespace trainlet::agent {

namespace {

// One lock per output that is not a regular file (a pipe, terminal or socket,
// by device and inode, so `2>&1` shares one): a pump holds it for a whole
// Emit. A line longer than PIPE_BUF goes out in several writes, and no other
// rank's line may land between them; and where the pipe cannot be reopened
// non-blocking (a non-root pod, a root-owned pipe), only the holder polls for
// room and then writes, so no pump is left blocked inside write() when the
// reader stalls.
std::shared_ptr<std::mutex> OutputLock(const struct stat& st) {
  static std::mutex registry_mu;
  static std::map<std::pair<dev_t, ino_t>, std::weak_ptr<std::mutex>> registry;
  std::lock_guard lock(registry_mu);
  std::weak_ptr<std::mutex>& slot = registry[{st.st_dev, st.st_ino}];
  std::shared_ptr<std::mutex> m = slot.lock();
  if (!m) {
    m = std::make_shared<std::mutex>();
    slot = m;
  }
  return m;
}

}  // namespace

LinePrefixer::LinePrefixer(std::string prefix, std::size_t max_line)
    : prefix_(std::move(prefix)), max_line_(std::max<std::size_t>(max_line, 1)) {}

char* LinePrefixer::Reserve(std::size_t n) {
  if (capacity_ - size_ < n) {
    std::size_t cap = std::max({capacity_ * 2, size_ + n, std::size_t{4096}});
    auto grown = std::make_unique_for_overwrite<char[]>(cap);
    if (size_ > 0) std::memcpy(grown.get(), out_.get(), size_);
    out_ = std::move(grown);
    capacity_ = cap;
  }
  return out_.get() + size_;
}

void LinePrefixer::Feed(std::string_view data) {
  // One pass: memchr finds each line end (glibc's is vectorised; a byte loop
  // here was half of the agent's time at 1 GiB/s), then prefix and line are
  // copied straight into the output (bench/HISTORY.md: log forwarding).
  const char* p = data.data();
  const char* const end = p + data.size();
  if (!partial_.empty()) {
    const void* nl = std::memchr(p, '\n', data.size());
    if (nl == nullptr) {
      partial_.append(p, data.size());
      CutLongLine();
      return;
    }
    const char* q = static_cast<const char*>(nl) + 1;
    Put(prefix_.data(), prefix_.size());
    Put(partial_.data(), partial_.size());
    Put(p, static_cast<std::size_t>(q - p));
    partial_.clear();
    p = q;
  }
  const std::size_t plen = prefix_.size();
  while (p < end) {
    const void* nl = std::memchr(p, '\n', static_cast<std::size_t>(end - p));
    if (nl == nullptr) break;
    std::size_t n = static_cast<std::size_t>(static_cast<const char*>(nl) + 1 - p);
    char* o = Reserve(plen + n);
    std::memcpy(o, prefix_.data(), plen);
    std::memcpy(o + plen, p, n);
    size_ += plen + n;
    p += n;
  }
  if (p < end) {
    partial_.assign(p, static_cast<std::size_t>(end - p));
    CutLongLine();
  }
}

void LinePrefixer::CutLongLine() {
  while (partial_.size() >= max_line_) {
    Put(prefix_.data(), prefix_.size());
    Put(partial_.data(), max_line_);
    Put("\n", 1);
    partial_.erase(0, max_line_);
  }
}

void LinePrefixer::Finish() {
  if (partial_.empty()) return;
  Put(prefix_.data(), prefix_.size());
  Put(partial_.data(), partial_.size());
  Put("\n", 1);
  partial_.clear();
}

OutputPump::OutputPump(int read_fd, int out_fd, std::string prefix, std::size_t tail_bytes)
    : read_fd_(read_fd), out_fd_(out_fd), lines_(std::move(prefix), kMaxLine),
      tail_limit_(tail_bytes),
      buf_(std::make_unique_for_overwrite<char[]>(kReadBytes)) {
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  // The read end is ours alone: non-blocking, so every wait is a poll that Stop() ends.
  if (int fl = ::fcntl(read_fd_, F_GETFL); fl >= 0) ::fcntl(read_fd_, F_SETFL, fl | O_NONBLOCK);
  struct stat st{};
  if (::fstat(out_fd_, &st) != 0) return;  // writes will fail: output dropped
  if (S_ISREG(st.st_mode)) {
    regular_ = true;  // a file never stalls: plain blocking writes, as large as they come
    return;
  }
  out_lock_ = OutputLock(st);
  if (S_ISSOCK(st.st_mode)) {
    socket_ = true;  // send(MSG_DONTWAIT) is non-blocking without touching the shared flags
  } else {
    // A pipe or terminal: a new open file description of it, so O_NONBLOCK stays
    // ours and never reaches the other processes that share fd 1 or 2.
    private_fd_ = ::open(("/proc/self/fd/" + std::to_string(out_fd_)).c_str(),
                         O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  }
}

OutputPump::~OutputPump() {
  Stop();
  if (thread_.joinable()) thread_.join();
  for (int fd : {read_fd_, wake_fd_, private_fd_}) {
    if (fd >= 0) ::close(fd);
  }
}

void OutputPump::Start(boost::asio::any_io_executor executor, std::function<void()> on_close) {
  thread_ = std::thread([this, executor, on_close = std::move(on_close)]() mutable {
    Run();
    boost::asio::post(executor, std::move(on_close));
  });
}

void OutputPump::Stop() {
  if (stopping_.exchange(true)) return;
  if (wake_fd_ >= 0) {
    std::uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
  }
}

std::string OutputPump::Tail() const {
  std::lock_guard lock(tail_mu_);
  return tail_.size() > tail_limit_ ? tail_.substr(tail_.size() - tail_limit_) : tail_;
}

bool OutputPump::WaitFor(int fd, short events) {
  pollfd p[2] = {{fd, events, 0}, {wake_fd_, POLLIN, 0}};
  const bool wakeable = wake_fd_ >= 0;
  for (;;) {
    if (stopping_.load(std::memory_order_acquire)) return false;
    // Without an eventfd (out of fds) Stop() is seen within 100 ms.
    int n = ::poll(p, wakeable ? 2 : 1, wakeable ? -1 : 100);
    if (n < 0 && errno != EINTR) return true;  // let the read/write report it
    if (wakeable && p[1].revents != 0) return false;
    if (n > 0 && p[0].revents != 0) return true;
  }
}

void OutputPump::Run() {
  // Checked every round too: a worker that never lets its pipe run dry, into
  // a file that never blocks, must not keep Stop() (and ~OutputPump) waiting.
  while (!stopping_.load(std::memory_order_acquire)) {
    ssize_t n = ::read(read_fd_, buf_.get(), kReadBytes);
    if (n > 0) {
      std::string_view data(buf_.get(), static_cast<std::size_t>(n));
      if (tail_limit_ > 0) {
        std::lock_guard lock(tail_mu_);
        tail_.append(data);
        if (tail_.size() > 2 * tail_limit_) tail_.erase(0, tail_.size() - tail_limit_);
      }
      lines_.Feed(data);
      if (!Emit()) break;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      if (!WaitFor(read_fd_, POLLIN)) break;
    } else {
      // EOF: every writer (the worker and whatever inherited its stdout) is gone.
      lines_.Finish();
      Emit();
      break;
    }
  }
  // A late writer (a daemon that kept the pipe) gets EPIPE instead of blocking.
  ::close(read_fd_);
  read_fd_ = -1;
}

bool OutputPump::Emit() {
  std::string_view rest = lines_.output();
  std::unique_lock<std::mutex> lock;
  if (out_lock_ && !rest.empty()) {
    lock = std::unique_lock(*out_lock_, std::try_to_lock);
    while (!lock.owns_lock()) {
      // Another pump has the output (writing, or waiting for room): look again
      // in 5 ms, or end at once on Stop().
      pollfd wake{wake_fd_, POLLIN, 0};
      ::poll(&wake, wake_fd_ >= 0 ? 1 : 0, 5);
      if (stopping_.load(std::memory_order_acquire)) {
        lines_.ClearOutput();
        return false;
      }
      lock.try_lock();
    }
  }
  bool ok = true;
  while (!rest.empty() && !broken_) {
    std::size_t n = rest.size();
    if (!regular_ && n > PIPE_BUF) {
      // At most PIPE_BUF bytes ending on a line break: atomic on a pipe
      // (pipe(7)), so other writers of the same pipe (the agent's own log, other
      // workers, other containers' runtimes) never land inside a line.
      std::size_t nl = rest.rfind('\n', PIPE_BUF - 1);
      n = nl != std::string_view::npos ? nl + 1 : PIPE_BUF;  // else one line over PIPE_BUF
    }
    ssize_t w;
    int wait_fd = out_fd_;
    if (private_fd_ >= 0) {
      w = ::write(private_fd_, rest.data(), n);
      wait_fd = private_fd_;
    } else if (socket_) {
      w = ::send(out_fd_, rest.data(), n, MSG_DONTWAIT | MSG_NOSIGNAL);
    } else {
      // A pipe without /proc to reopen it: wait for room first (POLLOUT on a
      // pipe means PIPE_BUF bytes fit), so Stop() can still end the wait.
      if (!regular_ && !WaitFor(out_fd_, POLLOUT)) {
        ok = false;
        break;
      }
      w = ::write(out_fd_, rest.data(), n);
    }
    if (w > 0) {
      rest.remove_prefix(static_cast<std::size_t>(w));
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else if (w < 0 && errno == EAGAIN) {
      if (!WaitFor(wait_fd, POLLOUT)) {
        ok = false;
        break;
      }
    } else {
      broken_ = true;  // EPIPE, EBADF, ...: drop output from now on, keep draining the worker
    }
  }
  lines_.ClearOutput();
  return ok;
}

}  // namespace trainlet::agent
