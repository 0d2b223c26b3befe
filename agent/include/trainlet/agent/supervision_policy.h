// trainlet/agent/supervision_policy.h — what the supervisor decides, as a pure
// state machine: (state, event) -> actions. No syscalls, no clocks: the
// Supervisor feeds it events (a worker exited, a signal arrived, the grace
// period ended, no children are left) and carries out the actions it returns.
// Not thread-safe; owned by the one event loop.
//
// The rules (README, "Supervision"):
//  - TERM and INT start a shutdown: send that signal (once) to every worker's
//    process group and SIGTERM (once) to every other process of the pod
//    (helpers in their own session or group, adopted orphans, daemons), wait
//    the grace period, then SIGKILL whatever remains. trainlet exits as soon
//    as no child is left. Once stopping (for any reason), further TERM/INT are
//    not passed on and do not shorten the grace period.
//  - HUP, QUIT, USR1, USR2 and WINCH are forwarded and change nothing else.
//  - The first worker to fail stops the others the same way; workers stopped by
//    trainlet afterwards never decide the outcome ("first failure wins").
//  - When every worker has exited, leftover descendants get TERM, then KILL
//    after the grace period; trainlet exits once no child is left.
//  - PeerStop (another pod failed) stops the workers like SIGTERM does; a stop
//    signal after it changes nothing (the peer's failure came first).
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
struct PeerStop {};        // another pod of the gang failed: stop like for SIGTERM
}  // namespace event
using Event = std::variant<event::WorkerExited, event::Signal, event::GraceExpired,
                           event::NoChildrenLeft, event::PeerStop>;

struct Actions {
  std::optional<int> forward_signal;  // send to every worker's process group
  // Start a stop: send this signal to every worker's group. SIGTERM for a
  // failure or leftovers; the received signal itself for a requested stop (so
  // SIGINT stays SIGINT for the trainers).
  std::optional<int> terminate;
  // With `terminate`: the signal for every other process of the pod (outside
  // the live workers' groups): SIGTERM, the request to end that needs no
  // terminal (background jobs of a shell ignore SIGINT, POSIX sh "Signals").
  std::optional<int> terminate_others;
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
  // `noun` names a child in log lines ("local rank", "pod agent"). A child
  // exiting with `collateral_code` (trainlet local: an agent's peer_failed) is
  // never the first failure: the culprit's own exit decides; it is used only
  // when no other failure happened.
  explicit SupervisionPolicy(int workers, std::string noun = "local rank",
                             std::optional<int> collateral_code = std::nullopt);

  // Applies one event and returns what to do. Events after kDone return {}.
  Actions On(const Event& e);

  Phase phase() const { return phase_; }
  const std::optional<FirstFailure>& first_failure() const { return first_failure_; }
  std::optional<int> stop_signal() const { return stop_signal_; }
  bool peer_stop() const { return peer_stop_; }
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
  std::string noun_;
  std::optional<int> collateral_code_;
  std::optional<FirstFailure> collateral_failure_;
  int alive_;
  std::vector<bool> exited_;
  std::optional<FirstFailure> first_failure_;
  std::optional<int> stop_signal_;
  bool peer_stop_ = false;
  int collateral_ = 0;
};

}  // namespace trainlet::agent
