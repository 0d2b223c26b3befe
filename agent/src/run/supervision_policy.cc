#include "trainlet/agent/run/supervision_policy.h"

#include <algorithm>
#include <csignal>

namespace trainlet::agent {

SupervisionPolicy::SupervisionPolicy(int workers, std::string noun,
                                     std::optional<int> collateral_code, SignalScope scope)
    : noun_(std::move(noun)),
      collateral_code_(collateral_code),
      scope_(scope),
      alive_(workers),
      exited_(workers, false) {}

std::chrono::milliseconds SupervisionPolicy::StopReserve(std::chrono::milliseconds grace) {
  return std::min(kMaxStopReserve, grace / 5);
}

bool SupervisionPolicy::IsStopSignal(int signo) { return signo == SIGTERM || signo == SIGINT; }

bool SupervisionPolicy::IsForwarded(int signo) {
  switch (signo) {
    case SIGTERM: case SIGINT: case SIGHUP: case SIGQUIT:
    case SIGUSR1: case SIGUSR2: case SIGWINCH:
      return true;
    default:
      return false;
  }
}

Actions SupervisionPolicy::BeginStop(int signo, std::string why) {
  Actions a;
  a.terminate = signo;
  a.whole_groups = scope_ == SignalScope::kGroup;
  a.start_grace_timer = true;
  a.log = std::move(why);
  if (scope_ == SignalScope::kMain && alive_ > 0) {
    // The main processes first: the rest of the pod once they are gone, or
    // at the reserve (ReserveReached).
    phase_ = Phase::kStoppingMain;
    a.start_reserve_timer = true;
    return a;
  }
  phase_ = Phase::kStopping;
  a.terminate_others = SIGTERM;
  return a;
}

Actions SupervisionPolicy::StopOthers(std::string why) {
  phase_ = Phase::kStopping;
  Actions a;
  a.terminate_others = SIGTERM;
  a.log = std::move(why);
  return a;
}

int SupervisionPolicy::ExitCode() const {
  if (first_failure_) return first_failure_->exit.code();
  if (stop_signal_) return 128 + *stop_signal_;
  if (peer_stop_) return exitcodes::kExitPeerFailed;
  if (collateral_failure_) return collateral_failure_->exit.code();
  return 0;
}

Actions SupervisionPolicy::OnWorkerExited(const event::WorkerExited& w) {
  if (w.local_rank < 0 || w.local_rank >= static_cast<int>(exited_.size()) ||
      exited_[w.local_rank]) {
    return {};
  }
  exited_[w.local_rank] = true;
  --alive_;
  if (phase_ == Phase::kRunning) {
    if (collateral_code_ && !w.exit.signaled && w.exit.exit_status == *collateral_code_) {
      if (!collateral_failure_) collateral_failure_ = FirstFailure{w.local_rank, w.exit};
      return alive_ == 0 ? BeginStop(SIGTERM, "") : Actions{};
    }
    if (!w.exit.success()) {
      first_failure_ = FirstFailure{w.local_rank, w.exit};
      return BeginStop(SIGTERM, noun_ + " " + std::to_string(w.local_rank) + " failed (" +
                                    w.exit.Describe() + "); stopping the others");
    }
    // Every worker finished: leftovers (background helpers, orphans) get TERM
    // and the grace period before KILL.
    return alive_ == 0 ? BeginStop(SIGTERM, "") : Actions{};
  }
  if (!w.exit.success()) ++collateral_;
  if (phase_ == Phase::kStoppingMain && alive_ == 0) {
    return StopOthers("");  // the usual end of a stop: not worth a line at info
  }
  return {};
}

Actions SupervisionPolicy::OnSignal(int signo) {
  if (!IsForwarded(signo)) return {};
  if (IsStopSignal(signo)) {
    if (phase_ != Phase::kRunning || alive_ == 0) {
      // Already stopping: the workers have their signal and the grace period
      // runs on. A second one could cut a checkpointing handler short.
      return {};
    }
    stop_signal_ = signo;
    return BeginStop(signo, "received " + exitcodes::SignalName(signo) +
                                "; stopping the workers (grace period running)");
  }
  Actions a;
  a.forward_signal = signo;
  a.whole_groups = scope_ == SignalScope::kGroup;
  return a;
}

Actions SupervisionPolicy::On(const Event& e) {
  if (phase_ == Phase::kDone) return {};
  if (const auto* w = std::get_if<event::WorkerExited>(&e)) return OnWorkerExited(*w);
  if (const auto* s = std::get_if<event::Signal>(&e)) return OnSignal(s->signo);
  if (std::holds_alternative<event::PeerStop>(e)) {
    if (phase_ != Phase::kRunning || peer_stop_ || stop_signal_ || first_failure_) return {};
    peer_stop_ = true;
    return BeginStop(SIGTERM, "another pod of the gang failed; stopping the workers");
  }
  if (std::holds_alternative<event::ReserveReached>(e)) {
    if (phase_ != Phase::kStoppingMain) return {};
    return StopOthers(std::to_string(alive_) + " " + noun_ +
                      "(s) still running near the end of the grace period; SIGTERM to the "
                      "other processes of the pod");
  }
  if (std::holds_alternative<event::GraceExpired>(e)) {
    if (phase_ != Phase::kStopping && phase_ != Phase::kStoppingMain) return {};
    phase_ = Phase::kKilling;
    Actions a;
    a.kill_all = true;
    a.log = "grace period over; killing what remains";
    return a;
  }
  if (std::holds_alternative<event::NoChildrenLeft>(e)) {
    if (alive_ > 0 || phase_ == Phase::kRunning) return {};
    phase_ = Phase::kDone;
    Actions a;
    a.exit_code = ExitCode();
    return a;
  }
  return {};
}

}  // namespace trainlet::agent
