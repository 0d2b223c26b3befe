// Real processes, real signals: the supervisor runs `sh` workers and the test
// process plays the agent (signals blocked and read from a signalfd, child
// subreaper so orphans come back to it).
#include "trainlet/agent/run/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include "trainlet/agent/run/signals.h"

namespace trainlet::agent {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

extern "C" char** environ;

std::vector<std::string> Env() {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  return env;
}

// The agent's fd 1 is a pipe (read_end() is the test's; nobody reads it unless
// the test does) until Restore() or the end of the object. The test's own
// logger writes fd 1 blocking (the agent's goes through a non-blocking sink):
// it is silenced meanwhile.
class StdoutPipe {
 public:
  StdoutPipe() {
    int p[2];
    EXPECT_EQ(::pipe2(p, O_CLOEXEC), 0);
    std::fflush(nullptr);
    read_end_ = p[0];
    saved_ = ::dup(STDOUT_FILENO);
    ::dup2(p[1], STDOUT_FILENO);
    ::close(p[1]);  // fd 1 is the only write end: Restore() makes the reader see EOF
    level_ = spdlog::get_level();
    spdlog::set_level(spdlog::level::off);
  }
  ~StdoutPipe() {
    Restore();
    ::close(read_end_);
  }
  int read_end() const { return read_end_; }
  void Restore() {
    if (saved_ < 0) return;
    spdlog::set_level(level_);
    ::dup2(saved_, STDOUT_FILENO);
    ::close(std::exchange(saved_, -1));
  }

