#include "trainlet/agent/supervision_policy.h"

#include <gtest/gtest.h>

#include <csignal>

namespace trainlet::agent {
namespace {

using exitcodes::WorkerExit;

WorkerExit Exited(int code) { return WorkerExit{.signaled = false, .exit_status = code}; }
WorkerExit Killed(int sig) { return WorkerExit{.signaled = true, .signal = sig}; }

struct Step {
  Event event;
  // What must be in the returned actions.
  std::optional<int> terminate = std::nullopt;
  bool kill_all = false;
  std::optional<int> forward = std::nullopt;
  std::optional<int> exit_code = std::nullopt;
};

struct Scenario {
  const char* name;
  int workers;
  std::vector<Step> steps;
};

TEST(SupervisionPolicyTest, Scenarios) {
  const std::vector<Scenario> scenarios = {
      {"all succeed, no leftovers",
       2,
       {{.event = event::WorkerExited{0, Exited(0)}},
        {.event = event::WorkerExited{1, Exited(0)}, .terminate = SIGTERM},
        {.event = event::NoChildrenLeft{}, .exit_code = 0}}},
      {"first failure stops the others and decides the code",
       3,
       {{.event = event::WorkerExited{1, Exited(3)}, .terminate = SIGTERM},
        {.event = event::WorkerExited{0, Killed(SIGTERM)}},
        {.event = event::WorkerExited{2, Exited(143)}},
        {.event = event::NoChildrenLeft{}, .exit_code = 3}}},
      {"signal death is 128+signal (pytorch/pytorch#160908: SIGSEGV, collateral 143s ignored)",
       4,
       {{.event = event::WorkerExited{2, Killed(SIGSEGV)}, .terminate = SIGTERM},
        {.event = event::WorkerExited{0, Exited(143)}},
        {.event = event::WorkerExited{1, Exited(143)}},
        {.event = event::WorkerExited{3, Exited(143)}},
        {.event = event::NoChildrenLeft{}, .exit_code = 128 + SIGSEGV}}},
      {"SIGTERM: forward, grace, exit 143 even when workers then exit 0 (kubernetes/kubernetes#115688)",
       2,
       {{.event = event::Signal{SIGTERM}, .terminate = SIGTERM},
        {.event = event::WorkerExited{0, Exited(0)}},
        {.event = event::WorkerExited{1, Exited(0)}},
        {.event = event::NoChildrenLeft{}, .exit_code = 143}}},
      {"SIGTERM then a worker dies of it: never that worker's code",
       2,
       {{.event = event::Signal{SIGTERM}, .terminate = SIGTERM},
        {.event = event::WorkerExited{0, Exited(42)}},
        {.event = event::WorkerExited{1, Killed(SIGTERM)}},
        {.event = event::NoChildrenLeft{}, .exit_code = 143}}},
      {"grace expiry kills what remains",
       1,
       {{.event = event::Signal{SIGTERM}, .terminate = SIGTERM},
        {.event = event::GraceExpired{}, .kill_all = true},
        {.event = event::WorkerExited{0, Killed(SIGKILL)}},
        {.event = event::NoChildrenLeft{}, .exit_code = 143}}},
      {"SIGINT is passed on as SIGINT (no extra SIGTERM) and exits 130",
       1,
       {{.event = event::Signal{SIGINT}, .terminate = SIGINT},
        {.event = event::WorkerExited{0, Killed(SIGINT)}},
        {.event = event::NoChildrenLeft{}, .exit_code = 130}}},
      {"USR1/USR2/HUP are forwarded and change nothing (pytorch/pytorch#154849)",
       1,
       {{.event = event::Signal{SIGUSR1}, .forward = SIGUSR1},
        {.event = event::Signal{SIGUSR2}, .forward = SIGUSR2},
        {.event = event::Signal{SIGHUP}, .forward = SIGHUP},
        {.event = event::Signal{SIGCHLD}},
        {.event = event::NoChildrenLeft{}},  // still running: not an exit
        {.event = event::WorkerExited{0, Exited(0)}, .terminate = SIGTERM},
        {.event = event::NoChildrenLeft{}, .exit_code = 0}}},
      {"SIGTERM after every worker finished keeps 0",
       1,
       {{.event = event::WorkerExited{0, Exited(0)}, .terminate = SIGTERM},
        {.event = event::Signal{SIGTERM}},
        {.event = event::NoChildrenLeft{}, .exit_code = 0}}},
      {"a failure after SIGTERM does not override the stop",
       2,
       {{.event = event::Signal{SIGTERM}, .terminate = SIGTERM},
        {.event = event::WorkerExited{1, Exited(1)}},
        {.event = event::WorkerExited{0, Exited(0)}},
        {.event = event::NoChildrenLeft{}, .exit_code = 143}}},
      {"SIGTERM after a failure keeps the failure's code",
       2,
       {{.event = event::WorkerExited{0, Exited(7)}, .terminate = SIGTERM},
        {.event = event::Signal{SIGTERM}},  // already stopping: not sent twice
        {.event = event::WorkerExited{1, Killed(SIGTERM)}},
        {.event = event::NoChildrenLeft{}, .exit_code = 7}}},
      {"leftovers after success: TERM, grace, KILL, then 0",
       1,
       {{.event = event::WorkerExited{0, Exited(0)}, .terminate = SIGTERM},
        {.event = event::GraceExpired{}, .kill_all = true},
        {.event = event::NoChildrenLeft{}, .exit_code = 0}}},
      {"duplicate and unknown exits are ignored",
       2,
       {{.event = event::WorkerExited{0, Exited(0)}},
        {.event = event::WorkerExited{0, Exited(9)}},
        {.event = event::WorkerExited{5, Exited(9)}},
        {.event = event::WorkerExited{1, Exited(0)}, .terminate = SIGTERM},
        {.event = event::NoChildrenLeft{}, .exit_code = 0}}},
  };
  for (const Scenario& sc : scenarios) {
    SupervisionPolicy p(sc.workers);
    for (std::size_t i = 0; i < sc.steps.size(); ++i) {
      const Step& st = sc.steps[i];
      Actions a = p.On(st.event);
      SCOPED_TRACE(std::string(sc.name) + ", step " + std::to_string(i));
      EXPECT_EQ(a.terminate, st.terminate);
      EXPECT_EQ(a.kill_all, st.kill_all);
      EXPECT_EQ(a.forward_signal, st.forward);
      EXPECT_EQ(a.exit_code, st.exit_code);
      EXPECT_EQ(a.start_grace_timer, a.terminate.has_value());
      // Every stop also reaches the pod's other processes (setsid helpers,
      // orphans), with SIGTERM whatever the workers get.
      EXPECT_EQ(a.terminate_others, a.terminate ? std::optional<int>(SIGTERM) : std::nullopt);
    }
    EXPECT_EQ(p.phase(), Phase::kDone) << sc.name;
    EXPECT_EQ(p.On(event::Signal{SIGTERM}), Actions{}) << "events after the exit do nothing";
  }
}

TEST(SupervisionPolicyTest, CollateralCodeNeverDecides) {
  SupervisionPolicy p(3, "pod agent", 76);
  EXPECT_EQ(p.On(event::WorkerExited{0, Exited(76)}), Actions{}) << "no stop on collateral";
  Actions a = p.On(event::WorkerExited{1, Exited(3)});
  EXPECT_EQ(a.terminate, SIGTERM);
  (void)p.On(event::WorkerExited{2, Exited(76)});
  EXPECT_EQ(p.On(event::NoChildrenLeft{}).exit_code, 3) << "the culprit's code";
  SupervisionPolicy only(2, "pod agent", 76);
  (void)only.On(event::WorkerExited{0, Exited(76)});
  a = only.On(event::WorkerExited{1, Exited(76)});
  EXPECT_EQ(a.terminate, SIGTERM);
  EXPECT_EQ(only.On(event::NoChildrenLeft{}).exit_code, 76) << "never 0 after a failure";
}

TEST(SupervisionPolicyTest, PeerStopEndsIn76AndAStopSignalAfterItChangesNothing) {
  SupervisionPolicy p(1);
  EXPECT_EQ(p.On(event::PeerStop{}).terminate, SIGTERM);
  EXPECT_EQ(p.On(event::Signal{SIGTERM}), Actions{}) << "already stopping";
  EXPECT_EQ(p.On(event::Signal{SIGUSR1}).forward_signal, SIGUSR1) << "notices still pass";
  (void)p.On(event::WorkerExited{0, Killed(SIGTERM)});
  EXPECT_EQ(p.On(event::NoChildrenLeft{}).exit_code, 76);
  EXPECT_TRUE(p.peer_stop());
  EXPECT_FALSE(p.stop_signal().has_value());
}

TEST(SupervisionPolicyTest, CountsCollateralSeparately) {
  SupervisionPolicy p(3);
  (void)p.On(event::WorkerExited{2, Killed(SIGSEGV)});
  (void)p.On(event::WorkerExited{0, Killed(SIGTERM)});
  (void)p.On(event::WorkerExited{1, Exited(0)});
  ASSERT_TRUE(p.first_failure().has_value());
  EXPECT_EQ(p.first_failure()->local_rank, 2);
  EXPECT_EQ(p.collateral(), 1);
}

}  // namespace
}  // namespace trainlet::agent
