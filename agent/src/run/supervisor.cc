#include "trainlet/agent/run/supervisor.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <linux/close_range.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <system_error>
#include <thread>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include "base/file_util.h"
#include "run/pump.h"
#include "trainlet/agent/observe/hang_policy.h"
#include "trainlet/agent/run/launch_check.h"
#include "trainlet/exitcodes/exit_code.h"

namespace trainlet::agent {

namespace asio = boost::asio;
using exitcodes::Status;

namespace {

#if !__GLIBC_PREREQ(2, 34)
// posix_spawn_file_actions_addclosefrom_np needs glibc 2.34; the portable
// release build targets older ones (scripts/package). The same effect for a
// spawn: every descriptor from `from` up is marked close-on-exec, with
// close_range(2) (Linux 5.11) or else one fcntl per entry of /proc/self/fd.
// The agent never means a descriptor >= 3 for a worker (dup2 onto 0-2 clears
// the flag on the copy), so marking its own ones changes nothing else.
void CloseOnExecFrom(int from) {
#ifndef SYS_close_range
#define SYS_close_range 436  // the same number on every architecture
#endif
  if (::syscall(SYS_close_range, from, ~0U, 4 /* CLOSE_RANGE_CLOEXEC */) == 0) return;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return;
  while (const dirent* e = ::readdir(d)) {
    int fd = std::atoi(e->d_name);
    if (fd >= from && fd != ::dirfd(d)) ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC);
  }
  ::closedir(d);
}
#endif

constexpr std::size_t kTailBytes = 8 * 1024;  // stderr kept per worker for classification
using Clock = std::chrono::steady_clock;
// After the last child: how long the output may stand still, and wait at most, to drain.
constexpr auto kDrainIdle = std::chrono::seconds(2);
constexpr auto kDrainLimit = std::chrono::seconds(30);

// Bytes of worker output the pumps have written to the agent's stdout and stderr.
std::uint64_t ConsoleBytes() {
  return OutputCounters(STDOUT_FILENO).bytes.load(std::memory_order_relaxed) +
         OutputCounters(STDERR_FILENO).bytes.load(std::memory_order_relaxed);
}

std::string Comm(pid_t pid) {
  std::string cmd = ReadSmallFile("/proc/" + std::to_string(pid) + "/cmdline", 4096).value_or("");
  for (char& c : cmd) {
    if (c == '\0') c = ' ';
  }
  while (!cmd.empty() && cmd.back() == ' ') cmd.pop_back();
  return cmd.empty() ? "?" : cmd.substr(0, 120);
}

}  // namespace

namespace {

struct ProcEntry {
  pid_t pid;
  pid_t ppid;
};

// Every live process in /proc with its parent (zombies, which only wait to be
// reaped, left out).
std::vector<ProcEntry> ScanProc() {
  std::vector<ProcEntry> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    std::string stat = ReadSmallFile(std::string("/proc/") + e->d_name + "/stat", 1024)
                           .value_or("");
    // Fields after the command (which may contain spaces and parentheses).
    auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 1));
    char state;
    long ppid;
    if (!(rest >> state >> ppid)) continue;
    if (state == 'Z' || state == 'X') continue;
    out.push_back({static_cast<pid_t>(pid), static_cast<pid_t>(ppid)});
  }
  ::closedir(d);
  return out;
}

// Our own PID namespace's /proc: /proc/self names us.
bool ProcIsOurs() {
  char buf[32];
  ssize_t n = ::readlink("/proc/self", buf, sizeof(buf) - 1);
  if (n <= 0) return false;
  buf[n] = '\0';
  return std::strtol(buf, nullptr, 10) == ::getpid();
}

// argv[0] as execve(2) needs it: the file execvp(3) would run (FindExecutable,
// the same search as posix_spawnp and the check before the start), else
// unchanged (execve then fails as execvp would).
std::string ResolveInPath(const std::string& name, const char* const* envp) {
  std::optional<std::string> path;
  for (const char* const* e = envp; *e != nullptr; ++e) {
    if (std::strncmp(*e, "PATH=", 5) == 0) path = *e + 5;
  }
  ExecutableLookup found = FindExecutable(name, path);
  return found.error == 0 ? found.path : name;
}

