// trainlet/agent/pod/gang_policy.h — what the gang decides, as a pure state machine:
// (state, event) -> actions. No sockets, no clocks, no processes: Pod (src/pod/pod_wiring.h)
// turns the control channel, the supervisor, signals and timers into events,
// and carries out the actions. Not thread-safe; owned by the one event loop.
//
// The rules (README, "Gang"), numbered (G1-G12; membership's, M1-M16, are in
// membership.h, which the leader's role holds: who is in the gang, whether
// an end is a restart or a resize, and the restart budget are decided there):
//  G1. The leader decides, alone, which failure of a generation came first
//      (its own pod's, a member's report, a member lost) and tells every
//      member in one Stop: restart in place (--max-restarts), or stop for good.
//  G2. The culprit (the pod named first) exits with its own class; every other
//      pod exits peer_failed, even one whose own worker failed later: exactly
//      one counted exit per gang failure. A member whose own worker failed
//      therefore waits (bounded) for the leader's verdict before it concludes.
//  G3. A pod whose own event loop stalled past the heartbeat timeout (SIGSTOP,
//      a frozen node) is the culprit of what its peers saw (class infra): it
//      stops its workers and never blames a healthy peer for the silence.
//      The stall is watched from the start of each round (the pod's hello is
//      in, the round may form without a word from it): a stall past the
//      limit while the pod joins ends it at once, as the culprit, before its
//      workers start (the peers may have given it up on a control channel
//      it never answered; no generation holds it to rejoin). The wiring
//      feeds such a stall only when a member's assignment waited for it
//      while it was stopped (pod_stall.cc): a pod stopped while its round
//      still waits keeps its place, and a leader forms its rounds itself.
//  G4. A stop signal (SIGTERM, SIGINT) received before the pod knew of any
//      failure ends it as terminated (143), whatever its workers do afterwards.
//      After a stop signal the pod never restarts, also when the signal
//      arrives while its workers stop for a restart or a resize.
//  G5. A member's stop signal is a graceful leave: it tells the leader it
//      leaves (wire::Report::leaving; also while it waits in a round), stops
//      its workers and exits 143. The leader's membership decides whether the
//      gang goes on without it (membership.h M7-M11).
//  G6. Whether a failure restarts the gang: membership.h M1-M5 (the budget).
//      With a hot spare waiting (--spares), a member's hardware failure
//      restarts too: that member leaves (it exits with its own class, so the
//      Job counts and recreates it) and a spare takes its node rank.
//  G7. A spare has no workers: it restarts at once with the gang, exits 0 when
//      the leader says the gang finished, 76 when it stopped for good. The loss
//      of a spare changes no generation.
//  G8. A next generation that counts no restart (a join below MAX, a graceful
//      leave, the leader leaving): a Stop with restart and class ok; the
//      members rejoin without raising TORCHELASTIC_RESTART_COUNT (torch's
//      num_nodes_waiting() restart does the same for joins).
//  G9. Restarts are counted, not generations; the count comes with each
//      assignment (membership.h M2, M15).
//  G10. Each generation's state is one value (Generation: a phase, a decision
//      and the first failure known); a restart replaces it whole. Events the
//      wiring delivers for an old generation must be dropped by the wiring
//      (pod_generation.h's PodGeneration, retired with the policy's decision,
//      its callbacks behind Pod::Guard).
//  G11. Once a member's workers all succeeded no restart follows (the gang
//      finishes, or stops for whoever failed).
//  G12. The actions say what the wiring does, so that it infers nothing: a
//      restart says whether it is counted (GangActions::counted: the pod's
//      log and trainlet_restarts_total follow it), a join whether the pod
//      waits as a spare (GangActions::joins_as_spare: the leader's answer to
//      it); the wiring never compares counts or reads the membership's sets.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "trainlet/agent/pod/membership.h"
#include "trainlet/exitcodes/status.h"
#include "trainlet/rendezvous/wire.h"

