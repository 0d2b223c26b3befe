// Runs the built binary: bad or missing input gets one clear line and exit 78
// within a second, before any network traffic; --help and --version work.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "trainlet/agent/front/local.h"
#include "trainlet/agent/run/supervisor.h"

namespace {

using Clock = std::chrono::steady_clock;

// Bad input exits at once: never a hang, never the rendezvous or grace
// timeouts (minutes). The bound, in seconds, is a hang guard, not a speed
// target: it allows for a sanitizer build (TSan runs the agent several times
// slower) on a machine under stress-ng, where starting a process can take
// seconds. How fast it really exits is bench/startup.py's to measure.
constexpr double kPromptExitSeconds = 20.0;

struct Outcome {
  int code;
  std::string out;  // stdout and stderr together
  double seconds;
};

Outcome Trainlet(const std::string& env, const std::string& args) {
  // `env -i` keeps the host's MASTER_ADDR/JOB_COMPLETION_INDEX out of the test, and
  // TRAINLET_LIBNCCL its NCCL (hermetic: the outcome must not depend on whether
  // this machine has libnccl.so.2, which under TSan also takes ~1 s to load).
  std::string cmd = "env -i PATH=/usr/bin:/bin HOSTNAME=x TRAINLET_LIBNCCL=/nonexistent/libnccl.so.2 " +
                    env + " " + TRAINLET_BIN + " " +
                    args + " 2>&1";
  auto t0 = Clock::now();
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  int status = ::pclose(p);
  return {WEXITSTATUS(status), out,
          std::chrono::duration<double>(Clock::now() - t0).count()};
}

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

TEST(CliTest, BadInputIsOneLineExit78AtOnce) {
  struct Row {
    std::string env, args, expected;
  };
  const std::vector<Row> rows = {
      {"", "", "no trainer command"},
      {"", "--nnodes 1", "no trainer command"},
      {"", "--no-such-flag -- true", "--no-such-flag"},
      {"JOB_COMPLETION_INDEX=1", "-- true", "number of pods is missing"},
      {"JOB_COMPLETION_INDEX=03 PET_NNODES=4", "-- true", "JOB_COMPLETION_INDEX='03'"},
      {"JOB_COMPLETION_INDEX='$(JOB_COMPLETION_INDEX)' TRAINLET_NNODES=4", "-- true",
       "unexpanded"},
      {"JOB_COMPLETION_INDEX=4", "--nnodes 4 --master-addr l -- true", "not below"},
      {"TRAINLET_NNODES=x", "-- true", "TRAINLET_NNODES='x'"},
      {"", "--grace-period soon -- true", "--grace-period='soon'"},
      {"", "--rdzv-port 70000 -- true", "--rdzv-port='70000' is too large"},
      {"TRAINLET_RDZV_PORT=0", "-- true", "TRAINLET_RDZV_PORT='0' is not a port"},
      {"PET_MASTER_PORT=x", "-- true", "PET_MASTER_PORT='x'"},
      {"", "--rdzv-timeout 1e-9 -- true", "--rdzv-timeout='1e-9'"},
      {"", "--grace-period ' 1' -- true", "--grace-period=' 1'"},
      {"", "--nnodes 2 --master-addr x -- true", "this pod has no index"},
      {"", "--token-file /nonexistent/token -- true", "'/nonexistent/token' cannot be read"},
      {"", "--token-file /dev/null -- true", "'/dev/null' is empty"},
      {"", "--log-level loud -- true", "--log-level='loud'"},
      {"", "--signal-scope pod -- true", "--signal-scope: pod not in {main,group}"},
      {"TRAINLET_SIGNAL_SCOPE=session", "-- true", "--signal-scope: session not in"},
      {"", "-- /no/such/trainer", "cannot execute the trainer command '/no/such/trainer'"},
      // torchrun's command line: what trainlet cannot honour is refused by name.
      {"", "--epochs 3 train.py", "unknown option '--epochs'"},
      {"", "--nproc-per-nodes 2 train.py", "did you mean --nproc-per-node?"},
      {"", "--n 2 train.py", "ambiguous option: --n could match --nnodes, --no-python, "
                             "--node-rank, --nproc-per-node, --numa-binding"},
      {"", "--rdzv_ x train.py", "ambiguous option: --rdzv_ could match --rdzv_backend, "
                                 "--rdzv_conf, --rdzv_endpoint, --rdzv_id"},
      {"", "--grace 3 -- true", "unknown option '--grace' (did you mean --grace-period?)"},
      {"", "--nproc x train.py", "--nproc-per-node='x'"},
      // A bare first argument is a script, .py or not (torchrun's training_script):
      // one that is not there is refused, saying how to run a program instead.
      {"", "python3 train.py", "'python3' is a program on PATH: a bare first argument is a "
                               "script for the interpreter"},
      {"", "./run.sh", "cannot open the training script './run.sh'"},
      {"", "--no-python -m pkg.mod", "cannot be used together"},
      {"", "--nnodes 2:4 train.py", "an elastic MIN:MAX gang needs an index on every pod"},
      {"PET_NNODES=1:3", "train.py", "PET_NNODES='1:3'"},
      {"", "--rdzv-backend zookeeper train.py", "--rdzv-backend='zookeeper'"},
      {"PET_RDZV_BACKEND=x", "train.py", "PET_RDZV_BACKEND='x'"},
      {"", "--rdzv-conf is_hots=1 train.py", "key 'is_hots' is not one of torch's rendezvous "
                                              "settings (join_timeout, timeout, read_timeout,"},
      {"", "--rdzv-conf is_host=maybe train.py", "is_host='maybe' is not a boolean"},
      {"", "--rdzv-conf join_timeout=soon train.py", "join_timeout='soon'"},
      // Port 0 (torch: a free port) where other pods would have to know it.
      {"", "--nnodes 2 --node-rank 1 --rdzv-endpoint host:0 -- true",
       "--rdzv-endpoint gives port 0 (a free port), which only a gang of one pod can use"},
      {"", "--start-method thread train.py", "--start-method='thread'"},
      {"", "--monitor-interval x train.py", "--monitor-interval='x'"},
      {"", "--event-log-handler console train.py", "--event-log-handler='console'"},
      {"", "--logs-specs mine train.py", "--logs-specs='mine'"},
      {"", "--numa_binding fast train.py", "--numa-binding='fast' is not one of node, socket"},
      {"CUDA_VISIBLE_DEVICES=3", "--virtual-local-rank --nproc-per-node 2 -- true",
       "--virtual-local-rank: CUDA_VISIBLE_DEVICES='3' has fewer GPUs than the 2 workers"},
      {"", "--signals-to-handle SIGTERM,SIGALRM train.py", "'SIGALRM' is not one of the signals"},
      {"", "--redirects 5 train.py", "--redirects='5'"},
      {"", "-t 0:9 train.py", "--tee='0:9'"},
      {"", "--local-ranks-filter 0,x train.py", "--local-ranks-filter='0,x'"},
      {"PET_STANDALONE=yes", "train.py", "PET_STANDALONE='yes' is not an integer"},
      {"", "--standalone --nnodes 2 train.py", "--standalone runs a gang of one pod"},
      {"", "--shutdown-timeout x train.py", "--shutdown-timeout='x'"},
      {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT=-1", "train.py", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT='-1'"},
      {"", "--role '' train.py", "--role='': a role needs a name"},
      {"", "--gang a=1 --role r train.py", "--role/PET_ROLE with --gang"},
      {"", "--rdzv-port 29500 --master-port 29500 train.py", "need two ports"},
      {"", "--master-port 29500 --jax-port 29500 -- true",
       "JAX's coordinator needs a port of its own"},
      {"", "--jax-port x -- true", "--jax-port='x'"},
      {"", "--log-dir /dev/null/x -r 3 -- true", "--log-dir '/dev/null/x'"},
      // trainlet's own flags mean what they say on their own, or are refused.
      {"", "--preflight-timeout 5 -- true", "--preflight-timeout has no effect without --preflight"},
      {"", "--preflight-min-busbw 5 -- true", "without --preflight"},
      {"", "--hang-start-timeout 5 -- true", "--hang-start-timeout has no effect without"},
      {"TRAINLET_HANG_SIGNAL=SIGQUIT", "-- true", "--hang-signal has no effect without"},
      // trainlet's own flags are given once; torchrun's take the last (CliTest.RepeatedFlags).
      {"", "--grace-period 1 --grace-period=2 -- true",
       "--grace-period is given more than once: trainlet's own flags take one value"},
      {"", "--preflight --preflight -- true", "--preflight is given more than once"},
      {"", "policy --container a --container b", "--container is given more than once"},
      // One setting from two sources at the same level: both named, none picked.
      {"", "--nnodes 2 --node-rank 1 --rdzv-endpoint 127.0.0.2:29401 --master-addr 127.0.0.3 -- true",
       "the leader's address: --rdzv-endpoint gives '127.0.0.2', --master-addr gives '127.0.0.3'"},
      {"", "--nnodes 2 --node-rank 1 --rdzv-endpoint 127.0.0.2:29401 --rdzv-port 29444 -- true",
       "the rendezvous port: --rdzv-port gives '29444', --rdzv-endpoint gives '29401'"},
      {"TRAINLET_MASTER_ADDR=a TRAINLET_RDZV_ENDPOINT=b", "--nnodes 2 --node-rank 1 -- true",
       "TRAINLET_RDZV_ENDPOINT gives 'b', TRAINLET_MASTER_ADDR gives 'a'"},
      {"PET_MASTER_ADDR=a PET_RDZV_ENDPOINT=b", "--nnodes 2 --node-rank 1 -- true",
       "PET_RDZV_ENDPOINT gives 'b', PET_MASTER_ADDR gives 'a'"},
      // Endpoints torch's parse_rendezvous_endpoint refuses: at once, not at the deadline.
      {"", "--nnodes 2 --node-rank 1 --rdzv-endpoint a:b:c -- true",
       "--rdzv-endpoint='a:b:c' is not HOST[:PORT]"},
      {"", "--nnodes 2 --node-rank 1 --rdzv-endpoint 127.0.0.1: -- true",
       "the port after ':' is empty"},
      {"PET_RDZV_ENDPOINT=h:65536", "--nnodes 2 --node-rank 1 -- true",
       "PET_RDZV_ENDPOINT='h:65536': '65536' is not a port"},
      // Messages name the source the user gave, and say what is wrong.
      {"PET_MAX_RESTARTS=x", "-- true", "PET_MAX_RESTARTS='x'"},
      {"TRAINLET_MAX_RESTARTS=x", "-- true", "TRAINLET_MAX_RESTARTS='x'"},
      {"", "--rdzv-id '' -- true", "--rdzv-id='' must be 1 to 253 characters"},
      {"", "--nnodes 2:1 -- true", "--nnodes='2:1': MIN is larger than MAX"},
      {"", "--nnodes 99999999999 -- true", "--nnodes='99999999999' is too large"},
      {"", "--max-restarts 99999999999 -- true", "--max-restarts='99999999999' is too large"},
      {"", "--monitor-interval -1 -- true", "--monitor-interval='-1' is negative"},
      {"", "--grace-period -2 -- true", "--grace-period='-2' is negative"},
      {"TRAINLET_RDZV_PORT=x", "-- true", "TRAINLET_RDZV_PORT='x'"},
      // A subcommand's name elsewhere is the trainer's; the message says why.
      {"", "--nnodes 1 local -- true", "`local` is a subcommand only as the first argument"},
  };
  for (const Row& r : rows) {
    Outcome run = Trainlet(r.env, r.args);
    EXPECT_EQ(run.code, 78) << r.env << " " << r.args << ": " << run.out;
    EXPECT_NE(run.out.find(r.expected), std::string::npos) << r.env << " " << r.args << ": "
                                                           << run.out;
    EXPECT_LT(run.seconds, kPromptExitSeconds) << r.args;
    // The last line is the JSON summary every non-zero exit ends with.
    std::string last = run.out.substr(run.out.rfind('\n', run.out.size() - 2) + 1);
    EXPECT_NE(last.find("{\"attempt\""), std::string::npos) << last;
    EXPECT_NE(last.find("\"class\":\"config\""), std::string::npos) << last;
  }
}

TEST(CliTest, FlagsFromTrainletAndPetEnvironment) {
  // PET_NPROC_PER_NODE (torchrun's) and TRAINLET_* are honoured; the flag wins.
  Outcome r = Trainlet("PET_NPROC_PER_NODE=3", "-- sh -c 'echo ws=$WORLD_SIZE'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("ws=3"), std::string::npos) << r.out;
  r = Trainlet("PET_NPROC_PER_NODE=3 TRAINLET_NPROC_PER_NODE=2",
               "-- sh -c 'echo ws=$WORLD_SIZE'");
  EXPECT_NE(r.out.find("[rank1]: ws=2"), std::string::npos) << r.out;
  r = Trainlet("TRAINLET_NPROC_PER_NODE=2", "--nproc-per-node 1 -- sh -c 'echo ws=$WORLD_SIZE'");
  EXPECT_NE(r.out.find("[rank0]: ws=1"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("[rank1]"), std::string::npos) << r.out;
}

TEST(CliTest, WorkersGetTorchrunEnvironment) {
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
TEST(CliTest, TheErrorFileDirectoryIsRemovedAtExit) {
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

TEST(CliTest, MaxRestartsRestartsInPlaceThenFollowsTheContract) {
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
  // Not a count: a config error.
  r = Trainlet("", "--max-restarts many -- true");
  EXPECT_EQ(r.code, 78) << r.out;
  EXPECT_NE(r.out.find("--max-restarts"), std::string::npos) << r.out;
}

TEST(CliTest, GangFromEnvironmentGivesRoles) {
  // TRAINLET_GANG like --gang: a one-pod gang whose only role is "solo".
  Outcome r = Trainlet("TRAINLET_GANG=solo=1", "--nproc-per-node 2 -- sh -c "
                       "'echo role=$ROLE_NAME/$ROLE_RANK/$ROLE_WORLD_SIZE'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("[rank1]: role=solo/1/2"), std::string::npos) << r.out;
  r = Trainlet("", "-- sh -c 'echo role=$ROLE_NAME/$ROLE_RANK/$ROLE_WORLD_SIZE'");
  EXPECT_NE(r.out.find("[rank0]: role=default/0/1"), std::string::npos) << r.out;
  r = Trainlet("TRAINLET_GANG=solo", "-- true");
  EXPECT_EQ(r.code, 78) << r.out;
  EXPECT_NE(r.out.find("--gang/TRAINLET_GANG='solo'"), std::string::npos) << r.out;
}

TEST(CliTest, HangIsDetectedFromTheHeartbeatFile) {
  // Worker 1 beats twice then stops; worker 0 keeps beating. Worker 0 also shows
  // it got the diagnostics signal.
  Outcome r = Trainlet(
      "", "--nproc-per-node 2 --hang-timeout 0.6 --grace-period 1 -- sh -c '"
          "trap \"echo diagnostics-$LOCAL_RANK\" USR1; "
          "if [ $LOCAL_RANK = 1 ]; then touch $TRAINLET_HEARTBEAT_FILE; sleep 0.2; "
          "touch $TRAINLET_HEARTBEAT_FILE; sleep 30 & wait; sleep 30 & wait; fi; "
          "while true; do touch $TRAINLET_HEARTBEAT_FILE; sleep 0.1; done'");
  EXPECT_EQ(r.code, 75) << r.out;
  EXPECT_NE(r.out.find("\"class\":\"infra\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hang: local rank 1 showed no progress"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("local rank 0 showed"), std::string::npos) << "rank 0 was beating";
  EXPECT_NE(r.out.find("[rank1]: diagnostics-1"), std::string::npos) << r.out;
  EXPECT_LT(r.seconds, 6.0);
}

TEST(CliTest, BeatingWorkersAreNotHung) {
  Outcome r = Trainlet("", "--hang-timeout 0.5 -- sh -c 'for i in 1 2 3 4 5 6 7 8 9 10; do "
                           "touch $TRAINLET_HEARTBEAT_FILE; sleep 0.1; done'");
  EXPECT_EQ(r.code, 0) << r.out;
  Outcome silent = Trainlet("", "--hang-timeout 0.3 --hang-start-timeout 5 -- sh -c 'sleep 1'");
  EXPECT_EQ(silent.code, 0) << "the first heartbeat has its own, longer limit: " << silent.out;
  Outcome never = Trainlet("", "--hang-timeout 0.3 --hang-start-timeout 0.6 --grace-period 1 "
                               "-- sh -c 'sleep 5'");
  EXPECT_EQ(never.code, 75) << never.out;
  EXPECT_NE(never.out.find("never showed progress in 0.6 s"), std::string::npos) << never.out;
  Outcome bad = Trainlet("", "--hang-signal KILL -- true");
  EXPECT_EQ(bad.code, 78) << bad.out;
}

// examples/k8s/indexed-job.yaml turns hang detection on for whatever trainer
// the image runs: one that never touches the file does not take part, and is
// not failed for it (without --hang-start-timeout).
TEST(CliTest, ATrainerThatNeverTouchesTheHeartbeatFileIsNotHung) {
  Outcome r = Trainlet("", "--hang-timeout 0.3 --grace-period 1 -- sh -c 'sleep 1.5; exit 0'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("hang:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("did not touch TRAINLET_HEARTBEAT_FILE"), std::string::npos) << r.out;
}

// A hung worker that does not handle --hang-signal (SIGUSR1's default action
// is to terminate; a Python trainer without faulthandler.register) is not sent
// it: it lives on to get the stop's SIGTERM, and the log says no stack dump was
// possible. The one that handles it gets it.
TEST(CliTest, TheDiagnosticsSignalNeverKillsAWorker) {
  Outcome r = Trainlet(
      "", "--nproc-per-node 2 --hang-timeout 0.5 --grace-period 2 -- sh -c '"
          "touch $TRAINLET_HEARTBEAT_FILE; "
          "if [ $LOCAL_RANK = 0 ]; then trap \"echo dump-0\" USR1; fi; "
          "trap \"echo term-$LOCAL_RANK; exit 0\" TERM; while :; do sleep 0.05; done'");
  EXPECT_EQ(r.code, 75) << r.out;
  EXPECT_NE(r.out.find("[rank0]: dump-0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank1]: term-1"), std::string::npos)
      << "rank 1 did not live to get SIGTERM: " << r.out;
  EXPECT_NE(r.out.find("local rank 1 (pid"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no stack dump is possible"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("SIGUSR1 (10)"), std::string::npos) << "a worker died of it: " << r.out;
}

// `trainlet local` killed with SIGKILL (the OOM killer, a CI timeout) cannot
// stop anything itself: its agents get SIGTERM from the kernel (a parent-death
// signal) and stop their workers, instead of all running on unsupervised.
// trainlet local's ports come from below the ephemeral range, so no outgoing connection
// takes one between the choice and the agents' bind (a TSan run of the suite once lost the
// rendezvous port to another test's connection for 30 s); they differ and are free.
TEST(CliTest, LocalPortsAreFreeAndBelowTheEphemeralRange) {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0, high = 0;
  ASSERT_TRUE(range >> low >> high);
  const std::vector<std::uint16_t> ports = trainlet::agent::FreeLoopbackPorts(3);
  ASSERT_EQ(ports.size(), 3u);
  EXPECT_EQ(std::set<std::uint16_t>(ports.begin(), ports.end()).size(), 3u);
  for (std::uint16_t port : ports) {
    EXPECT_LT(port, low);
    EXPECT_GE(port, 1024);
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << port;
    ::close(fd);
  }
}

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

TEST(CliTest, ReadinessMeansTheGangHasFormed) {
  // A leader waiting for a pod that never comes is live but not ready; a lone
  // pod whose worker runs is ready; after the exit nothing answers.
  const std::string t = TRAINLET_BIN;
  const std::string script =
      t + " --health-port 29611 --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --rdzv-port "
          "29612 --rdzv-timeout 1.5 -- true & sleep 0.5; " +
      t + " probe ready --health-port 29611; echo waiting-ready=$?; " + t +
      " probe live --health-port 29611; echo waiting-live=$?; wait; " + t +
      " --health-port 29611 -- sleep 1.5 & sleep 0.5; " + t +
      " probe ready --health-port 29611; echo running-ready=$?; wait; " + t +
      " probe ready --health-port 29611; echo gone-ready=$?";
  FILE* p = ::popen(("sh -c '" + script + "' 2>/dev/null").c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  ::pclose(p);
  EXPECT_NE(out.find("waiting-ready=1"), std::string::npos) << out;
  EXPECT_NE(out.find("waiting-live=0"), std::string::npos) << out;
  EXPECT_NE(out.find("running-ready=0"), std::string::npos) << out;
  EXPECT_NE(out.find("gone-ready=1"), std::string::npos) << out;
}

TEST(CliTest, ExitCodeIsTheWorkersOr128PlusSignal) {
  EXPECT_EQ(Trainlet("", "-- sh -c 'exit 7'").code, 7);
  EXPECT_EQ(Trainlet("", "-- sh -c 'kill -KILL $$'").code, 128 + 9);
  EXPECT_EQ(Trainlet("", "--nproc-per-node 2 -- sh -c '[ $RANK = 1 ] && exit 5; sleep 20'").code,
            5);
}

}  // namespace

namespace {

TEST(CliTest, GpuFlagsAndTheirEnvironment) {
  struct Row {
    std::string env, args;
    int code;
    std::string text;
  };
  const std::string nogpu = "TRAINLET_LIBCUDA=/nonexistent/libcuda.so.1 "
                            "TRAINLET_LIBNVML=/nonexistent/libnvml.so.1";
  const std::vector<Row> rows = {
      {nogpu, "--nproc-per-node gpu -- true", 78,
       "--nproc-per-node='gpu' but no GPU is visible: no CUDA driver"},
      {nogpu + " TRAINLET_NPROC_PER_NODE=gpu", "-- true", 78, "but no GPU is visible"},
      // torchrun: auto without an accelerator is os.cpu_count().
      {nogpu, "--nproc-per-node auto -- sh -c 'echo workers=$LOCAL_WORLD_SIZE'", 0,
       "workers=" + std::to_string(::sysconf(_SC_NPROCESSORS_ONLN))},
      {nogpu, "--preflight --preflight-timeout abc -- true", 78, "--preflight-timeout='abc'"},
      {nogpu + " TRAINLET_PREFLIGHT=1 TRAINLET_PREFLIGHT_MIN_BUSBW=-1", "-- true", 78,
       "TRAINLET_PREFLIGHT_MIN_BUSBW='-1' is negative"},
      {nogpu + " TRAINLET_NCCL_IDS=maybe", "-- true", 78, "nccl-ids"},
      {nogpu + " CUDA_VISIBLE_DEVICES=0,,1", "--nproc-per-node gpu -- true", 78,
       "CUDA_VISIBLE_DEVICES='0,,1' has an empty entry"},
      {nogpu + " NCCL_SOCKET_IFNAME=nosuchif0", "-- true", 78,
       "NCCL_SOCKET_IFNAME='nosuchif0': no interface matches; interfaces: lo"},
      {nogpu + " TRAINLET_PREFLIGHT=1", "-- true", 0, "no GPU: preflight skipped"},
  };
  for (const Row& r : rows) {
    Outcome o = Trainlet(r.env, r.args);
    EXPECT_EQ(o.code, r.code) << r.env << " " << r.args << "\n" << o.out;
    EXPECT_NE(o.out.find(r.text), std::string::npos) << r.env << " " << r.args << "\n" << o.out;
    if (r.code == 78) {
      EXPECT_LT(o.seconds, kPromptExitSeconds);
    }
  }
}

}  // namespace

namespace {
// A file's content ("" when missing).
std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
}  // namespace

// Nothing after the first positional is the launcher's: a trainer flag that
// shares a name with a trainlet flag reaches the trainer.
TEST(CliTest, ParsingStopsAtTheTrainerCommand) {
  Outcome r = Trainlet("", "--nproc_per_node 1 sh -c 'echo args:$*' sh --log-level debug "
                           "--nnodes 9 2>&1");
  // A bare first argument is a script for python (torchrun's); `sh` is none here: refused,
  // saying how to run a program, not guessed.
  EXPECT_EQ(r.code, 78) << r.out;
  EXPECT_NE(r.out.find("'sh' is a program on PATH"), std::string::npos) << r.out;
  r = Trainlet("", "--nproc_per_node 1 --no-python sh -c 'echo args:$*' sh --log-level debug "
                   "--nnodes 9");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("[rank0]: args:--log-level debug --nnodes 9"), std::string::npos) << r.out;
  r = Trainlet("", "-- sh -c 'echo args:$*' sh --grace-period 1");
  EXPECT_NE(r.out.find("[rank0]: args:--grace-period 1"), std::string::npos) << r.out;
}

// script.py runs as `python -u script.py args` with PYTHON_EXEC (torchrun's),
// -m as `python -u -m`, --run-path through runpy; --python names the interpreter.
TEST(CliTest, ScriptModuleAndRunPathRunWithPython) {
  const std::string dir = "/tmp/cli-test-py-" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/fakepy") << "#!/bin/sh\necho \"py:$*\"\n";
  ::chmod((dir + "/fakepy").c_str(), 0755);
  std::ofstream(dir + "/train.py") << "";  // a missing script is refused before the start
  Outcome r = Trainlet("PYTHON_EXEC=" + dir + "/fakepy", dir + "/train.py --epochs 3");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("[rank0]: py:-u " + dir + "/train.py --epochs 3"), std::string::npos)
      << r.out;
  r = Trainlet("", "--python " + dir + "/fakepy -m pkg.mod --x 1");
  EXPECT_NE(r.out.find("[rank0]: py:-u -m pkg.mod --x 1"), std::string::npos) << r.out;
  r = Trainlet("PET_MODULE=1 TRAINLET_PYTHON=" + dir + "/fakepy", "pkg.mod");
  EXPECT_NE(r.out.find("[rank0]: py:-u -m pkg.mod"), std::string::npos) << r.out;
  r = Trainlet("PET_NO_PYTHON=1", "sh -c 'echo direct'");
  EXPECT_NE(r.out.find("[rank0]: direct"), std::string::npos) << r.out;
  std::ofstream(dir + "/t.py") << "import sys\nprint('argv', sys.argv)\n";
  r = Trainlet("", "--python /usr/bin/python3 --run-path --no-python " + dir + "/t.py a b");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("[rank0]: argv ['" + dir + "/t.py', 'a', 'b']"), std::string::npos)
      << r.out;
  std::system(("rm -rf " + dir).c_str());
}

TEST(CliTest, TorchrunFlagsInBothSpellingsAndPetVariables) {
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

// argparse's abbreviations of torchrun's flags, with torchrun's meaning.
TEST(CliTest, AbbreviatedTorchrunFlags) {
  Outcome r = Trainlet("", "--nproc 2 --max_rest 0 --ro=trainer --rdzv-i job7 --no-py sh -c "
                           "'echo $ROLE_NAME/$TORCHELASTIC_RUN_ID/$WORLD_SIZE' --nproc");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("[rank1]: trainer/job7/2"), std::string::npos) << r.out;
  // `local` takes them for the torchrun flags it has.
  r = Trainlet("", "local --nn 2 --nproc 1 --no-py sh -c 'echo $RANK/$WORLD_SIZE'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("[rank1]: 1/2"), std::string::npos) << r.out;
}

// --standalone: a gang of one on free ports, whatever the environment says.
TEST(CliTest, StandaloneIsAGangOfOne) {
  Outcome r = Trainlet("JOB_COMPLETION_INDEX=3 PET_STANDALONE=1",
                       "--nproc-per-node 2 -- sh -c 'echo $RANK/$WORLD_SIZE/$MASTER_ADDR/"
                       "$MASTER_PORT'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("[rank1]: 1/2/127.0.0.1/"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("/29500"), std::string::npos) << r.out;  // a free port instead
}

// Per-rank log files in torchrun's layout; --tee also on the console,
// --redirects only in the file; --local-ranks-filter keeps ranks off the
// console but not out of their files.
TEST(CliTest, LogFilesInTorchrunsLayout) {
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
TEST(CliTest, LogFilesAreCompleteAfterSigkillEscalation) {
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

// A flag means what it says on its own: --require-gpus without --preflight
// on a pod without a GPU is a hardware failure, not a silent success.
TEST(CliTest, RequireGpusOnItsOwn) {
  Outcome r = Trainlet("TRAINLET_LIBCUDA=/nonexistent/libcuda.so.1", "--require-gpus -- true");
  EXPECT_EQ(r.code, 74) << r.out;
  EXPECT_NE(r.out.find("--require-gpus: no usable GPU"), std::string::npos) << r.out;
}

// --nproc-per-node cpu (and auto without a GPU): one worker per online CPU.
TEST(CliTest, NprocPerNodeCpu) {
  Outcome r = Trainlet("TRAINLET_LIBCUDA=/nonexistent/libcuda.so.1",
                       "--nproc-per-node cpu -- sh -c 'echo lws=$LOCAL_WORLD_SIZE'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("lws=" + std::to_string(::sysconf(_SC_NPROCESSORS_ONLN))),
            std::string::npos)
      << r.out;
}

// JAX on the same gang: the coordinator at MASTER_ADDR and the leader's JAX port.
TEST(CliTest, WorkersGetJaxEnvironment) {
  Outcome r = Trainlet("", "--nproc-per-node 2 --jax-port 29611 -- sh -c 'echo "
                           "$JAX_COORDINATOR_ADDRESS/$JAX_NUM_PROCESSES/$JAX_PROCESS_ID'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("[rank1]: 127.0.0.1:29611/2/1"), std::string::npos) << r.out;
  r = Trainlet("", "--jax-port 0 -- sh -c 'echo jax=${JAX_COORDINATOR_ADDRESS:-none}'");
  EXPECT_NE(r.out.find("[rank0]: jax=none"), std::string::npos) << r.out;
}

// A subcommand is one only as the very first argument: every subcommand's name
// is also a module or program the trainer may be (torchrun has no subcommands).
TEST(CliTest, SubcommandNamesRunAsTrainersAnywhereElse) {
  const std::string dir = "/tmp/cli-test-sub-" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0755);
  const std::string py = dir + "/fakepy";
  std::ofstream(py) << "#!/bin/sh\necho \"py:$*\"\n";
  ::chmod(py.c_str(), 0755);
  for (const std::string name : {"local", "exit-codes", "probe", "policy", "preflight"}) {
    std::ofstream(dir + "/" + name) << "#!/bin/sh\necho \"prog:$0 $*\"\n";
    ::chmod((dir + "/" + name).c_str(), 0755);
    struct Row {
      std::string env, args, expected;
    };
    for (const Row& r : {
             Row{"", "--python " + py + " -m " + name, "[rank0]: py:-u -m " + name + "\n"},
             Row{"", "--python " + py + " -m " + name + " --epochs 3",
                 "[rank0]: py:-u -m " + name + " --epochs 3\n"},
             Row{"", "--nproc 2 --python " + py + " -m " + name, "[rank1]: py:-u -m " + name},
             Row{"PET_MODULE=1 PYTHON_EXEC=" + py, name + " x", "[rank0]: py:-u -m " + name + " x"},
             Row{"TRAINLET_MODULE=1 PYTHON_EXEC=" + py, name, "[rank0]: py:-u -m " + name},
             Row{"PATH=" + dir + ":/usr/bin:/bin", "--no-python " + name + " a",
                 "[rank0]: prog:" + dir + "/" + name + " a"},
             Row{"PET_NO_PYTHON=1 PATH=" + dir + ":/usr/bin:/bin", name,
                 "[rank0]: prog:" + dir + "/" + name},
             Row{"", "-- " + dir + "/" + name, "[rank0]: prog:" + dir + "/" + name},
         }) {
      Outcome o = Trainlet(r.env, r.args);
      EXPECT_EQ(o.code, 0) << r.env << " " << r.args << "\n" << o.out;
      EXPECT_NE(o.out.find(r.expected), std::string::npos) << r.env << " " << r.args << "\n"
                                                           << o.out;
      EXPECT_EQ(o.out.find("podFailurePolicy"), std::string::npos) << r.args << "\n" << o.out;
    }
  }
  // As the first argument they are still trainlet's.
  Outcome p = Trainlet("", "policy");
  EXPECT_EQ(p.code, 0) << p.out;
  EXPECT_NE(p.out.find("podFailurePolicy"), std::string::npos) << p.out;
  EXPECT_EQ(Trainlet("", "exit-codes").code, 0);
  Outcome probe = Trainlet("", "probe ready --health-port 29613");
  EXPECT_EQ(probe.code, 1) << probe.out;  // nothing listens there: not ready
  Outcome l = Trainlet("", "local --nnodes 2 --no-python sh -c 'echo r=$RANK'");
  EXPECT_EQ(l.code, 0) << l.out;
  EXPECT_NE(l.out.find("[rank1]: r=1"), std::string::npos) << l.out;
  std::system(("rm -rf " + dir).c_str());
}

// torchrun's flags may be repeated, the last wins (argparse), and a one-letter
// option takes "=VALUE" (-t=3), as torchrun's command lines do.
TEST(CliTest, RepeatedTorchrunFlagsTakeTheLastValue) {
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

// The leader's address: a flag wins over TRAINLET_*, which wins over PET_*,
// the loser is named in the log, and the log names the source used.
TEST(CliTest, RendezvousEndpointAndTheLeadersOtherSources) {
  struct Row {
    std::string env, args, expected;
  };
  const std::string member = "--nnodes 2 --node-rank 1 --rdzv-timeout 0.2 ";
  for (const Row& r : {
           Row{"TRAINLET_MASTER_ADDR=127.0.0.9", member + "--rdzv-endpoint 127.0.0.2:29401 -- true",
               "joining leader 127.0.0.2 port 29401 (--rdzv-endpoint)"},
           Row{"TRAINLET_MASTER_ADDR=127.0.0.9", member + "--rdzv-endpoint 127.0.0.2:29401 -- true",
               "TRAINLET_MASTER_ADDR='127.0.0.9' is overridden by --rdzv-endpoint='127.0.0.2'"},
           Row{"PET_RDZV_ENDPOINT=127.0.0.2:29401", member + "--master-addr 127.0.0.3 -- true",
               "joining leader 127.0.0.3 port 29401 (--master-addr)"},
           Row{"TRAINLET_RDZV_PORT=29444", member + "--rdzv-endpoint 127.0.0.2:29401 -- true",
               "joining leader 127.0.0.2 port 29401 (--rdzv-endpoint)"},
           Row{"", member + "--rdzv-endpoint 127.0.0.2 --rdzv-port 29444 -- true",
               "joining leader 127.0.0.2 port 29444 (--rdzv-endpoint)"},
           Row{"MASTER_ADDR=127.0.0.5", member + "--rdzv-endpoint 127.0.0.2 -- true",
               "joining leader 127.0.0.2 port 29400 (--rdzv-endpoint)"},
           Row{"", member + "--rdzv-endpoint [::1]:29402 -- true",
               "joining leader ::1 port 29402 (--rdzv-endpoint)"},
           Row{"PET_MASTER_ADDR=127.0.0.4", member + "-- true",
               "joining leader 127.0.0.4 port 29400 (PET_MASTER_ADDR)"},
           Row{"", "--standalone -- true", "pod index 0 of 1 (--standalone)"},
       }) {
    Outcome o = Trainlet(r.env, r.args);
    EXPECT_NE(o.out.find(r.expected), std::string::npos) << r.env << " " << r.args << "\n"
                                                         << o.out;
  }
}

namespace {

// A TCP port free on loopback now (bound to 0, then closed).
std::string FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return std::to_string(ntohs(a.sin_port));
}

// The lines of agent/tests/data/torchrun-flags.txt (scripts/torchrun-flags)
// that start with `kind`, without it.
std::vector<std::vector<std::string>> TorchrunList(const std::string& kind) {
  std::ifstream in(TORCHRUN_FLAGS);
  std::vector<std::vector<std::string>> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (first != kind) continue;
    out.emplace_back(std::istream_iterator<std::string>(words), std::istream_iterator<std::string>());
  }
  return out;
}

}  // namespace

// Every flag of the torchrun that README names (the list scripts/torchrun-flags
// took from its run.py), in each of its spellings, is accepted with torchrun's
// values; what it means here is README's table. A flag added to the list
// without a row here fails the test, naming it.
TEST(CliTest, EveryTorchrunFlagOfTheTrackedVersion) {
  const std::string dir = "/tmp/cli-test-flags-" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/t.py") << "print('ran')\n";
  struct Use {
    std::string value;                      // the flag's value ("" for a switch)
    std::string trainer = "-- true";        // what follows
    int code = 0;
    std::string expected;                   // in the output
  };
  auto U = [](std::string value, std::string trainer = "-- true", int code = 0,
              std::string expected = "") { return Use{value, trainer, code, expected}; };
  const std::map<std::string, Use> uses = {
      {"--nnodes", U("1:1")},
      {"--nproc-per-node", U("2")},
      {"--rdzv-backend", U("c10d")},
      {"--rdzv-endpoint", U("localhost:0")},  // torchtitan's run_train.sh
      {"--rdzv-id", U("job")},
      {"--rdzv-conf", U("join_timeout=30,last_call_timeout=5,is_host=1", "-- true", 0,
       "is_host=1 has no effect")},
      {"--standalone", U("")},
      {"--max-restarts", U("0")},
      {"--monitor-interval", U("5")},
      {"--start-method", U("fork")},
      {"--event-log-handler", U("null")},
      {"--role", U("trainer")},
      {"-m", U("", "json.tool -h", 0, "json.tool")},
      {"--no-python", U("", "true")},
      {"--run-path", U("", dir + "/t.py", 0, "[rank0]: ran")},
      {"--log-dir", U(dir + "/logs")},
      {"-r", U("0")},
      {"-t", U("0")},
      {"--log-line-prefix-template", U("<$rank> ", "-- echo hi", 0, "<0> hi")},
      {"--local-ranks-filter", U("0")},
      {"--duplicate-stdout-filters", U("a,b", "-- true", 0, "has no effect")},
      {"--duplicate-stderr-filters", U("a", "-- true", 0, "has no effect")},
      {"--node-rank", U("0", "--nnodes 1 -- true")},
      {"--master-addr", U("127.0.0.1")},
      {"--master-port", U(FreePort())},
      {"--local-addr", U("127.0.0.1")},
      {"--logs-specs", U("custom", "-- true", 78, "a torchrun.logs_specs plugin is Python")},
      {"--numa-binding", U("node", "-- true", 0, "has no effect: trainlet binds no CPUs")},
      {"--signals-to-handle", U("SIGTERM,SIGINT,SIGUSR1")},
      {"--shutdown-timeout", U("5")},
      {"--virtual-local-rank", U("", "-- sh -c 'echo lr=$LOCAL_RANK/$CUDA_VISIBLE_DEVICES'", 0,
       "[rank0]: lr=0/0")},
      {"--print-completion", U("bash", "", 0, "no shell completion script")},
  };
  const auto flags = TorchrunList("value"), switches = TorchrunList("switch");
  ASSERT_GT(flags.size() + switches.size(), 30u) << TORCHRUN_FLAGS;
  for (const auto* list : {&flags, &switches}) {
    for (const auto& spellings : *list) {
      for (const std::string& name : spellings) {
        const std::string& key = spellings.front();  // the row: torchrun's first spelling
        auto it = uses.find(key);
        ASSERT_NE(it, uses.end()) << "no row for torchrun's " << name << " (" << key << ")";
        const Use& u = it->second;
        const std::string args = name + (u.value.empty() ? "" : " '" + u.value + "'") + " " +
                                 u.trainer;
        Outcome o = Trainlet("", args);
        EXPECT_EQ(o.code, u.code) << args << "\n" << o.out;
        EXPECT_EQ(o.out.find("unknown option"), std::string::npos) << args << "\n" << o.out;
        EXPECT_NE(o.out.find(u.expected), std::string::npos) << args << "\n" << o.out;
      }
    }
  }
  std::system(("rm -rf " + dir).c_str());
}

// The interpreter, in torchrun's order: --python, PYTHON_EXEC, the venv the
// binary runs from (pip's layout: <venv>/bin/trainlet, <venv>/bin/python3,
// <venv>/pyvenv.cfg), else python3 on PATH; the start line says which.
TEST(CliTest, TheInterpreterOfTheVenvTrainletRunsFrom) {
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
TEST(CliTest, PlainWorkerLinesHaveNoPrefix) {
  Outcome r = Trainlet("", "--worker-log-format plain --nproc-per-node 2 -- sh -c "
                           "'echo \"{\\\"rank\\\": $RANK}\"'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\n{\"rank\": 1}\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("[rank"), std::string::npos) << r.out;
}

// `trainlet local` takes the log-file flags and --health-port (agent i on
// PORT+i) as the pod form does, and refuses variables it would ignore.
TEST(CliTest, LocalTakesLogFilesHealthPortsAndRefusesWhatItIgnores) {
  const std::string dir = "/tmp/cli-test-local-" + std::to_string(::getpid());
  const std::string port = FreePort();
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
  for (const char* env : {"TRAINLET_NODE_RANK=1", "PET_MASTER_ADDR=h", "TRAINLET_RDZV_ENDPOINT=h"}) {
    Outcome o = Trainlet(env, "local --nnodes 2 -- true");
    EXPECT_EQ(o.code, 78) << env << ": " << o.out;
    EXPECT_NE(o.out.find(std::string(env).substr(0, std::string(env).find('=')) +
                         " is set, but `trainlet local` has no --"),
              std::string::npos)
        << o.out;
  }
  // TRAINLET_TEE is honoured now (it was ignored without a word).
  Outcome t = Trainlet("TRAINLET_TEE=x", "local -- true");
  EXPECT_EQ(t.code, 78) << t.out;
  EXPECT_NE(t.out.find("TRAINLET_TEE='x'"), std::string::npos) << t.out;
  // JSON: local's own lines too.
  Outcome j = Trainlet("", "local --log-format json -- true");
  EXPECT_EQ(j.code, 0) << j.out;
  EXPECT_NE(j.out.find("{\"time\""), std::string::npos) << j.out;
  EXPECT_EQ(j.out.find("[trainlet local"), std::string::npos) << j.out;
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
}
