#include "trainlet/agent/pod/gang_policy.h"
#include "trainlet/agent/pod/rule_hits.h"

#include "trainlet/exitcodes/exit_code.h"

namespace trainlet::agent {

using exitcodes::FailureClass;
using Kind = Conclusion::Kind;
using Phase = Generation::Phase;
using Decision = Generation::Decision;
using Cause = Generation::Cause;

namespace {
std::string FirstWords(std::uint32_t index, FailureClass c, const std::string& reason);
}  // namespace

// ---- What both roles share ----

namespace {
// "pod 2 failed first (pod 2: ...)", or "was stopped first" for a stop signal.
std::string FirstWords(std::uint32_t index, FailureClass c, const std::string& reason) {
  return "pod " + std::to_string(index) +
         (c == FailureClass::kTerminated ? " was stopped first (" : " failed first (") + reason +
         ")";
}
}  // namespace

bool GangPolicyBase::CanRestart(FailureClass c) const {
  return RestartAllowed(c, restarts_, config_.max_restarts, stop_signal_.has_value());  // M1
}

GangActions GangPolicyBase::Conclude(GangActions a, Conclusion c) {
  concluded_ = true;
  a.conclude = std::move(c);
  return a;
}

GangActions GangPolicyBase::ConcludeNow(GangActions a) {
  const Cause& c = gen_.cause;
  const Conclusion terminated{.kind = Kind::kTerminated,
                              .failure_class = FailureClass::kTerminated,
                              .stop_signal = stop_signal_.value_or(15)};
  // A preempted gang gets SIGTERM in every pod, in some order: a pod stopping
  // because a peer was terminated, that then gets its own, was preempted too.
  if (c.kind == Cause::Kind::kStopSignal ||
      (stop_signal_ && (c.kind == Cause::Kind::kPeerStopped || gen_.restarting()))) {
    rule_hits::G(4);
    return Conclude(std::move(a), terminated);
  }
  switch (c.kind) {
    case Cause::Kind::kPeer:
    case Cause::Kind::kPeerStopped:
      rule_hits::G(2);
      return Conclude(std::move(a), {.kind = Kind::kPeerFailed,
                                     .failure_class = FailureClass::kPeerFailed,
                                     .reason = c.reason});
    case Cause::Kind::kOwnStall:
      rule_hits::G(3);
      return Conclude(std::move(a), {.kind = Kind::kStall,
                                     .failure_class = FailureClass::kInfra,
                                     .reason = c.reason});
    case Cause::Kind::kOwn:
      if (c.failure_class == FailureClass::kTerminated) return Conclude(std::move(a), terminated);
      return Conclude(std::move(a),
                      {.kind = Kind::kOwn, .failure_class = c.failure_class, .reason = c.reason});
    case Cause::Kind::kNone:
    case Cause::Kind::kStopSignal:  // above
      break;
  }
  if (stop_signal_) return Conclude(std::move(a), terminated);
  if (gen_.succeeded()) return Conclude(std::move(a), {.kind = Kind::kOk});
  return Conclude(std::move(a), {.kind = Kind::kOwn, .failure_class = FailureClass::kWorker});
}

GangActions GangPolicyBase::Restart(GangActions a) {
  a.restart = true;
  // The next generation's count (membership.h M2; the next assignment says it again).
  a.counted = gen_.decision != Decision::kGrow;  // G12
  rule_hits::G(12);
  if (a.counted) {
    ++restarts_;
    rule_hits::G(9);
  }
  rule_hits::G(10);  // the generation's state replaced whole
  gen_ = {};
  restarted_ = true;
  return a;
}

std::optional<GangActions> GangPolicyBase::OnCommon(const GangEvent& e) {
  if (concluded_) return GangActions{};
  if (const auto* a = std::get_if<gang::Assigned>(&e)) {
    generation_ = a->generation;
    restarts_ = a->restarts.value_or(a->generation);
    // A spare has no workers to wait for, and never a success of its own.
    gen_.phase = a->spare ? Phase::kSpare : Phase::kRunning;
    if (a->spare) rule_hits::G(7);
    return GangActions{};
  }
  if (const auto* f = std::get_if<gang::AgentFailed>(&e)) {
    return Conclude({}, {.kind = Kind::kAgent,
                         .failure_class = f->status.failure_class(),
                         .reason = f->status.message()});
  }
  if (!gen_.running()) {
    // Joining (the first rendezvous, or the next generation's): no worker runs.
    if (const auto* s = std::get_if<gang::StopSignal>(&e)) {
      if (!stop_signal_) stop_signal_ = s->signo;
      GangActions a;
      if (config_.index != 0 && config_.index != rendezvous::wire::kNoIndex) {
        // G5: a member tells the leader, so that the round need not wait for it.
        rule_hits::G(5);
        a.report = rendezvous::wire::Report{
            .index = config_.index,
            .ok = false,
            .failure_class = static_cast<std::uint16_t>(FailureClass::kTerminated),
            .reason = "stopped by " + exitcodes::SignalName(s->signo),
            .leaving = true};
      }
      rule_hits::G(4);
      return Conclude(std::move(a), {.kind = Kind::kTerminated,
                           .failure_class = FailureClass::kTerminated,
                           .reason = "received " + exitcodes::SignalName(s->signo) +
                                     (restarted_
                                          ? " while the gang restarted (generation " +
                                                std::to_string(generation_ + 1) + ")"
                                          : " before the workers started"),
                           .stop_signal = s->signo});
    }
    if (const auto* s = std::get_if<gang::OwnStall>(&e)) {
      // G3 while joining: the round may have formed during the stall, and
      // the peers given this pod up on the control channel it never answered
      // (its assignment waits unread). No worker runs yet and no generation
      // holds this pod: it leaves as the culprit, before starting any.
      rule_hits::G(3);
      gen_.cause = Cause::OwnStall(s->why);
      return ConcludeNow();
    }
    return GangActions{};  // nothing else can concern a generation that has not started
  }
  return std::nullopt;
}

std::optional<GangActions> GangPolicyBase::OnWorkersDoneCommon(const gang::WorkersDone& d) {
  if (gen_.done()) return GangActions{};
  gen_.phase = d.success && !gen_.cause.own() ? Phase::kSucceeded : Phase::kExited;
  if (gen_.restarting()) {
    if (stop_signal_) return ConcludeNow();  // SIGTERM while stopping for a restart: 143
    return Restart();
  }
  return std::nullopt;
}

// ---- The leader ----

LeaderPolicy::LeaderPolicy(GangConfig config)
    : GangPolicyBase(config),
      membership_({.min_nodes = config.min_nodes != 0 ? config.min_nodes : config.nnodes,
                   .max_nodes = config.nnodes,
                   .max_restarts = config.max_restarts,
                   .spares = config.spares,
                   .leader = config.index}) {}

bool LeaderPolicy::GangSucceeded() const {
  return gen_.decision == Decision::kSucceeded || gen_.succeeded();
}

// Concludes the leader; when the gang succeeded, the spares still waiting are
// told (a final Stop of class ok) and exit 0.
GangActions LeaderPolicy::ConcludeGang(GangActions a) {
  a = ConcludeNow(std::move(a));
  if (a.conclude && a.conclude->kind == Kind::kOk && !membership_.spares().empty()) {
    a.broadcast = rendezvous::wire::Stop{.failed_index = config_.index,
                                         .reason = "the gang finished",
                                         .restart = false,
                                         .next_generation = generation_,
                                         .failure_class =
                                             static_cast<std::uint16_t>(FailureClass::kOk)};
  }
  return a;
}

GangActions LeaderPolicy::MaybeConclude(GangActions a) {
  if (!gen_.done()) return a;
  if (gen_.first || AllSettled()) return ConcludeGang(std::move(a));
  if (gen_.succeeded()) {
    a.log = "workers finished; waiting for the other pods to finish";
    a.log_info = true;
  }
  return a;
}

GangActions LeaderPolicy::PodFailed(std::uint32_t index, FailureClass c, const std::string& reason,
                                    bool hang) {
  if (gen_.first) return {};
  const MembershipActions m = membership_.On(member_event::Failed{
      .key = index, .failure_class = c, .succeeded = GangSucceeded(),
      .stopped = stop_signal_.has_value()});
  if (m.end == MembershipActions::End::kNone) return {};  // collateral (membership.h M12)
  return Announce(index, c, reason, hang, m);
}

// The first failure of the generation, decided by the membership machine
// (M3-M5, M10): the Stop for every member, and this pod's part.
GangActions LeaderPolicy::Announce(std::uint32_t index, FailureClass c, const std::string& reason,
                                   bool hang, const MembershipActions& m) {
  GangActions a;
  rule_hits::G(1);
  gen_.first = index;
  a.leaving = m.leaving;
  a.note_failure = static_cast<std::uint16_t>(c);
  const bool restart = m.end == MembershipActions::End::kRestart;
  const int diag = hang ? config_.hang_signal : 0;
  a.broadcast = rendezvous::wire::Stop{.failed_index = index,
                                       .reason = reason,
                                       .diagnostics_signal = static_cast<std::uint16_t>(diag),
                                       .restart = restart,
                                       .next_generation = generation_ + 1,
                                       .failure_class = static_cast<std::uint16_t>(c)};
  if (restart) {
    rule_hits::G(6);
    gen_.decision = Decision::kRestart;
    a.log = "gang: " + reason + "; restarting in place (restart " +
            std::to_string(m.next_restarts) + " of " + std::to_string(config_.max_restarts) + ")";
  } else if (index == config_.index && membership_.active() == 1) {
    a.log = "gang: " + reason;  // a gang of one: nobody else to stop or wait for
  } else if (index == config_.index && AllSettled()) {
    // E.g. JobSet's successPolicy: the other pods finished, this one is stopped.
    a.log = "gang: " + reason + "; every other pod has finished";
    a.log_info = true;
  } else {
    a.log = "gang: " + reason + (m.why.empty() ? "" : " (" + m.why + ")") + "; stopping every pod";
  }
  if (index != config_.index) {
    if (!restart) {
      gen_.cause = Cause::Peer(FirstWords(index, c, reason), c == FailureClass::kTerminated);
    }
    a.stop_workers = diag;
  }
  if (!gen_.done()) return a;
  return restart ? Restart(std::move(a)) : MaybeConclude(std::move(a));
}

// A next generation that counts no restart (membership.h M8, M9, M11, M13):
// every member stops its workers and rejoins; the Stop names no failure.
GangActions LeaderPolicy::NextWithoutRestart(const MembershipActions& m) {
  GangActions a;
  const std::uint32_t subject = m.subject.value_or(config_.index);
  gen_.decision = Decision::kGrow;  // a failure may still be decided (membership.h M12)
  rule_hits::G(8);
  a.leaving = m.leaving;
  a.resize = true;
  a.broadcast = rendezvous::wire::Stop{
      .failed_index = subject,
      .reason = m.why,
      .restart = true,
      .next_generation = generation_ + 1,
      .failure_class = static_cast<std::uint16_t>(FailureClass::kOk)};
  if (!stop_signal_) a.stop_workers = 0;  // else the supervisor forwards the signal itself
  a.log = "gang: " + m.why + " (generation " + std::to_string(generation_ + 1) + ")";
  a.log_info = true;
  if (gen_.done() && !stop_signal_) return Restart(std::move(a));
  if (gen_.done()) return ConcludeNow(std::move(a));
  return a;
}

GangActions LeaderPolicy::OnReport(const gang::Report& r) {
  gen_.settled.insert(r.index);
  if (r.report.ok) {
    // A restart decided before stays decided.
    if (gen_.decision == Decision::kOpen) gen_.decision = Decision::kSucceeded;
    rule_hits::G(11);
    return MaybeConclude();
  }
  const auto c = static_cast<FailureClass>(r.report.failure_class);
  if (r.report.leaving && !GangSucceeded()) return OnLeaving(r);
  if (c == FailureClass::kTerminated && GangSucceeded()) {
    // A Job successPolicy (or JobSet's) met: the controller stops the pods
    // still running. Not a failure of the gang.
    GangActions a;
    a.log = "pod " + std::to_string(r.index) + " stopped after the gang succeeded (" +
            r.report.reason + "); not a failure";
    a.log_info = true;
    return MaybeConclude(std::move(a));
  }
  return PodFailed(r.index, c, "pod " + std::to_string(r.index) + ": " + r.report.reason,
                   r.report.hang);
}

GangActions LeaderPolicy::OnLost(const gang::Lost& l) {
  const bool spare = membership_.spares().contains(l.index);
  const bool decided = membership_.decided();
  const MembershipActions m = membership_.On(member_event::Lost{l.index});
  GangActions a;
  a.lost = m.lost;
  a.lost_spares = m.lost_spares;
  if (spare) {  // M6: a waiting spare; no worker of the gang ran there
    if (!decided) a.log = "spare pod " + std::to_string(l.index) + " was lost: " + l.why;
    return a;
  }
  // M14: after the next generation is decided every member closes its
  // connection to rejoin; a leaver closes after its word.
  if (!gen_.settled.insert(l.index).second || decided || gen_.decision == Decision::kGrow) {
    return a;
  }
  GangActions f = PodFailed(l.index, FailureClass::kInfra,
                            "pod " + std::to_string(l.index) + " was lost: " + l.why, false);
  f.lost = std::move(a.lost);
  return f;
}

// G5: a member leaves (its own stop signal). The membership machine gathers
// the leaves of a settle window and decides them at once (M7-M10).
GangActions LeaderPolicy::OnLeaving(const gang::Report& r) {
  GangActions a;
  rule_hits::G(5);
  if (gen_.first || gen_.restarting()) {  // a failure or a next generation came first
    a.leaving = membership_.On(member_event::Leaving{r.index}).leaving;
    return a;
  }
  const MembershipActions m = membership_.On(member_event::Leaving{r.index});
  if (m.end == MembershipActions::End::kStop) {  // M10 at once: a fixed gang without spares
    return Announce(r.index, FailureClass::kTerminated,
                    "pod " + std::to_string(r.index) + ": " + r.report.reason, false, m);
  }
  a.leaving = m.leaving;
  a.arm_settle_timer = m.arm_settle;
  a.log = "pod " + std::to_string(r.index) + " leaves the gang (" + r.report.reason + ")";
  a.log_info = true;
  return MaybeConclude(std::move(a));
}

GangActions LeaderPolicy::OnSettled() {
  if (gen_.first || gen_.restarting()) return {};
  const MembershipActions m = membership_.On(member_event::SettleEnded{});
  using End = MembershipActions::End;
  if (m.end == End::kNone) return {};
  if (m.end == End::kStop) {
    const std::uint32_t who = m.subject.value_or(config_.index);
    return Announce(who, FailureClass::kTerminated, "pod " + std::to_string(who) + ": " + m.why,
                    false, m);
  }
  return NextWithoutRestart(m);
}

GangActions LeaderPolicy::OnLocalFailure(const gang::LocalFailure& f) {
  // Collateral of a known failure, or of the stop for a growing gang.
  if (gen_.cause.own() || gen_.first || gen_.done() || gen_.restarting()) return {};
  const std::uint32_t own = config_.index;
  gen_.cause = Cause::Own(f);
  GangActions a = PodFailed(own, f.failure_class, "pod " + std::to_string(own) + ": " + f.reason,
                            f.hang);
  a.stop_workers = f.hang ? config_.hang_signal : 0;
  return a;
}

GangActions LeaderPolicy::OnOwnStall(const gang::OwnStall& s) {
  if (gen_.cause.own() || gen_.first) return {};
  const std::uint32_t own = config_.index;
  gen_.cause = Cause::OwnStall(s.why);
  rule_hits::G(3);
  GangActions a = PodFailed(own, FailureClass::kInfra, "pod " + std::to_string(own) + ": " + s.why,
                            false);
  a.stop_workers = 0;
  return a;
}

GangActions LeaderPolicy::OnStopSignal(int signo) {
  if (!stop_signal_) stop_signal_ = signo;
  const std::uint32_t own = config_.index;
  const std::string why = "stopped by " + exitcodes::SignalName(signo);
  if (gen_.done()) {
    // The workers are done and the leader only waits for the others: tell
    // those still running and leave now, or the kubelet's SIGKILL would come
    // first. (A member whose own worker failed meanwhile and waits for the
    // verdict is then collateral: the stop came first.)
    GangActions a;
    if (!gen_.first && !AllSettled()) {
      gen_.cause = Cause::StopSignal(why);
      a = PodFailed(own, FailureClass::kTerminated, "pod " + std::to_string(own) + ": " + why,
                    false);
    }
    return Conclude(std::move(a), {.kind = Kind::kTerminated,
                                   .failure_class = FailureClass::kTerminated,
                                   .stop_signal = signo});
  }
  // A failure came first, or a next generation is decided (the members rejoin
  // and wait for this leader's replacement, M11): the workers stop anyway.
  if (gen_.first || gen_.cause.own() || gen_.restarting()) return {};
  gen_.cause = Cause::StopSignal(why);
  const MembershipActions m = membership_.On(member_event::LeaderLeaving{});
  if (m.end == MembershipActions::End::kRejoin) return NextWithoutRestart(m);  // M11
  return Announce(own, FailureClass::kTerminated, "pod " + std::to_string(own) + ": " + why,
                  false, m);
}

GangActions LeaderPolicy::OnWorkersDone(const gang::WorkersDone& d) {
  if (auto a = OnWorkersDoneCommon(d)) return *a;
  return MaybeConclude();
}

// A pod admitted while the generation runs (membership.h M13): the gang
// grows when it may and nothing has ended the generation yet; otherwise the
// pod waits as a spare (or, a next generation decided, joins it).
GangActions LeaderPolicy::OnJoined(const gang::Joined& j) {
  const bool open =
      gen_.decision == Decision::kOpen && !gen_.first && !gen_.done() && !stop_signal_;
  const MembershipActions m = membership_.On(member_event::Joined{.key = j.index, .open = open});
  if (m.end == MembershipActions::End::kResize) return NextWithoutRestart(m);
  GangActions a;
  a.joins_as_spare = m.joins_as_spare;  // G12
  a.log_info = true;
  a.log = "pod " + std::to_string(j.index) + " joined; " +
          (m.joins_as_spare ? "it waits as a spare" : "it joins the next generation");
  return a;
}

GangActions LeaderPolicy::On(const GangEvent& e) {
  if (auto common = OnCommon(e)) {
    if (const auto* a = std::get_if<gang::Assigned>(&e); a && !concluded_) {
      membership_.On(member_event::Formed{
          .generation = a->generation, .active = a->nnodes, .restarts = restarts_});
    }
    return *common;
  }
  if (std::holds_alternative<gang::Timer>(e)) return OnSettled();
  if (const auto* j = std::get_if<gang::Joined>(&e)) return OnJoined(*j);
  if (const auto* r = std::get_if<gang::Report>(&e)) return OnReport(*r);
  if (const auto* l = std::get_if<gang::Lost>(&e)) return OnLost(*l);
  if (const auto* f = std::get_if<gang::LocalFailure>(&e)) return OnLocalFailure(*f);
  if (const auto* s = std::get_if<gang::OwnStall>(&e)) return OnOwnStall(*s);
  if (const auto* s = std::get_if<gang::StopSignal>(&e)) return OnStopSignal(s->signo);
  if (const auto* d = std::get_if<gang::WorkersDone>(&e)) return OnWorkersDone(*d);
  return {};  // Stop, ReportSent: the member's
}

// ---- A member ----

// This pod's own failure, first: tell the leader, stop the workers.
GangActions MemberPolicy::OwnFailure(Cause cause, bool hang) {
  GangActions a;
  a.report = rendezvous::wire::Report{.index = config_.index,
                                      .ok = false,
                                      .failure_class =
                                          static_cast<std::uint16_t>(cause.failure_class),
                                      .reason = cause.reason,
                                      .hang = hang,
                                      .leaving = cause.kind == Cause::Kind::kStopSignal};
  a.note_failure = static_cast<std::uint16_t>(cause.failure_class);
  if (cause.failure_class != FailureClass::kTerminated) {
    a.stop_workers = hang ? config_.hang_signal : 0;
  }
  gen_.cause = std::move(cause);
  return a;
}

// Our own failure, our workers gone, no verdict yet.
GangActions MemberPolicy::AfterOwnFailureDone() {
  GangActions a;
  if (gen_.cause.failure_class == FailureClass::kTerminated || stop_signal_) {
    // Preempted: leave now; the kubelet's SIGKILL would come first.
    return Conclude(std::move(a), {.kind = Kind::kTerminated,
                                   .failure_class = FailureClass::kTerminated,
                                   .stop_signal = stop_signal_.value_or(15)});
  }
  if (gen_.leader_lost()) {
    if (CanRestart(gen_.cause.failure_class)) {
      a.log = "lost the leader; restarting in place";
      return Restart(std::move(a));
    }
    return ConcludeNow(std::move(a));
  }
  // The leader decides for the gang whether this failure restarts it, and
  // whose failure came first.
  a.arm_verdict_timer = true;
  a.log = "workers stopped; waiting for the leader's decision (restart or stop)";
  a.log_info = true;
  return a;
}

GangActions MemberPolicy::OnStop(const rendezvous::wire::Stop& s) {
  GangActions a;
  // A growing gang's Stop may be followed by a failure's (counted, or final
  // when the restarts are spent) while the workers still stop.
  if (gen_.verdict() || gen_.decision == Decision::kRestart) return a;
  if (gen_.decision == Decision::kGrow && s.failure_class == 0) return a;
  if (!s.restart && s.failure_class == static_cast<std::uint16_t>(FailureClass::kOk)) {
    // The gang finished: a spare (the only pod still waiting for a word) exits 0.
    rule_hits::G(7);
    gen_.decision = Decision::kFinal;
    return gen_.done() ? Conclude(std::move(a), {.kind = Kind::kOk}) : a;
  }
  if (s.restart && s.failure_class == static_cast<std::uint16_t>(FailureClass::kOk)) {
    // A pod joined and the gang grows: a next generation, no failure, no restart.
    rule_hits::G(8);
    gen_.decision = Decision::kGrow;
    a.log = "the leader starts generation " + std::to_string(s.next_generation) + ": " + s.reason;
    a.log_info = true;
    if (gen_.done()) return Restart(std::move(a));
    a.stop_workers = 0;
    return a;
  }
  const auto c = static_cast<FailureClass>(s.failure_class);
  const std::string first = FirstWords(s.failed_index, c, s.reason);
  if (s.failed_index != config_.index) {  // trainlet_last_failure: the culprit's, or peer_failed
    a.note_failure = s.restart ? s.failure_class
                               : static_cast<std::uint16_t>(FailureClass::kPeerFailed);
  }
  if (s.restart && s.failed_index == config_.index && !RestartableClass(c)) {
    // Our own failure points at this node (hardware): the gang goes on with a
    // spare in our place; we leave with our own class.
    gen_.decision = Decision::kFinal;
    if (gen_.done()) return ConcludeNow(std::move(a));
    return a;
  }
  if (s.restart && !stop_signal_) {
    gen_.decision = Decision::kRestart;
    a.log = "the leader restarts the gang in place (generation " +
            std::to_string(s.next_generation) + "): " + first;
    if (gen_.done()) return Restart(std::move(a));
    if (s.failed_index != config_.index) a.stop_workers = s.diagnostics_signal;
    return a;
  }
  gen_.decision = Decision::kFinal;
  if (s.failed_index != config_.index) {
    // Another pod's failure came first: ours, if any, is collateral (a stop
    // signal that came first stays: the pod was preempted).
    if (gen_.cause.kind != Cause::Kind::kStopSignal) {
      gen_.cause = Cause::Peer(first, c == FailureClass::kTerminated);
    }
    // A pod stopping on its own stop signal needs no word of the others'.
    if (!stop_signal_) a.log = "the leader stops the gang: " + first;
    a.stop_workers = s.diagnostics_signal;
  }
  if (gen_.done()) return ConcludeNow(std::move(a));
  return a;
}

GangActions MemberPolicy::OnLost(const gang::Lost& l) {
  GangActions a;
  // After its verdict the leader may leave first: not a failure.
  if (gen_.decision != Decision::kOpen) return a;
  gen_.decision = Decision::kLeaderLost;
  if (gen_.cause.own()) return gen_.done() ? AfterOwnFailureDone() : a;
  if (gen_.cause.peer() || gen_.phase == Phase::kReporting) return a;
  a.stop_workers = 0;
  if (CanRestart(FailureClass::kInfra)) {
    gen_.decision = Decision::kRestart;
    a.log = "lost the leader: " + l.why + "; stopping the workers, then rejoining (restart " +
            std::to_string(restarts_ + 1) + " of " + std::to_string(config_.max_restarts) + ")";
    if (gen_.done()) return Restart(std::move(a));  // a spare: no workers to stop
    return a;
  }
  gen_.cause = Cause::Peer("lost the leader: " + l.why, false);
  a.log = gen_.cause.reason + "; stopping the workers";
  if (gen_.done()) return ConcludeNow(std::move(a));
  return a;
}

GangActions MemberPolicy::OnWorkersDone(const gang::WorkersDone& d) {
  if (auto a = OnWorkersDoneCommon(d)) return *a;
  if (gen_.verdict() || gen_.cause.peer()) return ConcludeNow();
  if (gen_.cause.own()) return AfterOwnFailureDone();
  if (gen_.succeeded() && !stop_signal_) {
    // Tell the leader before leaving, so our exit is not read as a loss.
    gen_.phase = Phase::kReporting;
    GangActions a;
    a.report = rendezvous::wire::Report{.index = config_.index, .ok = true, .reason = ""};
    rule_hits::G(11);
    return a;
  }
  return ConcludeNow();
}

GangActions MemberPolicy::OnStopSignal(int signo) {
  if (!stop_signal_) stop_signal_ = signo;
  if (gen_.done()) {
    // Waiting for the verdict or for the success report to be written.
    return Conclude({}, {.kind = Kind::kTerminated,
                         .failure_class = FailureClass::kTerminated,
                         .stop_signal = signo});
  }
  if (gen_.restarting() && !gen_.cause.known()) {
    // G5: the gang restarts or resizes; the next round need not wait for it.
    rule_hits::G(5);
    GangActions a;
    a.report = rendezvous::wire::Report{
        .index = config_.index,
        .ok = false,
        .failure_class = static_cast<std::uint16_t>(FailureClass::kTerminated),
        .reason = "stopped by " + exitcodes::SignalName(signo),
        .leaving = true};
    return a;
  }
  if (FailureKnown()) return {};
  return OwnFailure(Cause::StopSignal("stopped by " + exitcodes::SignalName(signo)), false);
}

bool MemberPolicy::FailureKnown() const {
  return gen_.cause.known() || gen_.restarting() || gen_.verdict();
}

GangActions MemberPolicy::On(const GangEvent& e) {
  if (auto common = OnCommon(e)) return *common;
  if (const auto* s = std::get_if<gang::Stop>(&e)) return OnStop(s->stop);
  if (const auto* l = std::get_if<gang::Lost>(&e)) return OnLost(*l);
  if (const auto* d = std::get_if<gang::WorkersDone>(&e)) return OnWorkersDone(*d);
  if (const auto* s = std::get_if<gang::StopSignal>(&e)) return OnStopSignal(s->signo);
  if (const auto* f = std::get_if<gang::LocalFailure>(&e)) {
    if (FailureKnown() || gen_.done()) return {};
    return OwnFailure(Cause::Own(*f), f->hang);
  }
  if (const auto* s = std::get_if<gang::OwnStall>(&e)) {
    if (FailureKnown()) return {};
    if (gen_.phase == Phase::kSpare) {
      // A waiting spare frozen past the heartbeat timeout: the leader gave it
      // up as lost (and goes on without it). It leaves with its own stall,
      // as an active pod does, instead of reading the leader's silence as the
      // leader's loss and rejoining a leader that no longer counts it.
      gen_.cause = Cause::OwnStall(s->why);
      return ConcludeNow();
    }
    if (gen_.done()) return {};
    return OwnFailure(Cause::OwnStall(s->why), false);
  }
  if (std::holds_alternative<gang::ReportSent>(e)) {
    if (gen_.phase != Phase::kReporting) return {};
    return ConcludeNow();
  }
  if (std::holds_alternative<gang::Timer>(e)) {
    if (!gen_.done() || !gen_.cause.own() || gen_.verdict()) return {};
    GangActions a;
    a.log = "the leader's decision did not come; concluding with this pod's own failure";
    return ConcludeNow(std::move(a));
  }
  return {};  // Report: the leader's
}

// ---- The facade ----

GangPolicy::GangPolicy(GangConfig config)
    : role_(config.index == 0 ? std::variant<LeaderPolicy, MemberPolicy>(LeaderPolicy(config))
                              : std::variant<LeaderPolicy, MemberPolicy>(MemberPolicy(config))) {}

GangActions GangPolicy::On(const GangEvent& e) {
  return std::visit([&e](auto& r) { return r.On(e); }, role_);
}

void GangPolicy::AdoptIndex(std::uint32_t index) {
  std::visit([index](auto& r) { r.AdoptIndex(index); }, role_);
}

const Membership* GangPolicy::membership() const {
  const auto* leader = std::get_if<LeaderPolicy>(&role_);
  return leader != nullptr ? &leader->membership() : nullptr;
}

Roster* GangPolicy::roster() {
  auto* leader = std::get_if<LeaderPolicy>(&role_);
  return leader != nullptr ? &leader->roster() : nullptr;
}

const Roster* GangPolicy::roster() const {
  const Membership* m = membership();
  return m != nullptr ? &m->roster() : nullptr;
}

const GangPolicyBase& GangPolicy::role() const {
  return std::visit([](const auto& r) -> const GangPolicyBase& { return r; }, role_);
}

}  // namespace trainlet::agent