// One worker stream's fds while Start() plumbs it, -1 where absent: `child`
// becomes the worker's fd 1 or 2; a pump reads `read` (a pipe's read end, or
// the log file it follows with `watch`) and writes through to `file`.
struct StreamFds {
  int child = -1, read = -1, watch = -1, file = -1;
  void CloseAll() {
    for (int* fd : {&child, &read, &watch, &file}) {
      if (*fd >= 0) ::close(*fd);
      *fd = -1;
    }
  }
};

// A stream with a log file: the worker writes the file itself, and the pump,
// if the stream has a reader (the console, the tail), follows it
// (OpenFollowedFile). Otherwise, or where the file cannot be followed, a
// pipe, with the file (if it could be opened) written through by the pump.
Status OpenStream(const std::string& file, bool reader, StreamFds* s) {
  if (!file.empty()) {
    FollowedFile f = OpenFollowedFile(file, reader);
    if (f.write_fd >= 0 && (!reader || f.watch_fd >= 0)) {
      *s = {f.write_fd, f.read_fd, f.watch_fd, -1};
      return Status::Ok();
    }
    s->file = f.write_fd;
  }
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    s->CloseAll();
    return exitcodes::ErrnoStatus(errno, "cannot make a pipe for worker output",
                                  exitcodes::FailureClass::kInfra);
  }
  s->child = p[1];
  s->read = p[0];
  return Status::Ok();
}

// A spawn that failed with `rc` (an errno value): a shortage (EAGAIN at
// pids.max, ENOMEM, ...) is infra, as when a pump thread fails for it
// (exitcodes::ErrnoStatus); anything else is the command's fault, config.
Status SpawnFailure(int rc, const std::string& who, const std::string& program) {
  if (exitcodes::IsResourceErrno(rc)) {
    return exitcodes::ErrnoStatus(rc, "cannot start " + who, exitcodes::FailureClass::kInfra);
  }
  return Status::Config(CannotExecuteMessage(program, rc));
}

// posix_spawn has no attribute for a parent-death signal, so: fork, set up the
// child like posix_spawn does for the workers (own process group, default
// mask and dispositions, fds 1/2, nothing else open), arm PR_SET_PDEATHSIG,
// exec. Between fork and exec only async-signal-safe calls (signal-safety(7)).
// An exec failure's errno comes back through a close-on-exec pipe. Returns 0
// or an errno value, like posix_spawn.
int SpawnWithParentDeath(pid_t* pid_out, char* const* argv, char* const* envp, int out_fd,
                         int err_fd, int death_signal) {
  const std::string path = ResolveInPath(argv[0], envp);
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return errno;
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    ::close(report[0]);
    ::close(report[1]);
    return e;
  }
  if (pid == 0) {
    ::setsid();  // as Start's POSIX_SPAWN_SETSID: a session and group of its own
    struct sigaction dfl{};
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; ++s) {
      if (s != SIGKILL && s != SIGSTOP) ::sigaction(s, &dfl, nullptr);
    }
    sigset_t empty;
    sigemptyset(&empty);
    ::sigprocmask(SIG_SETMASK, &empty, nullptr);
    if (out_fd >= 0) ::dup2(out_fd, STDOUT_FILENO);
    if (err_fd >= 0) ::dup2(err_fd, STDERR_FILENO);
    // Nothing of the agent's leaks into the child: every fd from 3 up is
    // closed by the exec (the report pipe too, which is how its success shows).
    if (::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
      for (int fd = 3; fd < 4096; ++fd) {
        if (fd != report[1]) ::close(fd);
      }
    }
    ::prctl(PR_SET_PDEATHSIG, death_signal);
    // The parent may have died before the prctl: then nobody would ever send it.
    if (::getppid() != parent) ::_exit(128 + death_signal);
    ::execve(path.c_str(), argv, envp);
    int e = errno;
    (void)!::write(report[1], &e, sizeof(e));
    ::_exit(127);
  }
  ::close(report[1]);
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(report[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n == static_cast<ssize_t>(sizeof(child_errno))) {
    ::waitpid(pid, nullptr, 0);
    return child_errno;
  }
  *pid_out = pid;
  return 0;
}

}  // namespace

namespace {

// Whether this kernel has /proc/<pid>/task/<tid>/children (proc(5): Linux 3.5,
// CONFIG_PROC_CHILDREN); checked once, on our own main thread.
bool HaveChildrenFiles() {
  static const bool have =
      ::access(("/proc/self/task/" + std::to_string(::getpid()) + "/children").c_str(), R_OK) == 0;
  return have;
}

// Whether `pid` is a zombie (or gone): nothing to signal.
bool Exited(pid_t pid) {
  std::string stat = ReadSmallFile("/proc/" + std::to_string(pid) + "/stat", 1024).value_or("");
  auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] == 'Z' ||
         stat[close + 2] == 'X';
}

