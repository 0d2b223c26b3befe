// trainlet/exitcodes/exit_code.h — the exit-code contract and worker wait statuses.
//
// Kubernetes decides what to do with a failed pod from its container's exit code
// (Job `podFailurePolicy.rules[].onExitCodes`, see
// https://kubernetes.io/docs/concepts/workloads/controllers/job/#pod-failure-policy).
// This header is the only place that turns a FailureClass into a number. Pure
// functions, no I/O, callable from any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "trainlet/exitcodes/status.h"

namespace trainlet::exitcodes {

// Default codes. 75 and 78 are sysexits.h's EX_TEMPFAIL and EX_CONFIG; 143 is
// 128+SIGTERM, what a shell reports for a process stopped by SIGTERM.
inline constexpr int kExitOk = 0;
inline constexpr int kExitBug = 42;
inline constexpr int kExitHardware = 74;
inline constexpr int kExitInfra = 75;
inline constexpr int kExitPeerFailed = 76;
inline constexpr int kExitOom = 77;
inline constexpr int kExitConfig = 78;
inline constexpr int kExitTerminated = 143;

// The exit code of a class. kWorker has no fixed code (the worker's own is used)
// and returns 1 here; callers with a worker status use WorkerExit::code.
int DefaultExitCode(FailureClass c);

// One row of the contract table, for `trainlet exit-codes` and the README.
struct ContractRow {
  FailureClass failure_class;
  int code;  // -1 for kWorker ("the worker's code, or 128+signal")
  std::string_view meaning;
};
const std::vector<ContractRow>& ContractTable();

// How a worker process ended, from a waitpid(2) status.
struct WorkerExit {
  bool signaled = false;  // killed by a signal (WIFSIGNALED)
  int exit_status = 0;    // WEXITSTATUS when !signaled
  int signal = 0;         // WTERMSIG when signaled

  static WorkerExit FromWaitStatus(int wait_status);
  bool success() const { return !signaled && exit_status == 0; }
  // The shell convention: the exit status, or 128 + signal number.
  int code() const { return signaled ? 128 + signal : exit_status; }
  // "exit 3" or "signal SIGSEGV (11)".
  std::string Describe() const;
};

// "SIGSEGV" for 11; "SIG<n>" for numbers without a name.
std::string SignalName(int signo);

}  // namespace trainlet::exitcodes