namespace trainlet::agent {

namespace gang {
using exitcodes::FailureClass;

struct Assigned {  // the gang formed; this pod's workers have been started (or, a spare, none)
  std::uint32_t generation = 0;
  bool spare = false;  // this pod waits as a hot spare in this generation: no workers
  // (Leader: the pods waiting as spares are its roster's, adopted before this
  // event: membership.h member_event::Formed.)
  // Active pods in this generation (WORLD_SIZE / nproc_per_node); 0: GangConfig::nnodes.
  std::uint32_t nnodes = 0;
  // Restarts counted so far (Assignment::restarts); nullopt: the generation number.
  std::optional<std::uint32_t> restarts{};
};
struct AgentFailed {  // before the workers ran: rendezvous, preflight, spawn
  exitcodes::Status status;
};
struct Report {  // leader: a member's report arrived
  std::uint32_t index = 0;
  rendezvous::wire::Report report;
};
struct Lost {  // leader: member `index` was lost; member: the leader was lost
  std::uint32_t index = 0;
  std::string why{};
};
struct Stop {  // member: the leader's Stop arrived
  rendezvous::wire::Stop stop;
};
struct LocalFailure {  // this pod's worker failed first, or a hang was found here
  FailureClass failure_class = FailureClass::kWorker;
  std::string reason{};
  bool hang = false;
};
struct WorkersDone {  // every worker of this pod has exited (and was reaped)
  bool success = false;  // all exited 0 and nobody stopped them
};
struct StopSignal {  // SIGTERM / SIGINT to this pod
  int signo = 15;
};
struct OwnStall {  // this pod's own event loop did not run for longer than the heartbeat timeout
  std::string why{};
};
struct ReportSent {};  // member: the success report was written to the leader
enum class TimerKind {
  kVerdict,  // member: the leader's verdict did not come in time
  kSettle,   // leader: the settle window after a graceful leave ended (membership.h M7)
};
struct Timer {
  TimerKind kind = TimerKind::kVerdict;
};
struct Joined {  // leader: pod `index` was admitted while this generation runs (membership.h M13)
  std::uint32_t index = 0;
};
}  // namespace gang

using GangEvent =
    std::variant<gang::Assigned, gang::AgentFailed, gang::Report, gang::Lost, gang::Stop,
                 gang::LocalFailure, gang::WorkersDone, gang::StopSignal, gang::OwnStall,
                 gang::ReportSent, gang::Timer, gang::Joined>;

// How the pod ends; the wiring turns it into exitcodes::Evidence.
struct Conclusion {
  enum class Kind {
    kOk,          // every worker of the gang finished
    kOwn,         // this pod's own worker failure (or hang): classify its evidence
    kPeerFailed,  // another pod failed first, or the leader was lost
    kTerminated,  // a stop signal came first
    kStall,       // this pod's own loop stalled: infra, the culprit
    kAgent,       // `status`: trainlet's own failure before the workers ran
  };
  Kind kind = Kind::kOk;
  exitcodes::FailureClass failure_class = exitcodes::FailureClass::kOk;  // as the policy knows it
  std::string reason{};     // the peer failure, the stall, the agent failure
  int stop_signal = 0;      // kTerminated
  bool operator==(const Conclusion&) const = default;
};

struct GangActions {
  std::optional<rendezvous::wire::Stop> broadcast;  // leader: send to every member
  std::optional<rendezvous::wire::Report> report;   // member: send to the leader
  // Stop this pod's workers (idempotent); the value is a signal to send them
  // first (a hang somewhere: stack dumps), 0 for none.
  std::optional<int> stop_workers;
  bool arm_verdict_timer = false;  // member: bound the wait for the leader's Stop
  bool arm_settle_timer = false;   // leader: decide the leaves after kLeaveSettle
  // Leader: pods the roster marks lost (never active again) and leaving (its
  // hardware, or a graceful leave): the membership machine's word, carried out
  // before the broadcast (whose replacement the roster names).
  std::vector<std::uint32_t> lost{};
  std::vector<std::uint32_t> leaving{};
  std::vector<std::uint32_t> lost_spares{};  // of `lost`, the waiting spares (membership.h M6)
  // Leader: the broadcast Stop ends the generation for a next one that counts
  // no restart (a join, a leave), so it names no failure (metrics).
  bool resize = false;
  // The class trainlet_last_failure (metrics.h) takes now: this pod's own
  // failure, or the culprit's the leader names (peer_failed for a final stop
  // caused elsewhere); nullopt: no failure (a join, a leave).
  std::optional<std::uint16_t> note_failure{};
  bool restart = false;            // join the rendezvous again for the next generation
  // With `restart`: the next generation counts a restart (G9: a failure or a
  // loss ended this one); false: it counts none (G8: a join, a leave, a swap).
  bool counted = false;
  // Leader, Joined: the pod admitted now waits as a spare in this generation
  // (membership.h M13); false: the gang grows for it, or it joins the next one.
  bool joins_as_spare = false;
  std::optional<Conclusion> conclude;  // exit now
  std::string log{};               // one line worth logging, or ""
  bool log_info = false;           // ... at info (expected progress), not as a warning
  bool operator==(const GangActions&) const = default;
};

struct GangConfig {
  std::uint32_t index = 0;   // this pod's completion index (0: the leader)
  std::uint32_t nnodes = 1;  // active pods (without the spares) until the first assignment says
  std::uint32_t max_restarts = 0;
  int hang_signal = 10;  // diagnostics signal the Stop asks for after a hang
  std::uint32_t min_nodes = 0;  // --nnodes MIN; 0: nnodes (a fixed gang)
  std::uint32_t spares = 0;     // --spares K
};

// One generation's state: a restart replaces it whole (`gen_ = {}`). Each
// field is one value, so that no impossible combination can be written: where
// the workers are (Phase), what the gang decided (Decision), and the first
// failure this pod knows of (Cause).
struct Generation {
  // Where this pod's workers are in the generation.
  enum class Phase {
    kJoining,    // the rendezvous (first, or after a restart): no worker runs yet
    kRunning,    // the gang formed and this pod's workers run
    kSpare,      // the gang formed; this pod waits as a hot spare: no workers to wait for
    kExited,     // every worker exited and was reaped, not all with success (or this pod failed)
    kSucceeded,  // every worker exited 0, nobody stopped them, and this pod did not fail
    kReporting,  // member: kSucceeded, and its success report is being written to the leader
  };
  // What the gang decided about this generation's end.
  enum class Decision {
    kOpen,        // nothing yet
    kRestart,     // it ends in an in-place restart (the next generation)
    kFinal,       // member: the leader's final Stop arrived (no restart)
    kLeaderLost,  // member: the leader was lost before it decided; no decision will come
    kSucceeded,   // leader: a member's workers all succeeded: no restart any more
    kGrow,        // it ends in a next generation that counts no restart (a join, a leave: G8)
  };
  // The first failure this pod knows of in the generation; a later one is
  // collateral. A member's own failure gives way to the leader's final word
  // that another pod failed first (kPeer, kPeerStopped), a stop signal that
  // came first does not.
  struct Cause {
    enum class Kind {
      kNone,         // no failure known
      kOwn,          // this pod's worker failed, or a hang was found here
      kOwnStall,     // this pod's own event loop stalled: infra, the culprit
      kStopSignal,   // a stop signal came before any failure was known
      kPeer,         // another pod failed first, or the leader was lost
      kPeerStopped,  // another pod was stopped first by a stop signal
    };
    Kind kind = Kind::kNone;
    // This pod's class: kOwn's (worker, oom, ...), kInfra for kOwnStall,
    // kTerminated for kStopSignal, kPeerFailed for kPeer and kPeerStopped.
    exitcodes::FailureClass failure_class = exitcodes::FailureClass::kOk;
    // This pod's words for its own failure, or the words naming the pod that
    // failed first ("pod 2 failed first (pod 2: ...)").
    std::string reason{};

