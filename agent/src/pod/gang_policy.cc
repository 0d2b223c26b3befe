#include "trainlet/agent/pod/gang_policy.h"

#include "trainlet/agent/pod/formation_policy.h"
#include "trainlet/exitcodes/exit_code.h"

namespace trainlet::agent {

using exitcodes::FailureClass;
using Kind = Conclusion::Kind;

namespace {
std::string FirstWords(std::uint32_t index, FailureClass c, const std::string& reason);
}  // namespace

bool RestartableClass(FailureClass c) {
  return c == FailureClass::kWorker || c == FailureClass::kInfra || c == FailureClass::kOom ||
         c == FailureClass::kPeerFailed;
}

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
  return !stop_signal_ && restarts_ < config_.max_restarts && RestartableClass(c);
}

GangActions GangPolicyBase::Conclude(GangActions a, Conclusion c) {
  concluded_ = true;
  a.conclude = std::move(c);
  return a;
}

GangActions GangPolicyBase::ConcludeNow(GangActions a) {
  const Generation& g = gen_;
  auto terminated = [&] {
    return Conclusion{.kind = Kind::kTerminated,
                      .failure_class = FailureClass::kTerminated,
                      .stop_signal = stop_signal_.value_or(15)};
  };
  // A preempted gang gets SIGTERM in every pod, in some order: a pod stopping
  // because a peer was terminated, that then gets its own, was preempted too.
  if (g.terminated_first || (stop_signal_ && (g.peer_terminated || g.restarting()))) {
    return Conclude(std::move(a), terminated());
  }
  if (g.peer) {
    return Conclude(std::move(a), {.kind = Kind::kPeerFailed,
                                   .failure_class = FailureClass::kPeerFailed,
                                   .reason = *g.peer});
  }
  if (g.own) {
    if (g.own_stall) {
      return Conclude(std::move(a), {.kind = Kind::kStall,
                                     .failure_class = FailureClass::kInfra,
                                     .reason = g.own->reason});
    }
    if (g.own->failure_class == FailureClass::kTerminated) return Conclude(std::move(a), terminated());
    return Conclude(std::move(a), {.kind = Kind::kOwn,
                                   .failure_class = g.own->failure_class,
                                   .reason = g.own->reason});
  }
  if (stop_signal_) return Conclude(std::move(a), terminated());
  if (g.success) return Conclude(std::move(a), {.kind = Kind::kOk});
  return Conclude(std::move(a), {.kind = Kind::kOwn, .failure_class = FailureClass::kWorker});
}

GangActions GangPolicyBase::Restart(GangActions a) {
  a.restart = true;
  // The next generation's count (the next assignment says it again).
  const bool grow = gen_.decision == Generation::Decision::kGrow;
  restarts_ = NextRestarts(restarts_, {.joined = grow, .failed = !grow}, config_.max_restarts).restarts;
  gen_ = {};
  restarted_ = true;
  return a;
}

std::optional<GangActions> GangPolicyBase::OnCommon(const GangEvent& e) {
  if (concluded_) return GangActions{};
  if (const auto* a = std::get_if<gang::Assigned>(&e)) {
    generation_ = a->generation;
    restarts_ = a->restarts.value_or(a->generation);
    gen_.phase = Generation::Phase::kRunning;
    gen_.spares = a->spares;
    gen_.active = a->nnodes;
    if (a->spare) {
      gen_.spare = true;
      gen_.phase = Generation::Phase::kDone;  // no workers to wait for; never a success of its own
    }
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
      return Conclude({}, {.kind = Kind::kTerminated,
                           .failure_class = FailureClass::kTerminated,
                           .reason = "received " + exitcodes::SignalName(s->signo) +
                                     (restarted_
                                          ? " while the gang restarted (generation " +
                                                std::to_string(generation_ + 1) + ")"
                                          : " before the workers started"),
                           .stop_signal = s->signo});
    }
    return GangActions{};  // nothing else can concern a generation that has not started
  }
  return std::nullopt;
}

std::optional<GangActions> GangPolicyBase::OnWorkersDoneCommon(const gang::WorkersDone& d) {
  if (gen_.done()) return GangActions{};
  gen_.phase = Generation::Phase::kDone;
  gen_.success = d.success && !gen_.own;
  if (gen_.restarting()) {
    if (stop_signal_) return ConcludeNow();  // SIGTERM while stopping for a restart: 143
    return Restart();
  }
  return std::nullopt;
}

// ---- The leader ----

bool LeaderPolicy::GangSucceeded() const {
  return gen_.member_succeeded || (gen_.done() && gen_.success);
}

