#include "trainlet/agent/spec/torchrun.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "trainlet/agent/base/tunables.h"
#include "trainlet/agent/base/values.h"

namespace trainlet::agent {

using exitcodes::Result;
using exitcodes::Status;

namespace {

// The option's name as written: "--log-dir=x" -> "--log-dir".
std::string_view NameOf(std::string_view arg) {
  auto eq = arg.find('=');
  return eq == std::string_view::npos ? arg : arg.substr(0, eq);
}

bool IsDecimal(std::string_view s) {
  return !s.empty() && s.size() <= 9 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Plain decimal seconds, as torch's rendezvous config takes them ("60", "1.5").
bool IsSeconds(const std::string& v) {
  return !v.empty() && v.find_first_not_of("0123456789.") == std::string::npos &&
         std::count(v.begin(), v.end(), '.') <= 1 && v.front() != '.' && v.back() != '.';
}

// The runpy.run_path call of torchrun's --run-path (torch/distributed/run.py
// run_script_path): sys.argv becomes [script, args...].
constexpr const char* kRunPathCode =
    "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')";

}  // namespace

Abbreviation AbbreviationOf(std::string_view prefix, const std::vector<std::string>& names) {
  // A flag's spellings differ only in '-' against '_' ("--nproc-per-node",
  // "--nproc_per_node"): one key for both.
  auto flag = [](std::string_view name) {
    std::string k(name);
    std::replace(k.begin(), k.end(), '_', '-');
    return k;
  };
  Abbreviation out;
  if (!prefix.starts_with("--") || prefix.size() <= 2) return out;
  std::vector<std::string> keys;
  for (const auto& n : names) {
    if (n == prefix) return {};  // exact: not an abbreviation
    if (!n.starts_with(prefix)) continue;
    std::string k = flag(n);
    if (std::find(keys.begin(), keys.end(), k) != keys.end()) continue;
    keys.push_back(k);
    out.candidates.push_back(n);
  }
  if (out.candidates.size() == 1) out.full = out.candidates.front();
  return out;
}

SplitArgs SplitAtTrainer(const std::vector<std::string>& args,
                         const std::function<OptionKind(std::string_view)>& kind,
                         const std::vector<std::string>& abbreviable) {
  SplitArgs out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    if (a == "--") {
      out.dash_dash = true;
      out.trainer.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
      return out;
    }
    if (a.size() < 2 || a[0] != '-') {  // the first positional ("-" alone is one too)
      out.trainer.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      return out;
    }
    std::string_view name = NameOf(a);
    OptionKind k = kind(name);
    // "-r3", "-r=3": a one-letter option with its value attached (argparse
    // splits "-r=3" at the '=' when "-r" is an option).
    if (a[1] != '-' && a.size() > 2 && kind(std::string_view(a).substr(0, 2)) == OptionKind::kValue) {
      out.options.push_back(a.substr(0, 2));
      out.launcher.push_back(a.substr(0, 2));
      out.launcher.push_back(a.substr(a[2] == '=' ? 3 : 2));
      continue;
    }
    if (k == OptionKind::kUnknown && name.starts_with("--")) {
      Abbreviation ab = AbbreviationOf(name, abbreviable);
      if (ab.candidates.size() > 1) out.could_match = std::move(ab.candidates);
      if (!ab.full.empty()) {
        a = ab.full + a.substr(name.size());  // "--nproc=2" -> "--nproc-per-node=2"
        name = NameOf(a);
        k = kind(name);
      }
    }
    if (k == OptionKind::kUnknown) {
      out.unknown = std::string(name);
      return out;
    }
    out.options.emplace_back(name);
    out.launcher.push_back(a);
    if (k == OptionKind::kValue && name.size() == a.size() && i + 1 < args.size()) {
      out.launcher.push_back(args[++i]);
    }
  }
  return out;
}

std::string SubcommandOf(const std::vector<std::string>& args,
                         const std::vector<std::string>& names, bool env_trainer_mode) {
  if (args.empty() || env_trainer_mode) return "";
  return std::find(names.begin(), names.end(), args.front()) == names.end() ? "" : args.front();
}

Result<std::optional<Candidate>> ChooseCandidate(const std::string& what,
                                                 const std::vector<Candidate>& candidates) {
  std::optional<Candidate> best;
  for (const Candidate& c : candidates) {
    if (!best || c.origin > best->origin) {
      best = c;
    } else if (c.origin == best->origin && c.value != best->value) {
      return Status::Config(what + ": " + best->source + " gives '" + best->value + "', " +
                            c.source + " gives '" + c.value + "'; give only one of them");
    }
  }
  return best;
}

Result<std::vector<std::string>> TrainerArgv(const SplitArgs& split, const TrainerMode& mode) {
  if (split.trainer.empty()) {
    return Status::Config(
        "no trainer command: give a script (trainlet [options] train.py --epochs 3) or a "
        "program after -- (trainlet [options] -- python3 train.py)");
  }
  const std::string& first = split.trainer.front();
  const std::vector<std::string> rest(split.trainer.begin() + 1, split.trainer.end());
  std::vector<std::string> argv;
  if (mode.run_path) {
    argv = {mode.python, "-u", "-c", kRunPathCode, first};
  } else if (mode.module && mode.no_python) {
    return Status::Config("--no-python and -m/--module cannot be used together (as in torchrun)");
  } else if (mode.module) {
    argv = {mode.python, "-u", "-m", first};
  } else if (mode.no_python || split.dash_dash) {
    argv = {first};
  } else {
    argv = {mode.python, "-u", first};  // torchrun: any training_script, .py or not
  }
  argv.insert(argv.end(), rest.begin(), rest.end());
  return argv;
}

int StdSpec::For(std::uint32_t local_rank) const {
  if (all) return *all;
  auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? 0 : it->second;
}

Result<StdSpec> ParseStd(const std::string& what, const std::string& value) {
  auto bad = [&] {
    return Status::Config(what + "='" + value + "' is not 0-3 (0 none, 1 stdout, 2 stderr, "
                          "3 both) or a map of local ranks like 0:1,1:2");
  };
  auto one = [](std::string_view s) { return s.size() == 1 && s[0] >= '0' && s[0] <= '3'; };
  StdSpec spec;
  if (one(value)) {
    spec.all = value[0] - '0';
    return spec;
  }
  for (const auto& item : SplitOn(value, ',')) {
    auto colon = item.find(':');
    if (colon == std::string::npos || !IsDecimal(item.substr(0, colon)) ||
        !one(std::string_view(item).substr(colon + 1))) {
      return bad();
    }
    spec.per_rank[static_cast<std::uint32_t>(std::stoul(item.substr(0, colon)))] =
        item[colon + 1] - '0';
  }
  return spec;
}

Result<std::set<std::uint32_t>> ParseLocalRanksFilter(const std::string& what,
                                                      const std::string& value) {
  std::set<std::uint32_t> ranks;
  if (value.empty()) return ranks;
  for (const auto& item : SplitOn(value, ',')) {
    if (!IsDecimal(item)) {
      return Status::Config(what + "='" + value +
                            "' is not a comma-separated list of local ranks like 0,1,2");
    }
    ranks.insert(static_cast<std::uint32_t>(std::stoul(item)));
  }
  return ranks;
}

const std::vector<RdzvConfKey>& RdzvConfKeys() {
  // trainlet has its own rendezvous, its own heartbeats and no etcd; these say
  // why a key of torch's changes nothing here.
  static constexpr std::string_view kFixed =
      "a trainlet gang ends by the leader's stop, not by closing its rendezvous";
  static constexpr std::string_view kOwnBeat =
      "trainlet's rendezvous has its own heartbeat (tunables.h)";
  static constexpr std::string_view kNoStore =
      "trainlet's rendezvous is not a TCPStore; the trainers' store is torch's own";
  static constexpr std::string_view kNoEtcd = "trainlet has no etcd backend";
  static_assert(kDefaultLastCall == std::chrono::seconds(30), "last_call_timeout's help");
  static const std::vector<RdzvConfKey> kKeys = {
      {"join_timeout", RdzvValue::kSeconds, "",
       "seconds a round waits for the gang (as --rdzv-timeout)"},
      {"timeout", RdzvValue::kSeconds, "", "as join_timeout, which wins"},
      {"read_timeout", RdzvValue::kSeconds, "", "seconds a connecting pod has for its hello"},
      {"last_call_timeout", RdzvValue::kSeconds, "",
       "seconds a round waits for more pods once MIN joined (--nnodes MIN:MAX, and the "
       "first round with --spares; default 30, torch's); it forms a moment before "
       "--rdzv-timeout at the latest"},
      {"close_timeout", RdzvValue::kSeconds, kFixed},
      {"heartbeat_timeout", RdzvValue::kSeconds, kOwnBeat},
      {"keep_alive_interval", RdzvValue::kSeconds, kOwnBeat},
      {"keep_alive_max_attempt", RdzvValue::kSeconds, kOwnBeat},
      {"is_host", RdzvValue::kBool,
       "trainlet chooses the leader itself (README, Coming from torchrun)"},
      {"use_libuv", RdzvValue::kBool, kNoStore},  // torch 2.2-2.3's c10d backend
      {"store_type", RdzvValue::kText, kNoStore},
      {"rank", RdzvValue::kText, "the node rank comes from --node-rank or the pod's index"},
      {"cas_backoff_max_seconds", RdzvValue::kText, kOwnBeat},
      {"protocol", RdzvValue::kText, kNoEtcd},
      {"cacert", RdzvValue::kText, kNoEtcd},
      {"cert", RdzvValue::kText, kNoEtcd},
      {"key", RdzvValue::kText, kNoEtcd},
      {"ca_cert", RdzvValue::kText, kNoEtcd},
      {"ssl_cert", RdzvValue::kText, kNoEtcd},
      {"ssl_cert_key", RdzvValue::kText, kNoEtcd},
      {"etcd_prefix", RdzvValue::kText, kNoEtcd},
  };
  return kKeys;
}

std::string RdzvConfHelp() {
  std::string used, none;
  for (const RdzvConfKey& k : RdzvConfKeys()) {
    const std::string key(k.key);
    if (!k.used.empty()) used += (used.empty() ? "" : "; ") + key + ": " + std::string(k.used);
    if (!k.no_effect.empty()) none += (none.empty() ? "" : ", ") + key;
  }
  return "KEY=VALUE,... (torch's rendezvous keys): " + used + ". Accepted with no effect (the "
         "log says why): " + none + ". Other keys are refused";
}

namespace {

// torch's RendezvousParameters.get_as_bool (rendezvous/api.py).
bool IsTorchBool(std::string v) {
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  static const std::set<std::string> kBools = {"1", "true", "t", "yes", "y",
                                               "0", "false", "f", "no", "n"};
  return kBools.contains(v);
}

Status CheckRdzvValue(const std::string& what, const RdzvConfKey& k, const std::string& v) {
  // get_as_int: a whole number (timeouts > 0 for the ones trainlet uses).
  if (k.value == RdzvValue::kSeconds && (!IsSeconds(v) || std::strtod(v.c_str(), nullptr) <= 0)) {
    return Status::Config(what + ": " + std::string(k.key) + "='" + v +
                          "' is not a number of seconds");
  }
  if (k.value == RdzvValue::kBool && !IsTorchBool(v)) {
    return Status::Config(what + ": " + std::string(k.key) + "='" + v +
                          "' is not a boolean (1, 0, true, false, yes, no)");
  }
  return Status::Ok();
}

}  // namespace

Result<RdzvConf> ParseRdzvConf(const std::string& what, const std::string& value) {
  RdzvConf conf;
  if (value.empty()) return conf;
  std::optional<std::string> timeout;
  for (const auto& item : SplitOn(value, ',')) {
    if (item.empty()) continue;
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Status::Config(what + "='" + value + "': '" + item + "' is not KEY=VALUE");
    }
    std::string key = item.substr(0, eq), v = item.substr(eq + 1);
    const auto& keys = RdzvConfKeys();
    auto k = std::find_if(keys.begin(), keys.end(), [&](const auto& r) { return r.key == key; });
    if (k == keys.end()) {
      std::string known;
      for (const auto& r : keys) known += (known.empty() ? "" : ", ") + std::string(r.key);
      return Status::Config(what + ": key '" + key + "' is not one of torch's rendezvous "
                            "settings (" + known + ")");
    }
    if (auto s = CheckRdzvValue(what, *k, v); !s.ok()) return s;
    if (!k->no_effect.empty()) {
      conf.no_effect.push_back(item + " has no effect: " + std::string(k->no_effect));
      continue;
    }
    (key == "join_timeout"        ? conf.join_timeout
     : key == "timeout"           ? timeout
     : key == "last_call_timeout" ? conf.last_call_timeout
                                  : conf.read_timeout) = v;
  }
  if (!conf.join_timeout) conf.join_timeout = timeout;
  return conf;
}

