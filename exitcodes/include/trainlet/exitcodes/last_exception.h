// trainlet/exitcodes/last_exception.h — the last exception a worker printed
// on stderr, kept apart from the stream's tail.
//
// The exception that ended a rank is the failure's own text: what it says
// may decide a class that a line anywhere else in the stream may not
// (classify.h, rules). A thread dump or a chain of exceptions after it can
// push it out of the last 8 KiB of stderr, so the pump feeds every stderr
// byte through an ExceptionKeeper, which keeps the last one, bounded.
//
// What counts as an exception, line by line (a leading "[rankN]:" that
// torch 2.x puts before its own lines is skipped):
//   * Python's traceback (the interpreter's default excepthook, the
//     traceback module, logging.exception): "Traceback (most recent call
//     last):", indented frame lines, then the exception's lines; of a chain
//     ("During handling of the above exception, another exception
//     occurred:"), the last traceback's, which is the one that ended it;
//   * the same as Rich draws it (rich.traceback: "╭─ Traceback (most recent
//     call last) ─╮", boxed frames, then the exception's lines);
//   * C++'s std::terminate report (libstdc++'s verbose terminate handler):
//     "terminate called after throwing an instance of 'T'" and its indented
//     "what():" lines, as torch's watchdog and c10::Error aborts print it.
// The exception's lines end at a blank line, at a line that looks like a log
// record ("[W1207 ...", "W1207 ...", "2026-12-07 ...", "WARNING:..."), or
// after kExceptionText bytes. Memory: bounded (kExceptionText, kKeptLine).
// One keeper per stream; not thread-safe. Pure: no I/O, no clock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace trainlet::exitcodes {

// The bytes of an exception's text that are kept.
inline constexpr std::size_t kExceptionText = 4096;
// The bytes of one line that are looked at (the rest of a longer line is
// skipped, but counted in offsets).
inline constexpr std::size_t kKeptLine = 1024;

// The last exception found in a stream.
struct LastException {
  enum class Kind { kPython, kCxx };
  Kind kind = Kind::kPython;
  // Python: the exception's lines (type, message, continuation lines: what
  // follows the last frame). C++: the terminate line and its "what():" lines.
  // Each line without its "[rankN]:" prefix, joined by '\n'; at most
  // kExceptionText bytes.
  std::string text;
  std::uint64_t end_offset = 0;  // stream offset just after its last line
  // Filled by whoever asks (the pump): how much of the stream followed it,
  // and how long before the stream ended (or before it was asked) its last
  // line was read; -1: unknown.
  std::uint64_t bytes_after = 0;
  std::int64_t age_ms = -1;
  // Its first line, e.g. "RuntimeError: CUDA error: out of memory".
  std::string_view first_line() const {
    return std::string_view(text).substr(0, text.find('\n'));
  }
};

class ExceptionKeeper {
 public:
  // Scans the next piece of the stream. True if last() changed (a new
  // exception, or a line added to the last one).
  bool Feed(std::string_view data);
  // The stream ended: a line without its '\n' is judged. True if last() changed.
  bool Finish();
  const std::optional<LastException>& last() const { return last_; }
  // Bytes fed so far.
  std::uint64_t fed() const { return fed_; }

 private:
  enum class State { kNone, kFrames, kMessage };
  // One whole line (without its '\n', cut to kKeptLine); `end` is the stream
  // offset after it. True if last_ changed.
  bool Line(std::string_view line, std::uint64_t end);

  State state_ = State::kNone;
  std::string line_;           // the current line so far (at most kKeptLine bytes)
  std::uint64_t fed_ = 0;
  std::optional<LastException> last_;
};

// `line` without a leading "[rankN]:" and the one blank after it (torch 2.x
// prints "[rankN]: " before each line of its own; the line's own indentation
// stays). Pure.
std::string_view StripRankPrefix(std::string_view line);

}  // namespace trainlet::exitcodes