// The live children of `pid`: one read of a children file per thread of it,
// not an open and read of every process on the node (ScanProc: ~1 ms for 75
// processes, bench_micro BM_ListChildren, at the start of every pod's stop).
std::vector<pid_t> ChildrenOf(pid_t pid) {
  std::vector<pid_t> out;
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;  // gone
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string text = ReadSmallFile(dir + "/" + e->d_name + "/children", 1 << 20).value_or("");
    const char* p = text.c_str();
    char* end = nullptr;
    for (long child = std::strtol(p, &end, 10); end != p; child = std::strtol(p, &end, 10)) {
      if (child > 0 && !Exited(static_cast<pid_t>(child))) out.push_back(static_cast<pid_t>(child));
      p = end;
    }
  }
  ::closedir(d);
  return out;
}

// Raises a just-spawned worker's oom_score_adj (proc(5)). The worker has only
// just exec'd (posix_spawn returns once the child has called execve; the
// fork path, a moment later): it has allocated next to nothing yet, and the
// score is in place long before it can need much. Setting it between fork and
// exec instead would need code there (STYLE.md: only setsid and the mask).
// Best effort: a worker that cannot be written (another uid) keeps the agent's.
void SetOomScoreAdj(pid_t pid, int adj) {
  const std::string path = "/proc/" + std::to_string(pid) + "/oom_score_adj";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  const std::string value = std::to_string(adj);
  if (fd < 0 || ::write(fd, value.data(), value.size()) < 0) {
    spdlog::debug("{}: {}", path, std::strerror(errno));
  }
  if (fd >= 0) ::close(fd);
}

// The first failed write to a worker's log file (OutputPump::OnFileError),
// once per file.
void LogFileError(const std::string& file, bool followed, int err) {
  if (followed) {
    spdlog::warn("log file {}: {}: the worker's writes to it fail, and its console copy, which "
                 "reads the file, misses what they lose", file, std::strerror(err));
  } else {
    spdlog::warn("log file {}: write failed: {}: output from here on is not in the file; the "
                 "console copy goes on", file, std::strerror(err));
  }
}

}  // namespace

std::vector<pid_t> ListDescendants(pid_t root, bool children_only) {
  if (HaveChildrenFiles()) {
    std::vector<pid_t> out;
    std::vector<pid_t> frontier{root};
    while (!frontier.empty()) {
      pid_t p = frontier.back();
      frontier.pop_back();
      for (pid_t child : ChildrenOf(p)) {
        out.push_back(child);
        if (!children_only) frontier.push_back(child);
      }
    }
    return out;
  }
  std::multimap<pid_t, pid_t> children;  // ppid -> pid
  for (const ProcEntry& p : ScanProc()) children.emplace(p.ppid, p.pid);
  std::vector<pid_t> out;
  std::vector<pid_t> frontier{root};
  while (!frontier.empty()) {
    pid_t p = frontier.back();
    frontier.pop_back();
    auto [lo, hi] = children.equal_range(p);
    for (auto it = lo; it != hi; ++it) {
      out.push_back(it->second);
      if (!children_only) frontier.push_back(it->second);
    }
  }
  return out;
}

std::vector<pid_t> ListPodProcesses() {
  const pid_t self = ::getpid();
  if (self != 1 || !ProcIsOurs()) return ListDescendants(self);
  std::vector<pid_t> out;
  for (const ProcEntry& p : ScanProc()) {
    if (p.pid != self) out.push_back(p.pid);
  }
  return out;
}

bool ReapOrphans() {
  for (;;) {
    int status;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      spdlog::debug("reaped orphan pid {} ({})",
                    pid, exitcodes::WorkerExit::FromWaitStatus(status).Describe());
      continue;
    }
    if (pid < 0 && errno == EINTR) continue;
    return pid < 0 && errno == ECHILD;
  }
}

