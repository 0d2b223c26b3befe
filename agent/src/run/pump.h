// Private: copies one worker stream (the read end of the worker's stdout or
// stderr pipe, or the log file the worker writes itself: FollowedFile) to one
// of the agent's fds, line by line, with the rank prefix.
//
// Each pump has its own thread. The agent's one event-loop thread then never
// touches worker output, so a stalled reader of the container's output cannot
// hold up reaping, signal forwarding or the grace period, and the copying of
// several busy workers runs on several cores (bench/logs.py: one thread for
// every worker was half of direct throughput; see bench/HISTORY.md).
//
// Backpressure: when the agent's output does not take more (a pipe whose reader
// stalls), or another pump has the output, the pump reads ahead up to
// kMaxAhead bytes (so Tail(), which failure classification reads, still holds
// the worker's last lines), then stops reading, and the worker blocks on its
// own writes. Lines are never torn: writes to a pipe are at most PIPE_BUF bytes
// and end on a line break, which pipe(7) makes atomic against other writers,
// and the pumps sharing an output take turns (OutputTurns), so a line longer
// than PIPE_BUF is not interleaved with another rank's either.
//
// The pump thread logs nothing and touches no state but its own (the agent's
// spdlog sink belongs to the event-loop thread).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include <boost/asio/any_io_executor.hpp>

#include "trainlet/agent/base/metrics.h"
#include "trainlet/exitcodes/last_exception.h"
#include "trainlet/exitcodes/marker_scanner.h"

namespace trainlet::agent {

// Puts a prefix before every line of a byte stream, fed in pieces as they are
// read. The output accumulates in an internal buffer until ClearOutput().
// A line ends at '\n', at "\r\n", or at a '\r' alone: a progress bar that
// redraws itself with carriage returns (tqdm) goes out as each redraw ends,
// each with the prefix, and its '\r' kept (a '\r' that starts a line goes out
// bare). One per stream; not thread-safe.
class LinePrefixer {
 public:
  // How each line goes out: "<prefix><line><its end>", or with kJson one JSON
  // object per line, "<prefix><line as a JSON string's content>\"}\n": the
  // prefix then opens the object and the string, e.g.
  // {"rank":3,"stream":"stderr","line":" (JsonLinePrefix). The line's end is
  // not part of the string; bytes that are not UTF-8 become U+FFFD. The
  // records of a split line (max_line) carry its piece's number from 1 and
  // whether it is the last: ...,"line":"...","part":1,"last":false}.
  enum class Format { kText, kJson };
  // max_line: a line of more than this many bytes (its end not counted) is cut
  // into pieces of exactly max_line bytes and a last, shorter or equal, piece;
  // each cut piece goes out with a '\n' added. Where it is cut depends on the
  // line alone, never on how the bytes were fed. Long lines are split, never
  // dropped, and memory stays bounded (an unfinished line keeps at most
  // max_line bytes).
  //
  // kText: a line that already starts with the prefix's own tag, the prefix
  // without its trailing blanks when that is "[...]:" (the default
  // "[rank3]: " has "[rank3]:", which torch 2.x puts before its own
  // exception and c10 log lines), goes out as it is, not tagged twice.
  LinePrefixer(std::string prefix, std::size_t max_line, Format format = Format::kText);
  // Appends every line that `data` completes to output(), each after the
  // prefix; the first one starts with what earlier calls left unfinished. The
  // unfinished end of `data` is kept for the next call.
  void Feed(std::string_view data);
  // Appends the unfinished line, if any, with a '\n' added (at end of stream).
  void Finish();
  std::string_view output() const { return {out_.get(), size_}; }
  void ClearOutput() { size_ = 0; }
  std::size_t capacity() const { return capacity_; }
  // Frees the output buffer if it is empty (it grows again when needed).
  void ReleaseMemory() {
    if (size_ == 0) {
      out_.reset();
      capacity_ = 0;
    }
  }
  // Drops the first n bytes of output() (n <= output().size()).
  void Consume(std::size_t n);
  // Lines put into the output since the last call (for the metrics).
  std::uint64_t TakeLineCount() { return std::exchange(lines_, 0); }

