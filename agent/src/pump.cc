#include "pump.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include <boost/asio/post.hpp>

namespace trainlet::agent {

namespace {



// The pumps of one output (by device and inode, so `2>&1` shares one) take
// turns: one writes a batch at a time. On a pipe, terminal or socket, a line
// longer than PIPE_BUF goes out in several writes, and no other rank's line may
// land between them; and where the pipe cannot be reopened non-blocking (a
// non-root pod, a root-owned pipe), only the holder polls for room and then
// writes, so no pump is left blocked inside write() when the reader stalls. On
// a regular file the kernel would serialise the writes anyway (the shared file
// offset's lock), but a waiting pump would spin there: with turns it reads
// ahead instead (bench/HISTORY.md, log forwarding). The turn goes to the
// waiting pumps in the order they asked, handed over directly: a pump that has
// just written cannot take it again ahead of them, so on a slow reader every
// rank still gets its share.
std::shared_ptr<OutputTurns> TurnsFor(const struct stat& st) {
  static std::mutex registry_mu;
  static std::map<std::pair<dev_t, ino_t>, std::weak_ptr<OutputTurns>> registry;
  std::lock_guard lock(registry_mu);
  std::weak_ptr<OutputTurns>& slot = registry[{st.st_dev, st.st_ino}];
  std::shared_ptr<OutputTurns> t = slot.lock();
  if (!t) {
    t = std::make_shared<OutputTurns>();
    slot = t;
  }
  return t;
}

}  // namespace

bool OutputTurns::Take(const void* who, int wake_fd) {
  std::lock_guard lock(mu_);
  if (owner_ == who) return true;
  if (owner_ == nullptr && queue_.empty()) {
    owner_ = who;
    return true;
  }
  for (const auto& [waiting, fd] : queue_) {
    if (waiting == who) return false;
  }
  queue_.emplace_back(who, wake_fd);
  return false;
}

void OutputTurns::Leave(const void* who) {
  std::lock_guard lock(mu_);
  std::erase_if(queue_, [who](const auto& q) { return q.first == who; });
  if (owner_ != who) return;
  owner_ = nullptr;
  if (queue_.empty()) return;
  auto [next, fd] = queue_.front();
  queue_.pop_front();
  owner_ = next;
  if (fd >= 0) {
    std::uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof one);
  }
}

LinePrefixer::LinePrefixer(std::string prefix, std::size_t max_line)
    : prefix_(std::move(prefix)), max_line_(std::max<std::size_t>(max_line, 1)) {}

char* LinePrefixer::Grow(std::size_t n) {
  std::size_t cap = std::max({capacity_ * 2, size_ + n, std::size_t{4096}});
  auto grown = std::make_unique_for_overwrite<char[]>(cap);
  if (size_ > 0) std::memcpy(grown.get(), out_.get(), size_);
  out_ = std::move(grown);
  capacity_ = cap;
  return out_.get() + size_;
}

void LinePrefixer::PutLine(std::string_view a, std::string_view b, bool add_newline) {
  char* o = Reserve(prefix_.size() + a.size() + b.size() + 1);
  std::memcpy(o, prefix_.data(), prefix_.size());
  o += prefix_.size();
  if (!a.empty()) std::memcpy(o, a.data(), a.size());
  o += a.size();
  if (!b.empty()) std::memcpy(o, b.data(), b.size());
  o += b.size();
  if (add_newline) *o++ = '\n';
  size_ = static_cast<std::size_t>(o - out_.get());
}

void LinePrefixer::Feed(std::string_view data) {
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
    PutLine(partial_, std::string_view(p, static_cast<std::size_t>(q - p)), false);
    partial_.clear();
    p = q;
  }
  p = PutCompleteLines(p, end);
  if (p < end) {
    partial_.assign(p, static_cast<std::size_t>(end - p));
    CutLongLine();
  }
}

const char* LinePrefixer::PutCompleteLines(const char* p, const char* const end) {
  // memchr finds each line end (glibc's is vectorised), then prefix and line
  // are copied straight into the output (bench/HISTORY.md, log forwarding: a
  // byte loop was half of the agent's time; vector steps that copy and search
  // at once, 16 or 64 bytes wide, were slower for 100-byte lines).
  const std::size_t plen = prefix_.size();
  while (p < end) {
    const void* nl = std::memchr(p, '\n', static_cast<std::size_t>(end - p));
    if (nl == nullptr) break;
    const std::size_t n = static_cast<std::size_t>(static_cast<const char*>(nl) + 1 - p);
    char* o = Reserve(plen + n);
    std::memcpy(o, prefix_.data(), plen);
    std::memcpy(o + plen, p, n);
    size_ += plen + n;
    p += n;
  }
  return p;
}

void LinePrefixer::CutLongLine() {
  while (partial_.size() >= max_line_) {
    PutLine(std::string_view(partial_).substr(0, max_line_), {}, true);
    partial_.erase(0, max_line_);
  }
}

