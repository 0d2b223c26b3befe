// The front end in process: the flag table, the precedence flag >
// TRAINLET_* > PET_*, Validate and the plans, as table tests (no binary:
// cli_test keeps the exit codes and --help of the real one).
#include "trainlet/agent/front/front_end.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <regex>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <sstream>
#include <variant>

#include "trainlet/agent/front/cli.h"
#include "trainlet/agent/front/flags.h"
#include "trainlet/agent/base/tunables.h"
#include "trainlet/agent/front/local.h"
#include "trainlet/agent/run/launch_check.h"
#include "trainlet/agent/run/worker_logs.h"

extern char** environ;

namespace trainlet::agent {
namespace {

using Env = std::map<std::string, std::string>;

// A variable of the process environment for one test (CLI11 reads TRAINLET_*
// there); the value before comes back after.
class ScopedEnv {
 public:
  ScopedEnv(const std::string& name, const std::string& value) : name_(name) {
    if (const char* old = ::getenv(name.c_str())) old_ = old;
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

SplitArgs TrainerLine(std::vector<std::string> argv = {"train.py"}) {
  SplitArgs split;
  split.trainer = std::move(argv);
  return split;
}

// `options` parsed for `form` with `env`, then validated.
exitcodes::Result<Settings> ValidateLine(Form form, const std::vector<std::string>& options,
                                         const Env& env = {}) {
  FlagValues f(form, env);
  if (auto st = ParseOptions(f, options); !st.ok()) return st;
  return Validate(f, TrainerLine(), {});
}

std::string ErrorOf(Form form, const std::vector<std::string>& options, const Env& env = {}) {
  auto s = ValidateLine(form, options, env);
  return s.ok() ? "" : s.status().message();
}

TEST(FlagTable, NamesAreUniqueAndRowsSayWhatTheyNeed) {
  std::set<std::string_view> names;
  for (const FlagSpec& spec : FlagTable()) {
    EXPECT_TRUE(names.insert(spec.name).second) << spec.name;
    EXPECT_FALSE(spec.help.empty()) << spec.name;
    // What `local` hands on, it must take.
    EXPECT_TRUE(spec.pass_on == PassOn::kNo || (spec.forms & kLocalForm) != 0) << spec.name;
    // torchrun's own flags read their PET_* (torchrun's argparse `env` action).
    EXPECT_TRUE(spec.spelling != Spelling::kTorchrun || spec.pet) << spec.name;
    EXPECT_TRUE(spec.spelling != Spelling::kOwn || !spec.pet) << spec.name;
    EXPECT_TRUE(spec.choices.empty() || spec.type == FlagType::kText) << spec.name;
  }
}

TEST(FlagTable, DefaultsAreTheTunables) {
  EXPECT_EQ(SpecOf(Flag::kRdzvPort).default_value, std::to_string(kDefaultRdzvPort));
  EXPECT_EQ(SpecOf(Flag::kJaxPort).default_value, std::to_string(kDefaultJaxPort));
  EXPECT_EQ(SpecOf(Flag::kGracePeriod).default_value, std::to_string(kDefaultGrace.count()));
  EXPECT_EQ(SpecOf(Flag::kRdzvTimeout).default_value,
            std::to_string(kDefaultRdzvTimeout.count()));
  EXPECT_EQ(SpecOf(Flag::kPreflightTimeout).default_value,
            std::to_string(kDefaultPreflightTimeout.count()));
}

TEST(FlagValues, FlagWinsOverTrainletWhichWinsOverPet) {
  struct Case {
    std::vector<std::string> options;
    std::optional<std::string> trainlet_env;
    Env env;
    std::uint32_t want;
    std::string source;
  };
  const Case cases[] = {
      {{}, std::nullopt, {}, 0, "--max-restarts"},
      {{}, std::nullopt, {{"PET_MAX_RESTARTS", "3"}}, 3, "PET_MAX_RESTARTS"},
      {{}, "2", {{"PET_MAX_RESTARTS", "3"}}, 2, "TRAINLET_MAX_RESTARTS"},
      {{"--max-restarts", "1"}, "2", {{"PET_MAX_RESTARTS", "3"}}, 1, "--max-restarts"},
      {{"--max_restarts=4", "--max-restarts", "5"}, std::nullopt, {}, 5, "--max-restarts"},
  };
  for (const Case& c : cases) {
    std::optional<ScopedEnv> scoped;
    if (c.trainlet_env) scoped.emplace("TRAINLET_MAX_RESTARTS", *c.trainlet_env);
    FlagValues f(Form::kPod, c.env);
    ASSERT_TRUE(ParseOptions(f, c.options).ok());
    auto s = Validate(f, TrainerLine(), {});
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_EQ(s->max_restarts, c.want);
    EXPECT_EQ(f.Source(Flag::kMaxRestarts), c.source);
  }
}

TEST(FlagValues, OwnFlagsIgnorePetAndAreGivenOnce) {
  FlagValues f(Form::kPod, {{"PET_SPARES", "3"}});
  ASSERT_TRUE(ParseOptions(f, {}).ok());
  EXPECT_EQ(f.Given(Flag::kSpares), std::nullopt);
  FlagValues twice(Form::kPod, {});
  auto st = ParseOptions(twice, {"--spares", "1", "--spares", "2"});
  EXPECT_EQ(st.message(), GivenTwice("--spares"));
}

TEST(FlagValues, ATorchrunSwitchReadsPetAsAnInteger) {
  FlagValues on(Form::kPod, {{"PET_STANDALONE", "1"}});
  ASSERT_TRUE(ParseOptions(on, {}).ok());
  EXPECT_TRUE(*on.Switch(Flag::kStandalone));
  FlagValues bad(Form::kPod, {{"PET_STANDALONE", "yes"}});
  ASSERT_TRUE(ParseOptions(bad, {}).ok());
  EXPECT_EQ(bad.Switch(Flag::kStandalone).status().message(),
            "PET_STANDALONE='yes' is not an integer (0 off, 1 on), as torchrun reads it");
}

TEST(Validate, RefusesWithTheSourceTheUserWrote) {
  struct Case {
    Form form;
    std::vector<std::string> options;
    Env env;
    std::string want;
  };
  const Case cases[] = {
      {Form::kPod, {"--grace-period", "-1"}, {},
       "--grace-period='-1' is negative: not a number of seconds between 0.001 and 10000000"},
      {Form::kPod, {"--preflight-timeout", "5"}, {},
       "--preflight-timeout has no effect without --preflight"},
      {Form::kLocal, {"--hang-signal", "SIGUSR2"}, {},
       "--hang-signal has no effect without --hang-timeout"},
      {Form::kPod, {"--hang-timeout", "10", "--hang-signal", "KILL"}, {},
       "--hang-signal='KILL' is not a signal that can be sent for diagnostics (e.g. SIGUSR1, "
       "SIGQUIT)"},
      {Form::kPod, {"--rdzv-backend", "zk"}, {},
       "--rdzv-backend='zk': not a rendezvous backend trainlet stands in for (static, c10d, "
       "etcd, etcd-v2)"},
      {Form::kPod, {}, {{"PET_START_METHOD", "thread"}},
       "PET_START_METHOD='thread': not one of spawn, fork, forkserver"},
      {Form::kPod, {"--hang-timeout", "10", "--straggler-factor", "0.5"}, {},
       "--straggler-factor='0.5' must be above 1 (or 0: off)"},
      {Form::kPod, {"--health-port", "0x10"}, {},
       "--health-port='0x10' is not a canonical non-negative decimal integer"},
      {Form::kPod, {"--max-restarts", "07"}, {},
       "--max-restarts='07' is not a canonical non-negative decimal integer"},
      {Form::kPod, {"--shutdown-timeout", "x"}, {},
       "--shutdown-timeout='x' is not a number of seconds between 0.001 and 10000000"},
      {Form::kPod, {}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "-3"}},
       "TORCH_ELASTIC_SHUTDOWN_TIMEOUT='-3' is negative: not a number of seconds between "
       "0.001 and 10000000"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ErrorOf(c.form, c.options, c.env), c.want) << c.options.size();
  }
}

TEST(Validate, GracePeriodPrecedence) {
  struct Case {
    Form form;
    std::vector<std::string> options;
    Env env;
    long long want_ms;
  };
  const Case cases[] = {
      {Form::kPod, {}, {}, 25'000},
      {Form::kPod, {"--shutdown-timeout", "7"}, {}, 7'000},
      {Form::kPod, {}, {{"PET_SHUTDOWN_TIMEOUT", "8"}}, 8'000},
      {Form::kPod, {}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "9"}}, 9'000},
      {Form::kPod, {"--grace-period", "3"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "9"}}, 3'000},
      // `local` has no --shutdown-timeout: its agents' grace is --grace-period's.
      {Form::kLocal, {}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "9"}}, 25'000},
  };
  for (const Case& c : cases) {
    auto s = ValidateLine(c.form, c.options, c.env);
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_EQ(s->grace.count(), c.want_ms);
  }
}

// A node with nothing to say: no GPU, no driver, a pod named web-1.
NodeFacts QuietNode() {
  NodeFacts node;
  node.self_exe = "/usr/bin/trainlet";
  node.python = {"/usr/bin/python3", "PATH"};
  node.hostname = "web-1";
  return node;
}

exitcodes::Result<PodOptions> PlanPodFor(const std::vector<std::string>& options,
                                         const Env& env = {}, NodeFacts node = QuietNode()) {
  FlagValues f(Form::kPod, env);
  if (auto st = ParseOptions(f, options); !st.ok()) return st;
  auto s = Validate(f, TrainerLine(), {});
  if (!s.ok()) return s.status();
  auto trainer = PlanTrainer(f, *s, node, TrainerLine());
  if (!trainer.ok()) return trainer.status();
  return PlanPod(f, *s, node, TrainerLine(), *trainer);
}

TEST(PlanPod, PortsByPrecedence) {
  struct Case {
    std::vector<std::string> options;
    Env env;
    std::uint16_t rdzv, master;
  };
  const Case cases[] = {
      {{"--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1"}, {}, 29400, 0},
      {{"--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "10.0.0.1:1234"}, {}, 1234, 0},
      // Kubeflow Trainer's PET_MASTER_PORT=29400: the rendezvous moves one up.
      {{"--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1"},
       {{"PET_MASTER_PORT", "29400"}}, 29401, 29400},
      {{"--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--rdzv-port", "5000"},
       {{"MASTER_PORT", "6000"}}, 5000, 6000},
  };
  for (const Case& c : cases) {
    auto po = PlanPodFor(c.options, c.env);
    ASSERT_TRUE(po.ok()) << po.status().message();
    EXPECT_EQ(po->rdzv_port, c.rdzv);
    EXPECT_EQ(po->master_port, c.master);
    EXPECT_EQ(po->identity.index, 1u);
    EXPECT_EQ(po->identity.leader_host, "10.0.0.1");
  }
}

TEST(PlanPod, RefusesWhatOnlyThePlanCanSee) {
  struct Case {
    std::vector<std::string> options;
    Env env;
    std::string want;
  };
  const Case cases[] = {
      {{"--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "10.0.0.1:0"}, {},
       "--rdzv-endpoint gives port 0 (a free port), which only a gang of one pod can use: the "
       "other 1 pod(s) would have to know it; give the port they dial"},
      {{"--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--jax-port", "29400"},
       {}, "--jax-port 29400 is also MASTER_PORT or the rendezvous port: JAX's coordinator needs "
           "a port of its own"},
      {{"--standalone", "--nnodes", "2"}, {},
       "--standalone runs a gang of one pod, but --nnodes is '2'"},
      {{"--master-addr", "a.example", "--rdzv-endpoint", "b.example"}, {},
       "the leader's address: --rdzv-endpoint gives 'b.example', --master-addr gives "
       "'a.example'; give only one of them"},
  };
  for (const Case& c : cases) {
    auto po = PlanPodFor(c.options, c.env);
    ASSERT_FALSE(po.ok());
    EXPECT_EQ(po.status().message(), c.want);
  }
}

// torchrun's elastic --nnodes MIN:MAX: accepted with an index on every pod;
// refused (config, one line) where it cannot mean anything.
TEST(PlanPod, ElasticMinMax) {
  struct Case {
    std::vector<std::string> options;
    std::uint32_t min, max;
    std::string error;  // "" when accepted
  };
  const Case cases[] = {
      {{"--nnodes", "2:3", "--node-rank", "2", "--master-addr", "10.0.0.1"}, 2, 3, ""},
      {{"--nnodes", "1:4", "--node-rank", "0", "--master-addr", "10.0.0.1"}, 1, 4, ""},
      {{"--nnodes", "3:3", "--node-rank", "1", "--master-addr", "10.0.0.1"}, 3, 3, ""},
      {{"--nnodes", "3:2", "--node-rank", "1", "--master-addr", "10.0.0.1"}, 0, 0,
       "--nnodes='3:2': MIN is larger than MAX; give N, or MIN:MAX with MIN <= MAX"},
      {{"--nnodes", "0:2", "--node-rank", "1", "--master-addr", "10.0.0.1"}, 0, 0,
       "--nnodes='0:2': a gang needs at least one pod"},
      {{"--nnodes", "2:3", "--node-rank", "3", "--master-addr", "10.0.0.1"}, 0, 0,
       "--node-rank='3' is not below the number of pods 3 "
       "(--nnodes); indices run from 0 to 2"},
      // torchrun's elastic c10d line, no index anywhere: numbered by arrival.
      {{"--nnodes", "2:3", "--rdzv-endpoint", "10.0.0.1:29400"}, 2, 3, ""},
      {{"--nnodes", "1:4", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.0.0.1:29400"}, 1, 4,
       ""},
      {{"--nnodes", "2:3"}, 0, 0,
       "--nnodes='2:3' but this pod has no index: run it in an Indexed Job "
       "(JOB_COMPLETION_INDEX), set --node-rank / PET_NODE_RANK, mount the job-completion-index "
       "annotation at /etc/podinfo/annotations, or give --rdzv-endpoint (its host leads, the "
       "others are numbered as they join)"},
  };
  for (const Case& c : cases) {
    auto po = PlanPodFor(c.options, {});
    if (!c.error.empty()) {
      ASSERT_FALSE(po.ok()) << c.options[1];
      EXPECT_EQ(po.status().message(), c.error);
      EXPECT_EQ(po.status().failure_class(), exitcodes::FailureClass::kConfig);
      continue;
    }
    ASSERT_TRUE(po.ok()) << po.status().message();
    EXPECT_EQ(po->identity.min_pods(), c.min) << c.options[1];
    EXPECT_EQ(po->identity.nnodes, c.max) << c.options[1];
    EXPECT_EQ(po->identity.elastic(), c.min < c.max) << c.options[1];
    const bool indexed = std::find(c.options.begin(), c.options.end(), "--node-rank") !=
                         c.options.end();
    EXPECT_EQ(po->identity.by_arrival, !indexed) << c.options[1];
  }
}

TEST(PlanPod, StandaloneTakesTheProbedPorts) {
  NodeFacts node = QuietNode();
  node.free_ports = {41000, 41001};
  auto po = PlanPodFor({"--standalone"}, {{"PET_NNODES", "3"}}, node);
  ASSERT_TRUE(po.ok()) << po.status().message();
  EXPECT_EQ(po->rdzv_port, 41000);
  EXPECT_EQ(po->jax_port, 41001);
  EXPECT_EQ(po->identity.nnodes, 1u);
  node.free_ports.clear();
  auto none = PlanPodFor({"--standalone"}, {}, node);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().failure_class(), exitcodes::FailureClass::kInfra);
}

TEST(PlanTrainer, HardwareFailuresKeepTheirClass) {
  NodeFacts node = QuietNode();
  node.gpu_fault = "GPU 0: uncorrectable ECC error";
  auto po = PlanPodFor({}, {}, node);
  ASSERT_FALSE(po.ok());
  EXPECT_EQ(po.status().failure_class(), exitcodes::FailureClass::kHardware);
  EXPECT_EQ(po.status().message(), "GPU fault at start: GPU 0: uncorrectable ECC error");
  NodeFacts no_gpu = QuietNode();
  no_gpu.gpus = gpu::Discovery{false, {}, "no device"};
  auto required = PlanPodFor({"--require-gpus"}, {}, no_gpu);
  ASSERT_FALSE(required.ok());
  EXPECT_EQ(required.status().message(), "--require-gpus: no usable GPU on this pod: no device");
}

exitcodes::Result<LocalOptions> PlanLocalFor(const std::vector<std::string>& options,
                                             const Env& env = {}) {
  FlagValues f(Form::kLocal, env);
  if (auto st = ParseOptions(f, options); !st.ok()) return st;
  auto s = Validate(f, TrainerLine({"true"}), {});
  if (!s.ok()) return s.status();
  NodeFacts node = QuietNode();
  node.working_directory = "/";
  SplitArgs split = TrainerLine({"true"});
  split.dash_dash = true;
  auto trainer = PlanTrainer(f, *s, node, split);
  if (!trainer.ok()) return trainer.status();
  return PlanLocal(f, *s, node, split, *trainer);
}

TEST(PlanLocal, PassesOnWhatTheTableSays) {
  auto lo = PlanLocalFor({"--nnodes", "3", "--marker", "bug=X", "--marker", "oom=Y",
                          "--hang-timeout", "5", "--hang-signal", "SIGUSR2", "--preflight"},
                         {{"PET_MAX_RESTARTS", "2"}, {"PET_TEE", "3"}});
  ASSERT_TRUE(lo.ok()) << lo.status().message();
  EXPECT_EQ(lo->nnodes, 3u);
  EXPECT_EQ(lo->rdzv_timeout, kLocalRdzvTimeout);
  const std::vector<std::string> want = {
      "--preflight", "--nccl-ids", "on", "--gpu-health", "on", "--signal-scope", "main",
      "--max-restarts", "2", "--log-format", "text", "--worker-log-format", "text",
      "--marker", "bug=X", "--marker", "oom=Y", "--hang-timeout", "5", "--hang-signal",
      "SIGUSR2", "--tee", "3"};
  EXPECT_EQ(lo->pass_through, want);
}

TEST(PlanLocal, RefusesVariablesForFlagsItSetsItself) {
  auto lo = PlanLocalFor({}, {{"PET_NODE_RANK", "1"}});
  ASSERT_FALSE(lo.ok());
  EXPECT_EQ(lo.status().message(),
            "PET_NODE_RANK is set, but `trainlet local` has no --node-rank: it sets each agent's "
            "identity and ports itself; unset it, or run the pod form (trainlet without local)");
  auto health = PlanLocalFor({"--nnodes", "3", "--health-port", "65534"});
  ASSERT_FALSE(health.ok());
  EXPECT_EQ(health.status().message(),
            "--health-port='65534': agent i serves on PORT+i, past 65535");
}


// ---- The whole front end in process: cli.h's PlanCommandLine ----
//
// The rows below were cli_test's, which ran the binary for each; they keep
// their environments and command lines as the shell wrote them, and their
// assertions, read from the plan instead of the workers' output. cli_test
// keeps the binary's exit codes, --help and signals.

// "a 'b c' ''" -> {"a", "b c", ""}: words as sh splits them (single quotes only).
std::vector<std::string> Words(const std::string& line) {
  std::vector<std::string> out;
  std::string word;
  bool in_word = false, quoted = false;
  for (char c : line) {
    if (quoted) {
      if (c == '\'') {
        quoted = false;
      } else {
        word += c;
      }
    } else if (c == '\'') {
      quoted = in_word = true;
    } else if (c == ' ') {
      if (in_word) out.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) out.push_back(word);
  return out;
}

std::string Join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

// What the binary would do with a command line, up to the start of its run.
struct Outcome {
  int code = 0;         // its exit code if it ends before the run; 0: it would run
  std::string message;  // the one line it refuses with, or ""
  std::string out;      // stdout and stderr (the front end's log lines) together
  FrontEnd front;
  const PodOptions* pod() const { return std::get_if<PodOptions>(&front.plan); }
  const LocalOptions* local() const { return std::get_if<LocalOptions>(&front.plan); }
  // The trainer's command line, either form.
  std::string command() const {
    if (pod()) return Join(pod()->command);
    return local() ? Join(local()->command) : "";
  }
};

// `env trainlet args` as cli_test ran it (env -i PATH=/usr/bin:/bin HOSTNAME=x
// TRAINLET_LIBNCCL=/nonexistent/libnccl.so.2 ENV trainlet ARGS), in process:
// PlanCommandLine with the real Probe, then for the pod form the check its run
// starts with (pod.cc Prepare: CheckLaunch). Env's variables are also set in
// the process environment, which CLI11 reads TRAINLET_* from (and no other
// TRAINLET_* is there).
Outcome FrontEndOf(const std::string& env, const std::string& args) {
  for (char** e = environ; *e != nullptr;) {
    const std::string kv = *e;
    if (kv.rfind("TRAINLET_", 0) == 0) {
      ::unsetenv(kv.substr(0, kv.find('=')).c_str());  // environ changed: from the top again
      e = environ;
    } else {
      ++e;
    }
  }
  Env vars = {{"PATH", "/usr/bin:/bin"},
              {"HOSTNAME", "x"},
              {"TRAINLET_LIBNCCL", "/nonexistent/libnccl.so.2"}};
  std::vector<std::unique_ptr<ScopedEnv>> scoped;
  for (const std::string& kv : Words(env)) {
    const auto eq = kv.find('=');
    vars[kv.substr(0, eq)] = kv.substr(eq + 1);
    scoped.push_back(std::make_unique<ScopedEnv>(kv.substr(0, eq), kv.substr(eq + 1)));
  }
  std::vector<std::string> argv = {"trainlet"};
  for (std::string& w : Words(args)) argv.push_back(std::move(w));
  Outcome o;
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  o.front = PlanCommandLine(argv, vars, [](const FlagValues& f, const Settings& s) {
    return Probe(f, s);
  });
  exitcodes::Status st = o.front.status;
  if (st.ok() && o.pod()) {
    st = CheckLaunch(o.pod()->command, o.pod()->launch_check, o.pod()->env, o.pod()->logs,
                     WorkingDirectory());
  }
  spdlog::default_logger()->flush();
  o.out = testing::internal::GetCapturedStdout();
  o.out += testing::internal::GetCapturedStderr();
  if (o.front.exit) {
    o.code = *o.front.exit;
  } else if (!st.ok()) {
    o.code = o.front.codes.CodeFor(st.failure_class());
    o.message = st.message();
  }
  return o;
}

// cli_test's BadInputIsOneLineExit78AtOnce, row for row (the binary test
// keeps one row of each stage for the exit, the one line and the summary).
TEST(CommandLine, BadInputIsRefusedAsConfig) {
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
      {"", "--token-file /dev/null -- true", "'/dev/null' is a character device"},
      {"", "--log-level loud -- true", "--log-level='loud'"},
      {"", "--signal-scope pod -- true", "--signal-scope: pod not in {main,group}"},
      {"TRAINLET_SIGNAL_SCOPE=session", "-- true", "TRAINLET_SIGNAL_SCOPE: session not in"},
      // CLI11's own refusals name the variable the value came from, not its flag.
      {"TRAINLET_RUN_PATH=xxx", "-- true", "TRAINLET_RUN_PATH"},
      {"TRAINLET_LOG_FORMAT=yaml", "-- true", "TRAINLET_LOG_FORMAT"},
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
      {"", "--nnodes 2:4 train.py", "--nnodes='2:4' but this pod has no index"},
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
      {"", "--hang-signal KILL -- true", "--hang-signal"},  // was BeatingWorkersAreNotHung's
      // trainlet's own flags are given once; torchrun's take the last (RepeatedFlags below).
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
      {"", "--max-restarts many -- true", "--max-restarts"},  // was MaxRestartsRestartsInPlace's
      {"", "--rdzv-id '' -- true", "--rdzv-id='' must be 1 to 253 characters"},
      {"", "--nnodes 2:1 -- true", "--nnodes='2:1': MIN is larger than MAX"},
      {"", "--nnodes 99999999999 -- true", "--nnodes='99999999999' is too large"},
      {"", "--max-restarts 99999999999 -- true", "--max-restarts='99999999999' is too large"},
      {"", "--monitor-interval -1 -- true", "--monitor-interval='-1' is negative"},
      {"", "--grace-period -2 -- true", "--grace-period='-2' is negative"},
      {"TRAINLET_RDZV_PORT=x", "-- true", "TRAINLET_RDZV_PORT='x'"},
      // A subcommand's name elsewhere is the trainer's; the message says why.
      {"", "--nnodes 1 local -- true", "`local` is a subcommand only as the first argument"},
      // Was GangFromEnvironmentGivesRoles'.
      {"TRAINLET_GANG=solo", "-- true", "--gang/TRAINLET_GANG='solo'"},
  };
  for (const Row& r : rows) {
    Outcome o = FrontEndOf(r.env, r.args);
    EXPECT_EQ(o.code, 78) << r.env << " " << r.args << ": " << o.out;
    EXPECT_NE(o.message.find(r.expected), std::string::npos) << r.env << " " << r.args << ": "
                                                             << o.message;
    EXPECT_EQ(o.message.find('\n'), std::string::npos) << "one line: " << o.message;
  }
}

// Every file a flag or variable names is read without blocking or growing
// (exitcodes::ReadUserFile), and every path from the spec goes through the
// calls that return errors, not exceptions: each bad one is a one-line 78
// that names it and says what it is.
TEST(CommandLine, BadFilesAndPathsAreConfigNamingThem) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("front-bad-files-" + std::to_string(::getpid()));
  fs::create_directories(dir / "podinfo");
  const std::string fifo = (dir / "fifo").string(), big = (dir / "big").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo((dir / "podinfo" / "labels").c_str(), 0600), 0);
  std::ofstream(big) << std::string((1 << 20) + 1, 'x');
  const std::string d = dir.string(), long_path = "/tmp/" + std::string(4100, 'a');
  struct Row {
    std::string env, args, expected;
  };
  const std::vector<Row> rows = {
      {"", "--token-file " + fifo + " -- true", "--token-file '" + fifo + "' is a FIFO"},
      {"", "--token-file /dev/zero -- true", "'/dev/zero' is a character device, not a regular"},
      {"TRAINLET_TOKEN_FILE=/dev/urandom", "-- true",
       "TRAINLET_TOKEN_FILE '/dev/urandom' is a character device"},
      {"", "--token-file " + d + " -- true", "--token-file '" + d + "' is a directory"},
      {"", "--token-file " + big + " -- true",
       "--token-file '" + big + "' is 1048577 bytes (1.0 MiB), more than the 1 MiB"},
      {"", "--token-file " + long_path + " -- true", "cannot be read: File name too long"},
      {"", "--podinfo-dir " + d + "/podinfo -- true",
       "the downward-API file '" + d + "/podinfo/labels' is a FIFO"},
      {"", "--podinfo-file /dev/zero -- true",
       "the downward-API file '/dev/zero' is a character device"},
      {"", "--podinfo-dir " + long_path + " -- true", "File name too long"},
      {"", "--log-dir " + long_path + " -r 3 -- true",
       "--log-dir '" + long_path + "' is not a folder that can be made: File name too long"},
  };
  for (const Row& r : rows) {
    const auto t0 = std::chrono::steady_clock::now();
    Outcome o = FrontEndOf(r.env, r.args);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10)) << r.args;
    EXPECT_EQ(o.code, 78) << r.env << " " << r.args.substr(0, 200) << ": " << o.out;
    EXPECT_NE(o.message.find(r.expected), std::string::npos)
        << r.env << " " << r.args.substr(0, 200) << ": " << o.message.substr(0, 300);
    EXPECT_EQ(o.message.find('\n'), std::string::npos) << "one line: " << o.message;
  }
  fs::remove_all(dir);
}

// A subcommand's refusal names what the user wrote, not the parser's names.
TEST(CommandLine, ProbeSaysWhatItTakes) {
  Outcome o = FrontEndOf("", "probe x");
  EXPECT_EQ(o.code, 78) << o.out;
  EXPECT_NE(o.out.find("trainlet: probe 'x': what to probe is one of ready, live, metrics"),
            std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("what:"), std::string::npos) << o.out;
}

// A token too short to be secret is taken, with a warning that says its size
// (never the token).
TEST(CommandLine, AShortTokenIsWarnedAbout) {
  const std::string path = testing::TempDir() + "short-token";
  std::ofstream(path) << "abcde\n";
  Outcome o = FrontEndOf("", "--token-file " + path + " -- true");
  ASSERT_NE(o.pod(), nullptr) << o.message;
  EXPECT_EQ(o.pod()->token, "abcde");
  EXPECT_NE(o.out.find("--token-file '" + path + "' holds 5 bytes: a token shorter than 32"),
            std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("abcde"), std::string::npos) << "never the token";
  std::ofstream(path) << std::string(32, 'k');
  Outcome long_enough = FrontEndOf("", "--token-file " + path + " -- true");
  ASSERT_NE(long_enough.pod(), nullptr) << long_enough.message;
  EXPECT_EQ(long_enough.out.find("holds"), std::string::npos) << long_enough.out;
  ::unlink(path.c_str());
}

// cli_test's GpuFlagsAndTheirEnvironment, RequireGpusOnItsOwn and NprocPerNodeCpu.
TEST(CommandLine, GpuFlagsAndTheirEnvironment) {
  struct Row {
    std::string env, args;
    int code;
    std::string text;  // in the refusal
    std::uint32_t workers = 0;  // a plan: its workers per pod
  };
  const std::string nogpu = "TRAINLET_LIBCUDA=/nonexistent/libcuda.so.1 "
                            "TRAINLET_LIBNVML=/nonexistent/libnvml.so.1";
  const auto cpus = static_cast<std::uint32_t>(::sysconf(_SC_NPROCESSORS_ONLN));
  const std::vector<Row> rows = {
      {nogpu, "--nproc-per-node gpu -- true", 78,
       "--nproc-per-node='gpu' but no GPU is visible: no CUDA driver"},
      {nogpu + " TRAINLET_NPROC_PER_NODE=gpu", "-- true", 78, "but no GPU is visible"},
      // torchrun: auto without an accelerator is os.cpu_count().
      {nogpu, "--nproc-per-node auto -- true", 0, "", cpus},
      {"TRAINLET_LIBCUDA=/nonexistent/libcuda.so.1", "--nproc-per-node cpu -- true", 0, "", cpus},
      {nogpu, "--preflight --preflight-timeout abc -- true", 78, "--preflight-timeout='abc'"},
      {nogpu + " TRAINLET_PREFLIGHT=1 TRAINLET_PREFLIGHT_MIN_BUSBW=-1", "-- true", 78,
       "TRAINLET_PREFLIGHT_MIN_BUSBW='-1' is negative"},
      {nogpu + " TRAINLET_NCCL_IDS=maybe", "-- true", 78, "TRAINLET_NCCL_IDS: maybe"},
      {nogpu + " CUDA_VISIBLE_DEVICES=0,,1", "--nproc-per-node gpu -- true", 78,
       "CUDA_VISIBLE_DEVICES='0,,1' has an empty entry"},
      {nogpu + " NCCL_SOCKET_IFNAME=nosuchif0", "-- true", 78,
       "NCCL_SOCKET_IFNAME='nosuchif0': no interface matches; interfaces: lo"},
      // Its run then says "no GPU: preflight skipped" (gpu/preflight.cc).
      {nogpu + " TRAINLET_PREFLIGHT=1", "-- true", 0, "", 1},
      // A flag means what it says on its own: --require-gpus without --preflight
      // on a pod without a GPU is a hardware failure, not a silent success.
      {"TRAINLET_LIBCUDA=/nonexistent/libcuda.so.1", "--require-gpus -- true", 74,
       "--require-gpus: no usable GPU"},
  };
  for (const Row& r : rows) {
    Outcome o = FrontEndOf(r.env, r.args);
    EXPECT_EQ(o.code, r.code) << r.env << " " << r.args << "\n" << o.out << o.message;
    EXPECT_NE(o.message.find(r.text), std::string::npos) << r.env << " " << r.args << "\n"
                                                         << o.message;
    if (r.code == 0) {
      ASSERT_NE(o.pod(), nullptr) << r.args;
      EXPECT_EQ(o.pod()->identity.nproc_per_node, r.workers) << r.env << " " << r.args;
    }
  }
}

// cli_test's FlagsFromTrainletAndPetEnvironment: PET_NPROC_PER_NODE
// (torchrun's) and TRAINLET_* are honoured; the flag wins.
TEST(CommandLine, FlagsFromTrainletAndPetEnvironment) {
  struct Row {
    std::string env, args;
    std::uint32_t workers;
  };
  for (const Row& r : {Row{"PET_NPROC_PER_NODE=3", "-- true", 3},
                       Row{"PET_NPROC_PER_NODE=3 TRAINLET_NPROC_PER_NODE=2", "-- true", 2},
                       Row{"TRAINLET_NPROC_PER_NODE=2", "--nproc-per-node 1 -- true", 1}}) {
    Outcome o = FrontEndOf(r.env, r.args);
    ASSERT_NE(o.pod(), nullptr) << r.env << ": " << o.message;
    EXPECT_EQ(o.pod()->identity.nproc_per_node, r.workers) << r.env << " " << r.args;
    EXPECT_EQ(o.pod()->identity.nnodes, 1u);
  }
}

// cli_test's GangFromEnvironmentGivesRoles: TRAINLET_GANG like --gang, a
// one-pod gang whose only role is "solo" (the refusal is a BadInput row).
TEST(CommandLine, GangFromEnvironmentGivesRoles) {
  Outcome o = FrontEndOf("TRAINLET_GANG=solo=1", "--nproc-per-node 2 -- true");
  ASSERT_NE(o.pod(), nullptr) << o.message;
  EXPECT_EQ(o.pod()->identity.role_name, "solo");
  EXPECT_EQ(o.pod()->identity.role_rank_base, 0u);
  EXPECT_EQ(o.pod()->identity.role_world_size, 2u);
  Outcome plain = FrontEndOf("", "-- true");
  ASSERT_NE(plain.pod(), nullptr) << plain.message;
  EXPECT_EQ(plain.pod()->identity.role_name, "default");
  EXPECT_EQ(plain.pod()->identity.role_world_size, 1u);
}

// cli_test's ParsingStopsAtTheTrainerCommand: nothing after the first
// positional is the launcher's; a trainer flag that shares a name with a
// trainlet flag reaches the trainer.
TEST(CommandLine, ParsingStopsAtTheTrainerCommand) {
  // A bare first argument is a script for python (torchrun's); `sh` is none
  // here: refused, saying how to run a program, not guessed.
  Outcome r =
      FrontEndOf("", "--nproc_per_node 1 sh -c 'echo args:$*' sh --log-level debug --nnodes 9");
  EXPECT_EQ(r.code, 78) << r.out;
  EXPECT_NE(r.message.find("'sh' is a program on PATH"), std::string::npos) << r.message;
  r = FrontEndOf("", "--nproc_per_node 1 --no-python sh -c 'echo args:$*' sh --log-level debug "
              "--nnodes 9");
  EXPECT_EQ(r.code, 0) << r.message;
  EXPECT_EQ(r.command(), "sh -c echo args:$* sh --log-level debug --nnodes 9");
  EXPECT_EQ(r.pod()->identity.nnodes, 1u);
  r = FrontEndOf("", "-- sh -c 'echo args:$*' sh --grace-period 1");
  EXPECT_EQ(r.command(), "sh -c echo args:$* sh --grace-period 1");
  EXPECT_EQ(r.pod()->grace, kDefaultGrace);
}

// A folder of scripts and programs for one test, removed after it.
struct TempDir {
  std::string path = "/tmp/front-end-test-" + std::to_string(::getpid());
  TempDir() { std::filesystem::create_directories(path); }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string File(const std::string& name, const std::string& text, bool executable = false) {
    const std::string p = path + "/" + name;
    std::ofstream(p) << text;
    if (executable) ::chmod(p.c_str(), 0755);
    return p;
  }
};

// cli_test's ScriptModuleAndRunPathRunWithPython: script.py runs as `python
// -u script.py args` with PYTHON_EXEC (torchrun's), -m as `python -u -m`;
// --python names the interpreter. (That --run-path's runpy sees the script's
// argv is agent_binary_test's: it takes a real python.)
TEST(CommandLine, ScriptModuleAndRunPathRunWithPython) {
  TempDir dir;
  const std::string py = dir.File("fakepy", "#!/bin/sh\necho \"py:$*\"\n", true);
  const std::string train = dir.File("train.py", "");  // a missing script is refused
  struct Row {
    std::string env, args, command;
  };
  for (const Row& r : {
           Row{"PYTHON_EXEC=" + py, train + " --epochs 3", py + " -u " + train + " --epochs 3"},
           Row{"", "--python " + py + " -m pkg.mod --x 1", py + " -u -m pkg.mod --x 1"},
           Row{"PET_MODULE=1 TRAINLET_PYTHON=" + py, "pkg.mod", py + " -u -m pkg.mod"},
           Row{"PET_NO_PYTHON=1", "sh -c 'echo direct'", "sh -c echo direct"},
       }) {
    Outcome o = FrontEndOf(r.env, r.args);
    EXPECT_EQ(o.code, 0) << r.env << " " << r.args << ": " << o.message;
    EXPECT_EQ(o.command(), r.command) << r.env << " " << r.args;
  }
  Outcome o = FrontEndOf("", "--python /usr/bin/python3 --run-path --no-python " +
                          dir.File("t.py", "") + " a b");
  EXPECT_EQ(o.code, 0) << o.message;
  ASSERT_NE(o.pod(), nullptr);
  const std::vector<std::string>& c = o.pod()->command;
  ASSERT_GE(c.size(), 3u);
  EXPECT_EQ(c[0], "/usr/bin/python3");
  EXPECT_EQ(std::vector<std::string>(c.end() - 3, c.end()),
            (std::vector<std::string>{dir.path + "/t.py", "a", "b"}));
}

// cli_test's TorchrunFlagsInBothSpellingsAndPetVariables.
TEST(CommandLine, TorchrunFlagsInBothSpellingsAndPetVariables) {
  Outcome r = FrontEndOf("", "--nproc_per_node 2 --role trainer --rdzv_id job7 --max_restarts 0 "
                      "--monitor_interval 1 --start_method fork --rdzv_backend c10d --nnodes 1:1 "
                      "--no-python true");
  ASSERT_NE(r.pod(), nullptr) << r.message;
  EXPECT_EQ(r.pod()->identity.role_name, "trainer");
  EXPECT_EQ(r.pod()->identity.job_id, "job7");
  EXPECT_EQ(r.pod()->identity.nproc_per_node, 2u);
  r = FrontEndOf("PET_ROLE=w PET_RDZV_ID=j PET_NPROC_PER_NODE=2 NCCL_ASYNC_ERROR_HANDLING=0",
          "--no-python true");
  ASSERT_NE(r.pod(), nullptr) << r.message;
  EXPECT_EQ(r.pod()->identity.role_name, "w");
  EXPECT_EQ(r.pod()->identity.job_id, "j");
  EXPECT_EQ(r.pod()->identity.nproc_per_node, 2u);
}

// cli_test's AbbreviatedTorchrunFlags: argparse's abbreviations of torchrun's
// flags, with torchrun's meaning; `local` takes them for the torchrun flags it has.
TEST(CommandLine, AbbreviatedTorchrunFlags) {
  Outcome r = FrontEndOf("", "--nproc 2 --max_rest 0 --ro=trainer --rdzv-i job7 --no-py sh -c "
                      "'echo $ROLE_NAME/$TORCHELASTIC_RUN_ID/$WORLD_SIZE' --nproc");
  ASSERT_NE(r.pod(), nullptr) << r.message;
  EXPECT_EQ(r.pod()->identity.role_name, "trainer");
  EXPECT_EQ(r.pod()->identity.job_id, "job7");
  EXPECT_EQ(r.pod()->identity.nproc_per_node, 2u);
  EXPECT_EQ(r.pod()->command.back(), "--nproc");  // the trainer's
  r = FrontEndOf("", "local --nn 2 --nproc 1 --no-py sh -c 'echo $RANK/$WORLD_SIZE'");
  ASSERT_NE(r.local(), nullptr) << r.message;
  EXPECT_EQ(r.local()->nnodes, 2u);
  EXPECT_EQ(r.local()->nproc_per_node, 1u);
}

// cli_test's StandaloneIsAGangOfOne: a gang of one on free ports, whatever
// the environment says.
TEST(CommandLine, StandaloneIsAGangOfOne) {
  Outcome r = FrontEndOf("JOB_COMPLETION_INDEX=3 PET_STANDALONE=1", "--nproc-per-node 2 -- true");
  ASSERT_NE(r.pod(), nullptr) << r.message;
  EXPECT_EQ(r.pod()->identity.index, 0u);
  EXPECT_EQ(r.pod()->identity.nnodes, 1u);
  EXPECT_EQ(r.pod()->identity.nproc_per_node, 2u);
  EXPECT_NE(r.pod()->rdzv_port, kDefaultRdzvPort);  // a free port instead
  EXPECT_NE(r.pod()->master_port, 29500);
}

// cli_test's RepeatedTorchrunFlagsTakeTheLastValue: torchrun's flags may be
// repeated, the last wins (argparse), and a one-letter option takes "=VALUE".
TEST(CommandLine, RepeatedTorchrunFlagsTakeTheLastValue) {
  Outcome r = FrontEndOf("", "--nproc_per_node 1 --nproc-per-node=2 --nnodes 1 --nnodes=1 "
                      "--role a --role b --no-python true");
  ASSERT_NE(r.pod(), nullptr) << r.message;
  EXPECT_EQ(r.pod()->identity.role_name, "b");
  EXPECT_EQ(r.pod()->identity.nproc_per_node, 2u);
  TempDir dir;
  r = FrontEndOf("", "--log-dir " + dir.path + " --rdzv-id rep -r 3 -r=1 -t=2 --no-python true");
  ASSERT_NE(r.pod(), nullptr) << r.message;
  const WorkerLogOptions& logs = r.pod()->logs;
  EXPECT_EQ(logs.log_dir, dir.path);
  // -r=1 redirects stdout only, -t=2 tees stderr only (worker_logs.h StdSpec).
  EXPECT_EQ(logs.redirects.For(0), kStdOut);
  EXPECT_EQ(logs.tee.For(0), kStdErr);
}

// cli_test's RendezvousEndpointAndTheLeadersOtherSources: the leader's
// address: a flag wins over TRAINLET_*, which wins over PET_*, the loser is
// named in the log, and the plan names the source used.
TEST(CommandLine, RendezvousEndpointAndTheLeadersOtherSources) {
  struct Row {
    std::string env, args, host;
    std::uint16_t port;
    std::string source, logged = "";
  };
  const std::string member = "--nnodes 2 --node-rank 1 --rdzv-timeout 0.2 ";
  for (const Row& r : {
           Row{"TRAINLET_MASTER_ADDR=127.0.0.9", member + "--rdzv-endpoint 127.0.0.2:29401 -- true",
               "127.0.0.2", 29401, "--rdzv-endpoint",
               "TRAINLET_MASTER_ADDR='127.0.0.9' is overridden by --rdzv-endpoint='127.0.0.2'"},
           Row{"PET_RDZV_ENDPOINT=127.0.0.2:29401", member + "--master-addr 127.0.0.3 -- true",
               "127.0.0.3", 29401, "--master-addr"},
           Row{"TRAINLET_RDZV_PORT=29444", member + "--rdzv-endpoint 127.0.0.2:29401 -- true",
               "127.0.0.2", 29401, "--rdzv-endpoint"},
           Row{"", member + "--rdzv-endpoint 127.0.0.2 --rdzv-port 29444 -- true", "127.0.0.2",
               29444, "--rdzv-endpoint"},
           Row{"MASTER_ADDR=127.0.0.5", member + "--rdzv-endpoint 127.0.0.2 -- true", "127.0.0.2",
               29400, "--rdzv-endpoint"},
           Row{"", member + "--rdzv-endpoint [::1]:29402 -- true", "::1", 29402,
               "--rdzv-endpoint"},
           Row{"PET_MASTER_ADDR=127.0.0.4", member + "-- true", "127.0.0.4", 29400,
               "PET_MASTER_ADDR"},
           // IPv6 in any written form is one address (address.h).
           Row{"PET_MASTER_ADDR=[fd00::1]", member + "-- true", "fd00::1", 29400,
               "PET_MASTER_ADDR"},
           Row{"MASTER_ADDR=[FD00::1]", member + "--master-addr fd00:0::1 -- true", "fd00::1",
               29400, "--master-addr"},
           Row{"", member + "--rdzv-endpoint [fd00:0::1]:29403 -- true", "fd00::1", 29403,
               "--rdzv-endpoint"},
       }) {
    Outcome o = FrontEndOf(r.env, r.args);
    ASSERT_NE(o.pod(), nullptr) << r.env << " " << r.args << ": " << o.message;
    EXPECT_EQ(o.pod()->identity.leader_host, r.host) << r.env << " " << r.args;
    EXPECT_EQ(o.pod()->rdzv_port, r.port) << r.env << " " << r.args;
    EXPECT_EQ(o.pod()->identity.leader_source, r.source) << r.env << " " << r.args;
    EXPECT_NE(o.out.find(r.logged), std::string::npos) << r.env << " " << r.args << "\n" << o.out;
  }
  Outcome s = FrontEndOf("", "--standalone -- true");
  ASSERT_NE(s.pod(), nullptr) << s.message;
  EXPECT_EQ(s.pod()->identity.index, 0u);
  EXPECT_EQ(s.pod()->identity.nnodes, 1u);
  EXPECT_EQ(s.pod()->identity.index_source, "--standalone");
  // torchrun's rdzv_id under --standalone is a fresh uuid4: so is TORCHELASTIC_RUN_ID,
  // --rdzv-id or not; trainlet's own --job-id is kept.
  Outcome again = FrontEndOf("", "--standalone --rdzv-id fixed -- true");
  ASSERT_NE(again.pod(), nullptr) << again.message;
  const std::string& first = s.pod()->identity.job_id;
  EXPECT_EQ(first.size(), 36u) << first;
  // RFC 9562's text form: 8-4-4-4-12 hex digits, version 4, variant 10xx.
  EXPECT_TRUE(std::regex_match(first, std::regex("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-"
                                                 "[89ab][0-9a-f]{3}-[0-9a-f]{12}")))
      << first;
  EXPECT_EQ(again.pod()->identity.job_id.size(), 36u);
  EXPECT_NE(first, again.pod()->identity.job_id);
  EXPECT_NE(s.pod()->identity.job_id_source.find("--standalone"), std::string::npos);
  Outcome kept = FrontEndOf("", "--standalone --job-id mine -- true");
  ASSERT_NE(kept.pod(), nullptr) << kept.message;
  EXPECT_EQ(kept.pod()->identity.job_id, "mine");
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

// cli_test's EveryTorchrunFlagOfTheTrackedVersion: every flag of the torchrun
// that README names (the list scripts/torchrun-flags took from its run.py), in
// each of its spellings, is accepted with torchrun's values; what it means here
// is README's table. A flag added to the list without a row here fails the
// test, naming it. `expected` is in the refusal, the log or the trainer's
// command line (the binary test read the workers' output: the row of
// --log-line-prefix-template and --virtual-local-rank check their plan below).
TEST(CommandLine, EveryTorchrunFlagOfTheTrackedVersion) {
  TempDir dir;
  const std::string script = dir.File("t.py", "print('ran')\n");
  struct Use {
    std::string value;                // the flag's value ("" for a switch)
    std::string trainer = "-- true";  // what follows
    int code = 0;
    std::string expected;  // in what it says
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
      {"-m", U("", "json.tool -h", 0, "-m json.tool -h")},
      {"--no-python", U("", "true")},
      {"--run-path", U("", script, 0, script)},
      {"--log-dir", U(dir.path + "/logs")},
      {"-r", U("0")},
      {"-t", U("0")},
      {"--log-line-prefix-template", U("<$rank> ", "-- echo hi")},
      {"--local-ranks-filter", U("0")},
      {"--duplicate-stdout-filters", U("a,b", "-- true", 0, "has no effect")},
      {"--duplicate-stderr-filters", U("a", "-- true", 0, "has no effect")},
      {"--node-rank", U("0", "--nnodes 1 -- true")},
      {"--master-addr", U("127.0.0.1")},
      {"--master-port", U("29511")},
      {"--local-addr", U("127.0.0.1")},
      {"--logs-specs", U("custom", "-- true", 78, "a torchrun.logs_specs plugin is Python")},
      {"--numa-binding", U("node", "-- true", 0, "has no effect: trainlet binds no CPUs")},
      {"--signals-to-handle", U("SIGTERM,SIGINT,SIGUSR1")},
      {"--shutdown-timeout", U("5")},
      {"--virtual-local-rank", U("")},
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
        Outcome o = FrontEndOf("", args);
        const std::string said = o.message + "\n" + o.out + "\n" + o.command();
        EXPECT_EQ(o.code, u.code) << args << "\n" << said;
        EXPECT_EQ(said.find("unknown option"), std::string::npos) << args << "\n" << said;
        EXPECT_NE(said.find(u.expected), std::string::npos) << args << "\n" << said;
      }
    }
  }
  Outcome prefix = FrontEndOf("", "--log-line-prefix-template '<$rank> ' -- echo hi");
  ASSERT_NE(prefix.pod(), nullptr) << prefix.message;
  EXPECT_EQ(prefix.pod()->logs.prefix_template, "<$rank> ");
  Outcome virt = FrontEndOf("", "--virtual-local-rank -- true");
  ASSERT_NE(virt.pod(), nullptr) << virt.message;
  EXPECT_TRUE(virt.pod()->virtual_local_rank);
}

// cli_test's SubcommandNamesRunAsTrainersAnywhereElse: a subcommand is one
// only as the very first argument; every subcommand's name is also a module or
// program the trainer may be (torchrun has no subcommands). Running them as the
// first argument is cli_test's.
TEST(CommandLine, SubcommandNamesRunAsTrainersAnywhereElse) {
  TempDir dir;
  const std::string py = dir.File("fakepy", "#!/bin/sh\necho \"py:$*\"\n", true);
  for (const std::string name : {"local", "exit-codes", "probe", "policy", "preflight"}) {
    const std::string prog = dir.File(name, "#!/bin/sh\necho \"prog:$0 $*\"\n", true);
    struct Row {
      std::string env, args, command;
      std::uint32_t workers = 1;
    };
    for (const Row& r : {
             Row{"", "--python " + py + " -m " + name, py + " -u -m " + name},
             Row{"", "--python " + py + " -m " + name + " --epochs 3",
                 py + " -u -m " + name + " --epochs 3"},
             Row{"", "--nproc 2 --python " + py + " -m " + name, py + " -u -m " + name, 2},
             Row{"PET_MODULE=1 PYTHON_EXEC=" + py, name + " x", py + " -u -m " + name + " x"},
             Row{"TRAINLET_MODULE=1 PYTHON_EXEC=" + py, name, py + " -u -m " + name},
             Row{"PATH=" + dir.path + ":/usr/bin:/bin", "--no-python " + name + " a",
                 name + " a"},
             Row{"PET_NO_PYTHON=1 PATH=" + dir.path + ":/usr/bin:/bin", name, name},
             Row{"", "-- " + prog, prog},
         }) {
      Outcome o = FrontEndOf(r.env, r.args);
      EXPECT_EQ(o.code, 0) << r.env << " " << r.args << "\n" << o.message;
      EXPECT_FALSE(o.front.exit) << r.env << " " << r.args << ": ran as a subcommand";
      ASSERT_NE(o.pod(), nullptr) << r.env << " " << r.args << "\n" << o.message;
      EXPECT_EQ(o.command(), r.command) << r.env << " " << r.args;
      EXPECT_EQ(o.pod()->identity.nproc_per_node, r.workers) << r.args;
    }
  }
}

// cli_test's LocalTakesLogFilesHealthPortsAndRefusesWhatItIgnores, its
// refusals: `trainlet local` refuses variables it would ignore (the run's log
// files and health ports are agent_binary_test's).
TEST(CommandLine, LocalRefusesWhatItIgnores) {
  for (const char* env : {"TRAINLET_NODE_RANK=1", "PET_MASTER_ADDR=h", "TRAINLET_RDZV_ENDPOINT=h"}) {
    Outcome o = FrontEndOf(env, "local --nnodes 2 -- true");
    EXPECT_EQ(o.code, 78) << env << ": " << o.message;
    EXPECT_NE(o.message.find(std::string(env).substr(0, std::string(env).find('=')) +
                             " is set, but `trainlet local` has no --"),
              std::string::npos)
        << o.message;
  }
  // TRAINLET_TEE is honoured now (it was ignored without a word).
  Outcome t = FrontEndOf("TRAINLET_TEE=x", "local -- true");
  EXPECT_EQ(t.code, 78) << t.message;
  EXPECT_NE(t.message.find("TRAINLET_TEE='x'"), std::string::npos) << t.message;
}

// Was cli_test's: trainlet local's ports (and --standalone's) come from below
// the ephemeral range, so no outgoing connection takes one between the choice
// and the agents' bind (a TSan run of the suite once lost the rendezvous port
// to another test's connection for 30 s); they differ and are free.
TEST(Probe, LocalPortsAreFreeAndBelowTheEphemeralRange) {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0, high = 0;
  ASSERT_TRUE(range >> low >> high);
  const std::vector<std::uint16_t> ports = FreeLoopbackPorts(3);
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

}  // namespace
}  // namespace trainlet::agent
