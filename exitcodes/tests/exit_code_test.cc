#include "trainlet/exitcodes/exit_code.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <set>

namespace trainlet::exitcodes {
namespace {

// Real wait statuses from real children, not hand-built bit patterns.
int WaitStatusOf(void (*body)()) {
  pid_t pid = fork();
  if (pid == 0) {
    body();
    _exit(127);
  }
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  return status;
}

TEST(WorkerExitTest, ExitCodesPassThrough) {
  for (int code : {0, 1, 3, 42, 255}) {
    static int wanted;
    wanted = code;
    WorkerExit e = WorkerExit::FromWaitStatus(WaitStatusOf([] { _exit(wanted); }));
    EXPECT_FALSE(e.signaled);
    EXPECT_EQ(e.code(), code);
    EXPECT_EQ(e.success(), code == 0);
    EXPECT_EQ(e.Describe(), "exit " + std::to_string(code));
  }
}

TEST(WorkerExitTest, SignalDeathIs128PlusSignalWithName) {
  WorkerExit e = WorkerExit::FromWaitStatus(WaitStatusOf([] {
    signal(SIGSEGV, SIG_DFL);
    raise(SIGSEGV);
  }));
  EXPECT_TRUE(e.signaled);
  EXPECT_EQ(e.signal, SIGSEGV);
  EXPECT_EQ(e.code(), 128 + SIGSEGV);
  EXPECT_FALSE(e.success());
  EXPECT_EQ(e.Describe(), "signal SIGSEGV (11)");
}

TEST(SignalNameTest, KnownAndUnknown) {
  EXPECT_EQ(SignalName(SIGTERM), "SIGTERM");
  EXPECT_EQ(SignalName(SIGKILL), "SIGKILL");
  EXPECT_EQ(SignalName(SIGUSR1), "SIGUSR1");
  EXPECT_EQ(SignalName(1000), "SIG1000");
}

TEST(ContractTest, CodesAreDistinctAndMatchDefaults) {
  std::set<int> seen;
  for (const ContractRow& row : ContractTable()) {
    if (row.failure_class == FailureClass::kWorker) continue;
    EXPECT_TRUE(seen.insert(row.code).second) << "duplicate code " << row.code;
    EXPECT_EQ(row.code, DefaultExitCode(row.failure_class)) << ClassName(row.failure_class);
  }
  EXPECT_EQ(DefaultExitCode(FailureClass::kConfig), 78);
  EXPECT_EQ(DefaultExitCode(FailureClass::kInfra), 75);
  EXPECT_EQ(DefaultExitCode(FailureClass::kTerminated), 143);
}

TEST(StatusTest, OkAndFailure) {
  Status ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.ToString(), "ok");
  Status bad = Status::Config("JOB_COMPLETION_INDEX='x' is not an integer");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.failure_class(), FailureClass::kConfig);
  EXPECT_EQ(bad.ToString(), "config: JOB_COMPLETION_INDEX='x' is not an integer");
  Result<int> r = 5;
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 5);
  Result<int> f = Status::Infra("dns");
  EXPECT_FALSE(f.ok());
  EXPECT_EQ(f.status().failure_class(), FailureClass::kInfra);
}

}  // namespace
}  // namespace trainlet::exitcodes
