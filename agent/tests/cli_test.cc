// Runs the built binary for what only a parent sees: exit codes (the
// workers', 128+signal, a refusal's, each with the JSON summary as the last
// line), --help and --version, the exit-code contract, the subcommands, and
// `trainlet local` killed with SIGKILL. What the front end decides from a
// command line (validation, precedence, the plan) is front_end_test's, in
// process; what workers running under the agent show is agent_binary_test's.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "binary_runner.h"
#include "trainlet/agent/run/supervisor.h"

namespace {

using namespace trainlet_test;

TEST(CliTest, HelpAndVersion) {
  Outcome h = Trainlet("", "--help");
  EXPECT_EQ(h.code, 0);
  EXPECT_NE(h.out.find("--nnodes"), std::string::npos);
  EXPECT_NE(h.out.find("TRAINLET_NNODES"), std::string::npos);
  Outcome v = Trainlet("", "--version");
  EXPECT_EQ(v.code, 0);
  EXPECT_EQ(v.out.rfind("trainlet ", 0), 0u) << v.out;
  // The release version (VERSION file) and the commit it was built from.
  EXPECT_NE(v.out.find(TRAINLET_EXPECTED_VERSION " (commit "), std::string::npos) << v.out;
  Outcome e = Trainlet("", "exit-codes");
  EXPECT_EQ(e.code, 0);
  EXPECT_NE(e.out.find("143"), std::string::npos);
}

// Bad input gets one line and its class's code at once, before any network
// traffic, and the JSON summary every non-zero exit ends with: one row for
// each stage that can refuse (front_end_test has every refusal, in process).
TEST(CliTest, BadInputIsOneLineAndItsCodeAtOnce) {
  struct Row {
    std::string env, args, expected;
    int code = 78;
    std::string failure_class = "config";
  };
  const std::vector<Row> rows = {
      {"", "--no-such-flag -- true", "--no-such-flag"},                 // the parse
      {"", "policy --container a --container b", "--container is given more than once"},
      {"", "--log-level loud -- true", "--log-level='loud'"},           // before the table
      {"TRAINLET_NNODES=x", "-- true", "TRAINLET_NNODES='x'"},          // Validate
      {"", "--token-file /nonexistent/token -- true", "'/nonexistent/token' cannot be read"},
      // A device or an endless file is refused before any read (it used to grow
      // the agent until the OOM killer came); a path the system refuses is 78
      // naming it (it was an exception: "internal error", 75).
      {"", "--token-file /dev/zero -- true", "'/dev/zero' is a character device"},
      // (The summary cuts the 4,100-character path: front_end_test sees the whole line.)
      {"", "--log-dir /tmp/" + std::string(4100, 'a') + " -r 3 -- true", "--log-dir '/tmp/aaa"},
      {"", "--run-dir /tmp/" + std::string(4100, 'a') + " -- true", "--run-dir /tmp/aaa"},
      {"TRAINLET_RUN_PATH=xxx", "-- true", "TRAINLET_RUN_PATH"},       // the variable, not the flag
      {"", "", "no trainer command"},                                   // the plan
      {"JOB_COMPLETION_INDEX=1", "-- true", "number of pods is missing"},
      {"", "-- /no/such/trainer", "cannot execute the trainer command '/no/such/trainer'"},
      // A flag means what it says on its own: --require-gpus without --preflight
      // on a pod without a GPU is a hardware failure, not a silent success.
      {"TRAINLET_LIBCUDA=/nonexistent/libcuda.so.1", "--require-gpus -- true",
       "--require-gpus: no usable GPU", 74, "hardware"},
  };
  for (const Row& r : rows) {
    Outcome run = Trainlet(r.env, r.args);
    EXPECT_EQ(run.code, r.code) << r.env << " " << r.args.substr(0, 200) << ": " << run.out;
    EXPECT_NE(run.out.find(r.expected), std::string::npos)
        << r.env << " " << r.args.substr(0, 200) << ": " << run.out;
    EXPECT_EQ(run.out.find("internal error"), std::string::npos) << run.out;
    EXPECT_LT(run.seconds, kPromptExitSeconds) << r.args.substr(0, 200);
    // The last line is the JSON summary every non-zero exit ends with.
    std::string last = run.out.substr(run.out.rfind('\n', run.out.size() - 2) + 1);
    EXPECT_NE(last.find("{\"attempt\""), std::string::npos) << last;
    EXPECT_NE(last.find("\"class\":\"" + r.failure_class + "\""), std::string::npos) << last;
  }
}

TEST(CliTest, ExitCodeIsTheWorkersOr128PlusSignal) {
  EXPECT_EQ(Trainlet("", "-- sh -c 'exit 7'").code, 7);
  EXPECT_EQ(Trainlet("", "-- sh -c 'kill -KILL $$'").code, 128 + 9);
  EXPECT_EQ(Trainlet("", "--nproc-per-node 2 -- sh -c '[ $RANK = 1 ] && exit 5; sleep 20'").code,
            5);
}

// `trainlet local` killed with SIGKILL (the OOM killer, a CI timeout) cannot
// stop anything itself: its agents get SIGTERM from the kernel (a parent-death
// signal) and stop their workers, instead of all running on unsupervised.
TEST(CliTest, LocalKilledWithSigkillTakesItsAgentsAndWorkersAlong) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("cli-local-kill-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  // Orphans come back to us: we can watch them end and reap them.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  const std::string worker = "echo $$ > " + dir.string() + "/worker-$RANK.tmp && mv " +
                             dir.string() + "/worker-$RANK.tmp " + dir.string() +
                             "/worker-$RANK; exec sleep 60";
  std::vector<std::string> args = {"/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "HOSTNAME=x",
                                   "TRAINLET_LIBNCCL=/nonexistent/libnccl.so.2", TRAINLET_BIN,
                                   "local", "--nnodes", "2", "--nproc-per-node", "2",
                                   "--grace-period", "2", "--", "sh", "-c", worker};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  const std::string log = (dir / "local.log").string();
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT, 0644);
  posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  pid_t local = -1;
  ASSERT_EQ(::posix_spawn(&local, argv[0], &fa, nullptr, argv.data(), nullptr), 0);
  posix_spawn_file_actions_destroy(&fa);
  struct KillAll {  // on every way out: nothing of this test keeps running
    ~KillAll() {
      for (pid_t p : trainlet::agent::ListDescendants(::getpid())) ::kill(p, SIGKILL);
      while (::waitpid(-1, nullptr, 0) > 0) {
      }
      ::prctl(PR_SET_CHILD_SUBREAPER, 0);
    }
  } kill_all;
  auto read_log = [&] {
    std::ifstream f(log);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };

