// The front end in process: the flag table, the precedence flag >
// TRAINLET_* > PET_*, Validate and the plans, as table tests (no binary:
// cli_test keeps the exit codes and --help of the real one).
#include "trainlet/agent/front/front_end.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <set>

#include "trainlet/agent/front/flags.h"
#include "trainlet/agent/base/tunables.h"

namespace trainlet::agent {
namespace {

using Env = std::map<std::string, std::string>;

// A TRAINLET_* variable for one test (CLI11 reads the process environment).
class ScopedEnv {
 public:
  ScopedEnv(const std::string& name, const std::string& value) : name_(name) {
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() { ::unsetenv(name_.c_str()); }

 private:
  std::string name_;
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
       "--nnodes='3:2': MIN is larger than MAX; give N or N:N"},
      {{"--nnodes", "0:2", "--node-rank", "1", "--master-addr", "10.0.0.1"}, 0, 0,
       "--nnodes='0:2': a gang needs at least one pod"},
      {{"--nnodes", "2:3", "--node-rank", "3", "--master-addr", "10.0.0.1"}, 0, 0,
       "--node-rank='3' is not below the number of pods 3 "
       "(--nnodes); indices run from 0 to 2"},
      {{"--nnodes", "2:3", "--rdzv-endpoint", "10.0.0.1:29400"}, 0, 0,
       "--nnodes='2:3': an elastic MIN:MAX gang needs an index on every pod "
       "(an Indexed Job's completion index, or --node-rank) and no --gang layout"},
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

}  // namespace
}  // namespace trainlet::agent
