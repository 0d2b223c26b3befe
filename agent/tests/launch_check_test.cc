// What a pod checks of its trainer before the rendezvous (launch_check.h):
// real files in a scratch folder, execvp's search rules.
#include "trainlet/agent/run/launch_check.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "trainlet/agent/run/supervisor.h"

namespace trainlet::agent {
namespace {

namespace fs = std::filesystem;

class LaunchCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("launch-check-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "a");
    fs::create_directories(root_ / "b");
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string File(const std::string& rel, mode_t mode) {
    const fs::path p = root_ / rel;
    std::ofstream(p) << "#!/bin/sh\n";
    ::chmod(p.c_str(), mode);
    return p.string();
  }
  std::string Dirs(std::initializer_list<const char*> rels) {
    std::string path;
    for (const char* r : rels) {
      if (!path.empty()) path += ':';
      path += (root_ / r).string();
    }
    return path;
  }
  fs::path root_;
};

SplitArgs Trainer(std::vector<std::string> trainer, bool dash_dash = false) {
  SplitArgs s;
  s.trainer = std::move(trainer);
  s.dash_dash = dash_dash;
  return s;
}

TEST_F(LaunchCheckTest, SearchesPathInOrderAndSkipsWhatCannotRun) {
  File("a/prog", 0644);  // found first, but not executable: execvp goes on
  const std::string good = File("b/prog", 0755);
  auto r = FindExecutable("prog", Dirs({"a", "b"}));
  EXPECT_EQ(r.error, 0);
  EXPECT_EQ(r.path, good);
}

TEST_F(LaunchCheckTest, NotExecutableAnywhereIsEaccesNotFoundIsEnoent) {
  File("a/prog", 0644);
  fs::create_directories(root_ / "b" / "dir");
  EXPECT_EQ(FindExecutable("prog", Dirs({"a", "b"})).error, EACCES);
  EXPECT_EQ(FindExecutable("dir", Dirs({"b"})).error, EACCES);  // a folder is no program
  EXPECT_EQ(FindExecutable("missing", Dirs({"a", "b"})).error, ENOENT);
  EXPECT_EQ(FindExecutable("", Dirs({"a"})).error, ENOENT);
}

TEST_F(LaunchCheckTest, ANameWithASlashIsTheFileItselfNotSearched) {
  File("b/prog", 0755);
  EXPECT_EQ(FindExecutable("b/prog", Dirs({"b"})).error, ENOENT);  // relative to the cwd
  EXPECT_EQ(FindExecutable((root_ / "b/prog").string(), std::string("/nonexistent")).error, 0);
  EXPECT_EQ(FindExecutable("/nonexistent/prog", Dirs({"b"})).error, ENOENT);
}

TEST_F(LaunchCheckTest, UnsetPathIsGlibcsDefault) {
  EXPECT_EQ(FindExecutable("sh", std::nullopt).path, "/bin/sh");
  EXPECT_EQ(FindExecutable("sh", std::string("")).error, ENOENT);  // only the cwd, which has none
}

TEST(LaunchCheckFor, ScriptModesCheckTheScriptAndNameTheInterpreter) {
  LaunchCheck c = LaunchCheckFor(Trainer({"train.py", "--epochs", "3"}), {});
  EXPECT_EQ(c.script, "train.py");
  EXPECT_NE(c.program_hint.find("PYTHON_EXEC"), std::string::npos);
  EXPECT_EQ(LaunchCheckFor(Trainer({"run.sh"}), {.run_path = true}).script, "run.sh");
  // -m: a missing module stays the trainer's own ModuleNotFoundError (class bug, 42).
  c = LaunchCheckFor(Trainer({"no.such.mod"}), {.module = true});
  EXPECT_EQ(c.script, "");
  EXPECT_NE(c.program_hint.find("PYTHON_EXEC"), std::string::npos);
  c = LaunchCheckFor(Trainer({"prog"}), {.no_python = true});
  EXPECT_EQ(c.script, "");
  EXPECT_EQ(c.program_hint, "");
}

TEST(LaunchCheckFor, DashDashScriptGetsTheTorchrunHint) {
  LaunchCheck c = LaunchCheckFor(Trainer({"train.py", "--x"}, true), {});
  EXPECT_EQ(c.script, "");  // after --, a program: checked as one
  EXPECT_EQ(c.program_hint,
            "; to run a script with Python as torchrun does, drop the \"--\": trainlet train.py ...");
  EXPECT_EQ(LaunchCheckFor(Trainer({"python3", "train.py"}, true), {}).program_hint, "");
  EXPECT_EQ(LaunchCheckFor(Trainer({"train.py"}, true), {.no_python = true}).program_hint, "");
}

TEST_F(LaunchCheckTest, MissingProgramIsTheSupervisorsLinePlusTheHint) {
  const std::map<std::string, std::string> env = {{"PATH", Dirs({"a"})}};
  auto s = CheckLaunch({"train.py", "--x"}, LaunchCheckFor(Trainer({"train.py", "--x"}, true), {}),
                       env, {}, root_.string());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.failure_class(), exitcodes::FailureClass::kConfig);
  EXPECT_EQ(s.message(), CannotExecuteMessage("train.py", ENOENT) +
                             "; to run a script with Python as torchrun does, drop the \"--\": "
                             "trainlet train.py ...");
  EXPECT_EQ(CannotExecuteMessage("train.py", ENOENT),
            "cannot execute the trainer command 'train.py': No such file or directory (not "
            "found in PATH)");
}

// The check before the rendezvous and the spawn's own (a file can vanish in
// between) say the same line.
TEST_F(LaunchCheckTest, EarlyAndLateChecksSayTheSameLine) {
  // Pods spawn with posix_spawnp(3): the agent's own PATH, which the workers inherit.
  const char* path = std::getenv("PATH");
  for (const std::string& program : {std::string("/nonexistent/trainer"),
                                     std::string("no-such-trainer-xyz"), File("a/noexec", 0644)}) {
    boost::asio::io_context io;
    Supervisor sup(io.get_executor(), {}, [](SupervisorResult) {});
    auto late = sup.Start({{{program}, {}, ""}});
    ASSERT_FALSE(late.ok()) << program;
    ExecutableLookup early =
        FindExecutable(program, path ? std::optional<std::string>(path) : std::nullopt);
    ASSERT_NE(early.error, 0) << program;
    EXPECT_EQ(CannotExecuteMessage(program, early.error), late.message());
  }
}

TEST_F(LaunchCheckTest, MissingScriptNamesItAndTheWorkersDirectory) {
  File("a/python3", 0755);
  const std::map<std::string, std::string> env = {{"PATH", Dirs({"a"})}};
  const std::vector<std::string> argv = {"python3", "-u", "nonexist.py"};
  auto s = CheckLaunch(argv, LaunchCheckFor(Trainer({"nonexist.py"}), {}), env, {},
                       (root_ / "b").string());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.failure_class(), exitcodes::FailureClass::kConfig);
  EXPECT_EQ(s.message(), "cannot open the training script 'nonexist.py' in " +
                             (root_ / "b").string() +
                             " (the workers' working directory): No such file or directory");
  File("b/nonexist.py", 0644);  // relative to the workers' directory, not ours
  EXPECT_TRUE(CheckLaunch(argv, LaunchCheckFor(Trainer({"nonexist.py"}), {}), env, {},
                          (root_ / "b").string())
                  .ok());
}