  std::vector<pid_t> workers;
  auto deadline = Clock::now() + std::chrono::seconds(30);
  for (int rank = 0; rank < 4 && Clock::now() < deadline;) {
    std::ifstream f(dir / ("worker-" + std::to_string(rank)));
    pid_t pid = 0;
    if (f >> pid) {
      workers.push_back(pid);
      ++rank;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ASSERT_EQ(workers.size(), 4u) << read_log();
  const std::vector<pid_t> agents = trainlet::agent::ListDescendants(local, /*children_only=*/true);
  EXPECT_EQ(agents.size(), 2u) << read_log();

  ASSERT_EQ(::kill(local, SIGKILL), 0);
  ASSERT_EQ(::waitpid(local, nullptr, 0), local);
  auto t_killed = Clock::now();
  std::vector<pid_t> all = agents;
  all.insert(all.end(), workers.begin(), workers.end());
  auto alive = [&] {
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    std::vector<pid_t> left;
    for (pid_t p : all) {
      if (::kill(p, 0) == 0) left.push_back(p);
    }
    return left;
  };
  std::vector<pid_t> left = alive();
  // The workers sleep 60 s: gone well before that means they were stopped.
  while (!left.empty() && Clock::now() - t_killed < std::chrono::seconds(40)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    left = alive();
  }
  EXPECT_TRUE(left.empty()) << left.size() << " agent(s)/worker(s) still running 40 s after "
                            << "`trainlet local` was killed\n" << read_log();
  fs::remove_all(dir);
}

// A SIGTERM/SIGINT while the agent is still starting ends it at once with the
// stop's code (the pod: 143; `trainlet local`: 128 + signal), at each point of
// the start-up that takes time: GPU discovery on a wedged driver (it used to
// wait out the 20 s discovery timeout, then exit 74), and resolving a leader
// that does not exist yet (the rendezvous loop).
TEST(CliTest, AStopDuringStartUpEndsItAtOnce) {
  struct Row {
    std::string what, env, args;
    int signo, code;
  };
  const std::string hang = std::string("FAKE_CUDA_HANG=1 TRAINLET_LIBCUDA=") + FAKE_LIBCUDA;
  const std::vector<Row> rows = {
      {"GPU discovery", hang, "--require-gpus -- true", SIGTERM, 143},
      {"GPU discovery, SIGINT", hang, "--nproc-per-node gpu -- true", SIGINT, 143},
      {"resolving the leader", "",
       "--nnodes 2 --node-rank 1 --master-addr no-such-leader.invalid --rdzv-timeout 120 -- true",
       SIGTERM, 143},
      {"local, GPU discovery", hang, "local --nproc-per-node gpu -- true", SIGINT, 130},
  };
  for (const Row& r : rows) {
    const std::string log = testing::TempDir() + "stop-at-start.log";
    std::vector<std::string> args = {"/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "HOSTNAME=x",
                                     "TRAINLET_LIBNCCL=/nonexistent/libnccl.so.2"};
    std::istringstream env(r.env), words(r.args);
    for (std::string w; env >> w;) args.push_back(w);
    args.push_back(TRAINLET_BIN);
    for (std::string w; words >> w;) args.push_back(w);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
    pid_t pid = -1;
    ASSERT_EQ(::posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), nullptr), 0);
    posix_spawn_file_actions_destroy(&fa);
    // Past main's first line (the stop signals blocked: /proc's SigBlk), then
    // into the slow step.
    auto blocked = [pid] {
      std::ifstream f("/proc/" + std::to_string(pid) + "/status");
      for (std::string line; std::getline(f, line);) {
        if (line.rfind("SigBlk:", 0) == 0) {
          return (std::stoull(line.substr(7), nullptr, 16) >> (SIGTERM - 1) & 1) != 0;
        }
      }
      return false;
    };
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (!blocked() && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    const auto t0 = Clock::now();
    ASSERT_EQ(::kill(pid, r.signo), 0);
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0 && Clock::now() - t0 < std::chrono::seconds(15)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const double took = std::chrono::duration<double>(Clock::now() - t0).count();
    if (took >= 15) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
    std::ifstream f(log);
    const std::string out(std::istreambuf_iterator<char>(f), {});
    ASSERT_TRUE(WIFEXITED(status)) << r.what << ": " << out;
    EXPECT_EQ(WEXITSTATUS(status), r.code) << r.what << ": " << out;
    EXPECT_LT(took, 5.0) << r.what << ": " << out;
  }
}

// A subcommand is one as the very first argument (front_end_test has their
// names as the trainer's anywhere else).
TEST(CliTest, SubcommandsAsTheFirstArgument) {
  Outcome p = Trainlet("", "policy");
  EXPECT_EQ(p.code, 0) << p.out;
  EXPECT_NE(p.out.find("podFailurePolicy"), std::string::npos) << p.out;
  EXPECT_EQ(Trainlet("", "exit-codes").code, 0);
  Outcome probe = Trainlet("", "probe ready --health-port 29613");
  EXPECT_EQ(probe.code, 1) << probe.out;  // nothing listens there: not ready
  Outcome l = Trainlet("", "local --nnodes 2 --no-python sh -c 'echo r=$RANK'");
  EXPECT_EQ(l.code, 0) << l.out;
  EXPECT_NE(l.out.find("[rank1]: r=1"), std::string::npos) << l.out;
}

// One truth for exit codes: every row `trainlet exit-codes` prints is a row of
// the README's table, word for word.
TEST(CliTest, ExitCodesAreTheReadmesTable) {
  Outcome e = Trainlet("", "exit-codes");
  ASSERT_EQ(e.code, 0) << e.out;
  std::ifstream in(TRAINLET_README);
  const std::string readme((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream lines(e.out);
  std::string line;
  std::getline(lines, line);  // the header
  int rows = 0;
  while (std::getline(lines, line) && !line.empty()) {  // the notes after the table aside
    std::istringstream words(line);
    std::string cls, code, meaning;
    words >> cls >> code;
    std::getline(words >> std::ws, meaning);
    const std::string row = "| " + cls + " | " + (code == "*" ? "its code" : code) + " | " +
                            meaning + " |";
    EXPECT_NE(readme.find(row), std::string::npos) << "README lacks: " << row;
    ++rows;
  }
  EXPECT_EQ(rows, 9);
  // Then the rules for a worker's failure, each in the README's list.
  int rules = 0;
  while (std::getline(lines, line)) {
    const std::size_t dot = line.find(". ");
    if (dot == std::string::npos || line.find_first_not_of(" 0123456789") != dot) continue;
    const std::string rule = line.substr(line.find_first_not_of(' '));
    EXPECT_NE(readme.find("\n" + rule + "\n"), std::string::npos) << "README lacks: " << rule;
    ++rules;
  }
  EXPECT_EQ(rules, 12);
}

}  // namespace
