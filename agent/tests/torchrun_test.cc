// torchrun's command line with torchrun's meaning (torch 2.x run.py): the
// split at the trainer, the trainer's argv, and the flag values' parsers.
#include "trainlet/agent/spec/torchrun.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "trainlet/agent/base/address.h"
#include "trainlet/agent/run/worker_env.h"
#include "trainlet/agent/run/worker_logs.h"

namespace trainlet::agent {
namespace {

OptionKind Kinds(std::string_view name) {
  if (name == "--nnodes" || name == "-r" || name == "--log-level" || name == "--tee") {
    return OptionKind::kValue;
  }
  if (name == "--standalone" || name == "-m") return OptionKind::kFlag;
  return OptionKind::kUnknown;
}

TEST(SplitAtTrainer, StopsAtTheFirstPositional) {
  auto s = SplitAtTrainer({"--nnodes", "2", "train.py", "--log-level", "debug", "--nnodes", "9"},
                          Kinds);
  EXPECT_EQ(s.launcher, (std::vector<std::string>{"--nnodes", "2"}));
  EXPECT_EQ(s.trainer,
            (std::vector<std::string>{"train.py", "--log-level", "debug", "--nnodes", "9"}));
  EXPECT_FALSE(s.dash_dash);
  EXPECT_TRUE(s.unknown.empty());
}

TEST(SplitAtTrainer, DashDashAndAttachedValues) {
  auto s = SplitAtTrainer({"--nnodes=2", "-r3", "--standalone", "--", "python3", "--tee", "x"},
                          Kinds);
  EXPECT_EQ(s.launcher, (std::vector<std::string>{"--nnodes=2", "-r", "3", "--standalone"}));
  EXPECT_EQ(s.trainer, (std::vector<std::string>{"python3", "--tee", "x"}));
  EXPECT_TRUE(s.dash_dash);
}

// argparse splits a one-letter option at '=' ("-r=3" is "-r 3"); every
// option read is listed, for the repeated-flag rules.
TEST(SplitAtTrainer, OneLetterOptionWithEqualsAndTheOptionsRead) {
  auto s = SplitAtTrainer({"-r=3", "-r3", "-r", "2", "--nnodes=1", "--standalone", "x.py", "-r=1"},
                          Kinds);
  EXPECT_EQ(s.launcher, (std::vector<std::string>{"-r", "3", "-r", "3", "-r", "2", "--nnodes=1",
                                                  "--standalone"}));
  EXPECT_EQ(s.options, (std::vector<std::string>{"-r", "-r", "-r", "--nnodes", "--standalone"}));
  EXPECT_EQ(s.trainer, (std::vector<std::string>{"x.py", "-r=1"}));
  EXPECT_EQ(SplitAtTrainer({"-r="}, Kinds).launcher, (std::vector<std::string>{"-r", ""}));
}

// A subcommand only as the very first argument, and not when the environment
// makes the first argument the trainer's: every name also works as a module.
TEST(SubcommandOf, OnlyTheFirstArgumentWithoutATrainerModeFromTheEnvironment) {
  const std::vector<std::string> names = {"local", "exit-codes", "probe", "policy"};
  for (const std::string& n : names) {
    EXPECT_EQ(SubcommandOf({n, "--x"}, names, false), n);
    EXPECT_EQ(SubcommandOf({n}, names, true), "") << n;
    EXPECT_EQ(SubcommandOf({"-m", n}, names, false), "") << n;
    EXPECT_EQ(SubcommandOf({"--nproc", "2", n}, names, false), "") << n;
    EXPECT_EQ(SubcommandOf({"--", n}, names, false), "") << n;
  }
  EXPECT_EQ(SubcommandOf({}, names, false), "");
  EXPECT_EQ(SubcommandOf({"train.py"}, names, false), "");
}

// The README's precedence, and no silent winner between two sources of one
// setting at the same level.
TEST(ChooseCandidate, HighestOriginWinsAndEqualOriginsMustAgree) {
  using O = Origin;
  EXPECT_FALSE(ChooseCandidate("x", {})->has_value());
  auto c = *ChooseCandidate("the leader's address",
                            {{"a", "TRAINLET_MASTER_ADDR", O::kTrainletEnv},
                             {"b", "--rdzv-endpoint", O::kFlag},
                             {"c", "PET_MASTER_ADDR", O::kPetEnv}});
  EXPECT_EQ(c->value, "b");
  EXPECT_EQ(c->source, "--rdzv-endpoint");
  EXPECT_EQ((*ChooseCandidate("x", {{"a", "--rdzv-endpoint", O::kFlag},
                                    {"a", "--master-addr", O::kFlag}}))->value, "a");
  auto bad = ChooseCandidate("the leader's address", {{"127.0.0.2", "--rdzv-endpoint", O::kFlag},
                                                      {"127.0.0.3", "--master-addr", O::kFlag}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "the leader's address: --rdzv-endpoint gives '127.0.0.2', --master-addr gives "
            "'127.0.0.3'; give only one of them");
  EXPECT_FALSE(ChooseCandidate("x", {{"1", "PET_RDZV_ENDPOINT", O::kPetEnv},
                                     {"2", "PET_MASTER_ADDR", O::kPetEnv},
                                     {"3", "MASTER_ADDR", O::kPlainEnv}}).ok());
}

TEST(SplitAtTrainer, UnknownOptionBeforeTheTrainerStopsTheScan) {
  auto s = SplitAtTrainer({"--nnodes", "2", "--epochs", "3", "train.py"}, Kinds);
  EXPECT_EQ(s.unknown, "--epochs");
  auto t = SplitAtTrainer({"train.py", "--epochs", "3"}, Kinds);
  EXPECT_TRUE(t.unknown.empty());
  EXPECT_EQ(t.trainer.size(), 3u);
}

// argparse's allow_abbrev: a unique prefix is the flag, both spellings of one
// flag are one flag, several flags are listed, an exact name is no prefix.
TEST(AbbreviationOf, UniquePrefixesAmbiguousOnesAndExactNames) {
  const std::vector<std::string> names = {"--nnodes", "--nproc-per-node", "--nproc_per_node",
                                          "--max-restarts", "--max_restarts", "--role",
                                          "--role-x"};
  EXPECT_EQ(AbbreviationOf("--nproc", names).full, "--nproc-per-node");
  EXPECT_EQ(AbbreviationOf("--nproc_", names).full, "--nproc_per_node");
  EXPECT_EQ(AbbreviationOf("--max_rest", names).full, "--max_restarts");
  auto n = AbbreviationOf("--n", names);
  EXPECT_EQ(n.full, "");
  EXPECT_EQ(n.candidates, (std::vector<std::string>{"--nnodes", "--nproc-per-node"}));
  EXPECT_TRUE(AbbreviationOf("--role", names).candidates.empty());  // exact, though --role-x
  EXPECT_EQ(AbbreviationOf("--role-", names).full, "--role-x");
  EXPECT_TRUE(AbbreviationOf("--epochs", names).candidates.empty());
  EXPECT_TRUE(AbbreviationOf("--", names).candidates.empty());
  EXPECT_TRUE(AbbreviationOf("-n", names).candidates.empty());  // long options only
}

TEST(SplitAtTrainer, AbbreviationsOfTorchrunFlagsAreWrittenOutInFull) {
  const std::vector<std::string> names = {"--nnodes", "--nproc-per-node", "--tee", "--tee-x"};
  auto kind = [](std::string_view name) {
    return name == "--nproc-per-node" || name == "--tee-x" ? OptionKind::kValue : Kinds(name);
  };
  auto s = SplitAtTrainer({"--nproc", "2", "--nn=3", "--tee", "1", "train.py", "--nproc", "9"},
                          kind, names);
  EXPECT_EQ(s.launcher, (std::vector<std::string>{"--nproc-per-node", "2", "--nnodes=3",
                                                  "--tee", "1"}));
  EXPECT_EQ(s.trainer, (std::vector<std::string>{"train.py", "--nproc", "9"}));  // the trainer's
  EXPECT_TRUE(s.unknown.empty());
  auto a = SplitAtTrainer({"--n", "2", "train.py"}, kind, names);
  EXPECT_EQ(a.unknown, "--n");
  EXPECT_EQ(a.could_match, (std::vector<std::string>{"--nnodes", "--nproc-per-node"}));
  // Without names (trainlet's own flags), a prefix is an unknown option.
  auto o = SplitAtTrainer({"--nproc", "2", "train.py"}, kind);
  EXPECT_EQ(o.unknown, "--nproc");
  EXPECT_TRUE(o.could_match.empty());
}

TEST(TrainerArgv, TorchrunsFourWays) {
  TrainerMode m;
  SplitArgs script{{}, {"train.py", "--epochs", "3"}, false, "", {}, {}};
  EXPECT_EQ(*TrainerArgv(script, m),
            (std::vector<std::string>{"python3", "-u", "train.py", "--epochs", "3"}));
  m.module = true;
  SplitArgs mod{{}, {"pkg.mod", "a"}, false, "", {}, {}};
  EXPECT_EQ(*TrainerArgv(mod, m), (std::vector<std::string>{"python3", "-u", "-m", "pkg.mod", "a"}));
  m.module = false;
  m.no_python = true;
  SplitArgs prog{{}, {"./run.sh", "a"}, false, "", {}, {}};
  EXPECT_EQ(*TrainerArgv(prog, m), (std::vector<std::string>{"./run.sh", "a"}));
  m.run_path = true;  // wins over --no-python, as in torchrun
  m.python = "/opt/py/bin/python";
  auto rp = *TrainerArgv(SplitArgs{{}, {"/abs/t.py", "x"}, false, "", {}, {}}, m);
  ASSERT_EQ(rp.size(), 6u);
  EXPECT_EQ(rp[0], "/opt/py/bin/python");
  EXPECT_EQ(rp[2], "-c");
  EXPECT_NE(rp[3].find("runpy.run_path"), std::string::npos);
  EXPECT_EQ(rp[4], "/abs/t.py");
  EXPECT_EQ(rp[5], "x");
}

TEST(TrainerArgv, DashDashRunsAsGivenAndAnyBareScriptRunsWithPython) {
  TrainerMode m;
  EXPECT_EQ(*TrainerArgv(SplitArgs{{}, {"python3", "t.py"}, true, "", {}, {}}, m),
            (std::vector<std::string>{"python3", "t.py"}));
  // torchrun's training_script: any path, .py or not, runs with the interpreter.
  for (const char* script : {"train", "./bin/launch_train", "t.pyw", "/abs/run"}) {
    EXPECT_EQ(*TrainerArgv(SplitArgs{{}, {script, "--x"}, false, "", {}, {}}, m),
              (std::vector<std::string>{"python3", "-u", script, "--x"}))
        << script;
  }
  m.module = m.no_python = true;
  auto both = TrainerArgv(SplitArgs{{}, {"x"}, false, "", {}, {}}, m);
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("cannot be used together"), std::string::npos);
  EXPECT_FALSE(TrainerArgv(SplitArgs{}, TrainerMode{}).ok());
}

TEST(ChooseInterpreter, TorchrunsOrder) {
  std::set<std::string> files = {"/v/bin/python3", "/v/pyvenv.cfg", "/sys/bin/python3"};
  auto exists = [&](const std::string& p) { return files.contains(p); };
  const std::map<std::string, std::string> none, exec = {{"PYTHON_EXEC", "/e/python"}};
  auto flag = ChooseInterpreter("/f/python", exec, "/v/bin/trainlet", exists);
  EXPECT_EQ(flag.path, "/f/python");
  EXPECT_EQ(flag.why, "--python");
  auto env = ChooseInterpreter(std::nullopt, exec, "/v/bin/trainlet", exists);
  EXPECT_EQ(env.path, "/e/python");
  EXPECT_EQ(env.why, "PYTHON_EXEC");
  auto venv = ChooseInterpreter(std::nullopt, none, "/v/bin/trainlet", exists);
  EXPECT_EQ(venv.path, "/v/bin/python3");
  EXPECT_EQ(venv.why, "the Python environment of /v/bin/trainlet");
  // A python3 beside it but no pyvenv.cfg above (/usr/local/bin): not a venv.
  auto sys = ChooseInterpreter(std::nullopt, none, "/sys/bin/trainlet", exists);
  EXPECT_EQ(sys.path, "python3");
  EXPECT_EQ(sys.why, "PATH");
  files.erase("/v/bin/python3");  // a venv without python3 (broken): PATH
  EXPECT_EQ(ChooseInterpreter(std::nullopt, none, "/v/bin/trainlet", exists).path, "python3");
  // An empty PYTHON_EXEC is no interpreter.
  EXPECT_EQ(ChooseInterpreter(std::nullopt, {{"PYTHON_EXEC", ""}}, "trainlet", exists).why,
            "PATH");
}

TEST(ParseNnodes, NAndMinMax) {
  EXPECT_EQ(*ParseNnodes("--nnodes", "4"), "4");
  EXPECT_EQ(*ParseNnodes("--nnodes", "4:4"), "4");
  EXPECT_EQ(*ParseNnodes("--nnodes", "2:4"), "2:4");  // elastic: torchrun's MIN:MAX
  EXPECT_EQ(*ParseNnodes("--nnodes", "1:2"), "1:2");
  for (const char* bad : {"0", "1:2:3", "x", "04", ":2", "", "0:2", "2:", "2:04"}) {
    EXPECT_FALSE(ParseNnodes("--nnodes", bad).ok()) << bad;
  }
  // MIN > MAX is no elastic range at all: said as it is.
  EXPECT_EQ(ParseNnodes("--nnodes", "2:1").status().message(),
            "--nnodes='2:1': MIN is larger than MAX; give N, or MIN:MAX with MIN <= MAX");
}

TEST(ParseStd, ValuesAndMaps) {
  EXPECT_EQ(ParseStd("-t", "3")->For(5), 3);
  auto m = *ParseStd("-r", "0:1,1:2");
  EXPECT_EQ(m.For(0), kStdOut);
  EXPECT_EQ(m.For(1), kStdErr);
  EXPECT_EQ(m.For(2), 0);
  for (const char* bad : {"4", "0:4", "x", "0:", ":1", "1,2", "-1"}) {
    auto r = ParseStd("--tee", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--tee='"), std::string::npos);
  }
}

TEST(ParseLocalRanksFilter, List) {
  EXPECT_EQ(*ParseLocalRanksFilter("f", "0,2"), (std::set<std::uint32_t>{0, 2}));
  EXPECT_TRUE(ParseLocalRanksFilter("f", "")->empty());
  EXPECT_FALSE(ParseLocalRanksFilter("f", "0,a").ok());
  EXPECT_FALSE(ParseLocalRanksFilter("f", "0,").ok());
}

TEST(ParseEndpoint, HostPortAndDefaults) {
  auto e = *ParseEndpoint("--rdzv-endpoint", "leader.svc:1234", 29400);
  EXPECT_EQ(e.host, "leader.svc");
  EXPECT_EQ(e.port, 1234);
  EXPECT_EQ(ParseEndpoint("e", "leader", 29400)->port, 29400);
  auto v6 = *ParseEndpoint("e", "[fd00::1]:99", 29400);
  EXPECT_EQ(v6.host, "fd00::1");
  EXPECT_EQ(v6.port, 99);
  EXPECT_EQ(ParseEndpoint("e", "[fd00::1]", 29400)->port, 29400);
  // Port 0 is torch's "a free port": kept, for the caller to judge.
  EXPECT_EQ(ParseEndpoint("e", "localhost:0", 29400)->port, 0);
  for (const char* bad : {":1", "h:x", "h:70000", "[fd00::1", "[::1]x"}) {
    EXPECT_FALSE(ParseEndpoint("e", bad, 29400).ok()) << bad;
  }
  EXPECT_EQ(ParseEndpoint("e", "[::1]:29400", 1)->host, "::1");
  // torch's parse_rendezvous_endpoint refuses these too: never a host name to
  // retry until the deadline, never a silent default port.
  struct Row {
    const char* value;
    const char* message;
  };
  for (const Row& r : {Row{"a:b:c", "e='a:b:c' is not HOST[:PORT]: it has more than one ':' (an "
                                    "IPv6 address goes in brackets: [fd00::1]:PORT"},
                       Row{"fd00::1", "more than one ':'"},
                       Row{"127.0.0.1:", "e='127.0.0.1:': the port after ':' is empty"},
                       Row{"[::1]:", "the port after ':' is empty"},
                       Row{"h:65536", "'65536' is not a port (0-65535"},
                       Row{"h:99999999999", "'99999999999' is not a port (0-65535"}}) {
    auto e = ParseEndpoint("e", r.value, 29400);
    ASSERT_FALSE(e.ok()) << r.value;
    EXPECT_NE(e.status().message().find(r.message), std::string::npos) << e.status().message();
  }
}

TEST(ParseRdzvConf, EveryTorchKeyAcceptedUnknownRefused) {
  auto c = *ParseRdzvConf("--rdzv-conf", "join_timeout=900,read_timeout=30");
  EXPECT_EQ(*c.join_timeout, "900");
  EXPECT_EQ(*c.read_timeout, "30");
  EXPECT_TRUE(c.no_effect.empty());
  EXPECT_EQ(*ParseRdzvConf("c", "timeout=60")->join_timeout, "60");
  // join_timeout wins over timeout, in either order.
  EXPECT_EQ(*ParseRdzvConf("c", "join_timeout=5,timeout=60")->join_timeout, "5");
  auto mixed = *ParseRdzvConf("c", "is_host=1,last_call_timeout=5,use_libuv=False");
  EXPECT_EQ(mixed.no_effect.size(), 2u);
  EXPECT_EQ(*mixed.last_call_timeout, "5");
  EXPECT_EQ(mixed.no_effect[0].rfind("is_host=1 has no effect: ", 0), 0u) << mixed.no_effect[0];
  EXPECT_FALSE(mixed.join_timeout);
  auto other = ParseRdzvConf("--rdzv-conf", "is_hots=1");
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("key 'is_hots' is not one of torch's rendezvous "
                                          "settings (join_timeout, timeout, read_timeout, "),
            std::string::npos)
      << other.status().message();
  EXPECT_FALSE(ParseRdzvConf("c", "join_timeout=soon").ok());
  EXPECT_FALSE(ParseRdzvConf("c", "join_timeout").ok());
  EXPECT_FALSE(ParseRdzvConf("c", "is_host=maybe").ok());
  EXPECT_FALSE(ParseRdzvConf("c", "last_call_timeout=-1").ok());
}

TEST(ExpandPrefixTemplate, PythonStringTemplateSafeSubstitute) {
  EXPECT_EQ(ExpandPrefixTemplate("[${role_name}${rank}|$local_rank] ", "trainer", 7, 3),
            "[trainer7|3] ");
  EXPECT_EQ(ExpandPrefixTemplate("$$ ${nope} $rankx ${rank", "r", 1, 0), "$ ${nope} $rankx ${rank");
  // torch 2.15's ${hostname}: the node's name, as its run.py documents.
  EXPECT_EQ(ExpandPrefixTemplate("${hostname}:${rank}: ", "r", 3, 1, "r12i0n8"), "r12i0n8:3: ");
}

TEST(NearestOption, SuggestsCloseNamesOnly) {
  std::vector<std::string> names = {"--nproc-per-node", "--nnodes", "--log-dir", "--tee"};
  EXPECT_EQ(NearestOption("--nproc-per-nodes", names), "--nproc-per-node");
  EXPECT_EQ(NearestOption("--nnode", names), "--nnodes");
  EXPECT_EQ(NearestOption("--epochs", names), "");
}

TEST(PlanWorkerStreams, TorchrunsLayoutAndConsole) {
  WorkerLogOptions o;
  o.redirects = *ParseStd("r", "0:1");
  o.tee = *ParseStd("t", "1:3");
  o.local_ranks_filter = {1, 2};
  auto s = PlanWorkerStreams(o, "/l/run_x/attempt_0", 3, 4, "default");
  EXPECT_EQ(s[0].stdout_file, "/l/run_x/attempt_0/0/stdout.log");
  EXPECT_EQ(s[0].stderr_file, "");
  EXPECT_FALSE(s[0].stdout_console);  // redirected; and filtered out anyway
  EXPECT_FALSE(s[0].stderr_console);  // filtered out
  EXPECT_EQ(s[1].stdout_file, "/l/run_x/attempt_0/1/stdout.log");
  EXPECT_EQ(s[1].stderr_file, "/l/run_x/attempt_0/1/stderr.log");
  EXPECT_TRUE(s[1].stdout_console && s[1].stderr_console);  // teed
  EXPECT_EQ(s[2].stdout_file, "");
  EXPECT_TRUE(s[2].stdout_console);
  EXPECT_EQ(s[2].prefix, "[rank6]: ");
  o.prefix_template = "${role_name}:${local_rank}> ";
  EXPECT_EQ(PlanWorkerStreams(o, "", 3, 4, "w")[2].prefix, "w:2> ");
  EXPECT_FALSE(WorkerLogOptions{}.writes_files());
  EXPECT_TRUE(o.writes_files());
}

// The run folder is "<run-id>_" and 8 random characters, as Python's
// tempfile.mkdtemp makes torchrun's: no template X's left over.
TEST(WorkerLogDirs, RunFolderHasEightRandomCharacters) {
  namespace fs = std::filesystem;
  const std::string base = fs::temp_directory_path() / ("torchrun-test-" + std::to_string(::getpid()));
  std::set<std::string> names;
  for (int i = 0; i < 3; ++i) {
    WorkerLogOptions o;
    o.log_dir = base;
    o.redirects = *ParseStd("r", "3");
    WorkerLogDirs dirs(o);
    ASSERT_TRUE(dirs.ForAttempt("job7", 0, 1, 0, "default").ok());
    const std::string name = fs::path(dirs.run_dir()).filename();
    ASSERT_EQ(name.size(), 5u + 8u) << name;
    EXPECT_EQ(name.substr(0, 5), "job7_");
    EXPECT_EQ(name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_", 5),
              std::string::npos) << name;
    EXPECT_EQ(fs::status(dirs.run_dir()).permissions() & fs::perms::all, fs::perms::owner_all);
    names.insert(name);
  }
  EXPECT_EQ(names.size(), 3u);
  fs::remove_all(base);
}

std::map<std::string, std::string> EnvMap(const std::vector<std::string>& kv) {
  std::map<std::string, std::string> m;
  for (const auto& e : kv) m[e.substr(0, e.find('='))] = e.substr(e.find('=') + 1);
  return m;
}

TEST(WorkerEnvironment, NcclAsyncErrorHandlingAsTorchrunNeverOverridden) {
  WorkerPlacement p;
  p.master_addr = "10.0.0.1";
  p.master_port = 29500;
  auto env = EnvMap(WorkerEnvironment({}, p));
  EXPECT_EQ(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1");
  EXPECT_FALSE(env.contains("NCCL_ASYNC_ERROR_HANDLING")) << "torch >= 2.2 warns about it";
  env = EnvMap(WorkerEnvironment({{"NCCL_ASYNC_ERROR_HANDLING", "0"}}, p));
  EXPECT_FALSE(env.contains("TORCH_NCCL_ASYNC_ERROR_HANDLING")) << "it would win over the user's";
  EXPECT_EQ(env["NCCL_ASYNC_ERROR_HANDLING"], "0");
  env = EnvMap(WorkerEnvironment({{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}}, p));
  EXPECT_EQ(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "3");
  EXPECT_FALSE(env.contains("NCCL_ASYNC_ERROR_HANDLING"));
}

TEST(WorkerEnvironment, JaxVariables) {
  WorkerPlacement p;
  p.local_rank = 1, p.nproc_per_node = 2, p.rank_base = 4, p.world_size = 8;
  p.master_addr = "10.0.0.1", p.master_port = 29500, p.jax_port = 29600, p.gpu_count = 8;
  auto env = EnvMap(WorkerEnvironment({}, p));
  EXPECT_EQ(env["JAX_COORDINATOR_ADDRESS"], "10.0.0.1:29600");
  EXPECT_EQ(env["JAX_NUM_PROCESSES"], "8");
  EXPECT_EQ(env["JAX_PROCESS_ID"], "5");
  EXPECT_EQ(env["JAX_LOCAL_DEVICE_IDS"], "4,5,6,7");  // local rank 1's half of 8 GPUs
  p.master_addr = "fd00::1";
  p.gpu_count = 0;  // unknown: JAX picks its own devices
  env = EnvMap(WorkerEnvironment({}, p));
  EXPECT_EQ(env["JAX_COORDINATOR_ADDRESS"], "[fd00::1]:29600");
  EXPECT_FALSE(env.contains("JAX_LOCAL_DEVICE_IDS"));
  p.jax_port = 0;
  EXPECT_FALSE(EnvMap(WorkerEnvironment({}, p)).contains("JAX_COORDINATOR_ADDRESS"));
}

// Every --rdzv-conf key torch's rendezvous backends read (the list
// scripts/torchrun-flags took from the tracked torch) is accepted, with a
// value torch accepts; each has a meaning here or says why it has none.
TEST(ParseRdzvConf, EveryKeyOfTheTrackedTorch) {
  std::ifstream in(TORCHRUN_FLAGS);
  std::size_t n = 0;
  for (std::string kind, key; in >> kind;) {
    if (kind != "rdzv-conf") {
      std::getline(in, key);
      continue;
    }
    in >> key;
    ++n;
    const auto& keys = RdzvConfKeys();
    auto k = std::find_if(keys.begin(), keys.end(), [&](const auto& r) { return r.key == key; });
    ASSERT_NE(k, keys.end()) << "torch's rendezvous key " << key << " is not in RdzvConfKeys";
    const std::string value = k->value == RdzvValue::kBool ? "true" : "30";
    auto c = ParseRdzvConf("--rdzv-conf", key + "=" + value);
    ASSERT_TRUE(c.ok()) << key << ": " << c.status().message();
    EXPECT_EQ(c->no_effect.size(), k->no_effect.empty() ? 0u : 1u) << key;
    EXPECT_TRUE(c->join_timeout || c->read_timeout || c->last_call_timeout ||
                !c->no_effect.empty())
        << key;
  }
  EXPECT_GT(n, 10u) << TORCHRUN_FLAGS;
}

}  // namespace
}  // namespace trainlet::agent
