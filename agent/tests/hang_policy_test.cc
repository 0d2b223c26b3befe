#include "trainlet/agent/observe/hang_policy.h"

#include <csignal>

#include <gtest/gtest.h>

namespace trainlet::agent {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

HeartbeatSample Touched(milliseconds ago) { return {.running = true, .since_touch = ago}; }
HeartbeatSample Never() { return {.running = true, .since_touch = std::nullopt}; }
HeartbeatSample Exited() { return {.running = false, .since_touch = std::nullopt}; }

TEST(HangPolicyTest, AWorkerThatTouchedTheFileIsHungAfterTheTimeout) {
  HangPolicy p({.timeout = 600s}, 2);
  EXPECT_EQ(p.Check(700s, {Touched(599s), Touched(1s)}).hung, "");
  EXPECT_EQ(p.Check(800s, {Touched(601s), Touched(1s)}).hung,
            "local rank 0 showed no progress for 600.0 s");
  EXPECT_EQ(p.Check(800s, {Touched(601s), Touched(700s)}).hung,
            "local rank 0 showed no progress for 600.0 s, local rank 1 showed no progress for "
            "600.0 s");
}

TEST(HangPolicyTest, ATrainerThatNeverTouchesTheFileIsNeverHungByDefault) {
  // An unmodified trainer (examples/k8s/indexed-job.yaml turns detection on for
  // every image): it does not take part, so it is not failed, and one line says so.
  HangPolicy p({.timeout = 600s}, 2);
  EXPECT_EQ(p.Check(599s, {Never(), Never()}), HangCheck{});
  HangCheck first = p.Check(601s, {Never(), Touched(1s)});
  EXPECT_EQ(first.hung, "");
  EXPECT_NE(first.note.find("local rank(s) 0 did not touch TRAINLET_HEARTBEAT_FILE in 600.0 s"),
            std::string::npos)
      << first.note;
  EXPECT_EQ(p.Check(10'000s, {Never(), Touched(1s)}), HangCheck{}) << "noted once, never hung";
  // It starts taking part with its first touch: from then on it is watched.
  EXPECT_EQ(p.Check(10'700s, {Touched(601s), Touched(1s)}).hung,
            "local rank 0 showed no progress for 600.0 s");
}

TEST(HangPolicyTest, AnExplicitStartTimeoutRequiresTheFirstTouch) {
  HangPolicy p({.timeout = 60s, .start_timeout = 900s}, 1);
  EXPECT_EQ(p.Check(899s, {Never()}), HangCheck{}) << "loading the model is not a hang";
  EXPECT_EQ(p.Check(901s, {Never()}).hung, "local rank 0 never showed progress in 900.0 s");
  HangPolicy shorter({.timeout = 60s, .start_timeout = 5s}, 1);
  EXPECT_EQ(shorter.Check(6s, {Never()}).hung, "local rank 0 never showed progress in 5.0 s");
  EXPECT_EQ(shorter.Check(6s, {Touched(2s)}).hung, "") << "after the first touch: --hang-timeout";
}

TEST(HangPolicyTest, ExitedWorkersAreNeverHungNorNoted) {
  HangPolicy p({.timeout = 1s, .start_timeout = 1s}, 3);
  EXPECT_EQ(p.Check(100s, {Exited(), {.running = false, .since_touch = 50s}, Touched(10ms)}),
            HangCheck{});
  HangPolicy q({.timeout = 1s}, 2);
  EXPECT_EQ(q.Check(100s, {Exited()}), HangCheck{}) << "a missing sample is not running";
}

TEST(HangPolicyTest, PollIntervalIsAQuarterOfTheShortestLimitWithinBounds) {
  EXPECT_EQ(HangPolicy({.timeout = 600s}, 1).PollInterval(), 1000ms);
  EXPECT_EQ(HangPolicy({.timeout = 600ms}, 1).PollInterval(), 150ms);
  EXPECT_EQ(HangPolicy({.timeout = 600s, .start_timeout = 400ms}, 1).PollInterval(), 100ms);
  EXPECT_EQ(HangPolicy({.timeout = 100ms}, 1).PollInterval(), 50ms);
}

TEST(HangPolicyTest, ParseSignalMaskReadsProcStatus) {
  const std::string status =
      "Name:\tpython3\nState:\tS (sleeping)\nSigQ:\t0/95538\nSigPnd:\t0000000000000000\n"
      "ShdPnd:\t0000000000000000\nSigBlk:\t0000000000000000\nSigIgn:\t0000000001001000\n"
      "SigCgt:\t0000000180000202\nCapInh:\t0000000000000000\n";
  auto caught = ParseSignalMask(status);
  ASSERT_TRUE(caught.has_value());
  EXPECT_EQ(*caught, 0x180000202u);
  EXPECT_TRUE(MaskHas(*caught, SIGINT));   // bit 1: Python's default SIGINT handler
  EXPECT_TRUE(MaskHas(*caught, SIGUSR1));  // bit 9
  EXPECT_FALSE(MaskHas(*caught, SIGUSR2));
  EXPECT_FALSE(MaskHas(*caught, SIGTERM));
  EXPECT_TRUE(MaskHas(*caught, 32));
  EXPECT_TRUE(MaskHas(*caught, 33));
  auto ignored = ParseSignalMask(status, "SigIgn");
  ASSERT_TRUE(ignored.has_value());
  EXPECT_TRUE(MaskHas(*ignored, SIGPIPE));
  EXPECT_FALSE(MaskHas(0, 0));
  EXPECT_FALSE(MaskHas(~0ULL, 65));
  EXPECT_EQ(ParseSignalMask("Name:\tx\n"), std::nullopt);
  EXPECT_EQ(ParseSignalMask("SigCgt:\tzz\n"), std::nullopt);
  EXPECT_EQ(ParseSignalMask("SigCgt:\t\n"), std::nullopt);
  EXPECT_EQ(ParseSignalMask("SigCgtX:\t1\nSigCgt:\t2"), 2u) << "the whole field name, last line";
}

TEST(HangPolicyTest, DiagnosticsGoOnlyToProcessesThatCatchTheSignal) {
  const std::uint64_t usr1 = 1ULL << (SIGUSR1 - 1);
  const std::uint64_t sigint = 1ULL << (SIGINT - 1);
  // Local rank 0 (group 100): a Python trainer with faulthandler.register(SIGUSR1)
  // and a DataLoader worker that inherited it; a `sleep` without handlers.
  // Local rank 1 (group 200): a Python trainer with only its SIGINT handler.
  // Local rank 2 exited (group 0); pid 300 is a stranger in another group.
  std::vector<ProcessSignals> procs = {
      {.pid = 100, .pgid = 100, .caught = usr1 | sigint},
      {.pid = 101, .pgid = 100, .caught = usr1},
      {.pid = 102, .pgid = 100, .caught = 0},
      {.pid = 200, .pgid = 200, .caught = sigint},
      {.pid = 201, .pgid = 200, .caught = std::nullopt},
      {.pid = 300, .pgid = 300, .caught = usr1},
  };
  DiagnosticsPlan plan = PlanDiagnostics(SIGUSR1, {100, 200, 0}, procs);
  EXPECT_EQ(plan.send_to, (std::vector<pid_t>{100, 101}));
  EXPECT_EQ(plan.without_handler, (std::vector<int>{1}));
  EXPECT_EQ(PlanDiagnostics(SIGINT, {100, 200}, procs).send_to, (std::vector<pid_t>{100, 200}));
  EXPECT_EQ(PlanDiagnostics(SIGUSR2, {100}, procs),
            (DiagnosticsPlan{.send_to = {}, .without_handler = {0}}));
}

}  // namespace
}  // namespace trainlet::agent
