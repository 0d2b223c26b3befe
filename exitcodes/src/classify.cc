#include "trainlet/exitcodes/classify.h"

#include <csignal>

#include "trainlet/exitcodes/termination.h"

namespace trainlet::exitcodes {

MarkerTable MarkerTable::Defaults() {
  MarkerTable t;
  const FailureClass hw = FailureClass::kHardware, infra = FailureClass::kInfra,
                     bug = FailureClass::kBug;
  // What trainlet::Session::ReportError writes (session/include/trainlet/session.h):
  // the trainer said which class its failure is.
  t.markers_.push_back({hw, "[trainlet:hardware]"});
  t.markers_.push_back({infra, "[trainlet:infra]"});
  t.markers_.push_back({bug, "[trainlet:bug]"});
  t.markers_.push_back({FailureClass::kOom, "[trainlet:oom]"});
  // GPU and driver faults (CUDA runtime error strings, NVRM Xid reports).
  for (const char* s : {"uncorrectable ECC error", "CUDA_ERROR_ECC_UNCORRECTABLE",
                        "fallen off the bus", "fell off the bus", "Xid", "CUDA_ERROR_LAUNCH_FAILED",
                        "unspecified launch failure", "device(s) is/are busy or unavailable",
                        "CUDA error: an illegal memory access was encountered",
                        "CUDA driver version is insufficient", "NVML_ERROR_GPU_IS_LOST"}) {
    t.markers_.push_back({hw, s});
  }
  // Collective and network faults: retriable.
  for (const char* s : {"ncclRemoteError", "ncclSystemError", "NCCL WARN NET/",
                        "remote process exited or there was a network error",
                        "Connection reset by peer", "Connection refused", "No route to host",
                        "Socket Timeout", "Watchdog caught collective operation timeout",
                        "DistNetworkError", "DistStoreError"}) {
    t.markers_.push_back({infra, s});
  }
  // Deterministic Python errors: the same code fails the same way again.
  for (const char* s : {"ModuleNotFoundError", "ImportError", "SyntaxError", "IndentationError",
                        "NameError: name"}) {
    t.markers_.push_back({bug, s});
  }
  return t;
}

Status MarkerTable::Add(const std::vector<std::string>& specs) {
  std::vector<Marker> added;
  for (const std::string& s : specs) {
    auto eq = s.find('=');
    if (eq == std::string::npos || eq + 1 == s.size()) {
      return Status::Config("--marker '" + s + "' is not CLASS=TEXT (e.g. hardware=Xid 79)");
    }
    auto cls = ExitCodeTable::ParseClass(s.substr(0, eq));
    if (!cls.ok()) return Status::Config("--marker '" + s + "': " + cls.status().message());
    if (*cls != FailureClass::kBug && *cls != FailureClass::kInfra &&
        *cls != FailureClass::kHardware && *cls != FailureClass::kOom) {
      return Status::Config("--marker '" + s + "': markers can only say bug, infra, hardware "
                            "or oom");
    }
    added.push_back({*cls, s.substr(eq + 1)});
  }
  markers_.insert(markers_.begin(), added.begin(), added.end());
  return Status::Ok();
}

std::optional<Marker> MarkerTable::Match(const std::string& text) const {
  for (const Marker& m : markers_) {
    if (text.find(m.text) != std::string::npos) return m;
  }
  return std::nullopt;
}

namespace {

Verdict Make(FailureClass c, int code, std::string reason, std::string evidence) {
  return Verdict{c, code, std::move(reason), std::move(evidence)};
}

// The first non-blank line of an error file's message, at most kErrorFileExcerpt
// bytes (cut before a UTF-8 continuation byte, with "..." where it was cut).
std::string Excerpt(const std::string& message) {
  std::size_t begin = message.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  std::size_t end = message.find_first_of("\r\n", begin);
  std::string line = message.substr(begin, end == std::string::npos ? end : end - begin);
  while (!line.empty() && (line.back() == ' ' || line.back() == '\t')) line.pop_back();
  if (line.size() <= kErrorFileExcerpt) return line;
  return Utf8Head(line, kErrorFileExcerpt) + "...";
}

}  // namespace

Verdict Classify(const Evidence& e, const ExitCodeTable& codes, const MarkerTable& markers) {
  if (e.agent_failure && !e.agent_failure->ok()) {
    FailureClass c = e.agent_failure->failure_class();
    return Make(c, codes.CodeFor(c), e.agent_failure->message(), "phase");
  }
  if (e.peer_failure) {
    return Make(FailureClass::kPeerFailed, codes.CodeFor(FailureClass::kPeerFailed),
                *e.peer_failure, "gang");
  }
  if (e.hang) {
    return Make(FailureClass::kInfra, codes.CodeFor(FailureClass::kInfra), "hang: " + *e.hang,
                "hang");
  }
  if (e.first_failure) {
    const WorkerFailure& f = e.first_failure.value();
    std::string who = "local rank " + std::to_string(f.local_rank) + " (rank " +
                      std::to_string(f.rank) + ") " +
                      (f.exit.signaled ? "died of " + f.exit.Describe()
                                       : "exited with code " + std::to_string(f.exit.exit_status));
    if (e.collateral > 0) {
      who += "; " + std::to_string(e.collateral) + " worker(s) stopped by trainlet afterwards";
    }
    // The kernel's OOM killer sends SIGKILL; a rising counter says it was it
    // (and not, say, the kubelet or a user) — kubernetes/kubernetes#78973. Its
    // victim need not be the worker itself: when it is one of the worker's
    // processes (a DataLoader worker: "DataLoader worker (pid N) is killed by
    // signal: Killed.", pytorch/pytorch#8976), the trainer then exits 1.
    if (e.oom_kills > 0) {
      return Make(FailureClass::kOom, codes.CodeFor(FailureClass::kOom),
                  who + (f.exit.signaled && f.exit.signal == SIGKILL
                             ? " and the memory cgroup counted "
                             : " after the memory cgroup counted ") +
                      std::to_string(e.oom_kills) + " OOM kill(s)",
                  "oom");
    }
    // NVML saw the GPU fail (ECC, Xid, a recovery action): the crash is the
    // hardware's, however the trainer reported it (microsoft/pai#4314).
    if (e.gpu_fault) {
      return Make(FailureClass::kHardware, codes.CodeFor(FailureClass::kHardware),
                  who + "; GPU fault: " + *e.gpu_fault, "gpu-health");
    }
    if (!f.error_file_message.empty()) {
      if (auto m = markers.Match(f.error_file_message)) {
        return Make(m->failure_class, codes.CodeFor(m->failure_class),
                    who + "; its error file says '" + m->text + "'", "error-file");
      }
      // No class in it, but what the trainer said it died of belongs in the summary.
      if (std::string line = Excerpt(f.error_file_message); !line.empty()) {
        who += "; its error file says: " + line;
      }
    }
    if (auto m = markers.Match(f.stderr_tail)) {
      return Make(m->failure_class, codes.CodeFor(m->failure_class),
                  who + "; its stderr says '" + m->text + "'", "marker");
    }
    if (!f.exit.signaled && codes.IsFatalWorkerCode(f.exit.exit_status)) {
      return Make(FailureClass::kBug, codes.CodeFor(FailureClass::kBug),
                  who + " (a --fatal-exit-codes code: software defect)", "exit-code");
    }
    return Make(FailureClass::kWorker, f.exit.code(), who, "exit-code");
  }
  if (e.stop_signal) {
    return Make(FailureClass::kTerminated, codes.CodeFor(FailureClass::kTerminated),
                "stopped by " + SignalName(*e.stop_signal) + " (preemption, eviction or deletion)",
                "phase");
  }
  return Make(FailureClass::kOk, 0, "every worker finished", "exit-code");
}

std::string VerdictWarning(const Evidence& e, const Verdict& v) {
  if (v.failure_class != FailureClass::kOk || e.oom_kills == 0) return "";
  return "every worker finished, but the memory cgroup counted " + std::to_string(e.oom_kills) +
         " OOM kill(s) while they ran (a process of theirs was killed for memory)";
}

}  // namespace trainlet::exitcodes
