#include "trainlet/exitcodes/exit_code.h"

#include <string.h>
#include <sys/wait.h>

#include <csignal>

namespace trainlet::exitcodes {

int DefaultExitCode(FailureClass c) {
  switch (c) {
    case FailureClass::kOk: return kExitOk;
    case FailureClass::kBug: return kExitBug;
    case FailureClass::kConfig: return kExitConfig;
    case FailureClass::kInfra: return kExitInfra;
    case FailureClass::kHardware: return kExitHardware;
    case FailureClass::kPeerFailed: return kExitPeerFailed;
    case FailureClass::kOom: return kExitOom;
    case FailureClass::kTerminated: return kExitTerminated;
    case FailureClass::kWorker: return 1;
  }
  return 1;
}

const std::vector<ContractRow>& ContractTable() {
  // The README's table says the same, word for word (cli_test checks it).
  static const std::vector<ContractRow> table = {
      {FailureClass::kOk, kExitOk,
       "every local worker exited 0 and no stop was requested"},
      {FailureClass::kBug, kExitBug,
       "software defect: a worker exited with a code in --fatal-exit-codes (default 42), or the exception that ended it says so (ModuleNotFoundError, ImportError, SyntaxError, ...): retrying cannot help"},
      {FailureClass::kConfig, kExitConfig,
       "trainlet's own input is invalid (env, flags, command not found or not executable), or "
       "the pod spec is too small for the job (shared memory ran out in /dev/shm): retrying "
       "cannot help"},
      {FailureClass::kInfra, kExitInfra,
       "retriable infrastructure fault: DNS, leader unreachable, rendezvous timeout, NCCL/network "
       "errors, a runtime resource running short (pids.max, RLIMIT_NOFILE, memory)"},
      {FailureClass::kHardware, kExitHardware,
       "GPU or driver fault (uncorrectable ECC, fallen off the bus, an Xid that NVIDIA's catalogue "
       "puts on the GPU, ...)"},
      {FailureClass::kPeerFailed, kExitPeerFailed,
       "this pod was healthy and stopped because another pod of the gang failed first (or the leader was lost)"},
      {FailureClass::kOom, kExitOom,
       "the first worker failed (killed, or exiting on its own) after the memory cgroup counted an OOM kill"},
      {FailureClass::kTerminated, kExitTerminated,
       "trainlet received SIGTERM or SIGINT (preemption, eviction, deletion; in an elastic gang or one with spares a graceful leave: the others go on without it) before any failure; trainlet local exits 128+signal (130 on Ctrl-C), as a shell does"},
      {FailureClass::kWorker, -1,
       "any other worker failure: the first failing worker's exit code, or 128+signal"},
  };
  return table;
}

WorkerExit WorkerExit::FromWaitStatus(int wait_status) {
  WorkerExit e;
  if (WIFSIGNALED(wait_status)) {
    e.signaled = true;
    e.signal = WTERMSIG(wait_status);
  } else if (WIFEXITED(wait_status)) {
    e.exit_status = WEXITSTATUS(wait_status);
  }
  return e;
}

std::string WorkerExit::Describe() const {
  if (!signaled) return "exit " + std::to_string(exit_status);
  return "signal " + SignalName(signal) + " (" + std::to_string(signal) + ")";
}

namespace {

// sigabbrev_np (glibc >= 2.32) gives "SEGV" for 11, without the "SIG" prefix.
// The portable release build targets an older glibc (scripts/package): the
// same names from the signal macros, which differ by architecture.
const char* SignalAbbrev(int signo) {
#if __GLIBC_PREREQ(2, 32)
  return sigabbrev_np(signo);
#else
  switch (signo) {
#define TRAINLET_SIG(n) \
  case SIG##n:          \
    return #n;
    TRAINLET_SIG(HUP) TRAINLET_SIG(INT) TRAINLET_SIG(QUIT) TRAINLET_SIG(ILL) TRAINLET_SIG(TRAP)
    TRAINLET_SIG(ABRT) TRAINLET_SIG(BUS) TRAINLET_SIG(FPE) TRAINLET_SIG(KILL) TRAINLET_SIG(USR1)
    TRAINLET_SIG(SEGV) TRAINLET_SIG(USR2) TRAINLET_SIG(PIPE) TRAINLET_SIG(ALRM) TRAINLET_SIG(TERM)
    TRAINLET_SIG(STKFLT) TRAINLET_SIG(CHLD) TRAINLET_SIG(CONT) TRAINLET_SIG(STOP) TRAINLET_SIG(TSTP)
    TRAINLET_SIG(TTIN) TRAINLET_SIG(TTOU) TRAINLET_SIG(URG) TRAINLET_SIG(XCPU) TRAINLET_SIG(XFSZ)
    TRAINLET_SIG(VTALRM) TRAINLET_SIG(PROF) TRAINLET_SIG(WINCH) TRAINLET_SIG(IO) TRAINLET_SIG(PWR)
    TRAINLET_SIG(SYS)
#undef TRAINLET_SIG
    default:
      return nullptr;
  }
#endif
}

}  // namespace

std::string SignalName(int signo) {
  const char* abbrev = SignalAbbrev(signo);
  if (abbrev == nullptr) return "SIG" + std::to_string(signo);
  return std::string("SIG") + abbrev;
}

}  // namespace trainlet::exitcodes