Interpreter ChooseInterpreter(const std::optional<std::string>& flag,
                              const std::map<std::string, std::string>& env,
                              const std::string& self_exe,
                              const std::function<bool(const std::string&)>& exists) {
  if (flag) return {*flag, "--python"};
  if (auto it = env.find("PYTHON_EXEC"); it != env.end() && !it->second.empty()) {
    return {it->second, "PYTHON_EXEC"};
  }
  // <venv>/bin/trainlet: <venv>/bin/python3 and <venv>/pyvenv.cfg (PEP 405).
  if (auto slash = self_exe.rfind('/'); slash != std::string::npos && slash > 0) {
    const std::string bin = self_exe.substr(0, slash);
    const auto up = bin.rfind('/');
    const std::string root = up == std::string::npos ? "." : bin.substr(0, up);
    if (exists(bin + "/python3") && exists(root + "/pyvenv.cfg")) {
      return {bin + "/python3", "the Python environment of " + self_exe};
    }
  }
  return {"python3", "PATH"};
}

std::string ExpandPrefixTemplate(std::string_view tmpl, const std::string& role_name,
                                 std::uint32_t rank, std::uint32_t local_rank,
                                 const std::string& hostname) {
  auto lookup = [&](std::string_view id) -> std::optional<std::string> {
    if (id == "role_name") return role_name;
    if (id == "rank") return std::to_string(rank);
    if (id == "local_rank") return std::to_string(local_rank);
    if (id == "hostname") return hostname;
    return std::nullopt;
  };
  auto ident_char = [](char c, bool first) {
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (!first && c >= '0' && c <= '9');
  };
  std::string out;
  for (std::size_t i = 0; i < tmpl.size(); ++i) {
    if (tmpl[i] != '$' || i + 1 == tmpl.size()) {
      out += tmpl[i];
      continue;
    }
    if (tmpl[i + 1] == '$') {
      out += '$';
      ++i;
      continue;
    }
    std::size_t start = i + 1, end = start;
    bool braced = tmpl[start] == '{';
    if (braced) ++start, end = start;
    while (end < tmpl.size() && ident_char(tmpl[end], end == start)) ++end;
    bool closed = !braced || (end < tmpl.size() && tmpl[end] == '}');
    auto value = end > start && closed ? lookup(tmpl.substr(start, end - start)) : std::nullopt;
    if (!value) {
      out += '$';  // safe_substitute leaves what it cannot replace
      continue;
    }
    out += *value;
    i = braced ? end : end - 1;
  }
  return out;
}

std::string NearestOption(std::string_view unknown, const std::vector<std::string>& names) {
  auto distance = [](std::string_view a, std::string_view b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
      std::size_t diag = row[0];
      row[0] = i;
      for (std::size_t j = 1; j <= b.size(); ++j) {
        std::size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diag = up;
      }
    }
    return row[b.size()];
  };
  std::string best;
  if (unknown.size() <= 2) return best;  // "-c": anything is near
  std::size_t best_d = std::max<std::size_t>(1, unknown.size() / 3) + 1;
  for (const auto& n : names) {
    std::size_t d = distance(unknown, n);
    if (d < best_d) best_d = d, best = n;
  }
  return best;
}

}  // namespace trainlet::agent
