// trainlet/agent/run/worker_logs.h — per-rank log files in torchrun's layout
// (torch/distributed/elastic/multiprocessing/api.py DefaultLogsSpecs):
//
//   <log-dir>/<run-id>_<suffix>/attempt_<generation>/<local-rank>/{stdout,stderr}.log
//
// torch names the folder by its restart count; trainlet by the gang's
// generation (Assignment::generation), which equals it in a fixed gang and,
// unlike the count, never repeats within a run: a join or a graceful leave
// starts a generation without a restart (agent/pod/membership.h M2), and a
// folder of the same number would be wiped.
//
// --redirects sends a stream to its file only, --tee to its file and to the
// console; --local-ranks-filter keeps other ranks off the console (their files
// are still written). The files hold the worker's bytes as written, without the
// console's rank prefix, and are written as the agent reads them (no buffering
// in the agent), so they are complete on every exit path: the worker's, a stop
// by SIGTERM, the grace period's SIGKILL, and the agent's own end.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "trainlet/agent/spec/torchrun.h"
#include "trainlet/exitcodes/status.h"

namespace trainlet::agent {

struct WorkerLogOptions {
  // --log-dir; empty: a fresh $TMPDIR/torchelastic_XXXXXX when a stream goes to a file.
  std::string log_dir;
  // --run-dir: where error and heartbeat files go (run_dir.h); "" = the first
  // writable of $TMPDIR, /dev/shm, /tmp, --log-dir.
  std::string run_dir;
  StdSpec redirects, tee;                    // --redirects, --tee
  std::set<std::uint32_t> local_ranks_filter;  // empty: every local rank on the console
  // TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE (ExpandPrefixTemplate); empty: "[rank<N>]: ".
  std::string prefix_template;
  // false (--worker-log-format plain): console lines as the worker wrote them,
  // no prefix, as torchrun prints a stream it does not tee.
  bool console_prefix = true;
  std::string hostname;  // ${hostname} in the template: this pod's (uname(2) nodename)

  // Whether any folder or file is made: --log-dir given, or a stream redirected or teed.
  bool writes_files() const;
};

// Where one worker's streams go.
struct WorkerStreams {
  std::string stdout_file, stderr_file;  // empty: no file
  // TORCHELASTIC_ERROR_FILE with --log-dir, as torchrun places it:
  // <attempt>/<local-rank>/error.json (kept with the logs). Empty: the agent's own.
  std::string error_file;
  bool stdout_console = true, stderr_console = true;
  std::string prefix;  // before each console line
};

// The streams of every local rank, for one attempt. `dirs` gives the attempt's
// folder, which holds one folder per local rank; without files it is "".
// Pure (no file system access).
std::vector<WorkerStreams> PlanWorkerStreams(const WorkerLogOptions& o, const std::string& dirs,
                                             std::uint32_t nproc, std::uint32_t rank_base,
                                             const std::string& role_name);

// Makes the log dir `dir` and its parents if missing (mkdir -p). Errors (class
// config, naming the folder): it cannot be made, is not a folder, or this
// process cannot write to it (access(2) W_OK|X_OK). Blocking: mkdir(2) calls.
[[nodiscard]] exitcodes::Status MakeLogDir(const std::string& dir);

// The folders of one pod's run, made as torchrun makes them: the run folder
// once ("<run-id>_" and 8 random characters of [a-z0-9_], mode 0700, as
// Python's tempfile.mkdtemp makes it, in the log dir, which is created if
// missing), and for each generation a fresh attempt_<generation>/ (an old
// one of that number, from an earlier run in the same folder, is removed) with a folder per local rank. Not thread-safe; call
// on the agent's thread.
class WorkerLogDirs {
 public:
  explicit WorkerLogDirs(WorkerLogOptions options) : options_(std::move(options)) {}
  // The streams for the attempt's workers. Errors (class config): the log dir
  // cannot be made or is not a folder (the message names it and errno).
  [[nodiscard]] exitcodes::Result<std::vector<WorkerStreams>> ForAttempt(
      const std::string& run_id, std::uint32_t generation, std::uint32_t nproc,
      std::uint32_t rank_base, const std::string& role_name);
  const std::string& run_dir() const { return run_dir_; }

 private:
  WorkerLogOptions options_;
  std::string run_dir_;
};

}  // namespace trainlet::agent