struct Supervisor::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::any_io_executor ex, SupervisorOptions opts, Done d)
      : executor(ex), options(opts), done(std::move(d)), grace_timer(ex), reserve_timer(ex),
        sweep_timer(ex), drain_timer(ex) {}

  struct Worker {
    pid_t pid;
    int local_rank;
    bool exited = false;
  };

  asio::any_io_executor executor;
  SupervisorOptions options;
  Done done;
  std::optional<SupervisionPolicy> policy;
  std::vector<Worker> workers;
  std::vector<std::unique_ptr<OutputPump>> pumps;
  std::vector<OutputPump*> stderr_pumps;  // by local rank
  std::vector<OutputPump*> stdout_pumps;  // by local rank; nullptr where stdout is not read
  int open_pumps = 0;
  asio::steady_timer grace_timer;
  asio::steady_timer reserve_timer;  // grace - StopReserve(grace): the rest of the pod's turn
  asio::steady_timer sweep_timer;
  asio::steady_timer drain_timer;
  bool grace_armed = false;
  bool no_children = false;
  bool drain_armed = false;
  bool drain_gave_up = false;
  Clock::time_point drain_until{};  // kDrainLimit after the drain began
  std::uint64_t drain_mark = 0;     // ConsoleBytes() when the drain timer was armed
  bool finished = false;

  void Apply(const Actions& a);
  // `signo` to each live worker's main process, or its whole group.
  void SignalWorkers(int signo, bool whole_groups);
  void SignalGroups(int signo) { SignalWorkers(signo, true); }
  bool InLiveWorkerGroup(pid_t pid) const;
  bool IsLiveWorker(pid_t pid) const;
  // `signo` to the pod's processes but the live workers' main processes (and,
  // with `skip_groups`, their groups), which have had theirs (see
  // SupervisorOptions::stop_every_process).
  void TerminateOthers(int signo, bool skip_groups, bool log_leftovers);
  // Arms the grace timer and, with `reserve`, the reserve's.
  void ArmStopTimers(bool reserve);
  void KillAll(bool log_leftovers);
  void SendDiagnostics(int signo);
  void Sweep();
  void CheckDone();
  // The drain's timer: once kDrainIdle passes with no output written, gives up.
  void ArmDrainTimer();
  void Reap();
  // Starts a pump for each of the worker's streams that has a reader (taking
  // its fds); stderr always has one. Infra when no thread is to be had.
  Status StartPumps(const WorkerSpec& spec, std::size_t rank, StreamFds (&streams)[2]);
  // Spawns worker `rank` of `spec` with `attr`, its streams and pumps; the
  // worker is in `workers` once spawned. Errors: the stream's, the spawn's.
  Status SpawnWorker(const WorkerSpec& spec, std::size_t rank, const posix_spawnattr_t* attr);
  // Start-up failed part way: kills and reaps what was spawned, drops the pumps.
  void AbandonStart();
};

Status Supervisor::Impl::StartPumps(const WorkerSpec& spec, std::size_t rank,
                                    StreamFds (&streams)[2]) {
  const std::size_t first = pumps.size();
  for (int i : {0, 1}) {
    StreamFds& s = streams[i];
    if (s.read < 0) continue;  // the worker writes its log file, and nothing reads it
    const bool is_err = i == 1;
    const bool console = is_err ? spec.stderr_console : spec.stdout_console;
    const int out = console ? (is_err ? STDERR_FILENO : STDOUT_FILENO) : -1;
    const std::size_t tail = is_err ? kTailBytes : 0;
    if (const auto& base = options.json_lines_rank_base) {
      pumps.push_back(std::make_unique<OutputPump>(
          std::exchange(s.read, -1), out,
          JsonLinePrefix(static_cast<int>(*base + rank), is_err ? "stderr" : "stdout"), tail,
          LinePrefixer::Format::kJson));
    } else {
      pumps.push_back(std::make_unique<OutputPump>(std::exchange(s.read, -1), out, spec.prefix, tail));
    }
    OutputPump& pump = *pumps.back();
    pump.SetMaxAhead(options.read_ahead_bytes);
    const std::string& file = is_err ? spec.stderr_file : spec.stdout_file;
    const bool followed = s.watch >= 0;
    if (followed) pump.Follow(std::exchange(s.watch, -1));
    if (s.file >= 0) pump.SetFile(std::exchange(s.file, -1));
    if (!file.empty()) {
      pump.OnFileError([file, followed](int err) { LogFileError(file, followed, err); });
    }
    if (options.markers != nullptr) pump.ScanMarkers(*options.markers);
    if (options.markers != nullptr && is_err) pump.KeepLastException();
    (is_err ? stderr_pumps : stdout_pumps).push_back(&pump);
  }
  if (stdout_pumps.size() < stderr_pumps.size()) stdout_pumps.push_back(nullptr);
  for (std::size_t i = first; i < pumps.size(); ++i) {
    try {
      pumps[i]->Start(executor, [weak = weak_from_this()] {
        if (auto im = weak.lock()) {
          --im->open_pumps;
          im->CheckDone();
        }
      });
      ++open_pumps;
    } catch (const std::system_error& e) {
      // No thread to be had (the pod's pids.max counts threads): like a
      // spawn that failed, nothing of this start may survive.
      return exitcodes::ErrnoStatus(e.code().value(), "cannot start a thread for worker output",
                                    exitcodes::FailureClass::kInfra);
    }
  }
  return Status::Ok();
}