// Concludes the leader; when the gang succeeded, the spares still waiting are
// told (a final Stop of class ok) and exit 0.
GangActions LeaderPolicy::ConcludeGang(GangActions a) {
  a = ConcludeNow(std::move(a));
  if (a.conclude && a.conclude->kind == Kind::kOk && !gen_.spares.empty()) {
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
  if (gen_.success) {
    a.log = "workers finished; waiting for the other pods to finish";
    a.log_info = true;
  }
  return a;
}

GangActions LeaderPolicy::PodFailed(std::uint32_t index, FailureClass c, const std::string& reason,
                                    bool hang) {
  GangActions a;
  if (gen_.first) return a;
  gen_.first = index;
  // A member's hardware failure: it leaves and a waiting spare takes its place.
  const bool swap = c == FailureClass::kHardware && index != config_.index &&
                    !gen_.spares.empty() && !stop_signal_ &&
                    restarts_ < config_.max_restarts;
  const bool restart = (CanRestart(c) || swap) && !GangSucceeded();
  const int diag = hang ? config_.hang_signal : 0;
  a.broadcast = rendezvous::wire::Stop{.failed_index = index,
                                       .reason = reason,
                                       .diagnostics_signal = static_cast<std::uint16_t>(diag),
                                       .restart = restart,
                                       .next_generation = generation_ + 1,
                                       .failure_class = static_cast<std::uint16_t>(c)};
  if (restart) {
    gen_.decision = Generation::Decision::kRestart;
    a.log = "gang: " + reason + "; restarting in place (restart " +
            std::to_string(restarts_ + 1) + " of " + std::to_string(config_.max_restarts) + ")";
  } else if (index == config_.index && (gen_.active != 0 ? gen_.active : config_.nnodes) == 1) {
    a.log = "gang: " + reason;  // a gang of one: nobody else to stop or wait for
  } else if (index == config_.index && AllSettled()) {
    // E.g. JobSet's successPolicy: the other pods finished, this one is stopped.
    a.log = "gang: " + reason + "; every other pod has finished";
    a.log_info = true;
  } else {
    a.log = "gang: " + reason + "; stopping every pod";
  }
  if (index != config_.index) {
    if (!restart) {
      gen_.peer = FirstWords(index, c, reason);
      gen_.peer_terminated = c == FailureClass::kTerminated;
    }
    a.stop_workers = diag;
  }
  if (!gen_.done()) return a;
  return restart ? Restart(std::move(a)) : MaybeConclude(std::move(a));
}

GangActions LeaderPolicy::OnReport(const gang::Report& r) {
  gen_.settled.insert(r.index);
  if (r.report.ok) {
    gen_.member_succeeded = true;
    return MaybeConclude();
  }
  const auto c = static_cast<FailureClass>(r.report.failure_class);
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
  if (gen_.spares.erase(l.index) > 0) {  // a waiting spare: no worker of the gang ran there
    if (gen_.restarting()) return {};  // it left to rejoin the next generation
    GangActions a;
    a.log = "spare pod " + std::to_string(l.index) + " was lost: " + l.why;
    return a;
  }
  if (!gen_.settled.insert(l.index).second) return {};
  // Growing: every member closes its connection to rejoin the next round.
  if (gen_.decision == Generation::Decision::kGrow) return {};
  return PodFailed(l.index, FailureClass::kInfra,
                   "pod " + std::to_string(l.index) + " was lost: " + l.why, false);
}

GangActions LeaderPolicy::OnLocalFailure(const gang::LocalFailure& f) {
  // Collateral of a failure already known, or of the stop for a growing gang.
  if (gen_.own || gen_.first || gen_.done() || gen_.restarting()) return {};
  const std::uint32_t own = config_.index;
  gen_.own = f;
  GangActions a = PodFailed(own, f.failure_class, "pod " + std::to_string(own) + ": " + f.reason,
                            f.hang);
  a.stop_workers = f.hang ? config_.hang_signal : 0;
  return a;
}

GangActions LeaderPolicy::OnOwnStall(const gang::OwnStall& s) {
  if (gen_.own || gen_.first) return {};
  const std::uint32_t own = config_.index;
  gen_.own = gang::LocalFailure{FailureClass::kInfra, s.why, false};
  gen_.own_stall = true;
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
      gen_.terminated_first = true;
      a = PodFailed(own, FailureClass::kTerminated, "pod " + std::to_string(own) + ": " + why,
                    false);
    }
    return Conclude(std::move(a), {.kind = Kind::kTerminated,
                                   .failure_class = FailureClass::kTerminated,
                                   .stop_signal = signo});
  }
  if (gen_.first || gen_.own) return {};  // a failure came first; the workers stop anyway
  gen_.terminated_first = true;
  gen_.own = gang::LocalFailure{FailureClass::kTerminated, why, false};
  return PodFailed(own, FailureClass::kTerminated, "pod " + std::to_string(own) + ": " + why,
                   false);
}

