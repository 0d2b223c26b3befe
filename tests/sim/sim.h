// tests/sim/sim.h — a deterministic simulator of a whole trainlet gang: one
// thread, one seed. Each simulated pod runs today's real pure machines
// (GangPolicy with its Membership, PlanGeneration, DecideFormation, Admit,
// SupervisionPolicy) over a simulated network that carries real encoded wire
// frames (wire::Encode / wire::Decoder), a simulated clock (time jumps to the
// next event; ties by sequence number), simulated workers and a simulated
// control plane. The protocol ends (who connects, says hello, forms rounds,
// sends assignments and stops) are behind ends.h: the real sans-IO cores
// (MemberCore; LeaderCore for fixed gangs without spares) or the stand-ins;
// README.md says which is which.
// Every run is checked by the one contract checker (tests/invariants).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "invariants.h"

namespace trainlet::sim {

// The gang's launch configuration, drawn from the seed (swarm testing).
struct SimConfig {
  std::uint32_t pods = 2;         // indices 0..pods-1 start (MAX + spares for a full gang)
  std::uint32_t min_nodes = 2;    // --nnodes MIN
  std::uint32_t max_nodes = 2;    // --nnodes MAX
  std::uint32_t spares = 0;       // --spares K
  std::uint32_t workers = 1;      // --nproc-per-node
  std::uint32_t max_restarts = 0; // --max-restarts
  bool token = false;             // --token-file
  bool by_arrival = false;        // ranks by arrival (drawn; the stand-in numbers by index)
  std::int64_t rdzv_timeout_ms = 600'000;
  std::int64_t last_call_ms = 30'000;
  std::int64_t grace_ms = 25'000;
  std::int64_t train_ms = 120'000;  // a generation's workers succeed after this long
  std::int64_t limit_ms = 600'000;  // simulated time a run may take
  // A combination the front door refuses (README: `--gang` with MIN:MAX, `--gang` with
  // `--spares`): the real front end (cli.h PlanCommandLine) must refuse it, class config (78),
  // before any pod runs. 0: none; 1: --gang with MIN:MAX; 2: --gang with --spares.
  int refused = 0;
  bool elastic() const { return min_nodes != max_nodes; }
};

enum class FaultKind {
  kWorkerFail,   // a worker of `pod` fails with class `arg` (exitcodes::FailureClass)
  kHang,         // `pod`'s workers ignore their stop until the grace period's SIGKILL
  kKill,         // `pod`'s agent SIGKILLed (its sockets reset); recreated after `arg` ms (0: never)
  kNodeDeath,    // `pod`'s node dies: no FIN (half-open); recreated after `arg` ms (0: never)
  kFreeze,       // `pod` frozen (SIGSTOP) for `arg` ms
  kPartition,    // the link between `pod` and the leader drops everything for `arg` ms
  kReset,        // `pod`'s connection to the leader reset
  kEvict,        // DisruptionTarget SIGTERM to `pod`; recreated after `arg` ms (0: never)
  kPreempt,      // the whole workload SIGTERMed
  kScaleUp,      // elastic: a pod at the next free index starts
  kScaleDown,    // elastic: SIGTERM to the highest running index, not recreated
  kLateListener, // the leader binds its listener `arg` ms late (members are refused)
  kStranger,     // a pod of another attempt (or with a wrong token) tries to join
  kCount,
};
const char* FaultName(FaultKind k);

struct Fault {
  std::int64_t t_ms = 0;
  FaultKind kind = FaultKind::kWorkerFail;
  std::uint32_t pod = 0;
  std::int64_t arg = 0;
};

struct Schedule {
  SimConfig config;
  std::vector<Fault> faults;
  std::uint64_t world_seed = 1;  // latencies, jitter, worker timings
  // A scenario's expected outcome ("expect codes=0,0,143 restarts=0"): every
  // pod's exit code in ascending order, the last generation's restart count.
  std::optional<std::string> expect_codes;
  std::optional<std::uint32_t> expect_restarts;
};

// Draws a configuration and up to `max_faults` faults from `seed`.
Schedule DrawSchedule(std::uint64_t seed, int max_faults = 4);
// The text form (tests/sim/regressions/*.sched): "config k=v ...", "expect codes=... restarts=N",
// "fault t kind pod arg"; '#' lines are comments (schedule.cc).
std::string ScheduleText(const Schedule& s);
// Parses ScheduleText's form; nullopt and a one-line `error` ("line N: what") on a bad line: an
// unknown word or key, a number out of its field's range or with trailing characters, a gang
// that cannot be (MIN > MAX, more pods than MAX + spares, beyond the bounds below), a fault on
// a pod beyond MAX + spares (checked after every line, whatever their order). What parses
// prints back (ScheduleText) to text that parses to the same schedule (tests/fuzz/fuzz_schedule.cc).
std::optional<Schedule> ParseSchedule(const std::string& text, std::string* error);
// ParseSchedule's bounds: a run's memory grows with pods and workers.
inline constexpr std::uint32_t kMaxSchedulePods = 1024;    // MAX, and spares
inline constexpr std::uint32_t kMaxScheduleWorkers = 64;   // --nproc-per-node

struct RunResult {
  std::vector<std::string> violations;
  std::vector<std::string> trace;  // readable lines, when asked for
  std::vector<bool> fault_hit;     // per fault of the schedule: it applied to something
  std::string codes;                // exit codes of the gang's pods, ascending, "0,0,76"
  std::uint32_t last_restarts = 0;  // the last generation's restart count
  std::int64_t end_ms = 0;
  std::uint64_t events = 0;
};

// Runs one schedule to its end; `trace`: keep a readable trace. A schedule
// with an expectation that the run does not meet adds a violation.
RunResult Run(const Schedule& s, bool trace = false);

// The command line a pod of `c` would get for its refused combination (c.refused != 0).
std::vector<std::string> RefusedArgv(const SimConfig& c);

// Drops faults (one at a time, then the configuration's extras) while the run
// still violates the contract; returns the smallest schedule found.
Schedule Shrink(const Schedule& s);

}  // namespace trainlet::sim