void Supervisor::Impl::SignalWorkers(int signo, bool whole_groups) {
  for (const Worker& w : workers) {
    // Each worker leads its own session and group (POSIX_SPAWN_SETSID), so
    // -pid reaches the processes it started too. Only while the worker is
    // unreaped: afterwards its pid, and so the group id, may be reused by a
    // stranger; its group's survivors are then our adopted children (see
    // TerminateOthers).
    if (!w.exited) ::kill(whole_groups ? -w.pid : w.pid, signo);
  }
}

bool Supervisor::Impl::InLiveWorkerGroup(pid_t pid) const {
  pid_t group = ::getpgid(pid);
  for (const Worker& w : workers) {
    if (!w.exited && group == w.pid) return true;
  }
  return false;
}

bool Supervisor::Impl::IsLiveWorker(pid_t pid) const {
  for (const Worker& w : workers) {
    if (!w.exited && w.pid == pid) return true;
  }
  return false;
}

void Supervisor::Impl::TerminateOthers(int signo, bool skip_groups, bool log_leftovers) {
  // As PID 1 or child subreaper, every live descendant is our child or below
  // one: with no child at all (live or zombie) there is nothing to look for,
  // and the /proc scan (an open and read per process on the node) is skipped.
  // WNOWAIT: a zombie stays for Reap() to collect.
  siginfo_t info{};
  if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) < 0 && errno == ECHILD) return;
  // The workers' helpers (their groups), helpers the trainers started in
  // their own session or group (setsid), orphans we adopted, daemons. Each is
  // told once; one left out would only learn of the stop from the SIGKILL,
  // and the pod would wait the whole grace period for it.
  const std::vector<pid_t> others = options.stop_every_process
                                        ? ListPodProcesses()
                                        : ListDescendants(::getpid(), /*children_only=*/true);
  for (pid_t pid : others) {
    if (IsLiveWorker(pid) || (skip_groups && InLiveWorkerGroup(pid))) continue;
    spdlog::log(log_leftovers ? spdlog::level::info : spdlog::level::debug,
                "{} process pid {} ({}): sending {}", log_leftovers ? "leftover" : "other", pid,
                Comm(pid), exitcodes::SignalName(signo));
    ::kill(pid, signo);
  }
}

void Supervisor::Impl::KillAll(bool log_leftovers) {
  SignalGroups(SIGKILL);
  siginfo_t info{};
  if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) < 0 && errno == ECHILD) return;
  const std::vector<pid_t> all =
      options.stop_every_process ? ListPodProcesses() : ListDescendants(::getpid());
  for (pid_t pid : all) {
    if (log_leftovers && !InLiveWorkerGroup(pid)) {
      spdlog::info("leftover process pid {} ({}): sending SIGKILL", pid, Comm(pid));
    }
    ::kill(pid, SIGKILL);
  }
}

void Supervisor::Impl::SendDiagnostics(int signo) {
  std::vector<pid_t> groups;
  for (const Worker& w : workers) {
    if (static_cast<std::size_t>(w.local_rank) >= groups.size()) groups.resize(w.local_rank + 1, 0);
    if (!w.exited) groups[w.local_rank] = w.pid;
  }
  std::vector<ProcessSignals> procs;
  const bool main_only = options.signal_scope == SignalScope::kMain;
  for (pid_t pid : ListDescendants(::getpid())) {
    if (main_only && !IsLiveWorker(pid)) continue;
    auto status = ReadSmallFile("/proc/" + std::to_string(pid) + "/status", 8192);
    procs.push_back({pid, ::getpgid(pid),
                     status ? ParseSignalMask(*status, "SigCgt") : std::nullopt});
  }
  DiagnosticsPlan plan = PlanDiagnostics(signo, groups, procs);
  for (pid_t pid : plan.send_to) ::kill(pid, signo);
  if (!plan.send_to.empty()) {
    spdlog::info("sent {} to {} worker process(es) that handle it", exitcodes::SignalName(signo),
                 plan.send_to.size());
  }
  for (int lr : plan.without_handler) {
    spdlog::warn("local rank {} (pid {}): no process handles {}, so no stack dump is possible "
                 "and it is not sent (its default action would end the worker); Python: "
                 "faulthandler.register(signal.{})",
                 lr, groups[lr], exitcodes::SignalName(signo), exitcodes::SignalName(signo));
  }
}