 private:
  int read_end_ = -1;
  int saved_ = -1;
  spdlog::level::level_enum level_;
};

// Redirects one of our fds to a temporary file for the lifetime of the object.
class CapturedFd {
 public:
  explicit CapturedFd(int fd) : fd_(fd) {
    std::fflush(nullptr);
    path_ = std::filesystem::temp_directory_path() / ("sup-" + std::to_string(::getpid()) + "-" +
                                                      std::to_string(fd) + ".out");
    int f = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    saved_ = ::dup(fd);
    ::dup2(f, fd);
    ::close(f);
  }
  ~CapturedFd() {
    Restore();
    std::filesystem::remove(path_);
  }
  void Restore() {
    if (saved_ < 0) return;
    ::dup2(saved_, fd_);
    ::close(saved_);
    saved_ = -1;
  }
  std::string Text() {
    std::ifstream f(path_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }

 private:
  int fd_;
  int saved_ = -1;
  std::filesystem::path path_;
};

// A signal the test sends to itself (the "agent") some time after the start.
struct SendSignal {
  int signo = 0;
  std::chrono::milliseconds after{0};
};

// A process of the worker's own group that notes the SIGTERM it gets in `log`.
std::string GroupHelper(const std::string& log) {
  return "sh -c 'trap \"echo helper >> " + log + "; exit 0\" TERM; "
         "while :; do sleep 0.05; done' & ";
}

class SupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BlockHandledSignals();
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    dir_ = std::filesystem::temp_directory_path() / ("suptest-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs `scripts` (one sh -c script per worker) to the end; `after_start`
  // runs once the workers are up. Returns the result; fails the test if the
  // supervisor takes longer than `limit`.
  // `at_first_failure` runs in the supervisor's on_first_failure callback.
  SupervisorResult Run(const std::vector<std::string>& scripts, std::chrono::milliseconds grace,
                       SendSignal to_agent = {}, std::chrono::seconds limit = 20s,
                       std::function<void(Supervisor&, const FirstFailure&)> at_first_failure = {}) {
    asio::io_context io;
    SupervisorResult result;
    bool done = false;
    SupervisorOptions o;
    o.grace = grace;
    if (edit_options_) edit_options_(o);
    o.signal_scope = scope_;
    o.markers = markers_;
    Supervisor* self = nullptr;
    o.on_first_failure = [&](const FirstFailure& f) {
      if (at_first_failure) at_first_failure(*self, f);
    };
    Supervisor sup(io.get_executor(), o, [&](SupervisorResult r) {
      result = r;
      done = true;
      io.stop();
    });
    self = &sup;
    auto signals = SignalSource::Create(io.get_executor(), [&](int s) {
      if (s == SIGCHLD) {
        sup.Reap();
      } else {
        sup.OnSignal(s);
      }
    });
    EXPECT_TRUE(signals.ok());
    std::vector<WorkerSpec> specs;
    for (std::size_t i = 0; i < scripts.size(); ++i) {
      specs.push_back({{"/bin/sh", "-c", scripts[i]}, Env(), "[rank" + std::to_string(i) + "]: "});
    }
    if (edit_specs_) edit_specs_(specs);
    exitcodes::Status s = sup.Start(specs);
    EXPECT_TRUE(s.ok()) << s.ToString();
    std::vector<std::unique_ptr<asio::steady_timer>> calls;
    for (auto& [after, call] : calls_) {
      calls.push_back(std::make_unique<asio::steady_timer>(io, after));
      calls.back()->async_wait([&sup, call = call](boost::system::error_code ec) {
        if (!ec) call(sup);
      });
    }
    asio::steady_timer signal_timer(io, to_agent.after);
    if (to_agent.signo != 0) {
      signal_timer.async_wait([signo = to_agent.signo](boost::system::error_code ec) {
        if (!ec) ::kill(::getpid(), signo);  // blocked: arrives through the signalfd
      });
    }
    asio::steady_timer guard(io);
    guard.expires_after(limit);
    guard.async_wait([&](boost::system::error_code ec) {
      if (!ec) io.stop();
    });
    io.run();
    EXPECT_TRUE(done) << "supervisor did not finish within " << limit.count() << " s";
    return result;
  }

  std::string File(const std::string& name) { return (dir_ / name).string(); }
  // One worker: GroupHelper(log) & main(log); SIGTERM 500 ms in. Returns the
  // log: who noted the stop, in order.
  std::string StopOrder(const std::function<std::string(const std::string&)>& main,
                        std::chrono::milliseconds grace) {
    const std::string log = File("order");
    auto r = Run({GroupHelper(log) + main(log)}, grace, {SIGTERM, 500ms});
    EXPECT_EQ(r.exit_code, 143);
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  // Calls made on the running supervisor, this long after the start.
  void At(std::chrono::milliseconds after, std::function<void(Supervisor&)> call) {
    calls_.emplace_back(after, std::move(call));
  }
  std::filesystem::path dir_;
  std::vector<std::pair<std::chrono::milliseconds, std::function<void(Supervisor&)>>> calls_;
  std::function<void(std::vector<WorkerSpec>&)> edit_specs_;  // applied before Start
  std::function<void(SupervisorOptions&)> edit_options_;      // applied before Start
  SignalScope scope_ = SignalScope::kMain;
  const exitcodes::MarkerTable* markers_ = nullptr;  // SupervisorOptions::markers
};

bool NoChildrenLeft() {
  return ::waitpid(-1, nullptr, WNOHANG) < 0 && errno == ECHILD;
}

// The listing a stop signals: children, and grandchildren unless
// children_only; a zombie child (exited, not yet reaped) is not listed.
TEST(ListDescendants, ChildrenGrandchildrenAndNoZombies) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::setpgid(0, 0);  // with the grandchild: one group to kill on every way out
    if (::fork() == 0) {  // the grandchild
      ::pause();
      ::_exit(0);
    }
    (void)!::write(ready[1], "x", 1);
    ::pause();
    ::_exit(0);
  }
  const pid_t zombie = ::fork();
  if (zombie == 0) ::_exit(0);
  struct Reap {  // a failed ASSERT leaves no process behind
    pid_t child, zombie;
    ~Reap() {
      ::kill(-child, SIGKILL);
      ::kill(child, SIGKILL);
      ::waitpid(child, nullptr, 0);
      ::waitpid(zombie, nullptr, 0);
    }
  } reap{child, zombie};
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, zombie, &info, WEXITED | WNOWAIT), 0);  // a zombie now
  const auto children = ListDescendants(::getpid(), /*children_only=*/true);
  const auto all = ListDescendants(::getpid());
  EXPECT_NE(std::find(children.begin(), children.end(), child), children.end());
  EXPECT_EQ(std::find(children.begin(), children.end(), zombie), children.end());
  EXPECT_EQ(all.size(), children.size() + 1) << "the grandchild";
  EXPECT_EQ(std::find(all.begin(), all.end(), zombie), all.end());
  for (pid_t p : all) ::kill(p, SIGKILL);
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_F(SupervisorTest, AllSucceedAndOutputIsPrefixedLineByLine) {
  CapturedFd out(STDOUT_FILENO), err(STDERR_FILENO);
  auto r = Run({"echo one; echo two >&2; printf 'no newline'",
                "i=0; while [ $i -lt 2000 ]; do echo line-$i; i=$((i+1)); done"},
               5s);
  out.Restore();
  err.Restore();
  EXPECT_EQ(r.exit_code, 0);
  std::string o = out.Text(), e = err.Text();
  EXPECT_NE(o.find("[rank0]: one\n"), std::string::npos) << o.substr(0, 200);
  EXPECT_NE(e.find("[rank0]: two\n"), std::string::npos) << e;
  EXPECT_NE(o.find("[rank0]: no newline\n"), std::string::npos) << "partial line flushed at exit";
  // Every line of rank 1 arrives whole and in order.
  std::istringstream lines(o);
  std::string line;
  int next = 0;
  while (std::getline(lines, line)) {
    if (!line.starts_with("[rank1]: ")) {
      EXPECT_TRUE(line.starts_with("[rank0]: ")) << "interleaved: " << line;
      continue;
    }
    EXPECT_EQ(line, "[rank1]: line-" + std::to_string(next));
    ++next;
  }
  EXPECT_EQ(next, 2000);
  EXPECT_TRUE(NoChildrenLeft());
}

