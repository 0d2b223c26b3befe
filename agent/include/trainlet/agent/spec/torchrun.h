// trainlet/agent/spec/torchrun.h — torchrun's command line, with torchrun's meaning
// (torch 2.x torch/distributed/run.py): where the trainer's command starts,
// how `script.py`, `-m`, `--no-python` and `--run-path` become its argv, and
// the values of --nnodes, --redirects/--tee, --local-ranks-filter,
// --rdzv-endpoint, --rdzv-conf, --signals-to-handle and
// TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE.
//
// Pure functions over their arguments, callable from any thread. Errors are
// class config, one line naming the flag (or variable) and the value.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "trainlet/agent/base/values.h"
#include "trainlet/exitcodes/status.h"

namespace trainlet::agent {

// What a launcher option is, for SplitAtTrainer.
enum class OptionKind { kUnknown, kFlag, kValue };

// The launcher's arguments and the trainer's, split where the trainer's begin:
// at the first positional argument, or after "--". Nothing from there on is
// read as a launcher option (as torchrun, env(1) and tini do).
struct SplitArgs {
  std::vector<std::string> launcher;  // the options before the trainer (argv[0] excluded)
  std::vector<std::string> trainer;   // the first positional and everything after it
  bool dash_dash = false;             // the trainer came after "--"
  std::string unknown;                // the first unknown option before the trainer, if any
  // When `unknown` is an ambiguous abbreviation: the flags it could be
  // (AbbreviationOf), as argparse lists them. Empty otherwise.
  std::vector<std::string> could_match;
  std::vector<std::string> options;  // each option's name as read ("--nproc-per-node", "-r"), in order
};

// argparse's abbreviations (allow_abbrev, on by default, which torchrun keeps):
// a long option written as an unambiguous prefix of one, "--nproc" for
// "--nproc-per-node", "--max_rest" for "--max_restarts". `names` are the long
// options that take abbreviations, every spelling of each ("--nproc-per-node",
// "--nproc_per_node"). The flags `prefix` could be: each flag once, however
// many of its spellings match (argparse, which counts spellings, calls
// "--nproc" ambiguous between the two of torch 2.x), by its first spelling in
// `names`, in their order; `full` is the matching spelling when there is
// exactly one flag, else "". Only for "--" options; a prefix that is itself
// one of `names` is no abbreviation (exact names are the caller's to match
// first: an abbreviation never changes what an exact flag means).
struct Abbreviation {
  std::string full;
  std::vector<std::string> candidates;
};
Abbreviation AbbreviationOf(std::string_view prefix, const std::vector<std::string>& names);

// Splits `args` (argv without argv[0]). `kind` tells, for an option's name as
// written ("--nnodes", "-r"; without "=value"), whether it is a flag, takes a
// value (the next argument, or "=value", or for a one-letter option the rest of
// the argument: "-r3", and as argparse splits it, "-r=3"), or is unknown. Scanning stops at an unknown option
// (SplitArgs::unknown) or at the trainer. An unknown "--" option that
// abbreviates exactly one of `abbreviable` (AbbreviationOf) is written out in
// full in SplitArgs::launcher; one that could be several stops the scan
// (SplitArgs::unknown and could_match).
SplitArgs SplitAtTrainer(const std::vector<std::string>& args,
                         const std::function<OptionKind(std::string_view)>& kind,
                         const std::vector<std::string>& abbreviable = {});

// trainlet's subcommand, or "" when `args` (argv without argv[0]) run a
// trainer. A subcommand is one of `names` as the very first argument, before
// any option: `trainlet -m policy`, `trainlet --nproc 2 local` run the trainer
// `policy`, `local` (torchrun has no subcommands, so no torchrun line ever
// names one). `env_trainer_mode`: the environment switches on -m, --no-python
// or --run-path (PET_MODULE=1, ...); then the first argument is the trainer's
// too, as torchrun reads it (`PET_MODULE=1 trainlet policy` runs the module).
std::string SubcommandOf(const std::vector<std::string>& args,
                         const std::vector<std::string>& names, bool env_trainer_mode);

// Where a value came from, by the README's precedence: a flag wins over
// TRAINLET_<FLAG>, which wins over torchrun's PET_<FLAG>, which wins over a
// plain variable (MASTER_ADDR).
enum class Origin { kPlainEnv = 0, kPetEnv = 1, kTrainletEnv = 2, kFlag = 3 };
struct Candidate {
  std::string value;
  std::string source;  // as the user wrote it: "--rdzv-endpoint", "TRAINLET_MASTER_ADDR"
  Origin origin = Origin::kFlag;
};
// The candidate of the highest origin; nullopt when there is none. Two of that
// origin with different values are refused (class config), naming both and
// `what` ("the leader's address"): one setting, two sources, no silent winner.
[[nodiscard]] exitcodes::Result<std::optional<Candidate>> ChooseCandidate(
    const std::string& what, const std::vector<Candidate>& candidates);

// How the first positional runs (torchrun's -m, --no-python, --run-path).
struct TrainerMode {
  bool module = false;     // -m: `python -u -m MODULE args`
  bool no_python = false;  // --no-python: the positional is the executable
  bool run_path = false;   // --run-path: runpy.run_path in a python -u (wins over --no-python)
  std::string python = "python3";  // the interpreter (PATH lookup when it has no '/')
};

// The worker's argv, torchrun's way (torch/distributed/run.py config_from_args):
//   -m M args          -> python -u -m M args
//   --no-python P args -> P args
//   --run-path S args  -> python -u -c <runpy.run_path(S) with sys.argv=[S, args]> S args
//   S args             -> python -u S args (any path, .py or not, as torchrun's
//                         training_script)
//   -- cmd args        -> cmd args (no mode flag given: as given)
// Errors: no trainer; -m with --no-python (torchrun refuses it too).
[[nodiscard]] exitcodes::Result<std::vector<std::string>> TrainerArgv(const SplitArgs& split,
                                                                      const TrainerMode& mode);

// The workers' interpreter, in torchrun's order: --python (trainlet's own
// flag; torchrun has none), PYTHON_EXEC (torchrun's os.getenv("PYTHON_EXEC",
// sys.executable)), the Python environment trainlet runs from (torchrun's
// sys.executable: a `python3` beside the binary in its bin/ with a
// pyvenv.cfg one level above, as pip installs the wheel into a venv), else
// `python3` on PATH. `exists(path)` says whether a file is there (stat(2) in
// the agent; a fake in tests). `why` names the source for the start line.
struct Interpreter {
  std::string path;
  std::string why;  // "--python", "PYTHON_EXEC", "the venv of /v/bin/trainlet", "PATH"
};
Interpreter ChooseInterpreter(const std::optional<std::string>& flag,
                              const std::map<std::string, std::string>& env,
                              const std::string& self_exe,
                              const std::function<bool(const std::string&)>& exists);

// torchrun's Std (torch/distributed/elastic/multiprocessing/api.py): a bit set
// of the streams to write to files, 0 none, 1 stdout, 2 stderr, 3 both.
constexpr int kStdOut = 1, kStdErr = 2;
struct StdSpec {
  std::optional<int> all;                 // "3": every local rank
  std::map<std::uint32_t, int> per_rank;  // "0:1,1:2": these ranks; the others none
  int For(std::uint32_t local_rank) const;
};
// "0".."3", or "RANK:STD,..." (RANK a decimal local rank).
[[nodiscard]] exitcodes::Result<StdSpec> ParseStd(const std::string& what,
                                                  const std::string& value);

// "0,1,2": the local ranks whose output reaches the console. Empty = all.
[[nodiscard]] exitcodes::Result<std::set<std::uint32_t>> ParseLocalRanksFilter(
    const std::string& what, const std::string& value);

// "k1=v1,k2=v2" (torch's _parse_rendezvous_config). Every key one of torch's
// rendezvous backends reads (RdzvConfKeys) is accepted; those with a meaning
// here become it, the others are listed in `no_effect` (the caller logs them
// once). An unknown key is refused naming the known ones, as is a value torch
// itself would refuse (a timeout that is not a whole number of seconds, a
// boolean that is not 1/0/true/false/yes/no/y/n/t/f).
struct RdzvConf {
  std::optional<std::string> join_timeout;  // join_timeout, else timeout: --rdzv-timeout
  std::optional<std::string> read_timeout;  // a rendezvous peer's hello must come within it
  // With MIN pods joined, how long a round waits for more (formation_policy.h).
  std::optional<std::string> last_call_timeout;
  std::vector<std::string> no_effect;  // "last_call_timeout=5 has no effect: <why>", in order
};
[[nodiscard]] exitcodes::Result<RdzvConf> ParseRdzvConf(const std::string& what,
                                                        const std::string& value);

// One rendezvous key torch reads (torch/distributed/elastic/rendezvous/
// {c10d,etcd}_rendezvous_backend.py, dynamic_rendezvous.py,
// static_tcp_rendezvous.py, etcd_rendezvous.py), what its value is, and what it
// does here: `used` (ParseRdzvConf gives it that meaning) or `no_effect` (why
// it is accepted and changes nothing); exactly one of them is set.
enum class RdzvValue { kSeconds, kBool, kText };
struct RdzvConfKey {
  std::string_view key;
  RdzvValue value;
  std::string_view no_effect;  // why it has no effect here; empty: it has one
  std::string_view used = {};  // what it does here; empty: no effect
};
const std::vector<RdzvConfKey>& RdzvConfKeys();

// --rdzv-conf's help, from RdzvConfKeys: each key that does something and
// what, then the keys accepted with no effect; other keys are refused.
std::string RdzvConfHelp();

// Python's string.Template.safe_substitute, as torchrun applies it to
// --log-line-prefix-template / TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE: "$name"
// and "${name}" of role_name, rank, local_rank and hostname (torch 2.15) are
// replaced, "$$" is "$", anything else stays.
std::string ExpandPrefixTemplate(std::string_view tmpl, const std::string& role_name,
                                 std::uint32_t rank, std::uint32_t local_rank,
                                 const std::string& hostname = "");

// The option among `names` nearest to `unknown` (edit distance at most a third
// of its length, at least 1), or "" when none is near or `unknown` is a
// one-letter option.
std::string NearestOption(std::string_view unknown, const std::vector<std::string>& names);

}  // namespace trainlet::agent
