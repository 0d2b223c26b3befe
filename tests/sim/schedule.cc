// The schedule's text form (sim.h: ScheduleText, ParseSchedule): the
// regression and finding files (tests/sim/regressions, findings) and the
// scenarios the simulator and the soak both run (tests/agree). Apart from
// sim.cc so that its fuzz target (tests/fuzz/fuzz_schedule.cc) links nothing
// of the world.
#include <charconv>
#include <limits>
#include <map>
#include <sstream>
#include <type_traits>

#include "sim.h"

namespace trainlet::sim {

namespace {
constexpr const char* kFaultNames[] = {
    "worker_fail", "hang",     "kill",       "node_death", "freeze",        "partition", "reset",
    "evict",       "preempt",  "scale_up",   "scale_down", "late_listener", "stranger",
};
static_assert(std::size(kFaultNames) == static_cast<std::size_t>(FaultKind::kCount));

// A bad line: its number and what is wrong, for the one-line error.
struct BadLine {
  std::string what;
};

// `text` as a whole decimal number of T's range (no sign for unsigned fields,
// no trailing characters).
template <typename T>
T Number(const std::string& text, const std::string& name) {
  using Wide = std::conditional_t<std::is_signed_v<T>, long long, unsigned long long>;
  Wide v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size() ||
      v < static_cast<Wide>(std::numeric_limits<T>::min()) ||
      v > static_cast<Wide>(std::numeric_limits<T>::max())) {
    throw BadLine{name + "=" + text + ": not a number in range"};
  }
  return static_cast<T>(v);
}

void ParseConfig(std::istringstream& l, Schedule& s) {
  std::map<std::string, std::string> kv;
  for (std::string word; l >> word;) {
    const auto eq = word.find('=');
    if (eq == std::string::npos) throw BadLine{"'" + word + "' is not k=v"};
    kv[word.substr(0, eq)] = word.substr(eq + 1);
  }
  SimConfig& c = s.config;
  auto u = [&](const char* k, auto& out) {
    const auto it = kv.find(k);
    if (it == kv.end()) return;
    out = Number<std::remove_reference_t<decltype(out)>>(it->second, k);
    kv.erase(it);
  };
  u("pods", c.pods), u("min", c.min_nodes), u("max", c.max_nodes), u("spares", c.spares);
  u("workers", c.workers), u("max_restarts", c.max_restarts), u("token", c.token);
  u("by_arrival", c.by_arrival), u("rdzv_timeout", c.rdzv_timeout_ms);
  u("last_call", c.last_call_ms), u("grace", c.grace_ms), u("train", c.train_ms);
  u("limit", c.limit_ms), u("refused", c.refused), u("world_seed", s.world_seed);
  if (!kv.empty()) throw BadLine{"unknown config key " + kv.begin()->first};
  if (c.max_nodes == 0 || c.min_nodes == 0 || c.min_nodes > c.max_nodes || c.workers == 0 ||
      c.pods == 0 || c.max_nodes > kMaxSchedulePods || c.spares > kMaxSchedulePods ||
      c.pods > c.max_nodes + c.spares || c.workers > kMaxScheduleWorkers) {
    throw BadLine{"an impossible gang"};
  }
}

void ParseExpect(std::istringstream& l, Schedule& s) {
  for (std::string word; l >> word;) {
    if (word.rfind("codes=", 0) == 0) s.expect_codes = word.substr(6);
    else if (word.rfind("restarts=", 0) == 0) s.expect_restarts = Number<std::uint32_t>(word.substr(9), "restarts");
    else throw BadLine{"unknown expectation '" + word + "'"};
  }
}

Fault ParseFault(std::istringstream& l) {
  std::string t, kind, pod, arg, extra;
  if (!(l >> t >> kind >> pod >> arg) || (l >> extra)) throw BadLine{"fault T KIND POD ARG"};
  Fault f;
  f.t_ms = Number<std::int64_t>(t, "T");
  f.pod = Number<std::uint32_t>(pod, "POD");
  f.arg = Number<std::int64_t>(arg, "ARG");
  if (f.t_ms < 0 || f.arg < 0) throw BadLine{"a negative time or argument"};
  for (std::size_t k = 0; k < std::size(kFaultNames); ++k) {
    if (kind == kFaultNames[k]) {
      f.kind = static_cast<FaultKind>(k);
      return f;
    }
  }
  throw BadLine{"unknown fault " + kind};
}

}  // namespace

const char* FaultName(FaultKind k) {
  const auto i = static_cast<std::size_t>(k);
  return i < std::size(kFaultNames) ? kFaultNames[i] : "?";
}

std::string ScheduleText(const Schedule& s) {
  const SimConfig& c = s.config;
  std::ostringstream o;
  o << "config pods=" << c.pods << " min=" << c.min_nodes << " max=" << c.max_nodes
    << " spares=" << c.spares << " workers=" << c.workers << " max_restarts=" << c.max_restarts
    << " token=" << c.token << " by_arrival=" << c.by_arrival << " rdzv_timeout=" << c.rdzv_timeout_ms
    << " last_call=" << c.last_call_ms << " grace=" << c.grace_ms << " train=" << c.train_ms
    << " limit=" << c.limit_ms << (c.refused ? " refused=" + std::to_string(c.refused) : "")
    << " world_seed=" << s.world_seed << "\n";
  if (s.expect_codes || s.expect_restarts) {
    o << "expect";
    if (s.expect_codes) o << " codes=" << *s.expect_codes;
    if (s.expect_restarts) o << " restarts=" << *s.expect_restarts;
    o << "\n";
  }
  for (const Fault& f : s.faults) {
    o << "fault " << f.t_ms << " " << FaultName(f.kind) << " " << f.pod << " " << f.arg << "\n";
  }
  return o.str();
}

std::optional<Schedule> ParseSchedule(const std::string& text, std::string* error) {
  Schedule s;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  try {
    while (std::getline(in, line)) {
      ++n;
      if (line.empty() || line[0] == '#') continue;
      std::istringstream l(line);
      std::string word;
      l >> word;
      if (word == "config") ParseConfig(l, s);
      else if (word == "expect") ParseExpect(l, s);
      else if (word == "fault") s.faults.push_back(ParseFault(l));
      else if (!word.empty()) throw BadLine{"expected config, expect or fault"};
    }
    // Against the configuration whatever the order of the lines (ScheduleText
    // writes the configuration first: what parses here parses again there).
    for (const Fault& f : s.faults) {
      if (f.pod >= s.config.max_nodes + s.config.spares) {
        n = 0;
        throw BadLine{"fault on pod " + std::to_string(f.pod) + ": beyond MAX + spares"};
      }
    }
  } catch (const BadLine& bad) {
    if (error) *error = (n > 0 ? "line " + std::to_string(n) + ": " : "") + bad.what;
    return std::nullopt;
  }
  return s;
}

}  // namespace trainlet::sim