GangActions LeaderPolicy::OnWorkersDone(const gang::WorkersDone& d) {
  if (auto a = OnWorkersDoneCommon(d)) return *a;
  return MaybeConclude();
}

// A pod admitted while the generation runs: the gang grows when it may and
// nothing has ended the generation yet; otherwise the pod waits as a spare
// (or, a restart under way, joins the next round with the others).
GangActions LeaderPolicy::OnJoined(const gang::Joined& j) {
  GangActions a;
  a.log_info = true;
  const bool open = gen_.decision == Generation::Decision::kOpen && !gen_.first && !gen_.done() &&
                    !gen_.member_succeeded && !stop_signal_;
  if (!j.grows || !open) {
    if (!gen_.restarting()) gen_.spares.insert(j.index);
    a.log = "pod " + std::to_string(j.index) + " joined; " +
            (gen_.restarting() ? "it joins the next generation" : "it waits as a spare");
    return a;
  }
  gen_.decision = Generation::Decision::kGrow;
  const std::string why = "pod " + std::to_string(j.index) + " joined: the gang grows";
  a.broadcast = rendezvous::wire::Stop{.failed_index = j.index,
                                       .reason = why,
                                       .restart = true,
                                       .next_generation = generation_ + 1,
                                       .failure_class = static_cast<std::uint16_t>(FailureClass::kOk)};
  a.stop_workers = 0;
  a.log = "gang: " + why + " (generation " + std::to_string(generation_ + 1) + ", no restart)";
  return a;
}

GangActions LeaderPolicy::On(const GangEvent& e) {
  if (auto common = OnCommon(e)) return *common;
  if (const auto* j = std::get_if<gang::Joined>(&e)) return OnJoined(*j);
  if (const auto* r = std::get_if<gang::Report>(&e)) return OnReport(*r);
  if (const auto* l = std::get_if<gang::Lost>(&e)) return OnLost(*l);
  if (const auto* f = std::get_if<gang::LocalFailure>(&e)) return OnLocalFailure(*f);
  if (const auto* s = std::get_if<gang::OwnStall>(&e)) return OnOwnStall(*s);
  if (const auto* s = std::get_if<gang::StopSignal>(&e)) return OnStopSignal(s->signo);
  if (const auto* d = std::get_if<gang::WorkersDone>(&e)) return OnWorkersDone(*d);
  return {};  // Stop, ReportSent, Timer: the member's
}

// ---- A member ----

GangActions MemberPolicy::OwnFailure(gang::LocalFailure f) {
  GangActions a;
  a.report = rendezvous::wire::Report{.index = config_.index,
                                      .ok = false,
                                      .failure_class = static_cast<std::uint16_t>(f.failure_class),
                                      .reason = f.reason,
                                      .hang = f.hang};
  if (f.failure_class != FailureClass::kTerminated) {
    a.stop_workers = f.hang ? config_.hang_signal : 0;
  }
  gen_.own = std::move(f);
  return a;
}

