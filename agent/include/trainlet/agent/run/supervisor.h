// trainlet/agent/run/supervisor.h — starts the local workers and sees them through
// to the end: output with rank prefixes, signal forwarding, reaping every child
// (adopted orphans included), grace period then SIGKILL, and the exit code.
//
// The decisions come from SupervisionPolicy; this class performs them with
// syscalls. Every method must be called on the single thread that runs the
// executor; callbacks run there too. The caller owns signal delivery: signals
// are blocked in main() and handed in through OnSignal(), and SIGCHLD turns into
// a call to Reap().
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>

#include "trainlet/agent/run/supervision_policy.h"
#include "trainlet/agent/base/tunables.h"
#include "trainlet/exitcodes/classify.h"
#include "trainlet/exitcodes/status.h"

namespace trainlet::agent {

struct WorkerSpec {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH when it has no '/'
  std::vector<std::string> env;   // complete environment, "NAME=value"
  std::string prefix;             // prepended to each output line, e.g. "[rank3]: "
  // With capture_output: each stream is also appended, as written, to this
  // file (worker_logs.h; "" = none), and reaches the agent's fd 1/2 only when
  // its *_console is true.
  std::string stdout_file{}, stderr_file{};
  bool stdout_console = true, stderr_console = true;
};

// Staying out of the OOM killer's way (proc(5) "oom_score_adj"; the kernel
// kills the process with the highest badness, its memory plus oom_score_adj
// thousandths of the cgroup's limit, unless memory.oom.group kills them all).
// Tunables, one per line:
inline constexpr std::size_t kReadAheadMin = 64 * 1024;           // bytes per stream, at least
inline constexpr std::size_t kReadAheadMax = 1024 * 1024;         // bytes per stream, at most
inline constexpr std::uint64_t kReadAheadShareOfLimit = 32;      // all streams: <= limit / this
inline constexpr int kWorkerOomScoreAdjAbove = 200;              // worker's = agent's + this

// Bytes each of `streams` worker output streams may read ahead while the
// console is backed up: together at most memory_limit / kReadAheadShareOfLimit,
// each within [kReadAheadMin, kReadAheadMax]; kReadAheadMax without a limit.
// Pure.
std::size_t ReadAheadBytes(std::optional<std::uint64_t> memory_limit, std::size_t streams);

// The oom_score_adj a worker gets when the agent's is `agent_adj` (-1000..1000):
// kWorkerOomScoreAdjAbove higher, at most 1000, so that where the kernel kills
// one process of the cgroup (cgroup v1; v2 with memory.oom.group 0) it picks a
// worker and the agent lives to report it. Raising a child's score needs no
// privilege; lowering the agent's own would (CAP_SYS_RESOURCE). Pure.
int WorkerOomScoreAdj(int agent_adj);

struct SupervisorOptions {
  // TERM -> KILL delay, for stops and for leftovers after the workers finished.
  std::chrono::milliseconds grace{kDefaultGrace};
  // Whom the workers' signals reach (SupervisionPolicy): each worker's main
  // process, the rest of the pod once they exited or StopReserve(grace)
  // before the end of the grace period; or each worker's whole group.
  SignalScope signal_scope = SignalScope::kMain;
  // Pipe worker stdout/stderr through the agent with prefixes; when false the
  // workers inherit the agent's stdout and stderr.
  bool capture_output = true;
  // What the children are, for log lines: "worker", or "pod agent" in local mode.
  std::string noun = "worker";
  // See SupervisionPolicy: an exit code that never counts as the first failure.
  std::optional<int> collateral_exit_code;
  // Set: each captured output line goes out as one JSON object instead of
  // after the spec's prefix, {"rank":R,"stream":"stdout"|"stderr","line":"..."}
  // with R = this + the worker's local rank (for log pipelines that parse JSON).
  std::optional<std::uint32_t> json_lines_rank_base;
  // Called once, at the first worker failure (before the others are stopped),
  // so the gang can be told at once.
  std::function<void(const FirstFailure&)> on_first_failure;
  // At the start of a stop, SIGTERM every other process of the pod as well:
  // the whole PID namespace when the agent is PID 1 (and /proc is its own),
  // every descendant when it is a child subreaper. False for `trainlet local`,
  // whose children are agents that stop their own workers: only its direct
  // children (the agents, orphans it adopted) are told.
  bool stop_every_process = true;
  // When non-zero, every child gets this signal when the thread that started
  // it (the caller of Start) ends, SIGKILL included (prctl(2),
  // PR_SET_PDEATHSIG): `trainlet local`'s agents end when it dies. Children
  // are then started with fork(2) and execve(2) instead of posix_spawn(3).
  int parent_death_signal = 0;
  // Bytes each output stream reads ahead of a backed-up console, at most
  // (ReadAheadBytes).
  std::size_t read_ahead_bytes = kReadAheadMax;
  // Set: written to every worker's /proc/<pid>/oom_score_adj right after its
  // spawn (WorkerOomScoreAdj). Its children (torchrun's workers) inherit it.
  std::optional<int> worker_oom_score_adj;
  // Set (with capture_output): every byte of each worker's stdout and stderr
  // passes through a MarkerScanner of this table as it is forwarded
  // (StreamMarker); stdout is then always read, even when it goes only to a
  // log file. Not owned; must outlive the Supervisor.
  const exitcodes::MarkerTable* markers = nullptr;
};

struct SupervisorResult {
  int exit_code = 0;
  std::optional<FirstFailure> first_failure;
  std::optional<int> stop_signal;
  bool peer_stop = false;
  int collateral = 0;
};

class Supervisor {
 public:
  using Done = std::function<void(SupervisorResult)>;
  Supervisor(boost::asio::any_io_executor executor, SupervisorOptions options, Done done);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Spawns every worker with posix_spawn: its own process group, a default
  // signal mask and default dispositions. Errors (class config): the command
  // cannot be executed (ENOENT, EACCES, ...); workers already started are then
  // killed and reaped before this returns. `done` runs once, on the executor,
  // after the last child is gone.
  [[nodiscard]] exitcodes::Status Start(std::vector<WorkerSpec> workers);