TEST_F(SupervisorTest, FirstFailureStopsTheOthersAndDecidesTheCode) {
  auto t0 = Clock::now();
  auto r = Run({"trap 'echo term > " + File("rank0") + "; exit 143' TERM; sleep 30 & wait",
                "sleep 0.2; exit 3"},
               60s, {}, 90s);
  EXPECT_EQ(r.exit_code, 3);
  ASSERT_TRUE(r.first_failure.has_value());
  EXPECT_EQ(r.first_failure->local_rank, 1);
  // Far below the 60 s grace: a busy machine can take seconds, not a minute.
  EXPECT_LT(Clock::now() - t0, 30s) << "the survivor was stopped by SIGTERM, not the grace";
  EXPECT_TRUE(std::filesystem::exists(File("rank0"))) << "rank 0 received SIGTERM";
  EXPECT_EQ(r.collateral, 1);
  EXPECT_TRUE(NoChildrenLeft());
}

// The stderr tail read at the first failure (what decides a restart) has the
// worker's last line, though it came right after 2 MB and just before exit.
TEST_F(SupervisorTest, TheStderrTailAtTheFirstFailureHasTheLastLine) {
  CapturedFd err(STDERR_FILENO);
  std::string tail;
  auto r = Run({"yes 'loss 0.1' | head -c 2000000 >&2; echo 'NCCL WARN NET/IB: last words' >&2; "
                "exit 1"},
               5s, {}, 20s, [&](Supervisor& sup, const FirstFailure& f) {
                 tail = sup.StderrTail(f.local_rank);
               });
  err.Restore();
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(tail.find("NCCL WARN NET/IB: last words\n"), std::string::npos)
      << tail.substr(tail.size() > 200 ? tail.size() - 200 : 0);
  EXPECT_LE(tail.size(), 8192u);
}

