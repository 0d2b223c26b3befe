// trainlet/exitcodes/classify.h — from everything observed to one verdict.
//
// One pure function decides the class, the exit code and the reason of a pod's
// outcome. Evidence, strongest first (README, "How a failure is classified"):
//   1. trainlet's own phase: a config, DNS or rendezvous failure, or a stop
//      requested before any worker failed (TERMINATED); then the gang: another
//      pod failed first (PEER_FAILED) — "who failed first" beats any message
//      parsing (a peer's crash surfaces as NCCL errors on the survivors);
//      then a hang trainlet found (INFRA);
//   2. the first worker failure, by the numbered rules of WorkerFailureRules():
//      structured evidence first (the OOM counter, NVML, a --fatal-exit-codes
//      code, the torchelastic error file), then the failure's own text (the
//      exception that ended the worker, from its stderr: last_exception.h),
//      then the rest of the stream, read only for markers whose cause
//      persists and that are no verdict against the code, the pod spec or
//      the node. The classes need evidence in proportion to what they cost:
//      bug and config fail the Job at once and hardware pages an operator,
//      so none is decided by a line that is not the failure's own.
// The first failure wins: only the worker that failed first, before any stop,
// is classified; workers trainlet stopped afterwards never are. No I/O, no
// globals; thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trainlet/exitcodes/contract.h"
#include "trainlet/exitcodes/exit_code.h"
#include "trainlet/exitcodes/last_exception.h"
#include "trainlet/exitcodes/status.h"

namespace trainlet::exitcodes {

// What an occurrence of a marker means beyond its listed class.
enum class MarkerMeaning {
  kPlain,         // the listed class
  kXid,           // an NVIDIA Xid report: the number on its line decides (xid.h)
  kSharedMemory,  // shared memory ran out: config, naming /dev/shm and the fix
  kStatement,     // the trainer's own [trainlet:CLASS] (trainlet::Session::ReportError)
};

// Where a marker may decide (WorkerFailureRules).
enum class MarkerScope {
  // Only in the failure's own text (the exception that ended the worker, or
  // the end of its stderr) or its error file.
  kOwnText,
  // Anywhere in the stream: its cause persists until the worker fails and
  // it is no verdict against the code, the spec or the node (an NCCL
  // watchdog timeout; always infra).
  kAnywhere,
};

// A substring that, found in a worker's output, says what kind of failure it
// was. Matching is case-sensitive and plain (no regex), on purpose: cheap,
// predictable, and easy to extend with --marker CLASS=TEXT.
struct Marker {
  FailureClass failure_class;
  std::string text;
  MarkerMeaning meaning = MarkerMeaning::kPlain;
  // Non-empty: the marker counts only on a line that also contains this
  // ("No space left on device" is shared memory only under /dev/shm).
  std::string context{};
  MarkerScope scope = MarkerScope::kOwnText;
};

// True for the markers a scan of the whole stream looks for: those of scope
// kAnywhere, and shared memory running out (which decides only while
// /dev/shm is full: WorkerFailureRules).
bool ScannedInWholeStream(const Marker& m);

// Longest marker text (bytes): --marker entries longer are a config error.
inline constexpr std::size_t kMaxMarkerText = 256;
// The bytes of the line a marker was found on that are kept as evidence.
inline constexpr std::size_t kEvidenceLine = 512;

// A marker as found in a worker's output, with what this occurrence means.
struct MarkerHit {
  std::size_t index = 0;  // in MarkerTable::markers(): lower is stronger
  FailureClass failure_class = FailureClass::kWorker;  // Interpret()'s class
  std::string note{};     // what the line means, e.g. "Xid 31: GPU memory page fault ..."
  std::string line{};     // the first line it counted on, at most kEvidenceLine bytes
  std::string stream{};   // where: "stderr", "stdout", "error file" (set by the caller)
  // Where in a stream its line began (bytes from the stream's start), how
  // many bytes of the stream followed it, and how long before the stream
  // ended (or before it was asked) it was read: -1 unknown. Set by the pump.
  std::uint64_t offset = 0;
  std::uint64_t bytes_after = 0;
  std::int64_t age_ms = -1;
};

// Compares two hits of the same stream or worker: true if `a` is stronger (a
// lower index; at the same index, a decisive class over kWorker, e.g. Xid 79
// over Xid 31).
bool Stronger(const MarkerHit& a, const MarkerHit& b);

class MarkerTable {
 public:
  // The documented defaults: trainlet::Session's own markers; CUDA/driver
  // faults -> hardware (an Xid by its number; an illegal memory access ->
  // worker); shared memory running out -> config; NCCL and network faults
  // -> infra; Python import/syntax errors -> bug. Built once per process;
  // every copy shares it.
  static MarkerTable Defaults();
  // Adds "CLASS=TEXT" entries, checked before the defaults. Errors (config): no
  // '=', an unknown class, empty text or longer than kMaxMarkerText, a class
  // that is not bug/infra/hardware/oom. Other copies of the table keep theirs.
  [[nodiscard]] Status Add(const std::vector<std::string>& specs);
  // The strongest marker in `text` (a whole text at once: MarkerScanner).
  std::optional<MarkerHit> Match(std::string_view text) const;
  // Every marker in `text` that counts on its line (Interpret), each once
  // with the first line it counted on, strongest first. For short texts (an
  // exception, an error file): a plain search per marker.
  std::vector<MarkerHit> MatchEach(std::string_view text) const;
  const std::vector<Marker>& markers() const { return c_->markers; }

