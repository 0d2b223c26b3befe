#include "trainlet/agent/supervision_policy.h"

#include <csignal>

namespace trainlet::agent {

SupervisionPolicy::SupervisionPolicy(int workers, std::string noun,
                                     std::optional<int> collateral_code)
    : noun_(std::move(noun)),
      collateral_code_(collateral_code),
      alive_(workers),
      exited_(workers, false) {}

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
  phase_ = Phase::kStopping;
  Actions a;
  a.terminate = signo;
  a.terminate_others = SIGTERM;
  a.start_grace_timer = true;
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

Actions SupervisionPolicy::On(const Event& e) {
  if (phase_ == Phase::kDone) return {};
  if (const auto* w = std::get_if<event::WorkerExited>(&e)) {
    if (w->local_rank < 0 || w->local_rank >= static_cast<int>(exited_.size()) ||
        exited_[w->local_rank]) {
      return {};
    }
    exited_[w->local_rank] = true;
    --alive_;
    if (phase_ == Phase::kRunning) {
      if (collateral_code_ && !w->exit.signaled && w->exit.exit_status == *collateral_code_) {
        if (!collateral_failure_) collateral_failure_ = FirstFailure{w->local_rank, w->exit};
        return alive_ == 0 ? BeginStop(SIGTERM, "") : Actions{};
      }
      if (!w->exit.success()) {
        first_failure_ = FirstFailure{w->local_rank, w->exit};
        return BeginStop(SIGTERM, noun_ + " " + std::to_string(w->local_rank) + " failed (" +
                                      w->exit.Describe() + "); stopping the others");
      }
      if (alive_ == 0) {
        // Every worker finished: leftovers (background helpers, orphans) get
        // TERM and the grace period before KILL.
        return BeginStop(SIGTERM, "");
      }
      return {};
    }
    if (!w->exit.success()) ++collateral_;
    return {};
  }
  if (const auto* s = std::get_if<event::Signal>(&e)) {
    if (!IsForwarded(s->signo)) return {};
    if (IsStopSignal(s->signo)) {
      if (phase_ != Phase::kRunning || alive_ == 0) {
        // Already stopping: the workers have their SIGTERM and the grace period
        // runs on. A second one could cut a checkpointing handler short.
        return {};
      }
      stop_signal_ = s->signo;
      return BeginStop(s->signo, "received " + exitcodes::SignalName(s->signo) +
                                     "; stopping the workers (grace period running)");
    }
    Actions a;
    a.forward_signal = s->signo;
    return a;
  }
  if (std::holds_alternative<event::PeerStop>(e)) {
    if (phase_ != Phase::kRunning || peer_stop_ || stop_signal_ || first_failure_) return {};
    peer_stop_ = true;
    return BeginStop(SIGTERM, "another pod of the gang failed; stopping the workers");
  }
  if (std::holds_alternative<event::GraceExpired>(e)) {
    if (phase_ != Phase::kStopping) return {};
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
