#include "run/pump.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
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

FollowedFile OpenFollowedFile(const std::string& path, bool follow) {
  FollowedFile f;
  // O_APPEND: another description of the file (a shell's `echo >>/dev/stderr`,
  // a child's own open) then adds to the end, never over the worker's lines.
  f.write_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (f.write_fd < 0 || !follow) return f;
  // Through /proc/self/fd: the very file just opened, even if the path is
  // replaced meanwhile.
  const std::string self = "/proc/self/fd/" + std::to_string(f.write_fd);
  f.read_fd = ::open(self.c_str(), O_RDONLY | O_CLOEXEC);
  f.watch_fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (f.read_fd < 0 || f.watch_fd < 0 ||
      ::inotify_add_watch(f.watch_fd, self.c_str(), IN_MODIFY) < 0) {
    for (int* fd : {&f.read_fd, &f.watch_fd}) {
      if (*fd >= 0) ::close(*fd);
      *fd = -1;
    }
  }
  return f;
}

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

LinePrefixer::LinePrefixer(std::string prefix, std::size_t max_line, Format format)
    : prefix_(std::move(prefix)), max_line_(std::max<std::size_t>(max_line, 1)),
      format_(format) {
  std::string_view tag = prefix_;
  while (!tag.empty() && tag.back() == ' ') tag.remove_suffix(1);
  if (format_ == Format::kText && tag.size() > 3 && tag.front() == '[' && tag.ends_with("]:")) {
    tag_ = tag;
  }
}

bool LinePrefixer::Tagged(std::string_view a, std::string_view b) const {
  if (tag_.empty() || part_ > 1 || a.size() + b.size() < tag_.size()) return false;
  const std::size_t in_a = std::min(a.size(), tag_.size());
  return a.substr(0, in_a) == std::string_view(tag_).substr(0, in_a) &&
         b.substr(0, tag_.size() - in_a) == std::string_view(tag_).substr(in_a);
}

std::string JsonLinePrefix(int rank, std::string_view stream) {
  return "{\"rank\":" + std::to_string(rank) + ",\"stream\":\"" + std::string(stream) +
         "\",\"line\":\"";
}

char* LinePrefixer::Grow(std::size_t n) {
  std::size_t cap = std::max({capacity_ * 2, size_ + n, std::size_t{4096}});
  auto grown = std::make_unique_for_overwrite<char[]>(cap);
  if (size_ > 0) std::memcpy(grown.get(), out_.get(), size_);
  out_ = std::move(grown);
  capacity_ = cap;
  return out_.get() + size_;
}

void LinePrefixer::PutLine(std::string_view a, std::string_view b, std::string_view end,
                           bool more) {
  ++lines_;
  if (format_ == Format::kJson) {
    char* o = Reserve(prefix_.size());
    std::memcpy(o, prefix_.data(), prefix_.size());
    size_ += prefix_.size();
    PutEscaped(a);
    PutEscaped(b);
    // A piece of a split line says which, so that a reader can join them
    // (README, --worker-log-format json).
    const std::string part = part_ == 0 ? std::string()
                                        : ",\"part\":" + std::to_string(part_) +
                                              ",\"last\":" + (more ? "false" : "true");
    const std::string_view close = "\"}\n";
    o = Reserve(close.size() + part.size());
    std::memcpy(o, close.data(), 1);
    std::memcpy(o + 1, part.data(), part.size());
    std::memcpy(o + 1 + part.size(), close.data() + 1, 2);
    size_ += close.size() + part.size();
    return;
  }
  const std::size_t plen = Tagged(a, b) ? 0 : prefix_.size();
  char* o = Reserve(plen + a.size() + b.size() + end.size());
  std::memcpy(o, prefix_.data(), plen);
  o += plen;
  if (!a.empty()) std::memcpy(o, a.data(), a.size());
  o += a.size();
  if (!b.empty()) std::memcpy(o, b.data(), b.size());
  o += b.size();
  if (!end.empty()) std::memcpy(o, end.data(), end.size());
  o += end.size();
  size_ = static_cast<std::size_t>(o - out_.get());
}

namespace {
// Length of the UTF-8 sequence at s[i..] (RFC 3629 section 4), 0 if invalid.
std::size_t Utf8Length(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  std::size_t n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
                : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
  }
  if ((c == 0xE0 && b(1) < 0xA0) || (c == 0xED && b(1) > 0x9F) || (c == 0xF0 && b(1) < 0x90) ||
      (c == 0xF4 && b(1) > 0x8F)) {
    return 0;  // overlong, a surrogate, or past U+10FFFF
  }
  return n;
}
}  // namespace

