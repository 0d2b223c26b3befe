// trainlet/agent/front/cli.h — the command line: `trainlet [flags] -- cmd...`,
// `trainlet local ...`, `trainlet exit-codes`, `--help`, `--version`.
//
// Every flag can also be set as TRAINLET_<FLAG> in the environment (dashes as
// underscores, upper case), and where torchrun has the flag, as its PET_<FLAG>;
// a flag on the command line wins over TRAINLET_*, which wins over PET_*.
// Logs go to stderr; the level comes from --log-level, else SPDLOG_LEVEL.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "trainlet/agent/front/front_end.h"
#include "trainlet/agent/front/local.h"
#include "trainlet/agent/pod/pod.h"
#include "trainlet/exitcodes/exit_code.h"
#include "trainlet/exitcodes/status.h"

namespace trainlet::agent {

// What runs: `trainlet local`'s agents, or this pod (monostate: nothing).
using PlannedRun = std::variant<std::monostate, LocalOptions, PodOptions>;

// What the front end makes of a command line, before anything runs.
struct FrontEnd {
  // It ended here: --help, --version, --print-completion or a subcommand
  // (exit-codes, probe, policy) ran and printed its output; the exit code.
  std::optional<int> exit;
  // Refused (not ok): Main reports it as one line and the JSON summary, and
  // exits with the class's code from `codes`, writing `termination_log`.
  exitcodes::Status status = exitcodes::Status::Ok();
  exitcodes::ExitCodeTable codes;  // --exit-code's, once it parsed; else the defaults
  std::string termination_log;     // --termination-log, once read
  std::uint32_t pod_index = 0;     // for the summary, when a source of it parses
  bool local = false;              // `trainlet local` (its stop at start: 128 + signal)
  // Neither: what runs, `trainlet local`'s agents or this pod.
  PlannedRun plan;
};

// Asks the node what the settings need (front_end.h's Probe; tests may answer instead).
using ProbeFn = std::function<NodeFacts(const FlagValues&, const Settings&)>;

// The front end without running anything: parse `argv` (argv[0] first) with
// the environment `env` (TRAINLET_* are read by CLI11 from the process's own,
// PET_* and the rest from `env`), then Validate -> `probe` -> Plan. Prints what
// ends here (--help, a subcommand's output), never a refusal (the caller's);
// configures logging as the flags ask and logs the front end's notes (a flag
// without effect, a source overridden). Blocking as `probe` is (Probe: GPU
// discovery in a child, seconds at most). Not thread-safe (CLI11 reads the
// process environment, logging is global).
[[nodiscard]] FrontEnd PlanCommandLine(const std::vector<std::string>& argv,
                                       const std::map<std::string, std::string>& env,
                                       const ProbeFn& probe);

// The whole program. Returns the process exit code. Call from main() after
// BlockHandledSignals().
int Main(int argc, char** argv);

}  // namespace trainlet::agent
