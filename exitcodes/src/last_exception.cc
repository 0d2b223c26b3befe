#include "trainlet/exitcodes/last_exception.h"

#include <cctype>
#include <cstring>

namespace trainlet::exitcodes {
namespace {

// Python's traceback header (Lib/traceback.py, Python/traceback.c) and
// libstdc++'s verbose terminate handler (libsupc++/vterminate.cc).
constexpr std::string_view kPythonStart = "Traceback (most recent call last):";
constexpr std::string_view kCxxStart = "terminate called after throwing an instance of";
// Rich's traceback (rich.traceback, as Lightning's and Accelerate's CLIs
// install it): "╭──── Traceback (most recent call last) ────╮", frames in a
// box ("│ ... │", "╰────╯"), then the exception's lines unboxed.
constexpr std::string_view kRichStart = "\u256d";  // ╭
constexpr std::string_view kRichFrame[] = {"\u2502", "\u2570"};  // │ ╰
constexpr std::string_view kRichTitle = "Traceback (most recent call last)";
// CPython's runpy (Lib/runpy.py, _run_module_as_main) ends `python -m X` whose
// module cannot be found with one line instead of a traceback:
// "<python>: Error while finding module specification for 'X' (ModuleNotFoundError: ...)".
constexpr std::string_view kRunpyError = ": Error while finding module specification for ";

bool Digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// A line a logger wrote, not an exception's: "[W1207 12:00:00 ...]" (torch's
// c10 logging, glog), "W1207 12:00:00..." (glog without brackets),
// "2026-12-07 ..." (Python logging's asctime), "WARNING:root:..." (Python
// logging's default format).
bool LooksLikeLogRecord(std::string_view s) {
  if (s.starts_with('[')) return true;
  if (s.size() >= 6 && std::strchr("IWEF", s[0]) != nullptr && Digits(s.substr(1, 4)) &&
      s[5] == ' ') {
    return true;
  }
  if (s.size() >= 10 && Digits(s.substr(0, 4)) && s[4] == '-' && Digits(s.substr(5, 2)) &&
      s[7] == '-' && Digits(s.substr(8, 2))) {
    return true;
  }
  for (std::string_view level : {"DEBUG:", "INFO:", "WARNING:", "ERROR:", "CRITICAL:"}) {
    if (s.starts_with(level)) return true;
  }
  return false;
}

}  // namespace

std::string_view StripRankPrefix(std::string_view line) {
  if (!line.starts_with("[rank")) return line;
  const std::size_t close = line.find("]:");
  if (close == std::string_view::npos || !Digits(line.substr(5, close - 5))) return line;
  line.remove_prefix(close + 2);
  if (line.starts_with(' ')) line.remove_prefix(1);  // "[rank1]: " + the line as printed
  return line;
}

bool ExceptionKeeper::Feed(std::string_view data) {
  bool changed = false;
  while (!data.empty()) {
    const void* nl = std::memchr(data.data(), '\n', data.size());
    const std::size_t n = nl ? static_cast<std::size_t>(static_cast<const char*>(nl) - data.data())
                             : data.size();
    if (line_.size() < kKeptLine) line_.append(data.substr(0, std::min(n, kKeptLine - line_.size())));
    fed_ += n;
    if (nl == nullptr) break;
    fed_ += 1;
    changed |= Line(line_, fed_);
    line_.clear();
    data.remove_prefix(n + 1);
  }
  return changed;
}

bool ExceptionKeeper::Finish() {
  if (line_.empty()) return false;
  const bool changed = Line(line_, fed_);
  line_.clear();
  return changed;
}

bool ExceptionKeeper::Line(std::string_view raw, std::uint64_t end) {
  if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
  const std::string_view s = StripRankPrefix(raw);
  if (s.starts_with(kPythonStart) ||
      (s.starts_with(kRichStart) && s.find(kRichTitle) != std::string_view::npos)) {
    state_ = State::kFrames;  // last_ changes at its exception's first line
    return false;
  }
  if (s.find(kRunpyError) != std::string_view::npos) {
    last_ = LastException{LastException::Kind::kPython, std::string(s), end};
    state_ = State::kNone;  // one line: nothing follows it
    return true;
  }
  if (s.starts_with(kCxxStart)) {
    last_ = LastException{LastException::Kind::kCxx, std::string(s), end};
    state_ = State::kMessage;
    return true;
  }
  switch (state_) {
    case State::kNone:
      return false;
    case State::kFrames:
      // Frames are indented ("  File ...", "    code", "    ^^^^"); the first
      // line that is not starts the exception.
      if (s.empty() || s.front() == ' ' || s.front() == '\t' || s.starts_with(kRichFrame[0]) ||
          s.starts_with(kRichFrame[1])) {
        return false;
      }
      last_ = LastException{LastException::Kind::kPython, std::string(s), end};
      state_ = State::kMessage;
      return true;
    case State::kMessage:
      if (s.empty() || LooksLikeLogRecord(s)) {
        state_ = State::kNone;
        return false;
      }
      if (last_->text.size() + 1 + s.size() > kExceptionText) return false;  // kept: its head
      last_->text += '\n';
      last_->text.append(s);
      last_->end_offset = end;
      return true;
  }
  return false;
}

}  // namespace trainlet::exitcodes
