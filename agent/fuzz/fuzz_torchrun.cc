// libFuzzer entry for torchrun's command line (torchrun.h): the input is argv
// without argv[0], its arguments separated by NUL bytes. SplitAtTrainer with
// torchrun's abbreviations, TrainerArgv, SubcommandOf, ChooseCandidate, and
// each flag-value parser on every argument. Any bytes give a split, a value or a config error with a message,
// never a crash; a split never reads into the trainer's arguments, and an
// abbreviation only ever becomes a whole flag name.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "trainlet/agent/base/address.h"
#include "trainlet/agent/spec/torchrun.h"
#include "trainlet/exitcodes/ports.h"

using namespace trainlet::agent;

namespace {

const std::vector<std::string> kNames = {
    "--nnodes", "--nproc-per-node", "--nproc_per_node", "--rdzv-backend", "--rdzv_backend",
    "--rdzv-id", "--rdzv_id", "--max-restarts", "--max_restarts", "--no-python", "--no_python",
    "--standalone", "--tee", "--redirects", "--role"};

OptionKind Kind(std::string_view name) {
  if (name == "--standalone" || name == "--no-python" || name == "--no_python" || name == "-m") {
    return OptionKind::kFlag;
  }
  if (name == "-r" || name == "-t" || name == "--log-level") return OptionKind::kValue;
  for (const auto& n : kNames) {
    if (n == name) return OptionKind::kValue;
  }
  return OptionKind::kUnknown;
}

template <class R>
void CheckParsed(const R& r) {
  if (!r.ok() && r.status().message().empty()) abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args;
  std::string all(reinterpret_cast<const char*>(data), size);
  for (std::size_t start = 0; start <= all.size() && args.size() < 64;) {
    std::size_t nul = all.find('\0', start);
    if (nul == std::string::npos) nul = all.size();
    args.push_back(all.substr(start, nul - start));
    start = nul + 1;
  }
  SplitArgs s = SplitAtTrainer(args, Kind, kNames);
  // The trainer's arguments are the input's own tail, untouched.
  if (s.trainer.size() > args.size() ||
      !std::equal(s.trainer.rbegin(), s.trainer.rend(), args.rbegin())) {
    abort();
  }
  // Only whole option names go on (an option's value may be anything).
  for (std::size_t i = 0; i < s.launcher.size(); ++i) {
    const std::string& a = s.launcher[i];
    const std::string name = a.substr(0, a.find('='));
    const OptionKind k = Kind(name);
    if (k == OptionKind::kUnknown) abort();
    if (k == OptionKind::kValue && name.size() == a.size()) ++i;  // its value
  }
  // Every option read is listed once, by a whole name, in order.
  std::size_t options = 0;
  for (std::size_t i = 0; i < s.launcher.size(); ++i, ++options) {
    const std::string& a = s.launcher[i];
    const std::string name = a.substr(0, a.find('='));
    if (options >= s.options.size() || s.options[options] != name) abort();
    if (Kind(name) == OptionKind::kValue && name.size() == a.size()) ++i;
  }
  if (options != s.options.size()) abort();
  // A subcommand is the first argument itself, or none.
  const std::string sub = SubcommandOf(args, {"local", "policy"}, false);
  if (!sub.empty() && sub != args.front()) abort();
  if (!SubcommandOf(args, {"local", "policy"}, true).empty()) abort();
  // One candidate per argument: the chosen one is of the highest origin, and
  // a refusal names a source.
  std::vector<Candidate> candidates;
  for (std::size_t i = 0; i < args.size() && i < 8; ++i) {
    candidates.push_back({args[i], "--s" + std::to_string(i), static_cast<Origin>(i % 4)});
  }
  if (auto c = ChooseCandidate("x", candidates); c.ok() && *c) {
    for (const auto& other : candidates) {
      if (other.origin > (*c)->origin) abort();
    }
  } else if (!c.ok() && c.status().message().find("--s") == std::string::npos) {
    abort();
  }
  if (!s.could_match.empty()) {
    if (s.unknown.empty() || s.could_match.size() < 2) abort();
    for (const auto& c : s.could_match) {
      if (!c.starts_with(s.unknown)) abort();
    }
  }
  for (bool module : {false, true}) {
    TrainerMode mode;
    mode.module = module;
    CheckParsed(TrainerArgv(s, mode));
  }
  for (const auto& a : args) {
    CheckParsed(ParseNnodes("--nnodes", a));
    CheckParsed(ParseStd("--tee", a));
    CheckParsed(ParseLocalRanksFilter("--local-ranks-filter", a));
    CheckParsed(ParseEndpoint("--rdzv-endpoint", a, trainlet::exitcodes::ports::kRendezvous));
    CheckParsed(ParseRdzvConf("--rdzv-conf", a));
    (void)ExpandPrefixTemplate(a, "role", 3, 1);
  }
  return 0;
}
