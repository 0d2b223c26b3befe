#include "trainlet/agent/run/worker_logs.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <system_error>

namespace trainlet::agent {

using exitcodes::Result;
using exitcodes::Status;

namespace {

// `prefix` + 8 random characters, made with mode 0700, as Python's
// tempfile.mkdtemp (torchrun's run folder: mkdtemp(prefix=run_id + "_")) makes
// it; mkdtemp(3) replaces only 6 X's. errno is set when it returns "".
std::string MakeTempDir(const std::string& prefix) {
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyz0123456789_";  // Python's
  std::random_device random;
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string path = prefix;
    for (int i = 0; i < 8; ++i) path += kChars[random() % (sizeof(kChars) - 1)];
    if (::mkdir(path.c_str(), 0700) == 0) return path;
    if (errno != EEXIST) return "";
  }
  return "";
}

}  // namespace

bool WorkerLogOptions::writes_files() const {
  if (!log_dir.empty()) return true;
  if (redirects.all.value_or(0) != 0 || tee.all.value_or(0) != 0) return true;
  for (const StdSpec* s : {&redirects, &tee}) {
    for (const auto& [rank, std] : s->per_rank) {
      if (std != 0) return true;
    }
  }
  return false;
}

std::vector<WorkerStreams> PlanWorkerStreams(const WorkerLogOptions& o, const std::string& dirs,
                                             std::uint32_t nproc, std::uint32_t rank_base,
                                             const std::string& role_name) {
  std::vector<WorkerStreams> out(nproc);
  for (std::uint32_t lr = 0; lr < nproc; ++lr) {
    WorkerStreams& w = out[lr];
    const std::uint32_t rank = rank_base + lr;
    w.prefix = !o.console_prefix            ? ""
               : o.prefix_template.empty()
                   ? "[rank" + std::to_string(rank) + "]: "
                   : ExpandPrefixTemplate(o.prefix_template, role_name, rank, lr, o.hostname);
    // As torchrun: a teed stream is also redirected, into the same file.
    const int tee = o.tee.For(lr), to_file = o.redirects.For(lr) | tee;
    const std::string dir = dirs + "/" + std::to_string(lr) + "/";
    if (!dirs.empty() && (to_file & kStdOut) != 0) w.stdout_file = dir + "stdout.log";
    if (!dirs.empty() && (to_file & kStdErr) != 0) w.stderr_file = dir + "stderr.log";
    if (!dirs.empty() && !o.log_dir.empty()) w.error_file = dir + "error.json";
    w.stdout_console = w.stdout_file.empty() || (tee & kStdOut) != 0;
    w.stderr_console = w.stderr_file.empty() || (tee & kStdErr) != 0;
    if (!o.local_ranks_filter.empty() && !o.local_ranks_filter.contains(lr)) {
      w.stdout_console = w.stderr_console = false;
    }
  }
  return out;
}

Status MakeLogDir(const std::string& dir) {
  std::error_code ec;
  // The error_code overloads only: a path from the spec (too long, a loop of
  // symlinks, a file on the way) is that spec's error (78), never an exception.
  std::filesystem::create_directories(dir, ec);
  std::error_code is_dir_ec;
  if (!std::filesystem::is_directory(dir, is_dir_ec)) {
    if (!ec) ec = is_dir_ec;
    return Status::Config("--log-dir '" + dir + "' is not a folder that can be made" +
                          (ec ? ": " + ec.message() : ""));
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return Status::Config("--log-dir '" + dir + "' is a folder this agent cannot write to: " +
                          std::strerror(errno));
  }
  return Status::Ok();
}

Result<std::vector<WorkerStreams>> WorkerLogDirs::ForAttempt(const std::string& run_id,
                                                            std::uint32_t restart,
                                                            std::uint32_t nproc,
                                                            std::uint32_t rank_base,
                                                            const std::string& role_name) {
  if (!options_.writes_files()) return PlanWorkerStreams(options_, "", nproc, rank_base, role_name);
  namespace fs = std::filesystem;
  std::error_code ec;
  if (run_dir_.empty()) {
    std::string base = options_.log_dir;
    if (base.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      std::string t = (tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + std::string("/torchelastic_XXXXXX");
      if (::mkdtemp(t.data()) == nullptr) {
        return Status::Config("cannot make a log folder " + t + ": " + std::strerror(errno));
      }
      base = t;
    }
    if (Status s = MakeLogDir(base); !s.ok()) return s;
    run_dir_ = MakeTempDir(base + "/" + run_id + "_");
    if (run_dir_.empty()) {
      return Status::Config("--log-dir: cannot make " + base + "/" + run_id + "_*: " +
                            std::strerror(errno));
    }
  }
  const std::string attempt = run_dir_ + "/attempt_" + std::to_string(restart);
  fs::remove_all(attempt, ec);
  for (std::uint32_t lr = 0; lr < nproc; ++lr) {
    fs::create_directories(attempt + "/" + std::to_string(lr), ec);
    if (ec) return Status::Config("--log-dir: cannot make " + attempt + ": " + ec.message());
  }
  return PlanWorkerStreams(options_, attempt, nproc, rank_base, role_name);
}

}  // namespace trainlet::agent
