// trainlet/agent/pod/formation_policy.h — *when* the leader's rendezvous round
// forms a generation: elastic `--nnodes MIN:MAX` with torchrun's meaning, and
// hot spares (`--spares K`). PlanGeneration
// (membership_policy.h) says *who* is active on which node rank; these say
// when to ask it. No sockets, no clocks: the caller measures the durations.
// Pure; thread-safe.
//
// torchrun's c10d/etcd rendezvous (torch/distributed/elastic/rendezvous/
// dynamic_rendezvous.py, `_RendezvousJoinOp` and `_add_to_participants`):
//  - a round completes at once when MAX nodes have joined;
//  - when the participants reach MIN, a deadline is set `last_call_timeout`
//    later (`RendezvousTimeout._DEFAULT_TIMEOUTS["last_call"]`: 30 s); at that
//    deadline a round with MIN..MAX participants completes;
//  - a node arriving after the round completed waits (wait list) for the next
//    round, which the agents start when they see `num_nodes_waiting() > 0`
//    (torch/distributed/elastic/agent/server/api.py, `_invoke_run`): they
//    restart their workers without spending a restart, so
//    TORCHELASTIC_RESTART_COUNT (max_restarts - remaining_restarts) does not
//    rise; a node beyond MAX waits in the redundancy list;
//  - a round below MIN at `join_timeout` (--rdzv-timeout) fails.
//
// trainlet's rules (README, "Gang"):
//  - The round forms when the gang is whole: MAX + K pods joined (K = --spares;
//    pods beyond MAX wait connected as spares).
//  - A later round (after a failure or a loss) also forms once every pod the
//    leader still counts alive is back and at least MIN are: the leader knows
//    who survived, so a restart does not wait out a last call. "Back" is by
//    identity: a pod new to the gang that arrives during the restart never
//    stands in for a survivor still stopping its workers (that survivor would
//    be planned out, its node rank given away, and refused as replaced).
//  - Otherwise, with at least MIN pods, it forms `last_call` after the pod
//    count reached MIN (torch's last call), a fixed gang's (MIN = MAX) first
//    round with spares too: a spare arriving after the round formed is
//    admitted while the generation runs (membership.h M13: it waits as a spare).
//  - But a later round waits for the survivors the leader still counts alive
//    (not lost, not leaving) for as long as one may take to stop its workers
//    and rejoin (FormationConfig::survivor_hold, SurvivorHold: --grace-period,
//    a hang's diagnostics delay and the heartbeat timeout, from the round's
//    start), also past the last
//    call: a survivor that takes the whole grace period to stop (a checkpoint
//    on SIGTERM) is no lost pod. Without the hold a last call shorter than the
//    grace period planned it out, gave its node rank away, and it came back
//    to be refused (admission.h rule 8) and exit 75: a counted exit with no
//    failure. The leader cannot hear a survivor between its old connection's
//    close and its rejoin, so the bound is the time the contract gives it,
//    not its liveness; the round's deadline bounds it too (below).
//  - Near the round's deadline (--rdzv-timeout less kFormBeforeDeadline, or
//    a tenth of it when shorter): at least MIN pods form, the last call cut
//    short (torch would time out when its last call outlasts join_timeout;
//    trainlet keeps the pods it has, and forms early enough for the members,
//    whose own deadline ends their wait, to get their assignments); at the
//    deadline fewer than MIN give up (the caller exits infra, 75).
//  - A pod arriving while a generation runs, and which generations count as
//    restarts: the membership machine's (membership.h M2, M13).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "trainlet/agent/base/tunables.h"

namespace trainlet::agent {

// How long after a later round's start a survivor the leader counts alive may
// still be on its way back, given --grace-period `grace`: its workers' stop
// (a hang's diagnostics delay, then the grace period's SIGKILL) and its
// rejoin, with the heartbeat timeout as slack. Also how long the round keeps
// a survivor's index for it by identity (LeaderOptions::keep_until).
constexpr std::chrono::milliseconds SurvivorHold(std::chrono::milliseconds grace) {
  return grace + rendezvous::tunables::kDiagnosticsDelay + rendezvous::tunables::kStallLimit;
}

struct FormationConfig {
  std::uint32_t min_nodes = 1;  // --nnodes MIN (N for a fixed gang)
  std::uint32_t max_nodes = 1;  // --nnodes MAX (N for a fixed gang)
  std::uint32_t spares = 0;     // --spares K
  // torch's last_call_timeout (--rdzv-conf last_call_timeout=S).
  std::chrono::milliseconds last_call = kDefaultLastCall;
  // --rdzv-timeout: how long one round may wait.
  std::chrono::milliseconds timeout = kDefaultRdzvTimeout;
  // How long a later round waits for the survivors it counts alive, from its
  // start (the hold, above): SurvivorHold(--grace-period).
  std::chrono::milliseconds survivor_hold = SurvivorHold(kDefaultGrace);
};

// The leader's rendezvous round as it stands.
struct RoundState {
  // Pods joined this round that may be active (not lost, not leaving), the
  // leader's own pod included.
  std::uint32_t joined = 0;
  // True for the gang's first generation (no generation has run yet).
  bool first = true;
  // Later rounds: the pods the leader still counts alive from the generation
  // that ended (active and waiting), whether or not they joined yet.
  std::uint32_t alive = 0;
  // Of those `alive` pods, how many joined this round (newcomers not counted).
  std::uint32_t alive_back = 0;
  // How long `joined` has been at least min_nodes without dropping below it
  // (MinReachedAt); nullopt while below.
  std::optional<std::chrono::milliseconds> since_min{};
  std::chrono::milliseconds since_start{0};  // since the round began
};

struct FormationDecision {
  enum class Kind {
    kForm,    // ask PlanGeneration now and send the assignments
    kWait,    // wait for more pods: decide again at a join, or after recheck_after
    kGiveUp,  // the round's deadline passed below MIN: the rendezvous failed (infra)
  };
  Kind kind = Kind::kWait;
  // kWait: the longest to wait before deciding again (a join decides sooner);
  // always set, never negative.
  std::chrono::milliseconds recheck_after{0};
  // One line: why it forms ("the gang is whole", "last call ended", ...), or
  // what is missing.
  std::string why{};
};

// Decides the round. Never fails.
FormationDecision DecideFormation(const RoundState& round, const FormationConfig& c);

// When the pod count first reached MIN in this round, given the previous value
// (`reached_at`, nullopt: not reached), the count now and the time now. A count
// back below MIN forgets it, as torch sets its last-call deadline each time the
// participants reach MIN.
std::optional<std::chrono::steady_clock::time_point> MinReachedAt(
    std::optional<std::chrono::steady_clock::time_point> reached_at, std::uint32_t joined,
    const FormationConfig& c, std::chrono::steady_clock::time_point now);

}  // namespace trainlet::agent