// After KILL, keep sweeping: a process may have forked between the scan and
// the signal.
void Supervisor::Impl::Sweep() {
  sweep_timer.expires_after(std::chrono::milliseconds(100));
  sweep_timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (ec || self->finished) return;
    self->KillAll(false);
    self->Sweep();
  });
}

void Supervisor::Impl::ArmStopTimers(bool reserve) {
  if (grace_armed) return;
  grace_armed = true;
  grace_timer.expires_after(options.grace);
  grace_timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (ec || self->finished) return;
    self->Apply(self->policy->On(event::GraceExpired{}));
  });
  if (!reserve) return;
  reserve_timer.expires_after(options.grace - SupervisionPolicy::StopReserve(options.grace));
  reserve_timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (ec || self->finished) return;
    self->Apply(self->policy->On(event::ReserveReached{}));
  });
}

void Supervisor::Impl::Apply(const Actions& a) {
  if (!a.log.empty()) spdlog::info("{}", a.log);
  if (a.forward_signal) {
    spdlog::debug("forwarding {} to {} worker {}", exitcodes::SignalName(*a.forward_signal),
                  workers.size(), a.whole_groups ? "group(s)" : "main process(es)");
    SignalWorkers(*a.forward_signal, a.whole_groups);
  }
  if (a.terminate) SignalWorkers(*a.terminate, a.whole_groups);
  if (a.terminate_others) {
    // Processes left when every worker had already finished are named at info.
    const bool leftovers = policy->workers_alive() == 0 && a.terminate.has_value();
    TerminateOthers(*a.terminate_others, a.whole_groups, leftovers);
  }
  if (a.start_grace_timer) ArmStopTimers(a.start_reserve_timer);
  if (a.kill_all) {
    KillAll(true);
    Sweep();
  }
  if (a.exit_code) {
    finished = true;
    grace_timer.cancel();
    reserve_timer.cancel();
    sweep_timer.cancel();
    drain_timer.cancel();
    SupervisorResult r;
    r.exit_code = *a.exit_code;
    r.first_failure = policy->first_failure();
    r.stop_signal = policy->stop_signal();
    r.peer_stop = policy->peer_stop();
    r.collateral = policy->collateral();
    asio::post(executor, [d = done, r] { d(r); });
    return;
  }
  CheckDone();
}

void Supervisor::Impl::CheckDone() {
  if (finished || !no_children || policy->phase() == Phase::kRunning) return;
  if (open_pumps > 0 && !drain_gave_up) {
    // Every child is gone, so the pipes reach EOF, and the followed log files
    // their end, as soon as the pumps have written what is left; bound the
    // wait in case something outside the process tree inherited a write end,
    // or the reader of our output stalls: it goes on while the output still
    // takes bytes (a slow reader, behind a log file's backlog), up to
    // kDrainLimit.
    for (auto& p : pumps) p->WritersGone();
    if (drain_armed) return;
    drain_armed = true;
    drain_until = Clock::now() + kDrainLimit;
    ArmDrainTimer();
    return;
  }
  Apply(policy->On(event::NoChildrenLeft{}));
}

void Supervisor::Impl::ArmDrainTimer() {
  drain_mark = ConsoleBytes();
  drain_timer.expires_after(kDrainIdle);
  drain_timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (ec || self->finished) return;
    if (ConsoleBytes() != self->drain_mark && Clock::now() < self->drain_until) {
      self->ArmDrainTimer();  // still moving
      return;
    }
    spdlog::warn("worker output still open after every child exited; not waiting for it");
    self->drain_gave_up = true;
    self->CheckDone();
  });
}

