// trainlet/agent/pod/membership.h — the leader's membership machine: who is in
// the gang, and how each generation ends, as one pure state machine:
// (state, event) -> actions. No sockets, no clocks, no processes: the leader's
// GangPolicy (gang_policy.h) holds one Membership and feeds it the events it
// hears; Pod (src/pod/pod_wiring.h) carries out the actions on the wire.
// The machine holds the leader's one Roster (roster.h, a pure value: the pods
// across generations, each round's formation and PlanGeneration) and applies
// its own word to it (lost, leaving, joined); the wiring reaches it through
// GangPolicy::roster() to run the rounds (StartRound, Plan, Adopt: the
// round's timer is the wiring's). Not thread-safe; owned by the one event loop.
//
// Who is active on which node rank is PlanGeneration's (membership_policy.h);
// when a round forms is DecideFormation's (formation_policy.h). This machine
// decides the rest, and is the one place that decides it: whether a
// generation ends, whether its end is a restart (counted against
// --max-restarts) or a resize (not counted), which spare replaces whom, who
// must leave, and the restart budget.
//
// The rules (README, "Gang"), numbered; each has a table test in
// agent/tests/membership_test.cc named after it:
//  M1. The budget: a restart is allowed only for a restartable class (worker,
//      infra, oom, peer_failed; a loss is infra), while restarts <
//      --max-restarts, before any stop signal of the leader's pod, and never
//      once some pod's workers all succeeded.
//  M2. A counted restart raises the count by one; a resize (a join, a
//      graceful leave) and a spare taking a leaver's place keep it.
//  M3. A member's failure with a restartable class, or its loss, while the
//      budget allows: a restart in place, counted; a lost member is in no
//      later generation (the roster marks it lost; coming back, also for
//      the restart's round, it is refused: admission.h rule 8, field left).
//  M4. A member's hardware failure while a spare waits and the budget allows:
//      a counted restart in which the member leaves (it exits with its own
//      class, so the Job counts it) and a spare takes its node rank.
//  M5. Anything else that ends the generation (budget spent, a class no
//      restart can fix, a stop after the gang succeeded): the gang stops.
//  M6. The loss of a waiting spare ends no generation; the roster forgets it.
//  M7. A member's graceful leave (its own SIGTERM/SIGINT, said on the wire)
//      waits for the settle window (tunables kLeaveSettle): every leave
//      heard before it ends is decided with it, once.
//  M8. At the settle window's end, with a spare waiting for each leaver: the
//      spares take the leavers' node ranks; no resize, no restart counted.
//  M9. Else, elastic (--nnodes MIN:MAX) with at least MIN pods staying
//      (spares included): a resize without the leavers, no restart counted.
//  M10. Else (a fixed gang short of spares, or below MIN): the gang stops as
//      for any stop signal (the leavers exit 143, the others 76). A fixed gang
//      without --spares decides this at the leave itself (no window: nothing
//      could go on), as before leaves had a rule of their own.
//  M11. The leader's own graceful leave, elastic or with spares: the members
//      rejoin for the next generation and wait for the leader's replacement
//      (--rdzv-timeout), keeping their restart count; no restart counted.
//      Without either, rule M10.
//  M12. A failure or loss heard during the settle window decides at once
//      (M3-M5); the leavers are left out of whatever comes next. Once the
//      generation's end is decided (a restart, a resize, a swap, the leader's
//      leave, a stop) a later failure is collateral of that stop: every pod
//      then counts the same restarts (a member that already rejoined for a
//      resize would never hear a restart decided after it); a worker that
//      fails again in the next generation is counted there.
//  M13. A pod admitted while a generation runs, below MAX and before anything
//      ended the generation: the gang grows, no restart counted; else it
//      waits as a spare (or, a next generation decided, joins it).
//  M14. Once the next generation is decided, a member's connection closing
//      is no loss (it closes to rejoin); a pod lost or leaving before that is
//      never in a later generation (PlanGeneration leaves it out, and a
//      connection that closes while the round's assignments are written is
//      reported lost by the leader: rendezvous/leader.h).
//  M15. A replaced leader (a fresh pod 0) continues the members' generation
//      and restart count: the highest their hellos carry (leader.h), in every
//      mode; the assignment brings the count here (Assigned).
//  M16. A replaced leader's first round keeps each survivor on the node rank
//      it held (its hello says it: wire::Hello::node_rank), the leader on 0,
//      where every rank of the last generation is back; the spares and
//      recreated pods wait (WithHeldRanks, membership_policy.h). Later rounds
//      follow the leader's own roster. Without it a survivor's node rank, and
//      its workers' RANK, would move because the leader's pod was replaced.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "trainlet/agent/pod/roster.h"
#include "trainlet/exitcodes/status.h"

