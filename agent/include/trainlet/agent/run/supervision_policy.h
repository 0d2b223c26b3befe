// trainlet/agent/run/supervision_policy.h — what the supervisor decides, as a pure
// state machine: (state, event) -> actions. No syscalls, no clocks: the
// Supervisor feeds it events (a worker exited, a signal arrived, the grace
// period ended, no children are left) and carries out the actions it returns.
// Not thread-safe; owned by the one event loop.
//
// The rules (README, "Grace period"):
//  - TERM and INT start a shutdown, in two steps (--signal-scope main, the
//    default): that signal (once) to each live worker's main process (the
//    process trainlet spawned, as the kubelet signals a container's first
//    process), then SIGTERM (once) to every other process of the pod (the
//    workers' process groups: DataLoader workers, checkpoint writers; helpers
//    in their own session; adopted orphans, daemons) once every worker's main
//    process has exited, or at the latest StopReserve(grace) before the grace
//    period ends; at its end SIGKILL to whatever remains. trainlet exits as
//    soon as no child is left. Helpers are not told first because a trainer
//    that saves on SIGTERM needs them: torch's DataLoader worker exits quietly
//    on a SIGTERM only when its own parent sent it (handler_SIGTERM in
//    torch/csrc/DataLoader.cpp); any other SIGTERM kills it, and its parent's
//    SIGCHLD handler (torch/utils/data/_utils/signal_handling.py) raises
//    "DataLoader worker ... is killed by signal" before the checkpoint is
//    written. With --signal-scope group (torchrun 2.x's killpg of each
//    worker's session, torch/distributed/elastic/multiprocessing/
//    subprocess_handler/subprocess_handler.py), the stop signal goes to every
//    worker's group and SIGTERM to every other process at once. Once stopping
//    (for any reason), further TERM/INT are not passed on and do not shorten
//    the grace period.
//  - HUP, QUIT, USR1, USR2 and WINCH are forwarded to each worker's main
//    process (its group with --signal-scope group: the default action of
//    USR1/USR2/HUP/QUIT ends a DataLoader worker) and change nothing else.
//  - The first worker to fail stops the others the same way; workers stopped by
//    trainlet afterwards never decide the outcome ("first failure wins").
//  - When every worker has exited, leftover descendants get TERM, then KILL
//    after the grace period; trainlet exits once no child is left.
//  - PeerStop (another pod failed, a restart, a hang) stops the workers like
//    SIGTERM does; a stop signal after it changes nothing (the peer's failure
//    came first).
//  - Exit code: the first failure's code (exit status or 128+signal); else
//    128+signal for a requested stop (143 for SIGTERM), even when every worker
//    then exited 0; else 0.
#pragma once

#include <chrono>
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
// StopReserve(grace) before the grace period ends: the helpers' turn even
// while a main process still runs.
struct ReserveReached {};
struct NoChildrenLeft {};  // waitpid reported ECHILD and all output is drained
struct PeerStop {};        // another pod of the gang failed: stop like for SIGTERM
}  // namespace event
using Event = std::variant<event::WorkerExited, event::Signal, event::GraceExpired,
                           event::ReserveReached, event::NoChildrenLeft, event::PeerStop>;

// Whom the workers' signals reach (--signal-scope, TRAINLET_SIGNAL_SCOPE).
enum class SignalScope {
  kMain,   // each worker's main process; the rest of the pod after it (default)
  kGroup,  // each worker's process group, and the rest of the pod at once (torchrun 2.x)
};

// The helpers' share of a stop: at most kMaxStopReserve, and a fifth of
// shorter grace periods, so the main processes keep at least 80% of it.
inline constexpr std::chrono::milliseconds kMaxStopReserve{5000};  // ms; a DataLoader worker polls its parent every 5 s (MP_STATUS_CHECK_INTERVAL, torch/utils/data/_utils/__init__.py) and ends on its own within it; a writer flushes and exits well inside it

struct Actions {
  std::optional<int> forward_signal;  // send to every live worker (see whole_groups)
  // Start a stop: send this signal to every live worker (see whole_groups).
  // SIGTERM for a failure or leftovers; the received signal itself for a
  // requested stop (so SIGINT stays SIGINT for the trainers).
  std::optional<int> terminate;
  // forward_signal and terminate reach each live worker's whole process group
  // (--signal-scope group), not only its main process.
  bool whole_groups = false;
  // The signal for every other process of the pod: all but the live workers'
  // main processes (and, with whole_groups, their groups), which already got
  // `terminate`. SIGTERM, the request to end that needs no terminal
  // (background jobs of a shell ignore SIGINT, POSIX sh "Signals").
  std::optional<int> terminate_others;
  bool start_grace_timer = false;     // arm (or keep) the grace timer
  bool start_reserve_timer = false;   // arm a timer for ReserveReached (grace - StopReserve)
  bool kill_all = false;              // SIGKILL to every group and every descendant
  std::optional<int> exit_code;       // trainlet should exit now with this code
  std::string log;                    // one line worth logging at info, or ""
  bool operator==(const Actions&) const = default;
};

enum class Phase {
  kRunning,       // workers running, nothing requested
  kStoppingMain,  // the stop signal sent to the main processes only; grace running
  kStopping,      // TERM sent to every process (failure, request, or leftovers after success); grace running
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
                             std::optional<int> collateral_code = std::nullopt,
                             SignalScope scope = SignalScope::kMain);

  // Applies one event and returns what to do. Events after kDone return {}.
  Actions On(const Event& e);

  Phase phase() const { return phase_; }
  const std::optional<FirstFailure>& first_failure() const { return first_failure_; }
  std::optional<int> stop_signal() const { return stop_signal_; }
  bool peer_stop() const { return peer_stop_; }
  int workers_alive() const { return alive_; }
  int collateral() const { return collateral_; }  // workers that failed after the stop

  // How long before the end of a `grace` period the rest of the pod gets
  // SIGTERM when a main process still runs: min(kMaxStopReserve, grace / 5).
  static std::chrono::milliseconds StopReserve(std::chrono::milliseconds grace);
  // True for signals that start a shutdown (TERM, INT).
  static bool IsStopSignal(int signo);
  // True for signals forwarded to workers (TERM, INT, HUP, QUIT, USR1, USR2, WINCH).
  static bool IsForwarded(int signo);

 private:
  Actions BeginStop(int signo, std::string why);
  Actions OnWorkerExited(const event::WorkerExited& w);
  Actions OnSignal(int signo);
  // kStoppingMain -> kStopping: SIGTERM to the rest of the pod.
  Actions StopOthers(std::string why);
  int ExitCode() const;

  Phase phase_ = Phase::kRunning;
  std::string noun_;
  std::optional<int> collateral_code_;
  SignalScope scope_;
  std::optional<FirstFailure> collateral_failure_;
  int alive_;
  std::vector<bool> exited_;
  std::optional<FirstFailure> first_failure_;
  std::optional<int> stop_signal_;
  bool peer_stop_ = false;
  int collateral_ = 0;
};

}  // namespace trainlet::agent