void LinePrefixer::PutEscaped(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  char* const start = Reserve(s.size() * 6);
  char* o = start;
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      std::size_t n = Utf8Length(s, i);
      if (n == 0) {
        std::memcpy(o, "\xEF\xBF\xBD", 3);  // U+FFFD REPLACEMENT CHARACTER
        o += 3;
        i += 1;
      } else {
        std::memcpy(o, s.data() + i, n);
        o += n;
        i += n;
      }
      continue;
    }
    ++i;
    if (c == '"' || c == '\\') {
      *o++ = '\\';
      *o++ = static_cast<char>(c);
    } else if (c >= 0x20) {
      *o++ = static_cast<char>(c);
    } else if (c == '\t') {
      *o++ = '\\';
      *o++ = 't';
    } else {
      std::memcpy(o, "\\u00", 4);
      o[4] = kHex[c >> 4];
      o[5] = kHex[c & 15];
      o += 6;
    }
  }
  size_ += static_cast<std::size_t>(o - start);
}

void LinePrefixer::Feed(std::string_view data) {
  if (after_cr_) {
    after_cr_ = false;
    if (!data.empty() && data.front() == '\n') {
      // The "\r\n" the last data ended inside: its line went out at the '\r'.
      if (format_ == Format::kText) {
        *Reserve(1) = '\n';
        ++size_;
      }
      data.remove_prefix(1);
    }
  }
  if (format_ == Format::kJson || std::memchr(data.data(), '\r', data.size()) != nullptr) {
    FeedEachLine(data);
    return;
  }
  const char* p = data.data();
  const char* const end = p + data.size();
  if (!partial_.empty()) {
    const void* nl = std::memchr(p, '\n', data.size());
    if (nl == nullptr) {
      partial_.append(p, data.size());
      CutLongLine();
      return;
    }
    const char* q = static_cast<const char*>(nl);
    EndLine(std::string_view(p, static_cast<std::size_t>(q - p)), "\n");
    p = q + 1;
  }
  p = PutCompleteLines(p, end);
  if (p < end) {
    partial_.assign(p, static_cast<std::size_t>(end - p));
    CutLongLine();
  }
}

void LinePrefixer::FeedEachLine(std::string_view data) {
  std::size_t p = 0;
  // The next '\n' and '\r' at or after p (npos: none), each found once.
  std::size_t nl = data.find('\n'), cr = data.find('\r');
  while (p < data.size()) {
    if (nl != std::string_view::npos && nl < p) nl = data.find('\n', p);
    if (cr != std::string_view::npos && cr < p) cr = data.find('\r', p);
    const std::size_t q = std::min(nl, cr);
    if (q == std::string_view::npos) break;
    std::size_t end_len = 1;
    if (data[q] == '\r') {
      if (q + 1 < data.size() && data[q + 1] == '\n') end_len = 2;
      if (q + 1 == data.size()) after_cr_ = true;
    }
    const std::string_view line = data.substr(p, q - p);
    if (data[q] == '\r' && end_len == 1 && partial_.empty() && line.empty()) {
      // A '\r' that starts a line (tqdm writes "\r" before each redraw):
      // nothing to prefix.
      if (format_ == Format::kText) {
        *Reserve(1) = '\r';
        ++size_;
      }
    } else {
      EndLine(line, data.substr(q, end_len));
    }
    p = q + end_len;
  }
  if (p < data.size()) {
    partial_.append(data.substr(p));
    CutLongLine();
  }
}

const char* LinePrefixer::PutCompleteLines(const char* p, const char* const end) {
  // memchr finds each line end (glibc's is vectorised), then prefix and line
  // are copied straight into the output (bench/HISTORY.md, log forwarding: a
  // byte loop was half of the agent's time; vector steps that copy and search
  // at once, 16 or 64 bytes wide, were slower for 100-byte lines).
  while (p < end) {
    const void* nl = std::memchr(p, '\n', static_cast<std::size_t>(end - p));
    if (nl == nullptr) break;
    const std::size_t n = static_cast<std::size_t>(static_cast<const char*>(nl) + 1 - p);
    if (n - 1 > max_line_) {  // rare: cut where a line fed in pieces would be
      EndLine(std::string_view(p, n - 1), "\n");
      p += n;
      continue;
    }
    const std::size_t plen =
        !tag_.empty() && n > tag_.size() && std::memcmp(p, tag_.data(), tag_.size()) == 0
            ? 0 : prefix_.size();
    char* o = Reserve(plen + n);
    std::memcpy(o, prefix_.data(), plen);
    std::memcpy(o + plen, p, n);
    size_ += plen + n;
    p += n;
    ++lines_;
  }
  return p;
}