TEST_F(LaunchCheckTest, MissingInterpreterNamesItsFlags) {
  auto s = CheckLaunch({"/nonexistent", "-u", "t.py"}, LaunchCheckFor(Trainer({"t.py"}), {}),
                       {}, {}, root_.string());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().find(CannotExecuteMessage("/nonexistent", ENOENT)), 0u);
  EXPECT_NE(s.message().find("--python, TRAINLET_PYTHON, PYTHON_EXEC"), std::string::npos);
}

TEST_F(LaunchCheckTest, LogDirIsMadeOrRefused) {
  const std::string exe = File("a/prog", 0755);
  WorkerLogOptions logs;
  logs.log_dir = (root_ / "logs" / "deep").string();
  EXPECT_TRUE(CheckLaunch({exe}, {}, {}, logs, root_.string()).ok());
  EXPECT_TRUE(fs::is_directory(logs.log_dir));
  logs.log_dir = exe + "/sub";  // under a file
  auto s = CheckLaunch({exe}, {}, {}, logs, root_.string());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.failure_class(), exitcodes::FailureClass::kConfig);
  EXPECT_EQ(s.message().find("--log-dir '" + logs.log_dir + "' is not a folder that can be made"),
            0u);
  EXPECT_FALSE(MakeLogDir("/proc/nope").ok());
}

}  // namespace
}  // namespace trainlet::agent