 private:
  // Appends every line of [p, end) that ends in it, each after the prefix;
  // returns where the unfinished rest begins (end if none). Lines end at '\n'
  // only: the fast path, for text without '\r'.
  const char* PutCompleteLines(const char* p, const char* end);
  // Feed() for data with a '\r', or in kJson.
  void FeedEachLine(std::string_view data);
  // Appends one line: prefix + a + b + end (kText), or the JSON object (with
  // part_ and `more` when the line is split).
  void PutLine(std::string_view a, std::string_view b, std::string_view end, bool more = false);
  // Ends the line partial_ + b with `end` (its line break): cut first if longer
  // than max_line_.
  void EndLine(std::string_view b, std::string_view end);
  // Appends `s` escaped for a JSON string (RFC 8259 section 7), invalid UTF-8
  // replaced; at most 6 bytes per input byte.
  void PutEscaped(std::string_view s);
  // Sends out max_line_ pieces of the unfinished line while it is longer.
  void CutLongLine();
  // Makes room for `n` more bytes of output; returns where they go. Inline:
  // it runs once per line.
  char* Reserve(std::size_t n) {
    return capacity_ - size_ >= n ? out_.get() + size_ : Grow(n);
  }
  char* Grow(std::size_t n);
  // True if the line a + b starts with tag_ (not tagged again).
  bool Tagged(std::string_view a, std::string_view b) const;
  std::string prefix_;
  std::string tag_;  // "[rank3]:", or "" when lines are always prefixed
  std::size_t max_line_;
  Format format_;
  std::string partial_;
  // The last line went out at a '\r' that ended the data fed: a '\n' at the
  // start of the next data completes its "\r\n".
  bool after_cr_ = false;
  std::unique_ptr<char[]> out_;  // not zeroed: only what is written is touched
  std::size_t size_ = 0, capacity_ = 0;
  std::uint64_t lines_ = 0;  // see TakeLineCount
  std::uint64_t part_ = 0;   // pieces of the current line cut so far (CutLongLine)
};

// Turns at one output, shared by the pumps that write to it (pump.cc). The
// turn is free, or held by one pump; pumps that asked for it while it was held
// get it in order, handed over directly. Thread-safe.
class OutputTurns {
 public:
  // True if `who` holds the turn now (it was free, or handed to `who`).
  // Otherwise `who` is queued (once), and 1 is written to `wake_fd` (an
  // eventfd; -1: none) when the turn is handed to it.
  bool Take(const void* who, int wake_fd);
  // `who` is done with the turn, or stops waiting for it: it leaves the queue,
  // and if it held the turn, the next in the queue gets it.
  void Leave(const void* who);

 private:
  std::mutex mu_;
  const void* owner_ = nullptr;
  std::deque<std::pair<const void*, int>> queue_;
};

// The prefix that opens a worker line's JSON object:
// {"rank":<rank>,"stream":"<stream>","line":"
std::string JsonLinePrefix(int rank, std::string_view stream);

// A worker stream that goes to a log file the worker writes itself, as
// torchrun's workers write theirs (--redirects, --tee): the worker's fd 1 or 2
// is the file, and a pump that mirrors it to the console or keeps its tail
// follows the file (OutputPump::Follow). Every byte is then in the file as
// soon as the worker's write(2) returns, whatever happens to the agent, and
// costs the agent one read instead of a read and a write (bench/RESULTS.md,
// log files). Each fd is owned by the caller, -1 where absent.
struct FollowedFile {
  int write_fd = -1;  // for the worker: O_WRONLY | O_APPEND, created or truncated (as torchrun)
  int read_fd = -1;   // the pump's: O_RDONLY, its own offset, from the start
  int watch_fd = -1;  // inotify(7) on the file: IN_MODIFY
};
// Opens `path` (mode 0644) for a worker; with `follow`, also the read end and
// the watch, set up before the worker exists so that no write goes unseen. write_fd -1 (errno set): the file cannot be opened. With `follow`,
// read_fd and watch_fd -1: no watch to be had (EMFILE: the user's
// fs.inotify.max_user_instances, 128 by default, is shared by every process
// of the user); the caller then pipes the stream through the pump with
// SetFile(write_fd). Never blocks.
FollowedFile OpenFollowedFile(const std::string& path, bool follow);

class OutputPump {
 public:
  static constexpr std::size_t kReadBytes = 64 * 1024;  // one read of the worker's pipe
  static constexpr std::size_t kMaxLine = 64 * 1024;    // longer lines are split, never dropped
  // Output buffered, at most (plus one read's worth), unless SetMaxAhead says
  // less: then the pump stops reading and the worker waits on its own writes
  // (backpressure).
  static constexpr std::size_t kMaxAhead = 1024 * 1024;

