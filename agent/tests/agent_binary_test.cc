// Runs the built binary with workers under it, for what only they show: the
// environment they get, restarts in place, hang detection and its signal,
// readiness, per-rank log files, the interpreter of the venv the binary runs
// from. What the front end decides from a command line is front_end_test's
// (in process); exit codes, --help and signals are cli_test's.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "binary_runner.h"

namespace {

using namespace trainlet_test;

TEST(AgentBinaryTest, WorkersGetTorchrunEnvironment) {
  Outcome r = Trainlet("", "--nproc-per-node 2 -- sh -c 'echo $RANK/$LOCAL_RANK/$WORLD_SIZE/"
                       "$LOCAL_WORLD_SIZE/$GROUP_RANK/$ROLE_RANK/$MASTER_ADDR/$MASTER_PORT/"
                       "$TORCHELASTIC_RESTART_COUNT/$OMP_NUM_THREADS; "
                       "test -n \"$TORCHELASTIC_ERROR_FILE\" && test -n \"$TORCHELASTIC_RUN_ID\" "
                       "&& echo has-files'");
  EXPECT_EQ(r.code, 0) << r.out;
  // MASTER_PORT: a port the leader found free (no --master-port), not 29500.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(\[rank1\]: 1/1/2/2/0/1/127\.0\.0\.1/(\d+)/0/1)")))
      << r.out;
  EXPECT_NE(m[1], "29500") << r.out;
  EXPECT_NE(r.out.find("[rank0]: 0/0/2/2/0/0/127.0.0.1/" + m[1].str() + "/0/1"), std::string::npos)
      << "one MASTER_PORT for every worker: " << r.out;
  EXPECT_NE(r.out.find("[rank0]: has-files"), std::string::npos) << r.out;
}

// The workers' error-file directory is gone when the agent exits: empty, and
// with an error file a worker wrote in it (which the agent read first).
TEST(AgentBinaryTest, TheErrorFileDirectoryIsRemovedAtExit) {
  // torchelastic's error-file format, as a trainer's @record would write it.
  const std::string json = "/tmp/cli-test-error-" + std::to_string(::getpid()) + ".json";
  {
    std::ofstream f(json);
    f << R"({"message": {"message": "ModuleNotFoundError: No module named 'apex'", "extraInfo": {}}})";
  }
  for (std::string body : {std::string(""), "cp " + json + " $TORCHELASTIC_ERROR_FILE; exit 1"}) {
    Outcome r = Trainlet("", "-- sh -c 'echo dir=$(dirname $TORCHELASTIC_ERROR_FILE); " + body + "'");
    auto at = r.out.find("dir=");
    ASSERT_NE(at, std::string::npos) << r.out;
    std::string dir = r.out.substr(at + 4, r.out.find('\n', at) - at - 4);
    ASSERT_NE(dir.find("trainlet-"), std::string::npos) << dir;
    EXPECT_NE(::access(dir.c_str(), F_OK), 0) << dir << " is still there\n" << r.out;
    if (!body.empty()) {  // read before it went: a deterministic Python error is bug (42)
      EXPECT_EQ(r.code, 42) << r.out;
      EXPECT_NE(r.out.find("its error file says 'ModuleNotFoundError'"), std::string::npos)
          << r.out;
    }
  }
  std::remove(json.c_str());
}

TEST(AgentBinaryTest, MaxRestartsRestartsInPlaceThenFollowsTheContract) {
  // Fails in generations 0 and 1, succeeds in 2: two restarts are enough
  // (PET_MAX_RESTARTS is torchrun's variable).
  const std::string flaky =
      "-- sh -c 'echo gen=$TORCHELASTIC_RESTART_COUNT/$TORCHELASTIC_MAX_RESTARTS; "
      "test $TORCHELASTIC_RESTART_COUNT -ge 2 || exit 3'";
  Outcome r = Trainlet("PET_MAX_RESTARTS=2", flaky);
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* g : {"gen=0/2", "gen=1/2", "gen=2/2"}) {
    EXPECT_NE(r.out.find(g), std::string::npos) << g << "\n" << r.out;
  }
  // One restart is not enough: the worker's own code, after generation 1.
  r = Trainlet("", "--max-restarts 1 " + flaky);
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("gen=1/1"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("gen=2/1"), std::string::npos) << r.out;
  // bug (a --fatal-exit-codes code) is never restarted.
  r = Trainlet("", "--max-restarts 3 -- sh -c 'echo gen=$TORCHELASTIC_RESTART_COUNT; exit 42'");
  EXPECT_EQ(r.code, 42) << r.out;
  EXPECT_EQ(r.out.find("gen=1"), std::string::npos) << r.out;
}