// Every byte of both streams passes the marker scanner: a marker on stdout,
// written in two pieces with a pause between (two reads), and then 20 KB of
// stderr, is the evidence at the first failure.
TEST_F(SupervisorTest, TheStrongestMarkerOfBothStreamsIsKeptPastTheTail) {
  const exitcodes::MarkerTable table = exitcodes::MarkerTable::Defaults();
  markers_ = &table;
  CapturedFd err(STDERR_FILENO);
  CapturedFd out(STDOUT_FILENO);
  std::optional<exitcodes::MarkerHit> hit;
  auto r = Run({"printf 'NCCL error: ncclRem'; sleep 0.3; printf 'oteError: peer gone\\n'; "
                "yes 'ImportError is weaker' | head -c 20000 >&2; exit 1"},
               5s, {}, 20s, [&](Supervisor& sup, const FirstFailure& f) {
                 hit = sup.StreamMarker(f.local_rank);
               });
  out.Restore();
  err.Restore();
  EXPECT_EQ(r.exit_code, 1);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(table.markers()[hit->index].text, "ncclRemoteError");
  EXPECT_EQ(hit->stream, "stdout");
  EXPECT_EQ(hit->line, "NCCL error: ncclRemoteError: peer gone");
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Log files (torchrun's --tee/--redirects): each worker writes its own files
// (its fd 1 is the file, as under torchrun), the console gets the teed
// streams prefixed and not the redirected one, and the failure's stderr tail
// comes from the followed file.
TEST_F(SupervisorTest, WorkersWriteTheirLogFilesAndTheConsoleFollowsThem) {
  edit_specs_ = [&](std::vector<WorkerSpec>& specs) {
    specs[0].stdout_file = File("0.out");
    specs[0].stderr_file = File("0.err");
    specs[1].stdout_file = File("1.out");
    specs[1].stdout_console = false;  // redirected: the file only
    specs[1].stderr_file = File("1.err");
  };
  CapturedFd out(STDOUT_FILENO), err(STDERR_FILENO);
  std::string tail;
  auto r = Run({"f=$(readlink /proc/$$/fd/1); echo \"$f\" > " + File("fd1") + "; echo out0; echo err0 >&2; printf part",
                "echo out1; sleep 0.3; echo 'NCCL WARN last words' >&2; exit 3"},
               5s, {}, 20s, [&](Supervisor& sup, const FirstFailure& f) {
                 tail = sup.StderrTail(f.local_rank);
               });
  out.Restore();
  err.Restore();
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(Slurp(File("fd1")), File("0.out") + "\n") << "the worker's stdout is its log file";
  EXPECT_EQ(Slurp(File("0.out")), "out0\npart");
  EXPECT_EQ(Slurp(File("0.err")), "err0\n");
  EXPECT_EQ(Slurp(File("1.out")), "out1\n");
  EXPECT_EQ(Slurp(File("1.err")), "NCCL WARN last words\n");
  EXPECT_NE(tail.find("NCCL WARN last words\n"), std::string::npos) << tail;
  const std::string o = out.Text(), e = err.Text();
  EXPECT_NE(o.find("[rank0]: out0\n"), std::string::npos) << o;
  EXPECT_NE(o.find("[rank0]: part\n"), std::string::npos) << "the unfinished line ended at exit";
  EXPECT_EQ(o.find("out1"), std::string::npos) << "redirected, not teed";
  EXPECT_NE(e.find("[rank0]: err0\n"), std::string::npos) << e;
  EXPECT_NE(e.find("[rank1]: NCCL WARN last words\n"), std::string::npos) << e;
  EXPECT_TRUE(NoChildrenLeft());
}

// A second writable description of a followed log file, opened and closed
// (dash's `echo >/dev/stderr` opens the path), does not end the stream: the
// marker written after it still reaches the console and the tail.
TEST_F(SupervisorTest, AReopenedLogFileIsStillFollowed) {
  edit_specs_ = [&](std::vector<WorkerSpec>& specs) { specs[0].stderr_file = File("0.err"); };
  CapturedFd err(STDERR_FILENO);
  std::string tail;
  auto r = Run({"echo 'warning: x' >/dev/stderr; sleep 0.1; echo 'NCCL WARN last words' >&2; exit 3"},
               5s, {}, 20s, [&](Supervisor& sup, const FirstFailure& f) {
                 tail = sup.StderrTail(f.local_rank);
               });
  err.Restore();
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(tail.find("NCCL WARN last words\n"), std::string::npos) << tail;
  const std::string e = err.Text();
  EXPECT_NE(e.find("[rank0]: warning: x\n"), std::string::npos) << e;
  EXPECT_NE(e.find("[rank0]: NCCL WARN last words\n"), std::string::npos) << e;
  EXPECT_EQ(Slurp(File("0.err")), "warning: x\nNCCL WARN last words\n");
}

// A teed log file lets the worker run ahead of a slow console; after the last
// child the agent keeps draining while the console takes bytes, so every
// line still arrives (the drain gives up only when nothing moves).
TEST_F(SupervisorTest, ASlowConsoleGetsEveryLineOfALogFilesBacklog) {
  edit_specs_ = [&](std::vector<WorkerSpec>& specs) { specs[0].stdout_file = File("0.out"); };
  StdoutPipe console;
  std::size_t lines = 0;
  std::thread reader([&] {  // about 1.6 MB/s
    char buf[16384];
    for (ssize_t n; (n = ::read(console.read_end(), buf, sizeof buf)) > 0;) {
      lines += static_cast<std::size_t>(std::count(buf, buf + n, '\n'));
      std::this_thread::sleep_for(10ms);
    }
  });
  auto r = Run({"yes 'a line of worker output' | head -c 5000000"}, 500ms, {}, 30s);
  console.Restore();  // the reader sees EOF
  reader.join();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(lines, (5000000u + 23) / 24) << "lines of the backlog lost at the drain (24-byte lines)";
}

// The read-ahead of each worker stream follows the memory limit: together at
// most 1/32 of it, each between 64 KiB and 1 MiB.
TEST(ReadAheadBytesTest, SizedToTheMemoryLimit) {
  struct Row {
    std::optional<std::uint64_t> limit;
    std::size_t streams, want;
  } rows[] = {
      {std::nullopt, 16, kReadAheadMax},     // no limit: the most
      {64ull << 30, 16, kReadAheadMax},      // 64 GiB: capped
      {256ull << 20, 8, 1u << 20},           // 256 MiB / 32 / 8 = 1 MiB
      {256ull << 20, 16, 512u << 10},        // ... / 16
      {64ull << 20, 16, 128u << 10},         // 64 MiB / 32 / 16
      {16ull << 20, 16, kReadAheadMin},      // 32 KiB each: the least
      {256ull << 20, 0, kReadAheadMax},      // no streams counted: as one
  };
  for (const Row& r : rows) {
    EXPECT_EQ(ReadAheadBytes(r.limit, r.streams), r.want)
        << (r.limit ? std::to_string(*r.limit) : "none") << " bytes, " << r.streams << " streams";
  }
}

TEST(WorkerOomScoreAdjTest, AboveTheAgentsAndWithinTheRange) {
  EXPECT_EQ(WorkerOomScoreAdj(0), kWorkerOomScoreAdjAbove);
  EXPECT_EQ(WorkerOomScoreAdj(-997), -997 + kWorkerOomScoreAdjAbove);  // a Guaranteed pod
  EXPECT_EQ(WorkerOomScoreAdj(900), 1000);
  EXPECT_EQ(WorkerOomScoreAdj(1000), 1000);  // BestEffort: equal, the larger process goes
  EXPECT_EQ(WorkerOomScoreAdj(-1000), -1000 + kWorkerOomScoreAdjAbove);
}

// Workers (and their children, which inherit it) get the oom_score_adj asked
// for; the agent keeps its own.
TEST_F(SupervisorTest, WorkersGetTheirOomScoreAdj) {
  const std::string own = [] {
    std::ifstream f("/proc/self/oom_score_adj");
    std::string v;
    f >> v;
    return v;
  }();
  const int want = WorkerOomScoreAdj(std::stoi(own));
  edit_options_ = [&](SupervisorOptions& o) { o.worker_oom_score_adj = want; };
  // The score is written right after the spawn: the script waits for it (a
  // child's copy shows it), 10 s at most, then reports what its child sees.
  auto r = Run({"n=0; while [ \"$(cat /proc/self/oom_score_adj)\" != " + std::to_string(want) +
                " ] && [ $n -lt 200 ]; do sleep 0.05; n=$((n+1)); done; "
                "cat /proc/self/oom_score_adj > " + File("adj")},
               5s);
  EXPECT_EQ(r.exit_code, 0);
  std::ifstream f(File("adj"));
  int got = -2000;
  f >> got;
  EXPECT_EQ(got, want);
  std::ifstream self("/proc/self/oom_score_adj");
  std::string now;
  self >> now;
  EXPECT_EQ(now, own) << "the agent's own score is left alone";
}

// Each worker leads a session of its own, as torchrun's do: with sched_autogroup
// (sched(7)) the kernel shares CPU time between sessions, and workers left in the
// agent's session had one share among them all on a loaded machine.
TEST_F(SupervisorTest, EachWorkerLeadsItsOwnSession) {
  auto r = Run({"set -- $(sed 's/.*) //' /proc/$$/stat); "
                "[ \"$4\" = $$ ] && [ \"$3\" = $$ ] && [ \"$4\" != " +
                    std::to_string(::getsid(0)) + " ]"},
               5s);
  EXPECT_EQ(r.exit_code, 0) << "the worker's session id and group id are its pid";
}

// A worker's own log file on a full disk (a 64 KiB tmpfs): one warning names
// the file and the error, whatever the number of failed writes.
TEST_F(SupervisorTest, AFullDiskUnderALogFileIsWarnedOnceNamingTheFile) {
  const std::string disk = File("disk");
  std::filesystem::create_directories(disk);
  if (::mount("tmpfs", disk.c_str(), "tmpfs", 0, "size=64k") != 0) {
    GTEST_SKIP() << "mounting a tmpfs needs CAP_SYS_ADMIN";
  }
  struct Unmount {
    std::string dir;
    ~Unmount() { ::umount2(dir.c_str(), MNT_DETACH); }
  } unmount{disk};
  const std::string log = disk + "/0.err";
  edit_specs_ = [&](std::vector<WorkerSpec>& specs) { specs[0].stderr_file = log; };
  CapturedFd out(STDOUT_FILENO), err(STDERR_FILENO);  // the agent's log, the console copy
  auto r = Run({"i=0; while [ $i -lt 2000 ]; do echo 'a worker line, on a disk that fills up' >&2;"
                " i=$((i+1)); done; exit 0"},
               5s);
  out.Restore();
  err.Restore();
  EXPECT_EQ(r.exit_code, 0);
  const std::string text = out.Text() + err.Text();
  const std::string warning = "log file " + log + ": " + std::strerror(ENOSPC);
  const std::size_t first = text.find(warning);
  EXPECT_NE(first, std::string::npos) << text.substr(0, 2000);
  EXPECT_EQ(text.find(warning, first + 1), std::string::npos) << "warned more than once";
  EXPECT_NE(text.find("[rank0]: a worker line, on a disk that fills up"), std::string::npos);
}

TEST_F(SupervisorTest, SignalDeathIs128PlusSignal) {
  auto r = Run({"kill -SEGV $$"}, 5s);
  EXPECT_EQ(r.exit_code, 128 + SIGSEGV);
}

TEST_F(SupervisorTest, SigtermIsForwardedAndEndsIn143EvenIfTheTrainerExits0) {
  auto r = Run({"trap 'echo got > " + File("w0") + "; exit 0' TERM; sleep 30 & wait",
                "trap 'echo got > " + File("w1") + "; exit 0' TERM; sleep 30 & wait"},
               10s, {SIGTERM, 300ms});
  EXPECT_EQ(r.exit_code, 143);
  EXPECT_TRUE(std::filesystem::exists(File("w0")));
  EXPECT_TRUE(std::filesystem::exists(File("w1")));
  EXPECT_FALSE(r.first_failure.has_value());
}

TEST_F(SupervisorTest, TrainerIgnoringSigtermIsKilledWhenGraceEnds) {
  auto t0 = Clock::now();
  auto r = Run({"trap '' TERM; while true; do sleep 0.05; done"}, 700ms,
               {SIGTERM, 200ms});
  auto elapsed = Clock::now() - t0;
  EXPECT_EQ(r.exit_code, 143);
  EXPECT_GE(elapsed, 900ms) << "not killed before the grace period";
  EXPECT_LT(elapsed, 30s) << "killed after it (a hang guard: the trainer loops forever)";
  EXPECT_TRUE(NoChildrenLeft());
}

TEST_F(SupervisorTest, UserSignalsAreForwardedWithoutStopping) {
  auto r = Run({"trap 'echo usr1 > " + File("usr1") + "; exit 0' USR1; sleep 30 & wait"}, 5s,
               {SIGUSR1, 300ms});
  EXPECT_EQ(r.exit_code, 0) << "USR1 is a notice, not a stop";
  EXPECT_TRUE(std::filesystem::exists(File("usr1")));
}

// The stop's SIGTERM goes to the main process alone (as the kubelet's to a
// container's first process): a helper in its group (a DataLoader worker, a
// checkpoint writer) gets it only after the main process has exited.
TEST_F(SupervisorTest, StopSignalsTheMainProcessFirstThenItsGroup) {
  auto saves = [](const std::string& log) {
    return "trap 'sleep 0.5; echo main >> " + log + "; exit 0' TERM; sleep 30 & wait";
  };
  EXPECT_EQ(StopOrder(saves, 10s), "main\nhelper\n")
      << "the helper must outlive the main process's save";
  EXPECT_TRUE(NoChildrenLeft());
}

// A main process that runs on past the reserve: its group gets SIGTERM
// StopReserve(grace) before the SIGKILL, while the main process still runs.
TEST_F(SupervisorTest, TheReserveReachesTheGroupWhileTheMainProcessRuns) {
  auto runs_on = [](const std::string& log) {
    return "trap 'echo main >> " + log + "' TERM; while :; do sleep 0.05; done";
  };
  EXPECT_EQ(StopOrder(runs_on, 1500ms), "main\nhelper\n")
      << "the helper's SIGTERM came before the SIGKILL";
  EXPECT_TRUE(NoChildrenLeft());
}

// --signal-scope group: the whole group at once (torchrun 2.x). The main
// process waits until its helper has noted its SIGTERM.
TEST_F(SupervisorTest, ScopeGroupSignalsTheWholeGroupAtOnce) {
  scope_ = SignalScope::kGroup;
  auto waits_for_helper = [](const std::string& log) {
    return "trap 'for i in $(seq 200); do grep -q helper " + log +
           " && break; sleep 0.05; done; echo main >> " + log + "; exit 0' TERM; sleep 30 & wait";
  };
  EXPECT_EQ(StopOrder(waits_for_helper, 20s), "helper\nmain\n");
}

// A forwarded SIGUSR1 reaches the main process only: its child, without a
// handler (SIGUSR1's default action ends it), lives on until the main process
// ends it with SIGTERM.
TEST_F(SupervisorTest, UserSignalsReachOnlyTheMainProcess) {
  auto r = Run({"sleep 30 & child=$!; trap 'kill -TERM $child; wait $child; echo $? > " +
                File("child") + "; exit 0' USR1; wait $child"},
               5s, {SIGUSR1, 300ms});
  EXPECT_EQ(r.exit_code, 0);
  std::ifstream in(File("child"));
  int code = -1;
  in >> code;
  EXPECT_EQ(code, 128 + SIGTERM) << "the child died of the SIGUSR1 meant for its parent";
}

// The hang's diagnostics signal follows the scope: with both a main process
// and its child handling SIGUSR1, only the main process gets it by default;
// with SignalScope::kGroup both do.
TEST_F(SupervisorTest, DiagnosticsFollowTheSignalScope) {
  for (SignalScope scope : {SignalScope::kMain, SignalScope::kGroup}) {
    scope_ = scope;
    const std::string log = File(scope == SignalScope::kMain ? "main" : "group");
    const std::string ready = log + ".ready";
    const std::string child = "sh -c 'trap \"echo child >> " + log + "\" USR1; : > " + ready +
                              "; while :; do sleep 0.05; done' & ";
    At(2s, [](Supervisor& s) { s.SendDiagnostics(SIGUSR1); });
    auto r = Run({child + "while [ ! -e " + ready + " ]; do sleep 0.01; done; trap 'sleep 0.5; "
                  "echo main >> " + log + "; exit 0' USR1; while :; do sleep 0.05; done"},
                 5s);
    calls_.clear();
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_EQ(Slurp(log), scope == SignalScope::kMain ? "main\n" : "child\nmain\n");
  }
}

// A helper the trainer started in its own session (setsid: another process
// group) gets SIGTERM once the trainer's main process has exited, and the run
// ends as soon as it is gone: not at the SIGKILL after the whole grace period.
TEST_F(SupervisorTest, AHelperInAnotherSessionGetsSigtermWhenTheMainProcessesExited) {
  const std::string helper = "setsid sh -c 'trap \"echo term > " + File("helper") +
                             "; exit 0\" TERM; while :; do sleep 0.05; done' & ";
  auto t0 = Clock::now();
  // The trainer takes a moment to stop (a checkpoint): its helper is still its
  // child, not yet one we adopted, when the stop starts.
  auto r = Run({helper + "trap 'sleep 1; exit 0' TERM; sleep 300 & wait", "sleep 300"}, 60s,
               {SIGTERM, 500ms}, 90s);
  EXPECT_EQ(r.exit_code, 143);
  EXPECT_TRUE(std::filesystem::exists(File("helper"))) << "the helper never got SIGTERM";
  EXPECT_LT(Clock::now() - t0, 30s) << "waited for the SIGKILL at the end of the grace period";
  EXPECT_TRUE(NoChildrenLeft());
}

// The same when a worker fails while its sibling, which started the helper,
// still runs (the helper is then a grandchild, not an adopted orphan).
TEST_F(SupervisorTest, AHelperInAnotherSessionGetsSigtermWhenASiblingFails) {
  const std::string helper = "setsid sh -c 'trap \"echo term > " + File("helper") +
                             "; exit 0\" TERM; while :; do sleep 0.05; done' & ";
  auto t0 = Clock::now();
  auto r = Run({helper + "trap 'sleep 1; exit 143' TERM; sleep 300 & wait", "sleep 0.5; exit 3"},
               60s, {}, 90s);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_TRUE(std::filesystem::exists(File("helper"))) << "the helper never got SIGTERM";
  EXPECT_LT(Clock::now() - t0, 30s) << "waited for the SIGKILL at the end of the grace period";
  EXPECT_TRUE(NoChildrenLeft());
}

// Hang diagnostics reach the worker that handles the signal and never one
// whose default action (terminate, for SIGUSR1) would end it.
TEST_F(SupervisorTest, DiagnosticsReachOnlyProcessesThatHandleTheSignal) {
  At(500ms, [](Supervisor& s) { s.SendDiagnostics(SIGUSR1); });
  auto r = Run({"trap 'echo usr1 >> " + File("w0") + "' USR1; trap 'exit 0' TERM; "
                "while :; do sleep 0.05; done",
                "trap 'echo term > " + File("w1") + "; exit 0' TERM; while :; do sleep 0.05; done"},
               5s, {SIGTERM, 1500ms});
  EXPECT_EQ(r.exit_code, 143) << "no worker died of the diagnostics signal";
  EXPECT_FALSE(r.first_failure.has_value());
  EXPECT_TRUE(std::filesystem::exists(File("w0"))) << "the handler never ran";
  EXPECT_TRUE(std::filesystem::exists(File("w1"))) << "worker 1 did not live to get SIGTERM";
  EXPECT_TRUE(NoChildrenLeft());
}

TEST_F(SupervisorTest, OrphansAndDaemonsAreReapedAfterTheTrainerExits) {
  // 30 short-lived orphans, a helper that finishes writing within the grace
  // period (Yelp/dumb-init#212's uploader), and a setsid daemon that ignores SIGTERM.
  std::string script =
      "for i in $(seq 30); do (sleep 0.1 &) ; done; "
      "(trap 'sleep 0.3; echo done > " + File("upload") + "; exit 0' TERM; sleep 30 & wait) & "
      "setsid sh -c 'trap \"\" TERM; while true; do sleep 0.05; done' & "
      "sleep 0.3; exit 0";
  auto t0 = Clock::now();
  auto r = Run({script}, 1500ms);
  EXPECT_EQ(r.exit_code, 0) << "the trainer's own result";
  EXPECT_GE(Clock::now() - t0, 1500ms) << "the daemon ignoring TERM costs the grace period";
  EXPECT_TRUE(std::filesystem::exists(File("upload"))) << "the helper could finish its write";
  EXPECT_TRUE(NoChildrenLeft());
}

constexpr const char* kEightMegabytesThenDone =
    "yes 'a line of worker output' | head -c 8000000; echo done > ";

// The container's output is a pipe whose reader stops reading (a log pipe
// under backpressure). The worker blocks on its own writes; the agent still
// takes SIGTERM, stops the worker, and finishes without waiting for the reader.
TEST_F(SupervisorTest, AStalledOutputReaderBlocksTheWorkerNotTheAgent) {
  auto t0 = Clock::now();
  SupervisorResult r;
  {
    StdoutPipe stalled;  // never read
    r = Run({kEightMegabytesThenDone + File("w0")}, 500ms, {SIGTERM, 700ms}, 10s);
  }
  EXPECT_EQ(r.exit_code, 143);
  EXPECT_FALSE(std::filesystem::exists(File("w0"))) << "8 MB went through a pipe nobody read";
  EXPECT_LT(Clock::now() - t0, 5s) << "SIGTERM, the grace period and a bounded drain";
  EXPECT_TRUE(NoChildrenLeft());
}

// With a log file (--tee), the file is the record and the console a mirror:
// the worker writes its file and goes on though the console is stalled, and
// the file holds everything; the agent still ends (its drain is bounded).
TEST_F(SupervisorTest, WithALogFileAStalledConsoleDoesNotBlockTheWorker) {
  edit_specs_ = [&](std::vector<WorkerSpec>& specs) { specs[0].stdout_file = File("0.out"); };
  auto t0 = Clock::now();
  SupervisorResult r;
  {
    StdoutPipe stalled;  // never read
    r = Run({kEightMegabytesThenDone + File("w0")}, 500ms, {}, 10s);
  }
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(std::filesystem::exists(File("w0"))) << "the worker was held up by the console";
  EXPECT_EQ(std::filesystem::file_size(File("0.out")), 8000000u);
  EXPECT_LT(Clock::now() - t0, 6s) << "the drain of the stalled console is bounded";
  EXPECT_TRUE(NoChildrenLeft());
}

TEST(SupervisorStartTest, MissingCommandIsAConfigError) {
  asio::io_context io;
  Supervisor sup(io.get_executor(), {}, [](SupervisorResult) {});
  auto s = sup.Start({{{"/nonexistent/trainer"}, {}, ""}, {{"sh"}, {}, ""}});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.failure_class(), exitcodes::FailureClass::kConfig);
  EXPECT_NE(s.message().find("/nonexistent/trainer"), std::string::npos);
  EXPECT_NE(s.message().find("No such file"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("PATH"), std::string::npos) << "a path is not searched in PATH";
  s = Supervisor(io.get_executor(), {}, [](SupervisorResult) {})
          .Start({{{"no-such-trainer-xyz"}, {"PATH=/usr/bin:/bin"}, ""}});
  EXPECT_NE(s.message().find("not found in PATH"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace trainlet::agent