void Supervisor::Impl::Reap() {
  for (;;) {
    int status;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0) {
      no_children = errno == ECHILD;
      break;
    }
    if (pid == 0) {
      no_children = false;
      break;
    }
    auto exit = exitcodes::WorkerExit::FromWaitStatus(status);
    bool known = false;
    for (Worker& w : workers) {
      if (w.pid != pid || w.exited) continue;
      w.exited = true;
      known = true;
      spdlog::log(exit.success() ? spdlog::level::debug : spdlog::level::info,
                  "{} {} (pid {}) exited: {}", options.noun, w.local_rank, pid, exit.Describe());
      if (!finished) {
        bool had_failure = policy->first_failure().has_value();
        Actions a = policy->On(event::WorkerExited{w.local_rank, exit});
        if (!had_failure && policy->first_failure() && options.on_first_failure) {
          options.on_first_failure(*policy->first_failure());
        }
        Apply(a);
      }
    }
    if (!known) spdlog::debug("reaped pid {} ({})", pid, exit.Describe());
  }
  CheckDone();
}

Supervisor::Supervisor(asio::any_io_executor executor, SupervisorOptions options, Done done)
    : impl_(std::make_shared<Impl>(executor, options, std::move(done))) {}

Supervisor::~Supervisor() {
  impl_->finished = true;
  impl_->grace_timer.cancel();
  impl_->reserve_timer.cancel();
  impl_->sweep_timer.cancel();
  impl_->drain_timer.cancel();
  // Stopped and joined here, while the executor they post to is alive.
  impl_->pumps.clear();
  impl_->stderr_pumps.clear();
  impl_->stdout_pumps.clear();
}

namespace {
// Usually caught up at once: the pump thread reads as the worker writes. It
// can be behind when the cores are busy, or stopped reading (its output
// backed up past OutputPump::kMaxAhead): then it has what it has.
void AwaitCaughtUp(const OutputPump& pump) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  while (!pump.CaughtUp() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}
}  // namespace

std::string Supervisor::StderrTail(int local_rank) const {
  if (local_rank < 0 || local_rank >= static_cast<int>(impl_->stderr_pumps.size())) return "";
  const OutputPump& pump = *impl_->stderr_pumps[local_rank];
  AwaitCaughtUp(pump);
  return pump.Tail();
}

std::optional<exitcodes::MarkerHit> Supervisor::StreamMarker(int local_rank) const {
  if (local_rank < 0 || local_rank >= static_cast<int>(impl_->stderr_pumps.size())) return {};
  std::optional<exitcodes::MarkerHit> best;
  for (auto [pumps, name] : {std::pair{&impl_->stderr_pumps, "stderr"},
                             std::pair{&impl_->stdout_pumps, "stdout"}}) {
    const OutputPump* pump = static_cast<std::size_t>(local_rank) < pumps->size()
                                 ? (*pumps)[local_rank] : nullptr;
    if (pump == nullptr) continue;
    AwaitCaughtUp(*pump);
    auto hit = pump->Marker();
    if (hit && (!best || exitcodes::Stronger(*hit, *best))) {
      best = std::move(hit);
      best->stream = name;
    }
  }
  return best;
}

std::optional<exitcodes::LastException> Supervisor::LastException(int local_rank) const {
  if (local_rank < 0 || local_rank >= static_cast<int>(impl_->stderr_pumps.size())) return {};
  const OutputPump& pump = *impl_->stderr_pumps[local_rank];
  AwaitCaughtUp(pump);
  return pump.LastException();
}

bool Supervisor::running(int local_rank) const {
  for (const auto& w : impl_->workers) {
    if (w.local_rank == local_rank) return !w.exited;
  }
  return false;
}

bool Supervisor::stopping() const {
  return impl_->policy && impl_->policy->phase() != Phase::kRunning;
}

std::vector<pid_t> Supervisor::worker_pids() const {
  std::vector<pid_t> pids;
  for (const auto& w : impl_->workers) pids.push_back(w.pid);
  return pids;
}

void Supervisor::OnSignal(int signo) {
  if (impl_->finished || !impl_->policy) return;
  impl_->Apply(impl_->policy->On(event::Signal{signo}));
}

void Supervisor::SendDiagnostics(int signo) {
  if (impl_->finished || !impl_->policy) return;
  impl_->SendDiagnostics(signo);
}

void Supervisor::StopForPeer() {
  if (impl_->finished || !impl_->policy) return;
  impl_->Apply(impl_->policy->On(event::PeerStop{}));
}

void Supervisor::Reap() {
  if (impl_->policy) {
    impl_->Reap();
  } else {
    (void)ReapOrphans();
  }
}