TEST(AgentBinaryTest, HangIsDetectedFromTheHeartbeatFile) {
  // Worker 1 beats twice then stops; worker 0 keeps beating. Worker 0 also shows
  // it got the diagnostics signal.
  Outcome r = Trainlet(
      "", "--nproc-per-node 2 --hang-timeout 2 --grace-period 1 -- sh -c '"
          "trap \"echo diagnostics-$LOCAL_RANK\" USR1; "
          "if [ $LOCAL_RANK = 1 ]; then touch $TRAINLET_HEARTBEAT_FILE; sleep 0.2; "
          "touch $TRAINLET_HEARTBEAT_FILE; sleep 30 & wait; sleep 30 & wait; fi; "
          "while true; do touch $TRAINLET_HEARTBEAT_FILE; sleep 0.1; done'");
  EXPECT_EQ(r.code, 75) << r.out;
  EXPECT_NE(r.out.find("\"class\":\"infra\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hang: local rank 1 showed no progress"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("local rank 0 showed"), std::string::npos) << "rank 0 was beating";
  EXPECT_NE(r.out.find("[rank1]: diagnostics-1"), std::string::npos) << r.out;
  // Not after the sleeps (60 s): a hang guard, not a speed target (a busy
  // machine may take seconds to start and stop processes).
  EXPECT_LT(r.seconds, 40.0);
}

TEST(AgentBinaryTest, BeatingWorkersAreNotHung) {
  // Beats every 0.1 s for 4.5 s: three limits' worth (a limit a busy machine's
  // scheduling cannot exceed between two beats).
  Outcome r = Trainlet("", "--hang-timeout 1.5 -- sh -c 'i=0; while [ $i -lt 45 ]; do "
                           "touch $TRAINLET_HEARTBEAT_FILE; sleep 0.1; i=$((i+1)); done'");
  EXPECT_EQ(r.code, 0) << r.out;
  Outcome silent = Trainlet("", "--hang-timeout 0.3 --hang-start-timeout 30 -- sh -c 'sleep 1'");
  EXPECT_EQ(silent.code, 0) << "the first heartbeat has its own, longer limit: " << silent.out;
  Outcome never = Trainlet("", "--hang-timeout 0.3 --hang-start-timeout 0.6 --grace-period 1 "
                               "-- sh -c 'sleep 60'");
  EXPECT_EQ(never.code, 75) << never.out;
  EXPECT_NE(never.out.find("never showed progress in 0.6 s"), std::string::npos) << never.out;
}

// examples/k8s/indexed-job.yaml turns hang detection on for whatever trainer
// the image runs: one that never touches the file does not take part, and is
// not failed for it (without --hang-start-timeout).
TEST(AgentBinaryTest, ATrainerThatNeverTouchesTheHeartbeatFileIsNotHung) {
  Outcome r = Trainlet("", "--hang-timeout 0.3 --grace-period 1 -- sh -c 'sleep 1.5; exit 0'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("hang:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("did not touch TRAINLET_HEARTBEAT_FILE"), std::string::npos) << r.out;
}

// A hung worker that does not handle --hang-signal (SIGUSR1's default action
// is to terminate; a Python trainer without faulthandler.register) is not sent
// it: it lives on to get the stop's SIGTERM, and the log says no stack dump was
// possible. The one that handles it gets it.
TEST(AgentBinaryTest, TheDiagnosticsSignalNeverKillsAWorker) {
  Outcome r = Trainlet(
      "", "--nproc-per-node 2 --hang-timeout 0.5 --grace-period 2 -- sh -c '"
          "if [ $LOCAL_RANK = 0 ]; then trap \"echo dump-0\" USR1; fi; "
          "trap \"echo term-$LOCAL_RANK; exit 0\" TERM; "
          "touch $TRAINLET_HEARTBEAT_FILE; while :; do sleep 0.05; done'");
  EXPECT_EQ(r.code, 75) << r.out;
  EXPECT_NE(r.out.find("[rank0]: dump-0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank1]: term-1"), std::string::npos)
      << "rank 1 did not live to get SIGTERM: " << r.out;
  EXPECT_NE(r.out.find("local rank 1 (pid"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no stack dump is possible"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("SIGUSR1 (10)"), std::string::npos) << "a worker died of it: " << r.out;
}

// The agent in the background, as a pod's container runs it (its output
// discarded): its pid, ours to stop and reap.
pid_t Spawn(const std::string& args) {
  std::vector<std::string> words = {"/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "HOSTNAME=x",
                                    "TRAINLET_LIBNCCL=/nonexistent/libnccl.so.2", TRAINLET_BIN};
  std::istringstream in(args);
  for (std::string w; in >> w;) words.push_back(w);
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  EXPECT_EQ(::posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), nullptr), 0) << args;
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

// SIGTERM, then its exit reaped.
void Stop(pid_t pid) {
  if (pid <= 0) return;
  ::kill(pid, SIGTERM);
  ::waitpid(pid, nullptr, 0);
}

// `trainlet probe WHAT` until it exits `want`, or a bound that only a hang
// reaches (a busy machine may take seconds to start the agent); the last code.
int ProbeUntil(const std::string& what, const std::string& port, int want) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  int code = -1;
  while (Clock::now() < deadline) {
    code = Trainlet("", "probe " + what + " --health-port " + port).code;
    if (code == want) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return code;
}

// A leader waiting for a pod that never comes is live but not ready; a lone
// pod whose worker runs is ready; after the exit nothing answers. (Polled, not
// slept for: on a loaded machine an agent can take seconds to listen.)
TEST(AgentBinaryTest, ReadinessMeansTheGangHasFormed) {
  const std::string port = FreePortPair();  // the health port; PORT+1 the rendezvous's
  const std::string rdzv = std::to_string(std::stoi(port) + 1);
  pid_t leader = Spawn("--health-port " + port + " --nnodes 2 --node-rank 0 --master-addr "
                       "127.0.0.1 --rdzv-port " + rdzv + " --rdzv-timeout 120 -- true");
  EXPECT_EQ(ProbeUntil("live", port, 0), 0) << "the waiting leader is live";
  EXPECT_EQ(Trainlet("", "probe ready --health-port " + port).code, 1)
      << "but not ready: its gang has not formed";
  Stop(leader);
  pid_t lone = Spawn("--health-port " + port + " -- sleep 120");
  EXPECT_EQ(ProbeUntil("ready", port, 0), 0) << "a lone pod whose worker runs is ready";
  Stop(lone);
  EXPECT_EQ(Trainlet("", "probe ready --health-port " + port).code, 1) << "gone: nothing answers";
}

TEST(AgentBinaryTest, TorchrunFlagsInBothSpellingsAndPetVariables) {
  const char* show = " --no-python sh -c 'echo $ROLE_NAME/$TORCHELASTIC_RUN_ID/$WORLD_SIZE/"
                     "$TORCH_NCCL_ASYNC_ERROR_HANDLING/$NCCL_ASYNC_ERROR_HANDLING'";
  Outcome r = Trainlet("", std::string("--nproc_per_node 2 --role trainer --rdzv_id job7 "
                                       "--max_restarts 0 --monitor_interval 1 --start_method fork "
                                       "--rdzv_backend c10d --nnodes 1:1") + show);
  EXPECT_EQ(r.code, 0) << r.out;
  // Only torch >= 2.2's name is set; a user's old name passes through alone.
  EXPECT_NE(r.out.find("[rank1]: trainer/job7/2/1/\n"), std::string::npos) << r.out;
  r = Trainlet("PET_ROLE=w PET_RDZV_ID=j PET_NPROC_PER_NODE=2 NCCL_ASYNC_ERROR_HANDLING=0",
               show);
  EXPECT_NE(r.out.find("[rank1]: w/j/2//0"), std::string::npos) << r.out;
  r = Trainlet("TORCH_NCCL_ASYNC_ERROR_HANDLING=3 NCCL_ASYNC_ERROR_HANDLING=2", show);
  EXPECT_NE(r.out.find("[rank0]: default/"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/1/3/2"), std::string::npos) << r.out;  // never replaced
}

// Per-rank log files in torchrun's layout; --tee also on the console,
// --redirects only in the file; --local-ranks-filter keeps ranks off the
// console but not out of their files.
TEST(AgentBinaryTest, LogFilesInTorchrunsLayout) {
  const std::string dir = "/tmp/cli-test-logs-" + std::to_string(::getpid());
  Outcome r = Trainlet("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='<${role_name}:${rank}> '",
                       "--nproc-per-node 2 --rdzv-id run9 --log-dir " + dir +
                           " --redirects 0:1 --tee 1:3 --local-ranks-filter 1 --no-python "
                           "sh -c 'echo out$LOCAL_RANK; echo err$LOCAL_RANK >&2'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("out0"), std::string::npos) << r.out;  // redirected
  EXPECT_EQ(r.out.find("err0"), std::string::npos) << r.out;  // filtered out
  EXPECT_NE(r.out.find("<default:1> out1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("<default:1> err1"), std::string::npos) << r.out;
  FILE* ls = ::popen(("ls -d " + dir + "/run9_*/attempt_0").c_str(), "r");
  char buf[4096] = {};
  std::string attempt(std::fgets(buf, sizeof buf, ls) ? buf : "");
  ::pclose(ls);
  ASSERT_FALSE(attempt.empty()) << r.out;
  attempt.pop_back();
  EXPECT_EQ(Slurp(attempt + "/0/stdout.log"), "out0\n");
  EXPECT_FALSE(std::ifstream(attempt + "/0/stderr.log").good());
  EXPECT_EQ(Slurp(attempt + "/1/stdout.log"), "out1\n");
  EXPECT_EQ(Slurp(attempt + "/1/stderr.log"), "err1\n");
  std::system(("rm -rf " + dir).c_str());
}

// The files hold what a worker wrote before the grace period's SIGKILL.
TEST(AgentBinaryTest, LogFilesAreCompleteAfterSigkillEscalation) {
  const std::string dir = "/tmp/cli-test-kill-" + std::to_string(::getpid());
  Outcome r = Trainlet("", "--grace-period 0.3 --log-dir " + dir + " --rdzv-id k -r 3 "
                           "--no-python sh -c 'trap \"\" TERM; echo started; "
                           "i=0; while [ $i -lt 2000 ]; do echo line$i; i=$((i+1)); done; "
                           "kill -TERM $PPID; sleep 30'");
  EXPECT_NE(r.code, 0) << r.out;
  FILE* f = ::popen(("cat " + dir + "/k_*/attempt_0/0/stdout.log | tail -1").c_str(), "r");
  char buf[256] = {};
  std::string last(std::fgets(buf, sizeof buf, f) ? buf : "");
  ::pclose(f);
  EXPECT_EQ(last, "line1999\n") << r.out;
  std::system(("rm -rf " + dir).c_str());
}

// JAX on the same gang: the coordinator at MASTER_ADDR and the leader's JAX port.
TEST(AgentBinaryTest, WorkersGetJaxEnvironment) {
  Outcome r = Trainlet("", "--nproc-per-node 2 --jax-port 29611 -- sh -c 'echo "
                           "$JAX_COORDINATOR_ADDRESS/$JAX_NUM_PROCESSES/$JAX_PROCESS_ID'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("[rank1]: 127.0.0.1:29611/2/1"), std::string::npos) << r.out;
  r = Trainlet("", "--jax-port 0 -- sh -c 'echo jax=${JAX_COORDINATOR_ADDRESS:-none}'");
  EXPECT_NE(r.out.find("[rank0]: jax=none"), std::string::npos) << r.out;
}

// torchrun's flags may be repeated, the last wins (argparse), and a one-letter
// option takes "=VALUE" (-t=3), as torchrun's command lines do.
TEST(AgentBinaryTest, RepeatedTorchrunFlagsTakeTheLastValue) {
  const std::string dir = "/tmp/cli-test-rep-" + std::to_string(::getpid());
  Outcome r = Trainlet("", "--nproc_per_node 1 --nproc-per-node=2 --nnodes 1 --nnodes=1 "
                           "--role a --role b --no-python sh -c 'echo $ROLE_NAME/$WORLD_SIZE'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("[rank1]: b/2"), std::string::npos) << r.out;
  r = Trainlet("", "--log-dir " + dir + " --rdzv-id rep -r 3 -r=1 -t=2 --no-python sh -c "
                   "'echo out; echo err >&2'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("[rank0]: out"), std::string::npos) << "-r=1 redirects stdout: " << r.out;
  EXPECT_NE(r.out.find("[rank0]: err"), std::string::npos) << "-t=2 tees stderr: " << r.out;
  FILE* ls = ::popen(("cat " + dir + "/rep_*/attempt_0/0/stdout.log " + dir +
                      "/rep_*/attempt_0/0/stderr.log").c_str(), "r");
  char buf[256] = {};
  std::string files;
  while (std::fgets(buf, sizeof buf, ls)) files += buf;
  ::pclose(ls);
  EXPECT_EQ(files, "out\nerr\n") << r.out;
  std::system(("rm -rf " + dir).c_str());
}

// The interpreter, in torchrun's order: --python, PYTHON_EXEC, the venv the
// binary runs from (pip's layout: <venv>/bin/trainlet, <venv>/bin/python3,
// <venv>/pyvenv.cfg), else python3 on PATH; the start line says which.
TEST(AgentBinaryTest, TheInterpreterOfTheVenvTrainletRunsFrom) {
  const std::string bin = TRAINLET_BIN;
  const std::string venv = bin.substr(0, bin.rfind('/')) + "/venv-test-" + std::to_string(::getpid());
  std::filesystem::create_directories(venv + "/bin");
  std::ofstream(venv + "/pyvenv.cfg") << "home = /usr/bin\n";
  std::ofstream(venv + "/bin/python3") << "#!/bin/sh\necho \"venv-py:$*\"\n";
  ::chmod((venv + "/bin/python3").c_str(), 0755);
  std::error_code ec;
  std::filesystem::create_hard_link(bin, venv + "/bin/trainlet", ec);
  if (ec) std::filesystem::copy_file(bin, venv + "/bin/trainlet");
  std::ofstream(venv + "/train") << "";  // a script without .py: runs with the interpreter too
  const std::string run = "env -i PATH=/usr/bin:/bin HOSTNAME=x TRAINLET_LIBNCCL=/nonexistent " +
                          venv + "/bin/trainlet " + venv + "/train --epochs 3 2>&1";
  FILE* p = ::popen(run.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  EXPECT_EQ(WEXITSTATUS(::pclose(p)), 0) << out;
  EXPECT_NE(out.find("[rank0]: venv-py:-u " + venv + "/train --epochs 3"), std::string::npos) << out;
  EXPECT_NE(out.find("python " + venv + "/bin/python3 (the Python environment of " + venv +
                     "/bin/trainlet)"),
            std::string::npos)
      << out;
  // PYTHON_EXEC wins over the venv; the start line says so.
  Outcome o = Trainlet("PYTHON_EXEC=" + venv + "/bin/python3", venv + "/train");
  EXPECT_NE(o.out.find("python " + venv + "/bin/python3 (PYTHON_EXEC)"), std::string::npos) << o.out;
  std::filesystem::remove_all(venv);
}

// --worker-log-format plain: worker lines as written (torchrun's console
// without --tee), so a trainer's JSON lines stay JSON.
TEST(AgentBinaryTest, PlainWorkerLinesHaveNoPrefix) {
  Outcome r = Trainlet("", "--worker-log-format plain --nproc-per-node 2 -- sh -c "
                           "'echo \"{\\\"rank\\\": $RANK}\"'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\n{\"rank\": 1}\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("[rank"), std::string::npos) << r.out;
}

// `trainlet local` takes the log-file flags and --health-port (agent i on
// PORT+i) as the pod form does (its refusals are front_end_test's).
TEST(AgentBinaryTest, LocalTakesLogFilesAndHealthPorts) {
  const std::string dir = "/tmp/cli-test-local-" + std::to_string(::getpid());
  const std::string port = FreePortPair();  // agent i on PORT+i
  Outcome r = Trainlet("", "local --nnodes 2 --log-dir " + dir + " --tee 3 --local-ranks-filter 0 "
                           "--health-port " + port + " --no-python sh -c 'echo out$RANK'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("health ports " + port + ".." + std::to_string(std::stoi(port) + 1)),
            std::string::npos)
      << r.out;
  FILE* ls = ::popen(("cat " + dir + "/*/attempt_0/0/stdout.log | sort").c_str(), "r");
  char buf[256] = {};
  std::string files;
  while (std::fgets(buf, sizeof buf, ls)) files += buf;
  ::pclose(ls);
  EXPECT_EQ(files, "out0\nout1\n") << r.out;  // each agent's run folder
  std::system(("rm -rf " + dir).c_str());
  // JSON: local's own lines too.
  Outcome j = Trainlet("", "local --log-format json -- true");
  EXPECT_EQ(j.code, 0) << j.out;
  EXPECT_NE(j.out.find("{\"time\""), std::string::npos) << j.out;
  EXPECT_EQ(j.out.find("[trainlet local"), std::string::npos) << j.out;
}

// What some of torchrun's flags do in the workers (front_end_test checks
// every flag is taken, in process): --run-path runs the script through runpy
// with its arguments, -m a module, --log-line-prefix-template prefixes the
// console lines, --virtual-local-rank gives each worker LOCAL_RANK=0.
TEST(AgentBinaryTest, WhatTorchrunFlagsShowInTheWorkers) {
  const std::string dir = "/tmp/agent-binary-test-py-" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/t.py") << "import sys\nprint('argv', sys.argv)\n";
  Outcome r = Trainlet("", "--python /usr/bin/python3 --run-path --no-python " + dir + "/t.py a b");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("[rank0]: argv ['" + dir + "/t.py', 'a', 'b']"), std::string::npos)
      << r.out;
  r = Trainlet("", "-m json.tool -h");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("json.tool"), std::string::npos) << r.out;
  r = Trainlet("", "--log-line-prefix-template '<$rank> ' -- echo hi");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("<0> hi"), std::string::npos) << r.out;
  r = Trainlet("", "--virtual-local-rank -- sh -c 'echo lr=$LOCAL_RANK/$CUDA_VISIBLE_DEVICES'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("[rank0]: lr=0/0"), std::string::npos) << r.out;
  std::system(("rm -rf " + dir).c_str());
}

// --preflight on a pod without a GPU: skipped, said, not a failure.
TEST(AgentBinaryTest, PreflightWithoutAGpuIsSkipped) {
  Outcome o = Trainlet("TRAINLET_LIBCUDA=/nonexistent/libcuda.so.1 "
                       "TRAINLET_LIBNVML=/nonexistent/libnvml.so.1 TRAINLET_PREFLIGHT=1",
                       "-- true");
  EXPECT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("no GPU: preflight skipped"), std::string::npos) << o.out;
}

}  // namespace