  // The prefilter MarkerScanner uses (marker_scanner.h): every marker has one
  // anchor byte; a match is looked for only where an anchor byte occurs.
  struct Anchor {
    std::uint32_t marker;  // index into markers()
    std::uint32_t offset;  // of the anchor byte in the marker's text
  };
  const std::vector<unsigned char>& anchor_bytes() const { return c_->anchor_bytes; }
  std::span<const Anchor> anchors_of(unsigned char b) const {
    return std::span<const Anchor>(c_->anchors).subspan(c_->first[b],
                                                        c_->first[b + 1] - c_->first[b]);
  }
  std::size_t longest() const { return c_->longest; }

 private:
  // The markers and their anchors, never changed once built: copies of a table
  // (the front end's, the pod's options, each generation's) share one.
  struct Compiled {
    std::vector<Marker> markers;
    std::vector<unsigned char> anchor_bytes;  // distinct anchor bytes
    std::vector<Anchor> anchors;              // by anchor byte, then marker
    std::array<std::uint32_t, 257> first{};   // byte b's: anchors[first[b], first[b + 1])
    std::size_t longest = 0;
  };
  static std::shared_ptr<const Compiled> Compile(std::vector<Marker> markers);
  std::shared_ptr<const Compiled> c_ = Compile({});
};

// What one occurrence of marker `m` on `line` means: its class and a note
// (an Xid's number and the catalogue's verdict; "" for a plain marker), or
// nullopt when the marker's context is not on the line. Pure.
std::optional<std::pair<FailureClass, std::string>> Interpret(const Marker& m,
                                                              std::string_view line);

// Status for a system call that failed with `err` while trainlet started or
// ran something: a shortage of a runtime resource (EAGAIN: the pod's pids.max
// or RLIMIT_NPROC; EMFILE: RLIMIT_NOFILE; ENFILE: the node's fs.file-max;
// ENOMEM: memory) is INFRA, naming the limit, whatever failed (a spawn, a
// thread, a pipe, a socket): the same spec can succeed on a retry. Any other
// errno gets `otherwise`. The one place that decides it; `what` says what
// failed, e.g. "cannot start worker 3". Pure.
Status ErrnoStatus(int err, const std::string& what, FailureClass otherwise);
// True for the errno values ErrnoStatus calls a resource shortage.
bool IsResourceErrno(int err);

// What we know about the worker that failed first.
struct WorkerFailure {
  int local_rank = 0;
  int rank = 0;                      // global rank
  WorkerExit exit{};
  std::string error_file_message{};  // the "message" of its torchelastic error file, if any
  std::string stderr_tail{};         // the last bytes it wrote to stderr
  // The strongest marker of those ScannedInWholeStream in everything it
  // wrote (MarkerScanner); nullopt when its output was not scanned (then
  // stderr_tail is matched for them).
  std::optional<MarkerHit> stream_marker = std::nullopt;
  // The last exception it printed on stderr (ExceptionKeeper), with
  // bytes_after and age_ms; nullopt: none, or not read.
  std::optional<LastException> last_exception = std::nullopt;
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
  // The size of /dev/shm in bytes (statvfs), for a shared-memory verdict's
  // message; nullopt when unknown.
  std::optional<std::uint64_t> shm_bytes = std::nullopt;
  // Bytes free in /dev/shm at the first failure (statvfs f_bavail); nullopt
  // when unknown.
  std::optional<std::uint64_t> shm_free_bytes = std::nullopt;
};

struct Verdict {
  FailureClass failure_class = FailureClass::kOk;
  int code = 0;
  std::string reason;  // one line, e.g. "local rank 1 (rank 3) exited 42"
  std::string evidence;  // which evidence decided: "phase", "oom", "error-file", "marker", "exit-code"
  int rule = 0;  // the WorkerFailureRules() number that decided; 0: not a worker failure's
};

// An exception counts as the failure's own text when its last line was read
// at most this long before the stream ended (or the failure was classified),
// and at most kOwnExceptionTrail bytes of stderr followed it (a faulthandler
// dump of 40 threads is ~15 KB). An older one was printed and survived
// (logging.exception in a retry loop).
inline constexpr std::int64_t kOwnExceptionAgeMs = 30'000;
inline constexpr std::uint64_t kOwnExceptionTrail = 64 * 1024;
// Without such an exception, the failure's own text is the end of its stderr:
// its last kOwnStderrLines lines, at most kOwnStderrEnd bytes. With one, only
// the trainer's [trainlet:CLASS] statement counts there.
inline constexpr std::size_t kOwnStderrLines = 4;
inline constexpr std::size_t kOwnStderrEnd = 1024;
// /dev/shm is full when at most this percentage of it is free.
inline constexpr std::uint64_t kShmFullPercent = 5;

// One rule of the first worker failure's classification.
struct WorkerFailureRule {
  int number;             // 1, 2, ...: the order they are tried in
  std::string_view says;  // one sentence, for `trainlet exit-codes` and the README
};
// The rules, in order: the first that applies decides (Classify). Pure.
const std::vector<WorkerFailureRule>& WorkerFailureRules();

// The bytes of an error file's message that a reason quotes when no marker
// matched it (its first non-blank line, cut to this many bytes).
inline constexpr std::size_t kErrorFileExcerpt = 200;

Verdict Classify(const Evidence& e, const ExitCodeTable& codes, const MarkerTable& markers);

// One line worth a warning beside the verdict `v` of `e`, or "": a run that
// succeeded although the memory cgroup counted OOM kills (some process of the
// workers was killed for memory, and the trainer coped).
std::string VerdictWarning(const Evidence& e, const Verdict& v);

}  // namespace trainlet::exitcodes