    static Cause Own(const gang::LocalFailure& f) {
      return {Kind::kOwn, f.failure_class, f.reason};
    }
    static Cause OwnStall(std::string why) {
      return {Kind::kOwnStall, exitcodes::FailureClass::kInfra, std::move(why)};
    }
    static Cause StopSignal(std::string why) {
      return {Kind::kStopSignal, exitcodes::FailureClass::kTerminated, std::move(why)};
    }
    // `stopped`: the pod that failed first was stopped by a stop signal.
    static Cause Peer(std::string words, bool stopped) {
      return {stopped ? Kind::kPeerStopped : Kind::kPeer, exitcodes::FailureClass::kPeerFailed,
              std::move(words)};
    }
    bool known() const { return kind != Kind::kNone; }
    bool own() const {  // this pod's own: its worker, its loop, or a stop signal
      return kind == Kind::kOwn || kind == Kind::kOwnStall || kind == Kind::kStopSignal;
    }
    bool peer() const { return kind == Kind::kPeer || kind == Kind::kPeerStopped; }
  };
  Phase phase = Phase::kJoining;
  Decision decision = Decision::kOpen;
  Cause cause{};
  // Leader.
  std::optional<std::uint32_t> first;    // the pod whose failure was decided first
  std::set<std::uint32_t> settled;       // members that reported or were lost