  // A signal the agent received. Forwarded signals go to every live worker's
  // main process (its whole group with SignalScope::kGroup).
  void OnSignal(int signo);

  // Hang diagnostics: sends `signo` to the live workers' main processes that
  // catch it (with SignalScope::kGroup: every process of their groups that
  // does; HangPolicy's PlanDiagnostics, from /proc/<pid>/status SigCgt), never
  // to one whose default action would end it, and logs the workers for which
  // no stack dump is possible. Changes nothing else.
  void SendDiagnostics(int signo);

  // Another pod of the gang failed: stop the workers (TERM, grace, KILL) unless
  // they are already stopping or a local failure or stop request came first.
  void StopForPeer();

  // Reaps every exited child (waitpid(-1, WNOHANG) until none), recording the
  // status of workers; call on SIGCHLD.
  void Reap();

  // The last 8 KiB a worker wrote to stderr (empty when output is not
  // captured); evidence for the failure classification. Called as a worker
  // exits, its last lines may still be in the pipe: waits (blocking, at most
  // 100 ms) until the stderr pump has read all the pipe holds.
  std::string StderrTail(int local_rank) const;

  // The strongest marker in everything the worker wrote to stdout and stderr
  // (SupervisorOptions::markers; the stronger of the two streams, stderr on a
  // tie), with MarkerHit::stream set; nullopt when none or not scanned. Waits
  // like StderrTail, at most 100 ms per stream.
  std::optional<exitcodes::MarkerHit> StreamMarker(int local_rank) const;

  // The last exception the worker printed on stderr (exitcodes::ExceptionKeeper,
  // kept apart from the tail while SupervisorOptions::markers is set), with
  // how much of stderr followed it and how long before stderr ended it was
  // read; nullopt when none or not kept. Waits like StderrTail.
  std::optional<exitcodes::LastException> LastException(int local_rank) const;

  // True once the workers are being stopped (a failure, a signal, a peer).
  bool stopping() const;
  // True while the worker with this local rank has not exited.
  bool running(int local_rank) const;

  // Process ids of the workers (for tests and logs).
  std::vector<pid_t> worker_pids() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// Reaps exited children without a Supervisor (before workers start, or after):
// returns true when the caller has no children left (ECHILD).
bool ReapOrphans();

// Every live descendant of `root` (children, grandchildren, ...), from
// /proc/<pid>/task/<tid>/children (proc(5)) where the kernel has it, else from a
// scan of every process in /proc; only its direct children when
// `children_only`. Zombies are left out. A snapshot: processes forked or
// exiting meanwhile may be missed. Blocking reads of /proc, no deadline.
std::vector<pid_t> ListDescendants(pid_t root, bool children_only = false);

// Every live process of this pod but the caller: as PID 1 of a PID namespace
// whose /proc this is (/proc/self is "1"), every process in /proc, those that
// entered the namespace from outside (kubectl exec) included; otherwise every
// descendant of the caller.
std::vector<pid_t> ListPodProcesses();

}  // namespace trainlet::agent
