// trainlet/agent/observe/hang_policy.h — what hang detection decides, as pure code:
// which workers are hung (from the ages of their heartbeat files) and which
// processes may get the diagnostics signal (from their caught-signal masks).
// No syscalls, no clocks: Pod feeds it samples and carries out the result.
// Not thread-safe; owned by the one event loop.
//
// The rules (README, "Hang detection"):
//  - A worker takes part in hang detection once it has touched its
//    TRAINLET_HEARTBEAT_FILE. From then on, no touch for --hang-timeout means
//    it is hung.
//  - Before its first touch a worker is watched only when --hang-start-timeout
//    was given: no first touch within it is then a hang. Without it, a trainer
//    that never touches the file does not take part and is never declared hung
//    (an unmodified trainer must not be failed by a feature it does not use);
//    this is logged once, when --hang-timeout has passed without a touch.
//  - A worker that has exited is never hung.
//  - The diagnostics signal (--hang-signal, for stack dumps) goes only to the
//    processes of a worker's process group that catch it (the SigCgt mask of
//    /proc/<pid>/status, proc(5)): the default action of SIGUSR1 and most
//    others is to terminate, so sending it to a process without a handler
//    would kill it. A worker with no such process is named in a log line
//    saying that no stack dump is possible.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainlet::agent {

struct HangOptions {
  std::chrono::milliseconds timeout{0};  // --hang-timeout: > 0 when detection is on
  // --hang-start-timeout when given: the first touch must come within it.
  std::optional<std::chrono::milliseconds> start_timeout = std::nullopt;
};

// One worker's heartbeat, as read at one check.
struct HeartbeatSample {
  bool running = true;  // false once the worker exited
  // Time since the worker last touched its file; nullopt when it has not
  // touched it since the workers started.
  std::optional<std::chrono::milliseconds> since_touch = std::nullopt;
};

struct HangCheck {
  std::string hung;  // "" or "local rank 1 showed no progress for 600.0 s, ..."
  std::string note;  // "" or one line to log at info (workers that do not take part)
  bool operator==(const HangCheck&) const = default;
};

class HangPolicy {
 public:
  // `workers`: local ranks 0..workers-1.
  HangPolicy(HangOptions options, int workers);

  // One check, `elapsed` after the workers started, with one sample per local
  // rank (missing samples count as not running).
  HangCheck Check(std::chrono::milliseconds elapsed, const std::vector<HeartbeatSample>& samples);

  // How often to sample: a quarter of the shortest limit, within 50 ms..1 s.
  std::chrono::milliseconds PollInterval() const;

 private:
  HangOptions options_;
  std::vector<bool> noted_;  // by local rank: "does not take part" already logged
};

// ---- The diagnostics signal ----

// The mask of `field` ("SigCgt", "SigIgn", ...) in the text of a
// /proc/<pid>/status file: hexadecimal, bit N-1 for signal N (proc(5)).
// nullopt when the field is missing or malformed.
std::optional<std::uint64_t> ParseSignalMask(std::string_view proc_status,
                                             std::string_view field = "SigCgt");

// True when `mask` has the bit of signal `signo` (1..64).
bool MaskHas(std::uint64_t mask, int signo);

// A process that might get the diagnostics signal.
struct ProcessSignals {
  pid_t pid = 0;
  pid_t pgid = 0;
  std::optional<std::uint64_t> caught = std::nullopt;  // SigCgt; nullopt when it could not be read
};

struct DiagnosticsPlan {
  std::vector<pid_t> send_to;        // the processes that catch the signal
  std::vector<int> without_handler;  // local ranks none of whose processes catches it
  bool operator==(const DiagnosticsPlan&) const = default;
};

// Whom to send `signo` to: of `processes`, those in a live worker's process
// group (`worker_groups[local_rank]`, the worker's pid; 0 once it exited)
// whose caught mask has `signo`.
DiagnosticsPlan PlanDiagnostics(int signo, const std::vector<pid_t>& worker_groups,
                                const std::vector<ProcessSignals>& processes);

}  // namespace trainlet::agent