Status Supervisor::Impl::SpawnWorker(const WorkerSpec& spec, std::size_t rank,
                                     const posix_spawnattr_t* attr) {
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  StreamFds streams[2];  // stdout, stderr
  if (options.capture_output) {
    for (int i : {0, 1}) {
      // stderr always has a reader (its tail, kTailBytes); stdout too to scan it.
      const bool reader = i == 1 || spec.stdout_console || options.markers != nullptr;
      if (Status s = OpenStream(i == 1 ? spec.stderr_file : spec.stdout_file, reader, &streams[i]);
          !s.ok()) {
        for (StreamFds& fds : streams) fds.CloseAll();
        return s;
      }
    }
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (options.capture_output) {
    posix_spawn_file_actions_adddup2(&fa, streams[0].child, STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&fa, streams[1].child, STDERR_FILENO);
  }
  // Nothing of the agent's leaks into a worker: not the gang's sockets (an
  // agent's death must close them at once), not the listeners, not other
  // workers' pipes. Asio does not open its sockets close-on-exec.
#if __GLIBC_PREREQ(2, 34)
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
#else
  CloseOnExecFrom(3);
#endif
  pid_t pid = -1;
  int rc = options.parent_death_signal != 0
               ? SpawnWithParentDeath(&pid, argv.data(), envp.data(), streams[0].child,
                                      streams[1].child, options.parent_death_signal)
               : posix_spawnp(&pid, argv[0], &fa, attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  for (StreamFds& s : streams) {
    if (s.child >= 0) ::close(std::exchange(s.child, -1));  // the worker's now
  }
  if (rc != 0) {
    for (StreamFds& s : streams) s.CloseAll();
    return SpawnFailure(rc, options.noun + " " + std::to_string(rank), spec.argv[0]);
  }
  if (options.worker_oom_score_adj) SetOomScoreAdj(pid, *options.worker_oom_score_adj);
  workers.push_back({pid, static_cast<int>(rank)});
  if (options.capture_output) return StartPumps(spec, rank, streams);
  return Status::Ok();
}

void Supervisor::Impl::AbandonStart() {
  // Nothing of this attempt may survive it.
  for (auto& w : workers) ::kill(-w.pid, SIGKILL);
  for (auto& w : workers) ::waitpid(w.pid, nullptr, 0);
  finished = true;
  pumps.clear();  // the workers are gone: the pumps end at EOF (or are stopped)
  for (auto* by_rank : {&stderr_pumps, &stdout_pumps}) by_rank->clear();
  workers.clear();
}

Status Supervisor::Start(std::vector<WorkerSpec> specs) {
  Impl& im = *impl_;
  im.policy.emplace(static_cast<int>(specs.size()),
                    im.options.noun == "worker" ? "local rank" : im.options.noun,
                    im.options.collateral_exit_code, im.options.signal_scope);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t empty, all;
  sigemptyset(&empty);
  sigfillset(&all);
  sigdelset(&all, SIGKILL);
  sigdelset(&all, SIGSTOP);
  // A fresh session (and so a fresh process group, setsid(2)), the default
  // signal mask (ours blocks everything we consume through signalfd) and
  // default dispositions (we ignore SIGPIPE). A session, as torchrun's workers
  // (torch.distributed.elastic's SubprocessHandler: Popen start_new_session):
  // where the kernel groups CPU time by session (sched_autogroup, sched(7)),
  // workers sharing the agent's session shared one CPU share among them all.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &all);

  Status result;
  for (std::size_t rank = 0; rank < specs.size() && result.ok(); ++rank) {
    result = im.SpawnWorker(specs[rank], rank, &attr);
  }
  posix_spawnattr_destroy(&attr);
  if (!result.ok()) im.AbandonStart();
  return result;
}

std::size_t ReadAheadBytes(std::optional<std::uint64_t> memory_limit, std::size_t streams) {
  if (!memory_limit) return kReadAheadMax;
  const std::uint64_t each =
      *memory_limit / kReadAheadShareOfLimit / std::max<std::size_t>(streams, 1);
  return static_cast<std::size_t>(
      std::clamp<std::uint64_t>(each, kReadAheadMin, kReadAheadMax));
}

int WorkerOomScoreAdj(int agent_adj) {
  return std::clamp(agent_adj + kWorkerOomScoreAdjAbove, -1000, 1000);
}

}  // namespace trainlet::agent
