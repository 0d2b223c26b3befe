#include "trainlet/agent/base/values.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <sstream>

#include "trainlet/agent/base/tunables.h"
#include "trainlet/exitcodes/exit_code.h"

namespace trainlet::agent {

using exitcodes::Result;
using exitcodes::Status;

namespace {

std::string Quote(const std::string& v) { return "'" + v + "'"; }

// "-1", "-0.5": a number, but below zero (said as such in messages).
bool IsNegative(const std::string& v) {
  return v.size() > 1 && v[0] == '-' && v.find_first_not_of("0123456789.", 1) == std::string::npos &&
         v.find_first_of("0123456789") != std::string::npos;
}

// The labels of a DNS name, as getline(3) splits it: no last empty label.
std::vector<std::string> Labels(const std::string& name) {
  std::vector<std::string> parts;
  std::string cur;
  std::istringstream is(name);
  while (std::getline(is, cur, '.')) parts.push_back(cur);
  return parts;
}

}  // namespace

std::vector<std::string> SplitOn(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    auto pos = s.find(sep, start);
    out.push_back(s.substr(start, pos - start));
    if (pos == std::string::npos) return out;
    start = pos + 1;
  }
}

bool IsPlainDecimal(const std::string& v) {
  return !v.empty() && v.find_first_not_of("0123456789.") == std::string::npos &&
         std::count(v.begin(), v.end(), '.') <= 1 && v.front() != '.' && v.back() != '.';
}

Result<std::uint32_t> ParseCount(const std::string& what, const std::string& value,
                                 std::uint32_t max) {
  if (value.find("$(") != std::string::npos) {
    return Status::Config(
        what + "=" + Quote(value) +
        " is an unexpanded Kubernetes $(VAR) reference: the kubelet expands only variables "
        "defined earlier in the env list, and the Job controller appends JOB_COMPLETION_INDEX "
        "after yours (kubernetes/kubernetes#121523); read JOB_COMPLETION_INDEX directly");
  }
  const bool canonical = !value.empty() && (value == "0" || (value[0] >= '1' && value[0] <= '9')) &&
                         value.find_first_not_of("0123456789") == std::string::npos;
  if (!canonical) {
    return Status::Config(what + "=" + Quote(value) +
                          " is not a canonical non-negative decimal integer");
  }
  std::uint64_t n = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec != std::errc() || ptr != value.data() + value.size() || n > max) {
    return Status::Config(what + "=" + Quote(value) + " is too large: larger than " +
                          std::to_string(max));
  }
  return static_cast<std::uint32_t>(n);
}

Result<std::string> ParseNnodes(const std::string& what, const std::string& value) {
  auto parts = SplitOn(value, ':');
  if (parts.size() > 2) {
    return Status::Config(what + "='" + value + "' is not N or MIN:MAX");
  }
  std::vector<std::uint32_t> n;
  for (const auto& p : parts) {
    auto c = ParseCount(what, p, kMaxPods);
    if (!c.ok()) return Status::Config(what + "='" + value + "' is not N or MIN:MAX of pods");
    if (*c == 0) return Status::Config(what + "='" + value + "': a gang needs at least one pod");
    n.push_back(*c);
  }
  if (n.size() == 2 && n[0] > n[1]) {
    return Status::Config(what + "='" + value + "': MIN is larger than MAX; give N, or MIN:MAX with MIN <= MAX");
  }
  // torchrun's elastic range (torch/distributed/run.py parse_min_max_nnodes).
  if (n.size() == 2 && n[0] != n[1]) return std::to_string(n[0]) + ":" + std::to_string(n[1]);
  return std::to_string(n[0]);
}

Result<std::uint16_t> ParsePort(const std::string& what, const std::string& v) {
  auto n = ParseCount(what, v, 65535);
  if (!n.ok()) return n.status();
  if (*n == 0) return Status::Config(what + "='0' is not a port peers can reach");
  return static_cast<std::uint16_t>(*n);
}

Result<int> ParseSignal(const std::string& what, const std::string& v) {
  std::string name = v.starts_with("SIG") ? v.substr(3) : v;
  for (int s = 1; s < 32; ++s) {
    // SignalName: "SIG" + sigabbrev_np(3), also where glibc predates it.
    if (name == exitcodes::SignalName(s).substr(3) || v == std::to_string(s)) {
      if (s == SIGKILL || s == SIGSTOP) break;
      return s;
    }
  }
  return Status::Config(what + "='" + v + "' is not a signal that can be sent for "
                                   "diagnostics (e.g. SIGUSR1, SIGQUIT)");
}

Result<std::chrono::milliseconds> ParseSeconds(const std::string& what,
                                                          const std::string& v) {
  const bool plain = IsPlainDecimal(v);
  double s = plain ? std::strtod(v.c_str(), nullptr) : -1;
  if (!plain || s < 0.001 || s > 1e7) {
    return Status::Config(what + "='" + v + "' is " +
                                     (IsNegative(v) ? "negative: not" : "not") +
                                     " a number of seconds between 0.001 and 10000000");
  }
  return std::chrono::milliseconds(static_cast<long long>(std::llround(s * 1000)));
}

Result<std::chrono::milliseconds> ParseSecondsOrZero(const std::string& what,
                                                                const std::string& v) {
  if (v == "0") return std::chrono::milliseconds(0);
  return ParseSeconds(what, v);
}

// "0", "12.5": a non-negative decimal.
Result<double> ParseRate(const std::string& what, const std::string& v) {
  const bool plain = IsPlainDecimal(v);
  if (!plain && IsNegative(v)) return Status::Config(what + "='" + v + "' is negative");
  if (!plain) return Status::Config(what + "='" + v + "' is not a number like 12.5");
  return std::strtod(v.c_str(), nullptr);
}

Status ValidateDnsName(const std::string& what, const std::string& name) {
  std::string n = name;
  if (!n.empty() && n.back() == '.') n.pop_back();
  if (n.size() > 253) {
    return Status::Config(what + "=" + Quote(name) + " is " + std::to_string(n.size()) +
                          " characters; a DNS name has at most 253 (RFC 1035 2.3.4)");
  }
  for (const std::string& label : Labels(n)) {
    if (label.size() > 63) {
      return Status::Config(what + "=" + Quote(name) + ": label " + Quote(label) + " is " +
                            std::to_string(label.size()) +
                            " characters; a DNS label has at most 63 (RFC 1035 2.3.4; "
                            "Kubernetes truncates longer pod hostnames)");
    }
    bool ok = !label.empty() && label.front() != '-' && label.back() != '-';
    for (char c : label) {
      ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '-');
    }
    if (!ok) {
      return Status::Config(what + "=" + Quote(name) + ": label " + Quote(label) +
                            " is not a DNS label (1 to 63 letters, digits and '-', not starting "
                            "or ending with '-'; RFC 1123 2.1)");
    }
  }
  return Status::Ok();
}

}  // namespace trainlet::agent
