// tests/invariants/invariants.h — the gang's contract as invariants, in one
// checker that the simulator (tests/sim), the gang property test
// (agent/tests/gang_property_test.cc) and the real-process soak
// (tests/soak/soak.py, through trainlet-check-trace) all use, so the three
// cannot drift apart.
//
// A run is a sequence of Records (what happened, in time order); the checker
// takes them one at a time (On: the checks that can be decided at once) and
// then Finish (the checks that need the whole run). The contract is README's
// "Exit codes" and "Gang" sections:
//  I1  no node rank twice in a generation;
//  I2  ranks dense: the leader's plan has world ranks 0..world-1, every
//      pod's rank below WORLD_SIZE;
//  I3  WORLD_SIZE and TORCHELASTIC_RESTART_COUNT equal on every pod of a
//      generation (the leader's plan's; in a trace without plans, the first
//      pod's of the generation);
//  I4  generations only grow and restarts never fall, across a replaced
//      leader too (membership.h M15); restarts never exceed --max-restarts;
//  I5  a next generation with no failure since the last one (only joins,
//      graceful leaves, a leader's leave) counts no restart (M2);
//  I6  no generation includes a pod the leader declared lost or leaving
//      (M14; with spares or elastic sizes: a fixed gang restarts in place on
//      the same pods), nor a pod that exited;
//  I7  a pod declared lost after it ran never gets a rank again (it comes
//      back refused, admission.h rule 8);
//  I8  every pod ends, with a code of the contract (0, 42, 74, 75, 76, 77,
//      78, 143, a worker's own code 1-255, or 137 from outside);
//  I9  at most one counted exit per gang failure: counted exits (not 0, 76,
//      143; 137 counts, a worker's own code or the agent killed) never outnumber the faults that can count (worker failures,
//      kills, freezes, cut links, resets); a round that ran out of time
//      (exit `what` "rdzv_timeout": README, below MIN the gang waits up to
//      --rdzv-timeout, then 75) is not counted here;
//  I10 a gang that stopped for a failure (some pod 76) has a counted exit,
//      except where the contract says none: a cut link (README: "every pod
//      then exits 76"), a SIGTERM (a preemption: 143), a pod killed (137:
//      the Job counts it);
//  I11 a pod SIGTERMed before any failure of its generation exits 143 (a
//      leaver too);
//  I12 no pod waits past its deadlines: in a round at most --rdzv-timeout,
//      after SIGTERM at most the grace period (each plus a slack);
//  I13 no stranger (another job, a stale attempt, a wrong token) gets a rank.
// Pure; not thread-safe (one checker per run).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace trainlet::invariants {

// What the run was launched with (the first record of a trace).
struct Contract {
  std::uint32_t min_nodes = 1;  // --nnodes MIN (N for a fixed gang)
  std::uint32_t max_nodes = 1;  // --nnodes MAX
  std::uint32_t spares = 0;     // --spares K
  std::uint32_t max_restarts = 0;
  std::int64_t rdzv_timeout_ms = 600'000;  // --rdzv-timeout
  std::int64_t grace_ms = 25'000;          // --grace-period
  std::int64_t slack_ms = 5'000;           // deadlines' slack: detection, scheduling
};

inline constexpr std::uint32_t kSpareRank = 0xFFFFFFFF;
inline constexpr std::uint32_t kNoIndex = 0xFFFFFFFF;  // kStart's pod: numbered by arrival later

// One thing that happened. `inst` names one agent process (a pod recreated at
// the same index is a new instance); `pod` is its index (its key).
struct Record {
  enum class Kind {
    kStart,     // an agent process started and joins (inst, pod: kNoIndex until a kJoin names it); `stranger`
    kJoin,      // it joins a round again (after a restart or a resize); a `pod` other than
                // its own: the index the leader gave it (ranks by arrival)
    kForm,      // the leader formed `generation`: `ranks` (keys by node rank), `world`, `restarts`
    kGen,       // pod `inst` runs `generation` at node `rank` of `world`, `restarts` counted
    kFault,     // a fault that can count (`what`: fail, kill, freeze, cut, reset, ...)
    kSignal,    // SIGTERM to `inst` (`what`: term, workload)
    kLeave,     // `inst` told the leader it leaves
    kLost,      // the leader declared pod `pod` (instance `inst`) lost (`what` "leaving": leaving)
    kExit,      // `inst` exited with `code` (137: killed from outside); `what` "rdzv_timeout": its round ran out of time
  };
  Kind kind = Kind::kStart;
  std::int64_t t_ms = 0;
  std::uint32_t inst = 0;
  std::uint32_t pod = 0;
  std::uint32_t generation = 0;
  std::uint32_t rank = 0;  // kSpareRank: a waiting spare
  std::uint32_t world = 0;
  std::uint32_t restarts = 0;
  int code = 0;
  bool stranger = false;
  std::vector<std::uint32_t> ranks{};  // kForm
  std::string what{};
};

std::string_view KindName(Record::Kind k);
std::optional<Record::Kind> KindFromName(std::string_view name);
// One line, for traces: "t=1200 gen inst=3 pod=1 generation=2 rank=1 world=4 restarts=1".
std::string Describe(const Record& r);

class Checker {
 public:
  explicit Checker(Contract c) : c_(c) {}
  // The checks decidable now; violations accumulate.
  void On(const Record& r);
  // The whole-run checks (I8-I10, I12 at the end). Call once, after the last record.
  void Finish(std::int64_t end_ms);
  const std::vector<std::string>& violations() const { return violations_; }
  bool ok() const { return violations_.empty(); }

 private:
  struct Inst {
    std::uint32_t pod = 0;
    bool stranger = false;
    bool exited = false;
    bool left = false;
    bool ran = false;   // it had a rank (or waited as a spare) in some generation
    bool lost = false;  // declared lost after it ran
    bool out = false;   // the leader marked it leaving after it ran
    bool expect_143 = false;
    int faults = 0;  // faults that struck it
    bool rdzv_timeout = false;  // exited 75 because its round ran out of time
    std::optional<int> code;
    std::optional<std::int64_t> joining_since;  // in a round since
    std::optional<std::int64_t> term_at;        // SIGTERM at
  };
  struct Gen {
    std::optional<Record> form;
    std::map<std::uint32_t, std::uint32_t> rank_of;  // rank -> inst
  };
  void OnForm(const Record& r);
  void OnGen(const Record& r);
  void OnExit(const Record& r);
  void CheckDeadlines(std::int64_t now);
  void Violation(std::string_view rule, const Record* r, const std::string& what);
  Inst& I(std::uint32_t inst) { return insts_[inst]; }

  Contract c_;
  std::map<std::uint32_t, Inst> insts_;
  std::map<std::uint32_t, std::uint32_t> current_;  // pod -> its latest instance
  std::map<std::uint32_t, Gen> gens_;
  std::optional<std::uint32_t> last_generation_;
  std::optional<std::uint32_t> last_leader_;  // the instance that formed the last generation
  std::uint32_t last_restarts_ = 0;
  // Faults that can count, as of the form before the last and the last one.
  std::array<int, 2> faults_at_form_{0, 0};
  int faults_ = 0, kills_ = 0, cuts_ = 0, signals_ = 0;
  std::vector<std::string> violations_;
};

}  // namespace trainlet::invariants