void LinePrefixer::CutLongLine() {
  // Only while more than max_line_ bytes wait: a line of exactly max_line_
  // bytes whose end comes in the next read is not cut.
  while (partial_.size() > max_line_) {
    ++part_;
    PutLine(std::string_view(partial_).substr(0, max_line_), {}, "\n", /*more=*/true);
    partial_.erase(0, max_line_);
  }
}

void LinePrefixer::EndLine(std::string_view b, std::string_view end) {
  if (partial_.size() + b.size() > max_line_) {
    partial_.append(b);
    CutLongLine();
    b = {};
  }
  if (part_ > 0) ++part_;
  PutLine(partial_, b, end);
  partial_.clear();
  part_ = 0;
}

void LinePrefixer::Consume(std::size_t n) {
  n = std::min(n, size_);
  std::memmove(out_.get(), out_.get() + n, size_ - n);
  size_ -= n;
}

void LinePrefixer::Finish() {
  if (partial_.empty()) return;
  EndLine({}, "\n");
}

OutputPump::OutputPump(int read_fd, int out_fd, std::string prefix, std::size_t tail_bytes,
                       LinePrefixer::Format format)
    : read_fd_(read_fd), out_fd_(out_fd), lines_(std::move(prefix), kMaxLine, format),
      tail_limit_(tail_bytes),
      counters_(&OutputCounters(out_fd)),
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
      ReportFileError(w < 0 ? errno : ENOSPC);  // write(2) returns 0 only when nothing fits
      ::close(file_fd_);
      file_fd_ = -1;
      return;
    }
    data.remove_prefix(static_cast<std::size_t>(w));
  }
}

void OutputPump::ReportFileError(int err) {
  if (std::exchange(file_errors_.reported, true) || !file_errors_.on_error) return;
  boost::asio::post(executor_, [f = file_errors_.on_error, err] { f(err); });
}

void OutputPump::CheckFollowedSpace(bool now) {
  if (file_errors_.reported || !file_errors_.on_error) return;
  const auto t = std::chrono::steady_clock::now();
  if (!now && t < file_errors_.next_space_check) return;
  file_errors_.next_space_check = t + std::chrono::seconds(1);
  // f_bavail: the blocks an unprivileged writer may still use (statvfs(3)).
  struct statvfs fs{};
  if (::fstatvfs(read_fd_, &fs) == 0 && fs.f_blocks > 0 && fs.f_bavail == 0) {
    ReportFileError(ENOSPC);
  }
}

OutputPump::~OutputPump() {
  Stop();
  if (thread_.joinable()) thread_.join();
  for (int fd : {read_fd_, wake_fd_, private_fd_, turn_fd_, file_fd_, watch_fd_, gone_fd_}) {
    if (fd >= 0) ::close(fd);
  }
}

void OutputPump::Start(boost::asio::any_io_executor executor, std::function<void()> on_close) {
  executor_ = executor;
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
  if (watch_fd_ >= 0) return FileTail();  // read_fd_ stays open until the destructor
  std::lock_guard lock(tail_mu_);
  return tail_.size() > tail_limit_ ? tail_.substr(tail_.size() - tail_limit_) : tail_;
}

OutputPump::Wait OutputPump::WaitFor(int fd, short events, bool input, int timeout_ms) {
  pollfd p[4];
  int n_fds = 0, out_i = -1, in_i = -1, gone_i = -1, wake_i = -1;
  if (fd >= 0) p[out_i = n_fds++] = {fd, events, 0};
  // A regular file always polls readable: a followed one waits for its watch.
  if (input) p[in_i = n_fds++] = {watch_fd_ >= 0 ? watch_fd_ : read_fd_, POLLIN, 0};
  if (input && gone_fd_ >= 0) p[gone_i = n_fds++] = {gone_fd_, POLLIN, 0};
  if (wake_fd_ >= 0) p[wake_i = n_fds++] = {wake_fd_, POLLIN, 0};
  // Without an eventfd (out of fds) Stop() or WritersGone() is seen within 100 ms.
  const bool woken = wake_fd_ >= 0 && (watch_fd_ < 0 || gone_fd_ >= 0);
  const int limit = woken || (timeout_ms >= 0 && timeout_ms < 100) ? timeout_ms : 100;
  for (;;) {
    if (stopping_.load(std::memory_order_acquire)) return Wait::kStop;
    int n = ::poll(p, static_cast<nfds_t>(n_fds), limit);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fd >= 0 ? Wait::kOutput : Wait::kInput;  // let the write/read report it
    if (wake_i >= 0 && p[wake_i].revents != 0) return Wait::kStop;
    if (out_i >= 0 && p[out_i].revents != 0) return Wait::kOutput;
    if (in_i >= 0 && p[in_i].revents != 0) return Wait::kInput;
    if (gone_i >= 0 && p[gone_i].revents != 0) return Wait::kInput;
    if (n == 0 && timeout_ms >= 0) return Wait::kTimeout;
  }
}