  // read_fd: the pipe's read end, owned (closed by the pump). out_fd: the agent's
  // fd 1 or 2, not owned. prefix: put before every line, e.g. "[rank3]: ".
  // tail_bytes: how much of the stream's end Tail() keeps (0: none).
  // format: kJson wraps each line as a JSON object (LinePrefixer; prefix from
  // JsonLinePrefix).
  OutputPump(int read_fd, int out_fd, std::string prefix, std::size_t tail_bytes = 0,
             LinePrefixer::Format format = LinePrefixer::Format::kText);
  // Stops the thread (Stop()) and joins it: returns within one write to a
  // regular file, or 50 ms when a line to a pipe, terminal or socket was cut
  // short (its '\n'); never waits longer for a stalled reader or an open pipe.
  ~OutputPump();
  OutputPump(const OutputPump&) = delete;
  OutputPump& operator=(const OutputPump&) = delete;

  // Also writes every byte read, as read (no prefix), to `fd` (owned; a log
  // file, worker_logs.h), before the console gets it: where the file cannot
  // be followed (OpenFollowedFile gave no watch). Call before Start().
  void SetFile(int fd) { file_fd_ = fd; }
  // The read-ahead bound in bytes (default and at most kMaxAhead; at least
  // kReadBytes): sized to the agent's memory limit (supervisor.h,
  // ReadAheadBytes). Call before Start().
  void SetMaxAhead(std::size_t bytes) {
    max_ahead_ = std::clamp(bytes, kReadBytes, kMaxAhead);
  }
  // How long a Stop() inside a line waits for room to end it (default 50 ms).
  // Call before Start().
  void SetEndLineWait(std::chrono::milliseconds wait) { end_line_wait_ = wait; }
  // `on_error` (an errno value) is posted to Start()'s executor once, at the
  // first failed write to the log file: SetFile's file (the write's error;
  // the file is dropped, the console goes on), or, for a followed file
  // (Follow), when its filesystem has no space left (ENOSPC, looked at when
  // the pump reaches the file's end and at least once a second): the
  // worker's own writes then fail, and the console, which copies the file,
  // misses what they lose. Call before Start().
  void OnFileError(std::function<void(int)> on_error) { file_errors_.on_error = std::move(on_error); }
  // Follows a file instead of reading a pipe: read_fd (the constructor's) is
  // the agent's own read-only description of a regular file that the worker
  // writes itself, and watch_fd (owned) an inotify(7) instance watching it
  // (OpenFollowedFile). The pump reads to the file's end, then waits for the
  // watch; the stream ends once WritersGone() was called and the file is read
  // to its end. (Not at IN_CLOSE_WRITE: inotify(7) sends it when any writable
  // description of the file closes, such as a shell's `echo >/dev/stderr`.)
  // Tail() reads the file itself. Call before Start().
  void Follow(int watch_fd);
  // Passes every byte read through a marker scanner (classify.h), as it is
  // forwarded, for the markers a whole-stream scan looks for
  // (exitcodes::ScannedInWholeStream): Marker() then holds the strongest of
  // the whole stream. `table` is not owned and must outlive the pump. Call
  // before Start().
  void ScanMarkers(const exitcodes::MarkerTable& table) {
    evidence_.scanner = std::make_unique<exitcodes::MarkerScanner>(
        table, exitcodes::MarkerScanner::Search::kBest,
        exitcodes::MarkerScanner::Which::kWholeStream);
  }
  // Keeps the stream's last exception (exitcodes::ExceptionKeeper), apart
  // from the tail: for a worker's stderr. Call before Start().
  void KeepLastException() { evidence_.keeper = std::make_unique<exitcodes::ExceptionKeeper>(); }
  // The strongest marker read so far (ScanMarkers), nullopt if none; its
  // offset, bytes_after and age_ms set (age: until the stream ended, or now).
  // Thread-safe.
  std::optional<exitcodes::MarkerHit> Marker() const;
  // The last exception read so far (KeepLastException), nullopt if none; its
  // bytes_after and age_ms set as Marker()'s. Thread-safe.
  std::optional<exitcodes::LastException> LastException() const;
  // No process is left that could write a followed file (the supervisor has
  // no children left): the pump reads to the file's end and ends the stream,
  // as a pipe's EOF would. No-op for a pipe. Thread-safe, idempotent, never
  // blocks.
  void WritersGone();
  // Starts the thread. Once the stream has reached EOF (every writer closed it)
  // and everything read has been written, or once Stop() made it give up,
  // `on_close` is posted to `executor` (never called on the pump's thread).
  void Start(boost::asio::any_io_executor executor, std::function<void()> on_close);
  // Makes the thread give up at its next wait (read or output) and end; what
  // the worker still writes is not forwarded. Never blocks; idempotent.
  void Stop();
  // The last `tail_bytes` bytes read (lines without prefix); of a followed
  // file, its last tail_bytes bytes, whatever the pump has read. Thread-safe.
  std::string Tail() const;
  // True once Tail() (and Marker()) hold everything the worker has written so
  // far: nothing is left unread in its pipe (FIONREAD), or the stream has
  // ended; for a followed file, always without a scanner (its Tail() reads the
  // file), else once it is read to its current end. False
  // while bytes wait in the pipe for the pump. Also true while the pump has
  // stopped reading (kMaxAhead buffered, the output backed up): the tail then
  // lags, and waiting would not help. For a pump with a tail (tail_bytes > 0)
  // or a scanner. Thread-safe.
  bool CaughtUp() const;

