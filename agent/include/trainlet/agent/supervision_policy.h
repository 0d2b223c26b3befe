// trainlet/agent/supervision_policy.h — what the supervisor decides, as a pure
// state machine: (state, event) -> actions. No syscalls, no clocks: the
// Supervisor feeds it events (a worker exited, a signal arrived, the grace
// period ended, no children are left) and carries out the actions it returns.
// Not thread-safe; owned by the one event loop.
//
// The rules (README, "Supervision"):
//  - TERM and INT start a shutdown: send that signal (once) to every worker's
//    process group and adopted child, wait the grace period, then SIGKILL
//    whatever remains (adopted orphans too).
//  - HUP, QUIT, USR1, USR2 and WINCH are forwarded and change nothing else.
//  - The first worker to fail stops the others the same way; workers stopped by
//    trainlet afterwards never decide the outcome ("first failure wins").
//  - When every worker has exited, leftover descendants get TERM, then KILL
//    after the grace period; trainlet exits once no child is left.
//  - Exit code: the first failure's code (exit status or 128+signal); else
//    128+signal for a requested stop (143 for SIGTERM), even when every worker
//    then exited 0; else 0.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "trainlet/exitcodes/exit_code.h"

namespace trainlet::agent {

namespace event {
struct WorkerExited {
  int local_rank;
  exitcodes::WorkerExit exit;
};
struct Signal {
  int signo;
};
struct GraceExpired {};
struct NoChildrenLeft {};  // waitpid reported ECHILD and all output is drained
}  // namespace event
using Event = std::variant<event::WorkerExited, event::Signal, event::GraceExpired,
                           event::NoChildrenLeft>;

struct Actions {
  std::optional<int> forward_signal;  // send to every worker's process group
  // Start a stop: send this signal to every worker's group and to every child
  // trainlet adopted (orphans, daemons). SIGTERM for a failure or leftovers; the
  // received signal itself for a requested stop (so SIGINT stays SIGINT).
  std::optional<int> terminate;
  bool start_grace_timer = false;     // arm (or keep) the grace timer
  bool kill_all = false;              // SIGKILL to every group and every descendant
  std::optional<int> exit_code;       // trainlet should exit now with this code
  std::string log;                    // one line worth logging at info, or ""
  bool operator==(const Actions&) const = default;
};

enum class Phase {
  kRunning,   // workers running, nothing requested
  kStopping,  // TERM sent (failure, request, or leftovers after success); grace running
  kKilling,   // grace over, KILL sent; waiting for the last children
  kDone,      // exit decided
};

// Why the pod stopped, for the termination summary.
struct FirstFailure {
  int local_rank;
  exitcodes::WorkerExit exit;
};

class SupervisionPolicy {
 public:
  explicit SupervisionPolicy(int workers);

  // Applies one event and returns what to do. Events after kDone return {}.
  Actions On(const Event& e);

  Phase phase() const { return phase_; }
  const std::optional<FirstFailure>& first_failure() const { return first_failure_; }
  std::optional<int> stop_signal() const { return stop_signal_; }
  int workers_alive() const { return alive_; }
  int collateral() const { return collateral_; }  // workers that failed after the stop

  // True for signals that start a shutdown (TERM, INT).
  static bool IsStopSignal(int signo);
  // True for signals forwarded to workers (TERM, INT, HUP, QUIT, USR1, USR2, WINCH).
  static bool IsForwarded(int signo);

 private:
  Actions BeginStop(int signo, std::string why);
  int ExitCode() const;

  Phase phase_ = Phase::kRunning;
  int alive_;
  std::vector<bool> exited_;
  std::optional<FirstFailure> first_failure_;
  std::optional<int> stop_signal_;
  int collateral_ = 0;
};

}  // namespace trainlet::agent