void LinePrefixer::Consume(std::size_t n) {
  n = std::min(n, size_);
  std::memmove(out_.get(), out_.get() + n, size_ - n);
  size_ -= n;
}

void LinePrefixer::Finish() {
  if (partial_.empty()) return;
  PutLine(partial_, {}, true);
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
  turns_ = TurnsFor(st);
  turn_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (S_ISREG(st.st_mode)) {
    regular_ = true;  // a file never stalls: plain blocking writes, as large as they come
    return;
  }
  if (S_ISSOCK(st.st_mode)) {
    socket_ = true;  // send(MSG_DONTWAIT) is non-blocking without touching the shared flags
  } else {
    // A pipe or terminal: a new open file description of it, so O_NONBLOCK stays
    // ours and never reaches the other processes that share fd 1 or 2.
    private_fd_ = ::open(("/proc/self/fd/" + std::to_string(out_fd_)).c_str(),
                         O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  }
}

void OutputPump::WriteFile(std::string_view data) {
  while (!data.empty()) {
    ssize_t w = ::write(file_fd_, data.data(), data.size());
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {  // ENOSPC, EIO, ...: the file stops here, the console goes on
      ::close(file_fd_);
      file_fd_ = -1;
      return;
    }
    data.remove_prefix(static_cast<std::size_t>(w));
  }
}

OutputPump::~OutputPump() {
  Stop();
  if (thread_.joinable()) thread_.join();
  for (int fd : {read_fd_, wake_fd_, private_fd_, turn_fd_, file_fd_}) {
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

OutputPump::Wait OutputPump::WaitFor(int fd, short events, bool input, int timeout_ms) {
  pollfd p[3];
  int n_fds = 0, out_i = -1, in_i = -1, wake_i = -1;
  if (fd >= 0) p[out_i = n_fds++] = {fd, events, 0};
  if (input) p[in_i = n_fds++] = {read_fd_, POLLIN, 0};
  if (wake_fd_ >= 0) p[wake_i = n_fds++] = {wake_fd_, POLLIN, 0};
  // Without an eventfd (out of fds) Stop() is seen within 100 ms.
  const int limit = wake_fd_ >= 0 || (timeout_ms >= 0 && timeout_ms < 100) ? timeout_ms : 100;
  for (;;) {
    if (stopping_.load(std::memory_order_acquire)) return Wait::kStop;
    int n = ::poll(p, static_cast<nfds_t>(n_fds), limit);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fd >= 0 ? Wait::kOutput : Wait::kInput;  // let the write/read report it
    if (wake_i >= 0 && p[wake_i].revents != 0) return Wait::kStop;
    if (out_i >= 0 && p[out_i].revents != 0) return Wait::kOutput;
    if (in_i >= 0 && p[in_i].revents != 0) return Wait::kInput;
    if (n == 0 && timeout_ms >= 0) return Wait::kTimeout;
  }
}

OutputPump::Read OutputPump::ReadSome() {
  // With a tail, the read and the tail's update are one step under tail_mu_
  // (the read is non-blocking), so CaughtUp() never sees bytes that have left
  // the pipe but are not in the tail yet.
  std::unique_lock<std::mutex> tail_lock;
  if (tail_limit_ > 0) tail_lock = std::unique_lock(tail_mu_);
  for (;;) {
    ssize_t n = ::read(read_fd_, buf_.get(), kReadBytes);
    if (n > 0) {
      std::string_view data(buf_.get(), static_cast<std::size_t>(n));
      if (tail_limit_ > 0) {
        tail_.append(data);
        if (tail_.size() > 2 * tail_limit_) tail_.erase(0, tail_.size() - tail_limit_);
        tail_lock.unlock();
      }
      if (file_fd_ >= 0) WriteFile(data);
      if (out_fd_ >= 0) lines_.Feed(data);
      full_.store(lines_.output().size() >= kMaxAhead, std::memory_order_release);
      return Read::kData;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return Read::kNothing;
    // EOF: every writer (the worker and whatever inherited its stdout) is gone;
    // a read error ends the stream the same way.
    eof_ = true;
    if (tail_lock.owns_lock()) tail_lock.unlock();
    lines_.Finish();
    return Read::kEof;
  }
}

bool OutputPump::CaughtUp() const {
  std::lock_guard lock(tail_mu_);
  if (eof_ || read_fd_ < 0) return true;
  // Reading paused at kMaxAhead (the output is backed up): nothing more comes
  // into the tail until the output drains, so there is nothing to wait for.
  if (full_.load(std::memory_order_acquire)) return true;
  int unread = 0;
  return ::ioctl(read_fd_, FIONREAD, &unread) == 0 && unread == 0;
}

void OutputPump::Run() {
  // stopping_ is checked every round too: a worker that never lets its pipe
  // run dry, into a file that never blocks, must not keep Stop() waiting.
  while (!stopping_.load(std::memory_order_acquire)) {
    const Read r = CanReadAhead() ? ReadSome() : Read::kNothing;
    if (Pending() == 0) {
      if (eof_) break;
      if (r == Read::kData) continue;  // only an unfinished line so far
      if (WaitFor(-1, 0, true) == Wait::kStop) break;
      continue;
    }
    if (!Emit(r == Read::kData)) break;
  }
  if (turns_) turns_->Leave(this);  // queued, or handed the turn while stopping
  // A late writer (a daemon that kept the pipe) gets EPIPE instead of blocking.
  std::lock_guard lock(tail_mu_);  // CaughtUp() reads read_fd_
  ::close(read_fd_);
  read_fd_ = -1;
}

bool OutputPump::Emit(bool more_input) {
  if (broken_) {
    lines_.ClearOutput();
    sent_ = 0;
    return true;
  }
  if (turns_) {
    while (!turns_->Take(this, turn_fd_)) {
      // Another pump is writing (or waiting for room). Read on meanwhile, up
      // to kMaxAhead: this pump's next batch is then larger, and Tail() stays
      // current while the output is backed up.
      if (more_input && CanReadAhead()) return true;
      // Queued: wait for the turn (turn_fd_), for input, or for Stop(). Without
      // an eventfd (out of fds), look again every millisecond.
      switch (WaitFor(turn_fd_, POLLIN, CanReadAhead(), turn_fd_ >= 0 ? -1 : 1)) {
        case Wait::kStop:
          return false;
        case Wait::kInput:
          ReadSome();
          break;
        case Wait::kOutput: {
          std::uint64_t count;
          [[maybe_unused]] ssize_t n = ::read(turn_fd_, &count, sizeof count);
          break;
        }
        case Wait::kTimeout:
          break;
      }
    }
    if (stopping_.load(std::memory_order_acquire)) return false;
  }
  const bool ok = WriteBatch();
  if (turns_) turns_->Leave(this);
  return ok;
}

bool OutputPump::WriteBatch() {
  // What was read before the turn came; what is read while waiting for room
  // goes in the next batch, so pumps take turns.
  const std::size_t batch_end = lines_.output().size();
  while (sent_ < batch_end && !broken_) {
    std::string_view rest = lines_.output().substr(sent_, batch_end - sent_);
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
    } else if (regular_) {
      w = ::write(out_fd_, rest.data(), n);
    } else {
      // A pipe without /proc to reopen it: wait for room first (POLLOUT on a
      // pipe means PIPE_BUF bytes fit), so Stop() can still end the wait.
      Wait ready = WaitFor(out_fd_, POLLOUT, CanReadAhead());
      if (ready == Wait::kStop) return EndLineAtStop();
      if (ready == Wait::kInput) {
        ReadSome();
        continue;
      }
      w = ::write(out_fd_, rest.data(), n);
    }
    if (w > 0) {
      sent_ += static_cast<std::size_t>(w);
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else if (w < 0 && errno == EAGAIN) {
      Wait ready = WaitFor(wait_fd, POLLOUT, CanReadAhead());
      if (ready == Wait::kStop) return EndLineAtStop();
      if (ready == Wait::kInput) ReadSome();
    } else {
      broken_ = true;  // EPIPE, EBADF, ...: drop output from now on, keep draining the worker
    }
  }
  if (broken_ || sent_ == lines_.output().size()) {
    lines_.ClearOutput();
    // A backed-up output can have grown the buffer to a few MiB: not kept.
    if (lines_.capacity() > 2 * kMaxAhead) lines_.ReleaseMemory();
  } else {
    lines_.Consume(sent_);  // at most kMaxAhead and one read's worth stay
  }
  sent_ = 0;
  full_.store(lines_.output().size() >= kMaxAhead, std::memory_order_release);
  return true;
}

bool OutputPump::EndLineAtStop() {
  // Stopped inside a line (a long line in several writes, or a partial write on
  // a socket or terminal): end it, so the next writer's text (another rank,
  // the agent's own log) starts on a line of its own. The output was full a
  // moment ago: give a slow reader up to 50 ms to make room for the '\n'; a
  // stalled one keeps the line unended.
  if (sent_ == 0 || lines_.output()[sent_ - 1] == '\n') return false;
  const int fd = private_fd_ >= 0 ? private_fd_ : out_fd_;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  for (;;) {
    pollfd p{fd, POLLOUT, 0};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        give_up - std::chrono::steady_clock::now());
    if (left.count() < 0 || ::poll(&p, 1, static_cast<int>(left.count())) != 1) return false;
    if ((p.revents & POLLOUT) == 0) return false;  // POLLERR, POLLHUP: the reader is gone
    const char nl = '\n';
    ssize_t n = socket_ ? ::send(fd, &nl, 1, MSG_DONTWAIT | MSG_NOSIGNAL) : ::write(fd, &nl, 1);
    if (n == 1 || (n < 0 && errno != EAGAIN && errno != EINTR)) return false;
  }
}

}  // namespace trainlet::agent