 private:
  enum class Read { kData, kNothing, kEof };
  enum class Wait { kOutput, kInput, kTimeout, kStop };
  void Run();
  // One non-blocking read of the worker's pipe, fed to the prefixer (and the
  // tail); at EOF or a read error, finishes the stream (eof_).
  Read ReadSome();
  // Following a file (Follow()), at its end: reads the watch's events, which
  // clears its readiness. True if there were any (new writes), or if the file
  // was truncated below what was read (another open with O_TRUNC, logrotate's
  // copytruncate; then it is read again from its start, as tail -F does).
  bool DrainWatch();
  // Tail() of a followed file: its last tail_limit_ bytes (pread(2)).
  std::string FileTail() const;
  // Writes `data` to file_fd_ in full; on an error the file is closed and
  // dropped, and the error reported (ReportFileError).
  void WriteFile(std::string_view data);
  // Posts file_errors_.on_error(err), the first time only.
  void ReportFileError(int err);
  // A followed file at its end: reports ENOSPC if its filesystem is full
  // (fstatvfs(3)), looking at most once a second unless `now`.
  void CheckFollowedSpace(bool now = false);
  // Writes the output read so far (a batch) in this pump's turn. more_input:
  // the last read returned data, so if another pump has the turn, returns at
  // once to read on (up to kMaxAhead). While it waits for the turn or for
  // room, it also reads ahead. False when Stop() ended a wait.
  bool Emit(bool more_input);
  // Emit's writes, in the turn.
  bool WriteBatch();
  // On Stop() in the middle of a line: ends it with '\n' if the output takes
  // it within 50 ms. Returns false (WriteBatch's result on Stop).
  bool EndLineAtStop();
  // Waits for `events` on `fd` (none if fd < 0), for input on the worker's pipe
  // if `input`, for Stop(), or timeout_ms (-1: none).
  Wait WaitFor(int fd, short events, bool input, int timeout_ms = -1);
  std::size_t Pending() const { return lines_.output().size() - sent_; }
  // The whole buffer (what a partly written batch still holds too) counts:
  // with one read's growth (prefixes of short lines), it stays near kMaxAhead.
  bool CanReadAhead() const { return !eof_ && lines_.output().size() < max_ahead_; }