// Our own failure, our workers gone, no verdict yet.
GangActions MemberPolicy::AfterOwnFailureDone() {
  GangActions a;
  if (gen_.own->failure_class == FailureClass::kTerminated || stop_signal_) {
    // Preempted: leave now; the kubelet's SIGKILL would come first.
    return Conclude(std::move(a), {.kind = Kind::kTerminated,
                                   .failure_class = FailureClass::kTerminated,
                                   .stop_signal = stop_signal_.value_or(15)});
  }
  if (gen_.leader_lost) {
    if (CanRestart(gen_.own->failure_class)) {
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
  if (gen_.verdict() || gen_.restarting()) return a;
  if (!s.restart && s.failure_class == static_cast<std::uint16_t>(FailureClass::kOk)) {
    // The gang finished: a spare (the only pod still waiting for a word) exits 0.
    gen_.decision = Generation::Decision::kFinal;
    gen_.success = true;
    return gen_.done() ? Conclude(std::move(a), {.kind = Kind::kOk}) : a;
  }
  if (s.restart && s.failure_class == static_cast<std::uint16_t>(FailureClass::kOk)) {
    // A pod joined and the gang grows: a next generation, no failure, no restart.
    gen_.decision = Generation::Decision::kGrow;
    a.log = "the leader starts generation " + std::to_string(s.next_generation) + ": " + s.reason;
    a.log_info = true;
    if (gen_.done()) return Restart(std::move(a));
    a.stop_workers = 0;
    return a;
  }
  const std::string first =
      FirstWords(s.failed_index, static_cast<FailureClass>(s.failure_class), s.reason);
  if (s.restart && s.failed_index == config_.index &&
      !RestartableClass(static_cast<FailureClass>(s.failure_class))) {
    // Our own failure points at this node (hardware): the gang goes on with a
    // spare in our place; we leave with our own class.
    gen_.decision = Generation::Decision::kFinal;
    if (gen_.done()) return ConcludeNow(std::move(a));
    return a;
  }
  if (s.restart && !stop_signal_) {
    gen_.decision = Generation::Decision::kRestart;
    a.log = "the leader restarts the gang in place (generation " +
            std::to_string(s.next_generation) + "): " + first;
    if (gen_.done()) return Restart(std::move(a));
    if (s.failed_index != config_.index) a.stop_workers = s.diagnostics_signal;
    return a;
  }
  gen_.decision = Generation::Decision::kFinal;
  if (s.failed_index != config_.index) {
    // Another pod's failure came first: ours, if any, is collateral.
    gen_.peer = first;
    gen_.peer_terminated = s.failure_class == static_cast<std::uint16_t>(FailureClass::kTerminated);
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
  if (gen_.restarting() || gen_.verdict() || gen_.leader_lost) return a;
  gen_.leader_lost = true;
  if (gen_.own) return gen_.done() ? AfterOwnFailureDone() : a;
  if (gen_.peer || gen_.report_pending) return a;
  a.stop_workers = 0;
  if (CanRestart(FailureClass::kInfra)) {
    gen_.decision = Generation::Decision::kRestart;
    a.log = "lost the leader: " + l.why + "; stopping the workers, then rejoining (restart " +
            std::to_string(restarts_ + 1) + " of " + std::to_string(config_.max_restarts) + ")";
    if (gen_.done()) return Restart(std::move(a));  // a spare: no workers to stop
    return a;
  }
  gen_.peer = "lost the leader: " + l.why;
  a.log = *gen_.peer + "; stopping the workers";
  if (gen_.done()) return ConcludeNow(std::move(a));
  return a;
}

GangActions MemberPolicy::OnWorkersDone(const gang::WorkersDone& d) {
  if (auto a = OnWorkersDoneCommon(d)) return *a;
  if (gen_.verdict() || gen_.peer) return ConcludeNow();
  if (gen_.own) return AfterOwnFailureDone();
  if (gen_.success && !stop_signal_) {
    // Tell the leader before leaving, so our exit is not read as a loss.
    gen_.report_pending = true;
    GangActions a;
    a.report = rendezvous::wire::Report{.index = config_.index, .ok = true, .reason = ""};
    return a;
  }
  return ConcludeNow();
}

GangActions MemberPolicy::On(const GangEvent& e) {
  if (auto common = OnCommon(e)) return *common;
  if (const auto* s = std::get_if<gang::Stop>(&e)) return OnStop(s->stop);
  if (const auto* l = std::get_if<gang::Lost>(&e)) return OnLost(*l);
  if (const auto* d = std::get_if<gang::WorkersDone>(&e)) return OnWorkersDone(*d);
  const bool failure_known = gen_.own || gen_.peer || gen_.restarting() || gen_.verdict();
  if (const auto* f = std::get_if<gang::LocalFailure>(&e)) {
    if (failure_known || gen_.done()) return {};
    return OwnFailure(*f);
  }
  if (const auto* s = std::get_if<gang::OwnStall>(&e)) {
    if (failure_known || gen_.done()) return {};
    gen_.own_stall = true;
    return OwnFailure({FailureClass::kInfra, s->why, false});
  }
  if (const auto* s = std::get_if<gang::StopSignal>(&e)) {
    if (!stop_signal_) stop_signal_ = s->signo;
    if (gen_.done()) {
      // Waiting for the verdict or for the success report to be written.
      return Conclude({}, {.kind = Kind::kTerminated,
                           .failure_class = FailureClass::kTerminated,
                           .stop_signal = s->signo});
    }
    if (failure_known) return {};
    gen_.terminated_first = true;
    return OwnFailure({FailureClass::kTerminated, "stopped by " + exitcodes::SignalName(s->signo),
                       false});
  }
  if (std::holds_alternative<gang::ReportSent>(e)) {
    if (!gen_.report_pending) return {};
    return ConcludeNow();
  }
  if (std::holds_alternative<gang::Timer>(e)) {
    if (!gen_.done() || !gen_.own || gen_.verdict()) return {};
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

const GangPolicyBase& GangPolicy::role() const {
  return std::visit([](const auto& r) -> const GangPolicyBase& { return r; }, role_);
}

}  // namespace trainlet::agent
