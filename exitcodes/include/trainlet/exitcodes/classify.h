// trainlet/exitcodes/classify.h — from everything observed to one verdict.
//
// One pure function decides the class, the exit code and the reason of a pod's
// outcome. Evidence, strongest first (README, "Exit codes"):
//   1. trainlet's own phase: a config, DNS or rendezvous failure, or a stop
//      requested before any worker failed (TERMINATED); then the gang: another
//      pod failed first (PEER_FAILED) — "who failed first" beats any message
//      parsing (a peer's crash surfaces as NCCL errors on the survivors);
//   2. the memory cgroup's OOM-kill counter rising before the first worker
//      failed, however it failed (OOM): the killer's victim may be the worker
//      itself (SIGKILL) or one of its processes, e.g. a PyTorch DataLoader
//      worker, after which the trainer exits 1; then NVML's GPU-fault evidence
//      (HARDWARE);
//   3. the torchelastic error file the worker wrote (TORCHELASTIC_ERROR_FILE);
//      a message no marker matches is quoted in the reason (kErrorFileExcerpt);
//   4. markers in the last lines of the worker's stderr (MarkerTable);
//   5. the worker's exit code: one of --fatal-exit-codes is BUG, anything else
//      passes through as the worker's own code (or 128+signal).
// The first failure wins: only the worker that failed first, before any stop,
// is classified; workers trainlet stopped afterwards never are. No I/O, no
// globals; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainlet/exitcodes/contract.h"
#include "trainlet/exitcodes/exit_code.h"
#include "trainlet/exitcodes/status.h"

namespace trainlet::exitcodes {

// A substring that, found in a worker's error output, says what kind of failure
// it was. Matching is case-sensitive and plain (no regex), on purpose: cheap,
// predictable, and easy to extend with --marker CLASS=TEXT.
struct Marker {
  FailureClass failure_class;
  std::string text;
};

class MarkerTable {
 public:
  // The documented defaults: CUDA/driver faults -> hardware, NCCL and network
  // faults -> infra, Python import/syntax errors -> bug.
  static MarkerTable Defaults();
  // Adds "CLASS=TEXT" entries, checked before the defaults. Errors (config): no
  // '=', an unknown class, empty text, a class that is not bug/infra/hardware/oom.
  [[nodiscard]] Status Add(const std::vector<std::string>& specs);
  // The first marker found in `text`, searching the user's markers first.
  std::optional<Marker> Match(const std::string& text) const;
  const std::vector<Marker>& markers() const { return markers_; }

 private:
  std::vector<Marker> markers_;
};

// What we know about the worker that failed first.
struct WorkerFailure {
  int local_rank = 0;
  int rank = 0;                      // global rank
  WorkerExit exit{};
  std::string error_file_message{};  // the "message" of its torchelastic error file, if any
  std::string stderr_tail{};         // the last bytes it wrote to stderr
};

struct Evidence {
  // trainlet's own failure (config, infra from DNS/rendezvous, terminated before
  // the workers started), if it never got as far as running workers.
  std::optional<Status> agent_failure = std::nullopt;
  // The first worker to fail before any stop was requested.
  std::optional<WorkerFailure> first_failure = std::nullopt;
  // The signal (SIGTERM, SIGINT) that requested a stop before any failure.
  std::optional<int> stop_signal = std::nullopt;
  // OOM kills the memory cgroup counted while the workers ran (up to the first
  // failure, when there is one).
  std::uint64_t oom_kills = 0;
  // Workers that failed after trainlet started stopping them.
  int collateral = 0;
  // The gang's control channel says another pod failed first (or the leader was
  // lost): this pod is collateral, whatever its own workers then did.
  std::optional<std::string> peer_failure = std::nullopt;
  // trainlet found a worker making no progress and stopped the workers.
  std::optional<std::string> hang = std::nullopt;
  // NVML's evidence of a GPU fault found after the first failure (gpu/health.h
  // HardwareEvidence: uncorrected ECC, Xid, a recovery action...): the failure
  // is HARDWARE whatever the worker's code or stderr said (microsoft/pai#4314).
  std::optional<std::string> gpu_fault = std::nullopt;
};

struct Verdict {
  FailureClass failure_class = FailureClass::kOk;
  int code = 0;
  std::string reason;  // one line, e.g. "local rank 1 (rank 3) exited 42"
  std::string evidence;  // which evidence decided: "phase", "oom", "error-file", "marker", "exit-code"
};

// The bytes of an error file's message that a reason quotes when no marker
// matched it (its first non-blank line, cut to this many bytes).
inline constexpr std::size_t kErrorFileExcerpt = 200;

Verdict Classify(const Evidence& e, const ExitCodeTable& codes, const MarkerTable& markers);

// One line worth a warning beside the verdict `v` of `e`, or "": a run that
// succeeded although the memory cgroup counted OOM kills (some process of the
// workers was killed for memory, and the trainer coped).
std::string VerdictWarning(const Evidence& e, const Verdict& v);

}  // namespace trainlet::exitcodes