  int read_fd_;
  int out_fd_;
  int file_fd_ = -1;  // SetFile()
  std::size_t max_ahead_ = kMaxAhead;                     // SetMaxAhead()
  std::chrono::milliseconds end_line_wait_{50};           // SetEndLineWait()
  // A log file's first failed write, reported once (OnFileError); pump thread only.
  struct FileErrors {
    std::function<void(int)> on_error;                        // OnFileError()
    bool reported = false;
    std::chrono::steady_clock::time_point next_space_check{};  // CheckFollowedSpace
  } file_errors_;
  boost::asio::any_io_executor executor_;                 // Start()'s
  int watch_fd_ = -1;  // Follow(): inotify on the file that read_fd_ reads
  int gone_fd_ = -1;   // Follow(): eventfd, readable after WritersGone()
  std::atomic<bool> writers_gone_{false};  // WritersGone()
  bool final_read_ = false;  // writers gone, reading to the end (pump thread only)
  LinePrefixer lines_;
  std::size_t tail_limit_;
  int wake_fd_ = -1;      // eventfd, readable after Stop()
  int private_fd_ = -1;   // non-blocking description of out_fd_'s pipe/tty, or -1
  bool regular_ = false;  // out_fd_ is a regular file: write it directly
  bool socket_ = false;   // out_fd_ is a socket: send(MSG_DONTWAIT) on it
  bool broken_ = false;   // the output failed (EPIPE, ...): drop, but keep reading
  // The worker's pipe reached EOF (or failed): nothing more to read. Written
  // by the pump thread (under tail_mu_ if there is a tail), like read_fd_.
  bool eof_ = false;
  std::size_t sent_ = 0;  // bytes of lines_.output() already written
  StreamCounters* counters_;  // metrics.h: this output's, relaxed atomic adds per write
  std::shared_ptr<OutputTurns> turns_;  // shared by the pumps of one output (see pump.cc)
  int turn_fd_ = -1;                    // eventfd: written when the turn is handed to this pump
  std::unique_ptr<char[]> buf_;  // kReadBytes, not zeroed: a quiet worker leaves it unbacked
  mutable std::mutex tail_mu_;
  std::string tail_;  // guarded by tail_mu_
  // What classification reads beyond the tail (ScanMarkers, KeepLastException).
  struct Evidence {
    using Clock = std::chrono::steady_clock;
    std::unique_ptr<exitcodes::MarkerScanner> scanner;  // pump thread only
    std::unique_ptr<exitcodes::ExceptionKeeper> keeper;  // pump thread only
    // Copies for other threads, with when they changed; guarded by tail_mu_.
    std::optional<exitcodes::MarkerHit> marker;
    std::optional<exitcodes::LastException> exception;
    Clock::time_point marker_at{}, exception_at{};
    Clock::time_point ended_at = Clock::time_point::max();  // at EOF
    // Feeds `data` to the scanner and the keeper, copying what changed.
    void Feed(std::string_view data);
    // At the stream's end.
    void Finish();
    // ms from `at` to the stream's end, or to now.
    std::int64_t AgeMs(Clock::time_point at) const;
  } evidence_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> full_{false};  // max_ahead_ buffered: reading paused (CaughtUp)
  std::thread thread_;
};

}  // namespace trainlet::agent