namespace trainlet::agent {

struct MembershipSettings {
  std::uint32_t min_nodes = 1;     // --nnodes MIN (N for a fixed gang)
  std::uint32_t max_nodes = 1;     // --nnodes MAX (N for a fixed gang)
  std::uint32_t max_restarts = 0;  // --max-restarts
  std::uint32_t spares = 0;        // --spares K
  std::uint32_t leader = 0;        // the leader's own key (0)
  bool elastic() const { return min_nodes != max_nodes; }
};

// True for the classes an in-place restart may follow (rule M1).
bool RestartableClass(exitcodes::FailureClass c);

// Rule M1, for either role: whether a restart may follow a failure of class
// `c` with `restarts` counted so far. `stopped`: this pod got a stop signal.
bool RestartAllowed(exitcodes::FailureClass c, std::uint32_t restarts, std::uint32_t max_restarts,
                    bool stopped);

namespace member_event {
// A generation formed: its active size, the restarts counted. The spares
// waiting are the roster's unranked pods (Roster::Unranked: the plan the
// wiring adopted, and the pods admitted since).
struct Formed {
  std::uint32_t generation = 0;
  std::uint32_t active = 0;  // 0: MembershipSettings::max_nodes
  std::uint32_t restarts = 0;
};
// A pod's failure is the first of the generation (the leader's GangPolicy
// decides which is first; the leader's own included, with key `leader`).
struct Failed {
  std::uint32_t key = 0;
  exitcodes::FailureClass failure_class = exitcodes::FailureClass::kWorker;  // a loss: infra
  bool succeeded = false;  // some pod's workers all succeeded this generation
  bool stopped = false;    // the leader's pod got a stop signal
};
struct Lost {  // a member's connection closed or went silent
  std::uint32_t key = 0;
};
struct Leaving {  // a member said it leaves (its own stop signal)
  std::uint32_t key = 0;
};
struct SettleEnded {};  // the settle window opened by the first leave ended
struct LeaderLeaving {};  // the leader's own pod got a stop signal while its workers run
struct Joined {           // admitted while the generation runs
  std::uint32_t key = 0;
  bool open = true;  // nothing ended the generation yet (no failure, no stop)
};
}  // namespace member_event

using MembershipEvent =
    std::variant<member_event::Formed, member_event::Failed, member_event::Lost,
                 member_event::Leaving, member_event::SettleEnded, member_event::LeaderLeaving,
                 member_event::Joined>;

struct MembershipActions {
  // How the generation ends, when this event ends it.
  enum class End {
    kNone,     // it goes on (or its end was decided before)
    kRestart,  // a restart in place, counted (M3, M4)
    kResize,   // a next generation without the leavers, or with a joiner: not counted (M9, M13)
    kSwap,     // spares take the leavers' node ranks: not counted (M8)
    kRejoin,   // the leader leaves: the members rejoin its replacement, not counted (M11)
    kStop,     // the gang stops (M5, M10)
  };
  End end = End::kNone;
  // The restart count of the next generation (M2), with end != kNone/kStop.
  std::uint32_t next_restarts = 0;
  // Pods the machine marked on its roster (already done when On returns):
  // lost ones (never active again, M3/M14) and leaving ones (a hardware
  // failure with a spare, M4; graceful leaves, M8-M10).
  std::vector<std::uint32_t> lost;
  std::vector<std::uint32_t> leaving;
  // Of `lost`, the pods that waited as spares (M6): the roster records them
  // (Roster::LostSpareIn: a lost spare coming back is refused for good,
  // rendezvous admission rule 8). The machine keeps who waits now
  // (spares()); the roster keeps what the next round's plan needs.
  std::vector<std::uint32_t> lost_spares;
  // The first leaver (the Stop names it) for leave decisions; the joiner for kResize by a join.
  std::optional<std::uint32_t> subject;
  bool arm_settle = false;  // start the settle window (M7)
  bool joins_as_spare = false;  // Joined: it waits as a spare now (M13)
  std::string why{};        // one line for the log and the Stop's reason
  bool operator==(const MembershipActions&) const = default;
};

class Membership {
 public:
  explicit Membership(MembershipSettings s) : settings_(s) {}
  MembershipActions On(const MembershipEvent& e);

  std::uint32_t restarts() const { return restarts_; }
  std::uint32_t generation() const { return generation_; }
  // Active pods of the generation that runs (WORLD_SIZE / nproc_per_node).
  std::uint32_t active() const { return active_ != 0 ? active_ : settings_.max_nodes; }
  // The spares waiting in this generation: the roster's unranked pods at
  // Formed, less those lost or leaving since, plus those joined as spares (M13).
  const std::set<std::uint32_t>& spares() const { return spares_; }
  const std::set<std::uint32_t>& leaving() const { return leaving_; }
  // The next generation is decided (M14): a connection closing now is no loss.
  bool decided() const {
    return end_ != MembershipActions::End::kNone && end_ != MembershipActions::End::kStop;
  }
  bool settling() const { return settling_; }
  // Rule M1 with the count kept here.
  bool CanRestart(exitcodes::FailureClass c, bool stopped) const {
    return RestartAllowed(c, restarts_, settings_.max_restarts, stopped);
  }
  // The leader's roster (roster.h), owned here. The wiring runs each round on
  // it (StartRound, Plan, Adopt before the Formed it feeds); the machine marks
  // it (lost, leaving, joined) as it decides.
  const Roster& roster() const { return roster_; }
  Roster& roster() { return roster_; }

 private:
  MembershipActions OnFailed(const member_event::Failed& f);
  MembershipActions OnLost(const member_event::Lost& l);
  MembershipActions OnLeaving(const member_event::Leaving& l);
  MembershipActions DecideLeaves();
  MembershipActions OnLeaderLeaving();
  MembershipActions OnJoined(const member_event::Joined& j);
  MembershipActions Decide(MembershipActions a, MembershipActions::End end);

  MembershipSettings settings_;
  std::uint32_t generation_ = 0;
  std::uint32_t restarts_ = 0;
  std::uint32_t active_ = 0;
  std::set<std::uint32_t> spares_;   // waiting in this generation
  std::set<std::uint32_t> leaving_;  // said they leave this generation, in order of keys
  std::optional<std::uint32_t> first_leaver_;
  bool settling_ = false;
  // How this generation ends, once decided; kStop: no loss is marked any more.
  MembershipActions::End end_ = MembershipActions::End::kNone;
  Roster roster_;
};

}  // namespace trainlet::agent