void OutputPump::Follow(int watch_fd) {
  watch_fd_ = watch_fd;
  gone_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);  // without one, WritersGone is seen in 100 ms
}

void OutputPump::WritersGone() {
  if (watch_fd_ < 0 || writers_gone_.exchange(true, std::memory_order_acq_rel)) return;
  if (gone_fd_ >= 0) {
    std::uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(gone_fd_, &one, sizeof one);
  }
}

bool OutputPump::DrainWatch() {
  alignas(inotify_event) char events[4096];
  bool any = false;
  for (;;) {
    ssize_t n = ::read(watch_fd_, events, sizeof events);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EAGAIN: drained
    any = true;
  }
  struct stat st{};
  if (::fstat(read_fd_, &st) == 0 && ::lseek(read_fd_, 0, SEEK_CUR) > st.st_size) {
    ::lseek(read_fd_, 0, SEEK_SET);  // truncated under us
    return true;
  }
  return any;
}

std::string OutputPump::FileTail() const {
  struct stat st{};
  if (tail_limit_ == 0 || ::fstat(read_fd_, &st) != 0) return "";
  const off_t from = std::max<off_t>(0, st.st_size - static_cast<off_t>(tail_limit_));
  std::string tail(static_cast<std::size_t>(st.st_size - from), '\0');
  ssize_t n = ::pread(read_fd_, tail.data(), tail.size(), from);
  tail.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return tail;
}

OutputPump::Read OutputPump::ReadSome() {
  // With a tail, the read and the tail's update are one step under tail_mu_
  // (the read is non-blocking), so CaughtUp() never sees bytes that have left
  // the pipe but are not in the tail yet.
  std::unique_lock<std::mutex> tail_lock;
  const bool keep_tail = tail_limit_ > 0 && watch_fd_ < 0;  // a followed file is its own tail
  if (keep_tail || evidence_.scanner || evidence_.keeper) tail_lock = std::unique_lock(tail_mu_);
  for (;;) {
    ssize_t n = ::read(read_fd_, buf_.get(), kReadBytes);
    if (n > 0) {
      std::string_view data(buf_.get(), static_cast<std::size_t>(n));
      if (keep_tail && data.size() >= tail_limit_) {
        // Only the read's last tail_limit_ bytes: not a copy of the whole read
        // (64 KiB) to erase most of it again.
        tail_.assign(data.substr(data.size() - tail_limit_));
      } else if (keep_tail) {
        tail_.append(data);
        if (tail_.size() > 2 * tail_limit_) tail_.erase(0, tail_.size() - tail_limit_);
      }
      evidence_.Feed(data);
      if (tail_lock.owns_lock()) tail_lock.unlock();
      if (file_fd_ >= 0) WriteFile(data);
      if (out_fd_ >= 0) lines_.Feed(data);
      full_.store(lines_.output().size() >= max_ahead_, std::memory_order_release);
      return Read::kData;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return Read::kNothing;
    // A followed file's end: the worker may write more until WritersGone().
    // The watch is drained before the file is read again, so a write after
    // that read wakes the next wait; once the writers are gone, one more
    // read to the end finishes the stream.
    if (n == 0 && watch_fd_ >= 0 && !final_read_) {
      if (writers_gone_.load(std::memory_order_acquire)) {
        CheckFollowedSpace(/*now=*/true);  // a last look: its last look may predate the fill
        final_read_ = true;
        continue;
      }
      if (DrainWatch()) continue;
      CheckFollowedSpace();
      return Read::kNothing;
    }
    // EOF: every writer (the worker and whatever inherited its stdout) is gone;
    // a read error ends the stream the same way.
    eof_ = true;
    evidence_.Finish();
    if (tail_lock.owns_lock()) tail_lock.unlock();
    lines_.Finish();
    return Read::kEof;
  }
}

void OutputPump::Evidence::Feed(std::string_view data) {
  if (!scanner && !keeper) return;
  const Clock::time_point now = Clock::now();
  if (scanner) {
    scanner->Feed(data);
    if (scanner->TakeImproved()) {
      marker = scanner->best();
      marker_at = now;
    }
  }
  if (keeper && keeper->Feed(data)) {
    exception = keeper->last();
    exception_at = now;
  }
}

void OutputPump::Evidence::Finish() {
  const Clock::time_point now = Clock::now();
  if (scanner) {
    scanner->Finish();
    if (scanner->TakeImproved()) {
      marker = scanner->best();
      marker_at = now;
    }
  }
  if (keeper && keeper->Finish()) {
    exception = keeper->last();
    exception_at = now;
  }
  ended_at = now;
}

std::int64_t OutputPump::Evidence::AgeMs(Clock::time_point at) const {
  const Clock::time_point end = std::min(ended_at, Clock::now());
  return std::max<std::int64_t>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(end - at).count());
}