  bool running() const { return phase != Phase::kJoining; }  // workers started (or a spare)
  bool done() const { return running() && phase != Phase::kRunning; }  // none left to wait for
  bool succeeded() const { return phase == Phase::kSucceeded || phase == Phase::kReporting; }
  bool restarting() const { return decision == Decision::kRestart || decision == Decision::kGrow; }
  bool verdict() const { return decision == Decision::kFinal; }
  bool leader_lost() const { return decision == Decision::kLeaderLost; }
};

// What both roles share: the state that survives restarts, and the helpers.
class GangPolicyBase {
 public:
  explicit GangPolicyBase(GangConfig config) : config_(config) {}
  bool concluded() const { return concluded_; }
  std::uint32_t generation() const { return generation_; }
  // Restarts counted so far (TORCHELASTIC_RESTART_COUNT); once a restart is
  // decided and the generation ended, the next generation's count.
  std::uint32_t restarts() const { return restarts_; }
  std::optional<int> stop_signal() const { return stop_signal_; }
  const Generation& gen() const { return gen_; }
  // Ranks by arrival: a member learns its index from its first assignment.
  void AdoptIndex(std::uint32_t index) { config_.index = index; }

 protected:
  bool CanRestart(exitcodes::FailureClass c) const;
  GangActions Conclude(GangActions a, Conclusion c);
  GangActions ConcludeNow(GangActions a = {});  // from the generation's state
  GangActions Restart(GangActions a = {});
  // What both roles do alike: nothing once concluded, the assignment, an
  // agent failure, a stop signal or an own stall (G3) while joining.
  // nullopt: the role decides.
  std::optional<GangActions> OnCommon(const GangEvent& e);
  // Every worker exited: the generation is done; decides alone for a
  // duplicate or a restart under way, else nullopt (the role decides).
  std::optional<GangActions> OnWorkersDoneCommon(const gang::WorkersDone& d);

  GangConfig config_;
  std::uint32_t generation_ = 0;
  std::uint32_t restarts_ = 0;
  std::optional<int> stop_signal_;  // first stop signal: no restart after it
  bool concluded_ = false;
  bool restarted_ = false;  // joining again after a restart
  Generation gen_;
};

class LeaderPolicy : public GangPolicyBase {
 public:
  explicit LeaderPolicy(GangConfig config);
  GangActions On(const GangEvent& e);
  const Membership& membership() const { return membership_; }
  Roster& roster() { return membership_.roster(); }

 private:
  GangActions OnReport(const gang::Report& r);
  GangActions OnLost(const gang::Lost& l);
  GangActions OnLocalFailure(const gang::LocalFailure& f);
  GangActions OnOwnStall(const gang::OwnStall& s);
  GangActions OnStopSignal(int signo);
  GangActions OnWorkersDone(const gang::WorkersDone& d);
  GangActions OnJoined(const gang::Joined& j);
  GangActions OnLeaving(const gang::Report& r);
  GangActions OnSettled();
  GangActions PodFailed(std::uint32_t index, exitcodes::FailureClass c, const std::string& reason,
                        bool hang);
  GangActions Announce(std::uint32_t index, exitcodes::FailureClass c, const std::string& reason,
                       bool hang, const MembershipActions& m);
  GangActions NextWithoutRestart(const MembershipActions& m);
  GangActions MaybeConclude(GangActions a = {});
  bool GangSucceeded() const;
  bool AllSettled() const { return gen_.settled.size() + 1 >= membership_.active(); }
  GangActions ConcludeGang(GangActions a);
  Membership membership_;
};

class MemberPolicy : public GangPolicyBase {
 public:
  using GangPolicyBase::GangPolicyBase;
  GangActions On(const GangEvent& e);

 private:
  GangActions OnStop(const rendezvous::wire::Stop& s);
  GangActions OnLost(const gang::Lost& l);
  GangActions OnWorkersDone(const gang::WorkersDone& d);
  GangActions OnStopSignal(int signo);
  GangActions OwnFailure(Generation::Cause cause, bool hang);
  GangActions AfterOwnFailureDone();
  bool FailureKnown() const;  // a failure, a restart or the final word already came
};

// The pod's policy: the leader's role for index 0, the member's otherwise.
class GangPolicy {
 public:
  explicit GangPolicy(GangConfig config);
  GangActions On(const GangEvent& e);
  const GangPolicyBase& role() const;
  // A member numbered by arrival (rendezvous/arrival.h) takes the index the
  // leader gave it; the role stays (index 0 leads from the start).
  void AdoptIndex(std::uint32_t index);
  bool is_leader() const { return std::holds_alternative<LeaderPolicy>(role_); }
  // The leader's membership machine; nullptr for a member.
  const Membership* membership() const;
  // The leader's roster, held by its membership machine (membership.h): the
  // wiring runs the rendezvous rounds on it (roster.h). nullptr for a member.
  // Valid while this policy lives.
  Roster* roster();
  const Roster* roster() const;

 private:
  std::variant<LeaderPolicy, MemberPolicy> role_;
};

}  // namespace trainlet::agent