std::optional<exitcodes::MarkerHit> OutputPump::Marker() const {
  std::lock_guard lock(tail_mu_);
  std::optional<exitcodes::MarkerHit> m = evidence_.marker;
  if (m) {
    m->bytes_after = evidence_.scanner->fed() - m->offset;
    m->age_ms = evidence_.AgeMs(evidence_.marker_at);
  }
  return m;
}

std::optional<exitcodes::LastException> OutputPump::LastException() const {
  std::lock_guard lock(tail_mu_);
  std::optional<exitcodes::LastException> e = evidence_.exception;
  if (e) {
    e->bytes_after = evidence_.keeper->fed() - e->end_offset;
    e->age_ms = evidence_.AgeMs(evidence_.exception_at);
  }
  return e;
}

bool OutputPump::CaughtUp() const {
  std::lock_guard lock(tail_mu_);
  if (watch_fd_ >= 0) {
    // Tail() reads the file itself; the scanner has seen what was read.
    struct stat st{};
    return (!evidence_.scanner && !evidence_.keeper) || eof_ || ::fstat(read_fd_, &st) != 0 ||
           ::lseek(read_fd_, 0, SEEK_CUR) >= st.st_size;
  }
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
      // A followed file is looked at once a second while its space is not
      // known to be gone: a write that fails adds nothing to watch.
      const bool watch_space = watch_fd_ >= 0 && file_errors_.on_error && !file_errors_.reported;
      if (WaitFor(-1, 0, true, watch_space ? 1000 : -1) == Wait::kStop) break;
      continue;
    }
    if (!Emit(r == Read::kData)) break;
  }
  if (turns_) turns_->Leave(this);  // queued, or handed the turn while stopping
  if (watch_fd_ >= 0) return;  // Tail() still reads the file (closed with the pump)
  // A late writer (a daemon that kept the pipe) gets EPIPE instead of blocking.
  std::lock_guard lock(tail_mu_);  // CaughtUp() reads read_fd_
  ::close(read_fd_);
  read_fd_ = -1;
}

bool OutputPump::Emit(bool more_input) {
  if (broken_) {
    counters_->dropped_lines.fetch_add(lines_.TakeLineCount(), std::memory_order_relaxed);
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
      // At most PIPE_BUF bytes ending on a line break ('\n' or '\r'): atomic
      // on a pipe (pipe(7)), so other writers of the same pipe (the agent's own
      // log, other workers, other containers' runtimes) never land inside a line.
      std::size_t nl = rest.find_last_of("\n\r", PIPE_BUF - 1);
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
      counters_->bytes.fetch_add(static_cast<std::uint64_t>(w), std::memory_order_relaxed);
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
    // Every line put out so far has been written (or dropped with the output).
    (broken_ ? counters_->dropped_lines : counters_->lines)
        .fetch_add(lines_.TakeLineCount(), std::memory_order_relaxed);
    lines_.ClearOutput();
    // A backed-up output can have grown the buffer to a few MiB: not kept.
    if (lines_.capacity() > 2 * max_ahead_) lines_.ReleaseMemory();
  } else {
    lines_.Consume(sent_);  // at most kMaxAhead and one read's worth stay
  }
  sent_ = 0;
  full_.store(lines_.output().size() >= max_ahead_, std::memory_order_release);
  return true;
}

bool OutputPump::EndLineAtStop() {
  // Stopped inside a line (a long line in several writes, or a partial write on
  // a socket or terminal): end it, so the next writer's text (another rank,
  // the agent's own log) starts on a line of its own. The output was full a
  // moment ago: give a slow reader up to end_line_wait_ (50 ms) to make room
  // for the '\n'; a stalled one keeps the line unended.
  if (sent_ == 0 || lines_.output()[sent_ - 1] == '\n' || lines_.output()[sent_ - 1] == '\r') {
    return false;
  }
  const int fd = private_fd_ >= 0 ? private_fd_ : out_fd_;
  const auto give_up = std::chrono::steady_clock::now() + end_line_wait_;
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
