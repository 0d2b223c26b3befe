// One test per rule of GangPolicy (gang_policy.h), for the leader's and the
// member's roles.
#include "trainlet/agent/pod/gang_policy.h"

#include "roster_form.h"

#include <gtest/gtest.h>

#include <csignal>

namespace trainlet::agent {
namespace {

using exitcodes::FailureClass;
using Kind = Conclusion::Kind;
namespace wire = rendezvous::wire;

constexpr int kHang = SIGUSR1;

GangPolicy Make(std::uint32_t index, std::uint32_t nnodes = 3, std::uint32_t max_restarts = 0) {
  GangPolicy p({.index = index, .nnodes = nnodes, .max_restarts = max_restarts,
                .hang_signal = kHang});
  p.On(gang::Assigned{0});
  return p;
}

gang::Report Failed(std::uint32_t index, FailureClass c, std::string reason = "rank failed",
                    bool hang = false) {
  return {index, wire::Report{.index = index,
                              .ok = false,
                              .failure_class = static_cast<std::uint16_t>(c),
                              .reason = std::move(reason),
                              .hang = hang}};
}
gang::Report Ok(std::uint32_t index) {
  return {index, wire::Report{.index = index, .ok = true, .reason = ""}};
}

wire::Stop FinalStop(std::uint32_t failed, FailureClass c = FailureClass::kWorker,
                     std::uint16_t diag = 0) {
  return {.failed_index = failed,
          .reason = "pod " + std::to_string(failed) + ": rank failed",
          .diagnostics_signal = diag,
          .failure_class = static_cast<std::uint16_t>(c)};
}
wire::Stop RestartStop(std::uint32_t failed, std::uint32_t next = 1) {
  wire::Stop s = FinalStop(failed);
  s.restart = true;
  s.next_generation = next;
  return s;
}

gang::LocalFailure Worker(FailureClass c = FailureClass::kWorker) {
  return {c, "local rank 0 (rank 0) failed: exited 3", false};
}

Kind KindOf(const GangActions& a) { return a.conclude ? a.conclude->kind : Kind::kOk; }

// ---- The leader ----

TEST(LeaderPolicyTest, MemberFailureStopsEveryPodAndTheLeaderIsCollateral) {
  GangPolicy p = Make(0);
  GangActions a = p.On(Failed(2, FailureClass::kWorker));
  ASSERT_TRUE(a.broadcast);
  EXPECT_EQ(a.broadcast->failed_index, 2u);
  EXPECT_FALSE(a.broadcast->restart);
  EXPECT_EQ(a.broadcast->failure_class, static_cast<std::uint16_t>(FailureClass::kWorker));
  EXPECT_EQ(a.stop_workers, 0);
  EXPECT_FALSE(a.conclude);
  a = p.On(gang::WorkersDone{false});
  ASSERT_TRUE(a.conclude);
  EXPECT_EQ(a.conclude->kind, Kind::kPeerFailed);
  EXPECT_NE(a.conclude->reason.find("pod 2 failed first"), std::string::npos);
}

TEST(LeaderPolicyTest, OwnWorkerFailureIsTheLeadersOwn) {
  GangPolicy p = Make(0);
  GangActions a = p.On(Worker(FailureClass::kBug));
  ASSERT_TRUE(a.broadcast);
  EXPECT_EQ(a.broadcast->failed_index, 0u);
  EXPECT_FALSE(a.broadcast->restart);
  a = p.On(gang::WorkersDone{false});
  ASSERT_TRUE(a.conclude);
  EXPECT_EQ(a.conclude->kind, Kind::kOwn);
  EXPECT_EQ(a.conclude->failure_class, FailureClass::kBug);
}

// A gang of one has no other pods: its log line does not speak of them.
TEST(LeaderPolicyTest, AGangOfOneSaysNothingOfOtherPods) {
  GangPolicy p = Make(0, 1);
  GangActions a = p.On(Worker());
  EXPECT_EQ(a.log, "gang: pod 0: local rank 0 (rank 0) failed: exited 3");
  GangPolicy two = Make(0, 2);
  EXPECT_NE(two.On(Worker()).log.find("stopping every pod"), std::string::npos);
}

TEST(LeaderPolicyTest, FirstFailureWinsLaterReportsAndLossesChangeNothing) {
  GangPolicy p = Make(0, 4);
  EXPECT_TRUE(p.On(Failed(1, FailureClass::kWorker)).broadcast);
  EXPECT_EQ(p.On(Failed(2, FailureClass::kBug)), GangActions{});
  EXPECT_EQ(p.On(gang::Lost{3, "closed"}), GangActions{});
  EXPECT_EQ(p.On(Worker()), GangActions{});  // own worker, after: collateral
  GangActions a = p.On(gang::WorkersDone{false});
  EXPECT_EQ(KindOf(a), Kind::kPeerFailed);
}

TEST(LeaderPolicyTest, RestartableFailureRestartsInPlaceAndResetsTheGeneration) {
  GangPolicy p = Make(0, 3, 2);
  GangActions a = p.On(Failed(1, FailureClass::kWorker));
  ASSERT_TRUE(a.broadcast);
  EXPECT_TRUE(a.broadcast->restart);
  EXPECT_EQ(a.broadcast->next_generation, 1u);
  EXPECT_EQ(a.stop_workers, 0);
  a = p.On(gang::WorkersDone{false});
  EXPECT_TRUE(a.restart);
  EXPECT_FALSE(a.conclude);
  EXPECT_FALSE(p.role().gen().first);
  EXPECT_FALSE(p.role().gen().running());
  p.On(gang::Assigned{1});
  EXPECT_EQ(p.role().generation(), 1u);
  // Generation 1 restarts once more, generation 2 no longer.
  EXPECT_TRUE(p.On(Failed(2, FailureClass::kOom)).broadcast->restart);
  EXPECT_TRUE(p.On(gang::WorkersDone{false}).restart);
  p.On(gang::Assigned{2});
  a = p.On(Failed(2, FailureClass::kWorker));
  EXPECT_FALSE(a.broadcast->restart);
  EXPECT_EQ(KindOf(p.On(gang::WorkersDone{false})), Kind::kPeerFailed);
}

TEST(LeaderPolicyTest, NoRestartForBugConfigHardwareOrTerminated) {
  for (FailureClass c : {FailureClass::kBug, FailureClass::kConfig, FailureClass::kHardware,
                         FailureClass::kTerminated}) {
    GangPolicy p = Make(0, 3, 5);
    GangActions a = p.On(Failed(1, c));
    ASSERT_TRUE(a.broadcast);
    EXPECT_FALSE(a.broadcast->restart) << exitcodes::ClassName(c);
    EXPECT_FALSE(p.On(gang::WorkersDone{false}).restart);
  }
}

TEST(LeaderPolicyTest, SigtermBeforeAnyFailureIsTerminatedAndTellsTheGang) {
  GangPolicy p = Make(0, 3, 2);
  GangActions a = p.On(gang::StopSignal{SIGTERM});
  ASSERT_TRUE(a.broadcast);
  EXPECT_FALSE(a.broadcast->restart);
  EXPECT_EQ(a.broadcast->failure_class, static_cast<std::uint16_t>(FailureClass::kTerminated));
  EXPECT_NE(a.broadcast->reason.find("stopped by SIGTERM"), std::string::npos);
  // A member failing afterwards changes nothing.
  EXPECT_EQ(p.On(Failed(1, FailureClass::kWorker)), GangActions{});
  a = p.On(gang::WorkersDone{false});
  ASSERT_TRUE(a.conclude);
  EXPECT_EQ(a.conclude->kind, Kind::kTerminated);
  EXPECT_EQ(a.conclude->stop_signal, SIGTERM);
}

TEST(LeaderPolicyTest, SigtermWhileStoppingForARestartEndsThePod) {
  GangPolicy p = Make(0, 3, 2);
  EXPECT_TRUE(p.On(Failed(1, FailureClass::kWorker)).broadcast->restart);
  EXPECT_EQ(p.On(gang::StopSignal{SIGTERM}), GangActions{});
  GangActions a = p.On(gang::WorkersDone{false});
  EXPECT_FALSE(a.restart);
  ASSERT_TRUE(a.conclude);
  EXPECT_EQ(a.conclude->kind, Kind::kTerminated);
}

TEST(LeaderPolicyTest, SigtermWhileJoiningTheNextGeneration) {
  GangPolicy p = Make(0, 3, 2);
  p.On(Failed(1, FailureClass::kWorker));
  EXPECT_TRUE(p.On(gang::WorkersDone{false}).restart);
  GangActions a = p.On(gang::StopSignal{SIGTERM});
  ASSERT_TRUE(a.conclude);
  EXPECT_EQ(a.conclude->kind, Kind::kTerminated);
  EXPECT_NE(a.conclude->reason.find("while the gang restarted"), std::string::npos);
}

TEST(LeaderPolicyTest, SigtermAfterOwnSuccessTellsTheMembersStillRunning) {
  GangPolicy p = Make(0, 3, 2);
  p.On(gang::WorkersDone{true});  // own success: waits for the members
  GangActions a = p.On(gang::StopSignal{SIGTERM});
  EXPECT_EQ(KindOf(a), Kind::kTerminated);
  // The members still running are told (no restart), so none waits for a verdict.
  ASSERT_TRUE(a.broadcast);
  EXPECT_FALSE(a.broadcast->restart);
  EXPECT_EQ(a.broadcast->failure_class, static_cast<std::uint16_t>(FailureClass::kTerminated));
}

TEST(LeaderPolicyTest, SuccessWaitsForEveryMember) {
  GangPolicy p = Make(0, 3);
  GangActions a = p.On(gang::WorkersDone{true});
  EXPECT_FALSE(a.conclude);
  EXPECT_NE(a.log.find("waiting for the other pods"), std::string::npos);
  EXPECT_FALSE(p.On(Ok(1)).conclude);
  a = p.On(Ok(2));
  ASSERT_TRUE(a.conclude);
  EXPECT_EQ(a.conclude->kind, Kind::kOk);
}

TEST(LeaderPolicyTest, MemberFailureAfterTheLeaderFinishedFailsTheLeaderToo) {
  GangPolicy p = Make(0, 3, 2);
  p.On(gang::WorkersDone{true});
  GangActions a = p.On(Failed(2, FailureClass::kWorker));
  ASSERT_TRUE(a.broadcast);
  EXPECT_FALSE(a.broadcast->restart);  // some pod succeeded: never a restart
  EXPECT_EQ(KindOf(a), Kind::kPeerFailed);
}

TEST(LeaderPolicyTest, StopAfterTheGangSucceededIsNoFailure) {
  GangPolicy p = Make(0, 3);
  p.On(Ok(1));
  GangActions a = p.On(Failed(2, FailureClass::kTerminated, "stopped by SIGTERM"));
  EXPECT_FALSE(a.broadcast);
  a = p.On(gang::WorkersDone{true});
  EXPECT_EQ(KindOf(a), Kind::kOk);
}

TEST(LeaderPolicyTest, LostMemberIsInfraAndRestartsWhenAllowed) {
  GangPolicy p = Make(0, 3);
  GangActions a = p.On(gang::Lost{1, "no heartbeat for 3000 ms"});
  ASSERT_TRUE(a.broadcast);
  EXPECT_EQ(a.broadcast->failure_class, static_cast<std::uint16_t>(FailureClass::kInfra));
  EXPECT_NE(a.broadcast->reason.find("pod 1 was lost"), std::string::npos);
  EXPECT_EQ(KindOf(p.On(gang::WorkersDone{false})), Kind::kPeerFailed);

  GangPolicy r = Make(0, 3, 1);
  EXPECT_TRUE(r.On(gang::Lost{2, "closed"}).broadcast->restart);
}

TEST(LeaderPolicyTest, LossAfterTheMembersReportIsIgnored) {
  GangPolicy p = Make(0, 3);
  p.On(Ok(1));
  GangActions a = p.On(gang::Lost{1, "closed"});
  EXPECT_EQ(a.lost, std::vector<std::uint32_t>{1}) << "the roster forgets it (membership.h M3)";
  a.lost.clear();
  EXPECT_EQ(a, GangActions{}) << "no failure of the gang";
}

TEST(LeaderPolicyTest, OwnStallMakesTheLeaderTheCulprit) {
  GangPolicy p = Make(0, 3);
  GangActions a = p.On(gang::OwnStall{"event loop stalled for 7.0 s"});
  ASSERT_TRUE(a.broadcast);
  EXPECT_EQ(a.broadcast->failed_index, 0u);
  EXPECT_EQ(a.broadcast->failure_class, static_cast<std::uint16_t>(FailureClass::kInfra));
  EXPECT_EQ(a.stop_workers, 0);
  // The members it could not hear while frozen are not blamed.
  EXPECT_EQ(p.On(gang::Lost{1, "no heartbeat"}), GangActions{});
  EXPECT_EQ(p.On(gang::Lost{2, "closed"}), GangActions{});
  a = p.On(gang::WorkersDone{false});
  ASSERT_TRUE(a.conclude);
  EXPECT_EQ(a.conclude->kind, Kind::kStall);
  EXPECT_EQ(a.conclude->failure_class, FailureClass::kInfra);
}

TEST(LeaderPolicyTest, StallAfterAFailureWasDecidedChangesNothing) {
  GangPolicy p = Make(0, 3);
  p.On(Failed(1, FailureClass::kWorker));
  EXPECT_EQ(p.On(gang::OwnStall{"stalled"}), GangActions{});
  EXPECT_EQ(KindOf(p.On(gang::WorkersDone{false})), Kind::kPeerFailed);
}

TEST(LeaderPolicyTest, HangAsksEveryPodForStackDumps) {
  GangPolicy p = Make(0, 3);
  GangActions a = p.On(gang::LocalFailure{FailureClass::kInfra, "hang: local rank 0", true});
  EXPECT_EQ(a.broadcast->diagnostics_signal, kHang);
  EXPECT_EQ(a.stop_workers, kHang);
  // A member's hang comes as a field of its report, not as words in the reason.
  GangPolicy q = Make(0, 3);
  a = q.On(Failed(2, FailureClass::kInfra, "no progress", /*hang=*/true));
  EXPECT_EQ(a.broadcast->diagnostics_signal, kHang);
  EXPECT_EQ(a.stop_workers, kHang);
  GangPolicy r = Make(0, 3);
  a = r.On(Failed(2, FailureClass::kInfra, "hang: words only"));
  EXPECT_EQ(a.broadcast->diagnostics_signal, 0);
}

TEST(LeaderPolicyTest, AgentFailureConcludesWithItsStatus) {
  GangPolicy p({.index = 0, .nnodes = 2});
  GangActions a = p.On(gang::AgentFailed{exitcodes::Status::Infra("rendezvous timed out")});
  ASSERT_TRUE(a.conclude);
  EXPECT_EQ(a.conclude->kind, Kind::kAgent);
  EXPECT_EQ(a.conclude->failure_class, FailureClass::kInfra);
  EXPECT_EQ(p.On(gang::WorkersDone{true}), GangActions{});  // concluded: nothing more
}

// ---- A member ----

TEST(MemberPolicyTest, OwnFailureIsReportedAndWaitsForTheVerdict) {
  GangPolicy p = Make(2);
  GangActions a = p.On(Worker());
  ASSERT_TRUE(a.report);
  EXPECT_FALSE(a.report->ok);
  EXPECT_EQ(a.report->failure_class, static_cast<std::uint16_t>(FailureClass::kWorker));
  a = p.On(gang::WorkersDone{false});
  EXPECT_TRUE(a.arm_verdict_timer);
  EXPECT_FALSE(a.conclude);
  a = p.On(gang::Stop{FinalStop(2)});
  ASSERT_TRUE(a.conclude);
  EXPECT_EQ(a.conclude->kind, Kind::kOwn);
}

TEST(MemberPolicyTest, OwnFailureNotFirstIsCollateral) {
  // Exactly one counted exit: the leader named another pod first.
  GangPolicy p = Make(2);
  p.On(Worker(FailureClass::kBug));
  p.On(gang::WorkersDone{false});
  GangActions a = p.On(gang::Stop{FinalStop(1)});
  ASSERT_TRUE(a.conclude);
  EXPECT_EQ(a.conclude->kind, Kind::kPeerFailed);
}

TEST(MemberPolicyTest, VerdictTimerConcludesWithTheOwnFailure) {
  GangPolicy p = Make(2);
  p.On(Worker());
  p.On(gang::WorkersDone{false});
  EXPECT_EQ(KindOf(p.On(gang::Timer{})), Kind::kOwn);
}

TEST(MemberPolicyTest, PeerStopStopsTheWorkersWithTheDiagnosticsSignal) {
  GangPolicy p = Make(1);
  GangActions a = p.On(gang::Stop{FinalStop(2, FailureClass::kInfra, kHang)});
  EXPECT_EQ(a.stop_workers, kHang);
  a = p.On(gang::WorkersDone{false});
  ASSERT_TRUE(a.conclude);
  EXPECT_EQ(a.conclude->kind, Kind::kPeerFailed);
  EXPECT_NE(a.conclude->reason.find("pod 2 failed first"), std::string::npos);
}

TEST(MemberPolicyTest, PreemptedGangEveryPodThatGotSigtermIsTerminated) {
  GangPolicy p = Make(1);
  p.On(gang::Stop{FinalStop(2, FailureClass::kTerminated)});
  p.On(gang::StopSignal{SIGTERM});
  EXPECT_EQ(KindOf(p.On(gang::WorkersDone{false})), Kind::kTerminated);
  // Without its own SIGTERM it is collateral.
  GangPolicy q = Make(1);
  q.On(gang::Stop{FinalStop(2, FailureClass::kTerminated)});
  EXPECT_EQ(KindOf(q.On(gang::WorkersDone{false})), Kind::kPeerFailed);
}

TEST(MemberPolicyTest, RestartStopStopsTheWorkersThenRejoins) {
  GangPolicy p = Make(1, 3, 1);
  GangActions a = p.On(gang::Stop{RestartStop(2)});
  EXPECT_EQ(a.stop_workers, 0);
  a = p.On(gang::WorkersDone{false});
  EXPECT_TRUE(a.restart);
  EXPECT_FALSE(p.role().gen().restarting());  // a fresh generation
}

TEST(MemberPolicyTest, LostLeaderWithoutRestartsIsPeerFailed) {
  GangPolicy p = Make(1);
  GangActions a = p.On(gang::Lost{0, "no heartbeat from the leader for 3000 ms"});
  EXPECT_EQ(a.stop_workers, 0);
  a = p.On(gang::WorkersDone{false});
  ASSERT_TRUE(a.conclude);
  EXPECT_EQ(a.conclude->kind, Kind::kPeerFailed);
  EXPECT_NE(a.conclude->reason.find("lost the leader"), std::string::npos);
}

TEST(MemberPolicyTest, LostLeaderWithRestartsRejoins) {
  GangPolicy p = Make(1, 3, 1);
  EXPECT_EQ(p.On(gang::Lost{0, "closed"}).stop_workers, 0);
  EXPECT_TRUE(p.On(gang::WorkersDone{false}).restart);
}

TEST(MemberPolicyTest, LostLeaderAfterOwnFailureDecidesByTheOwnClass) {
  GangPolicy p = Make(1, 3, 1);
  p.On(Worker());
  p.On(gang::WorkersDone{false});
  EXPECT_TRUE(p.On(gang::Lost{0, "closed"}).restart);
  GangPolicy q = Make(1, 3, 1);
  q.On(Worker(FailureClass::kBug));
  q.On(gang::Lost{0, "closed"});
  EXPECT_EQ(KindOf(q.On(gang::WorkersDone{false})), Kind::kOwn);
}

TEST(MemberPolicyTest, LossAfterTheVerdictIsNoFailure) {
  GangPolicy p = Make(1);
  p.On(Worker());
  p.On(gang::Stop{FinalStop(1)});
  EXPECT_EQ(p.On(gang::Lost{0, "closed"}), GangActions{});
  EXPECT_EQ(KindOf(p.On(gang::WorkersDone{false})), Kind::kOwn);
}

TEST(MemberPolicyTest, SuccessIsReportedThenConcluded) {
  GangPolicy p = Make(1);
  GangActions a = p.On(gang::WorkersDone{true});
  ASSERT_TRUE(a.report);
  EXPECT_TRUE(a.report->ok);
  EXPECT_FALSE(a.conclude);
  EXPECT_EQ(p.On(gang::Lost{0, "closed"}), GangActions{});
  EXPECT_EQ(KindOf(p.On(gang::ReportSent{})), Kind::kOk);
}

TEST(MemberPolicyTest, RestartBeforeTheSuccessReportWasWrittenWins) {
  GangPolicy p = Make(1, 3, 1);
  p.On(gang::WorkersDone{true});
  EXPECT_TRUE(p.On(gang::Stop{RestartStop(2)}).restart);
  EXPECT_EQ(p.On(gang::ReportSent{}), GangActions{});  // of the old generation: nothing
}

TEST(MemberPolicyTest, SigtermFirstIsReportedAndTerminated) {
  GangPolicy p = Make(1, 3, 2);
  GangActions a = p.On(gang::StopSignal{SIGTERM});
  ASSERT_TRUE(a.report);
  EXPECT_EQ(a.report->failure_class, static_cast<std::uint16_t>(FailureClass::kTerminated));
  EXPECT_TRUE(a.report->leaving) << "a graceful leave (G5), not a failure";
  // Even a verdict naming another pod does not make it collateral.
  p.On(gang::Stop{FinalStop(2)});
  EXPECT_EQ(KindOf(p.On(gang::WorkersDone{false})), Kind::kTerminated);
}

TEST(MemberPolicyTest, SigtermWhileStoppingForARestartEndsThePod) {
  GangPolicy p = Make(1, 3, 2);
  p.On(gang::Stop{RestartStop(2)});
  GangActions a = p.On(gang::StopSignal{SIGTERM});
  ASSERT_TRUE(a.report) << "it tells the leader it leaves (G5): the next round need not wait";
  EXPECT_TRUE(a.report->leaving);
  EXPECT_FALSE(a.conclude);
  a = p.On(gang::WorkersDone{false});
  EXPECT_FALSE(a.restart);
  EXPECT_EQ(KindOf(a), Kind::kTerminated);
}

TEST(MemberPolicyTest, SigtermWhileAwaitingTheVerdictLeavesAtOnce) {
  GangPolicy p = Make(1);
  p.On(Worker());
  p.On(gang::WorkersDone{false});
  EXPECT_EQ(KindOf(p.On(gang::StopSignal{SIGTERM})), Kind::kTerminated);
}

TEST(MemberPolicyTest, OwnStallMakesTheMemberTheCulprit) {
  GangPolicy p = Make(2);
  GangActions a = p.On(gang::OwnStall{"event loop stalled for 6.2 s"});
  ASSERT_TRUE(a.report);
  EXPECT_EQ(a.report->failure_class, static_cast<std::uint16_t>(FailureClass::kInfra));
  EXPECT_EQ(a.stop_workers, 0);
  // The leader dropped it meanwhile: not a peer's failure.
  EXPECT_EQ(p.On(gang::Lost{0, "closed"}), GangActions{});
  a = p.On(gang::WorkersDone{false});
  ASSERT_TRUE(a.conclude);
  EXPECT_EQ(a.conclude->kind, Kind::kStall);
  EXPECT_EQ(a.conclude->failure_class, FailureClass::kInfra);
}

TEST(MemberPolicyTest, OwnStallWithRestartsRejoins) {
  GangPolicy p = Make(2, 3, 1);
  p.On(gang::OwnStall{"stalled"});
  p.On(gang::Lost{0, "closed"});
  EXPECT_TRUE(p.On(gang::WorkersDone{false}).restart);
}

TEST(MemberPolicyTest, LocalFailureAfterAPeerStopIsCollateral) {
  GangPolicy p = Make(1);
  p.On(gang::Stop{FinalStop(2)});
  EXPECT_EQ(p.On(Worker()), GangActions{});
  EXPECT_EQ(KindOf(p.On(gang::WorkersDone{false})), Kind::kPeerFailed);
}

TEST(MemberPolicyTest, EventsBeforeTheWorkersStartChangeNothing) {
  GangPolicy p({.index = 1, .nnodes = 3});
  EXPECT_EQ(p.On(gang::Lost{0, "closed"}), GangActions{});
  EXPECT_EQ(p.On(Worker()), GangActions{});
  EXPECT_EQ(KindOf(p.On(gang::StopSignal{SIGINT})), Kind::kTerminated);
}

// G3 from the hello on: a pod stopped (SIGSTOP, a frozen node) past the
// heartbeat timeout while it waits in a round may have been given up by a
// gang that formed meanwhile. Whatever its role, round or budget, it leaves
// as the culprit (infra, 75) before any worker starts: no restart, no report
// (its connection closes; the leader has lost it or drops it from the round),
// and the assignment it then reads changes nothing.
TEST(GangPolicyTest, APodStalledWhileItJoinsLeavesAsTheCulpritBeforeItsWorkersStart) {
  struct Case {
    const char* what;
    std::uint32_t index;
    std::uint32_t max_restarts;
    bool after_a_restart;  // the stall came in the round of a restart, not the first
  };
  const Case cases[] = {
      {"a member in the first round", 2, 0, false},
      {"a member in the first round, with restarts left", 2, 3, false},
      {"a member in a restart's round", 1, 3, true},
      {"the leader in the first round", 0, 0, false},
      {"the leader in a restart's round", 0, 3, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    GangPolicy p({.index = c.index, .nnodes = 3, .max_restarts = c.max_restarts,
                  .hang_signal = kHang});
    if (c.after_a_restart) {
      p.On(gang::Assigned{0});
      if (c.index == 0) {
        p.On(Failed(2, FailureClass::kWorker));
      } else {
        p.On(gang::Stop{RestartStop(2)});
      }
      ASSERT_TRUE(p.On(gang::WorkersDone{false}).restart);
      ASSERT_FALSE(p.role().gen().running());
    }
    GangActions a = p.On(gang::OwnStall{"this pod's event loop did not run for 6.5 s"});
    ASSERT_TRUE(a.conclude);
    EXPECT_EQ(a.conclude->kind, Kind::kStall);
    EXPECT_EQ(a.conclude->failure_class, FailureClass::kInfra);
    EXPECT_EQ(a.conclude->reason, "this pod's event loop did not run for 6.5 s");
    EXPECT_FALSE(a.restart);
    EXPECT_FALSE(a.report);
    EXPECT_FALSE(a.broadcast);
    EXPECT_FALSE(a.stop_workers);
    EXPECT_TRUE(p.role().concluded());
    EXPECT_EQ(p.On(gang::Assigned{c.after_a_restart ? 1u : 0u}), GangActions{});
  }
}


// ---- Hot spares (--spares) ----

namespace spares {

GangPolicy MakeWithSpare(std::uint32_t index, bool spare = false) {
  GangPolicy p({.index = index, .nnodes = 2, .max_restarts = 2, .hang_signal = kHang});
  if (Roster* roster = p.roster()) roster_testing::FormRoster(*roster, {0, 1}, {2});  // the leader's
  p.On(gang::Assigned{.generation = 0, .spare = spare});
  return p;
}

TEST(SparePolicyTest, MembersHardwareFailureRestartsWithASpareAndTheCulpritLeaves) {
  GangPolicy leader = MakeWithSpare(0);
  GangActions a = leader.On(Failed(1, FailureClass::kHardware));
  ASSERT_TRUE(a.broadcast);
  EXPECT_TRUE(a.broadcast->restart);
  EXPECT_EQ(a.broadcast->failed_index, 1u);
  const wire::Stop stop = *a.broadcast;
  EXPECT_TRUE(leader.On(gang::WorkersDone{false}).restart);
  // The culprit leaves with its own class.
  GangPolicy culprit = MakeWithSpare(1);
  culprit.On(Worker(FailureClass::kHardware));
  culprit.On(gang::WorkersDone{false});
  a = culprit.On(gang::Stop{stop});
  ASSERT_TRUE(a.conclude);
  EXPECT_EQ(a.conclude->kind, Kind::kOwn);
  EXPECT_EQ(a.conclude->failure_class, FailureClass::kHardware);
  EXPECT_FALSE(a.restart);
}

TEST(SparePolicyTest, HardwareWithoutASpareStopsTheGang) {
  GangPolicy p({.index = 0, .nnodes = 2, .max_restarts = 2, .hang_signal = kHang});
  p.On(gang::Assigned{0});
  GangActions a = p.On(Failed(1, FailureClass::kHardware));
  ASSERT_TRUE(a.broadcast);
  EXPECT_FALSE(a.broadcast->restart);
}

TEST(SparePolicyTest, ALostSpareChangesNoGeneration) {
  GangPolicy p = MakeWithSpare(0);
  GangActions a = p.On(gang::Lost{2, "its connection closed"});
  EXPECT_FALSE(a.broadcast);
  EXPECT_FALSE(a.restart);
  EXPECT_FALSE(a.conclude);
  // Now a hardware failure finds no spare: the gang stops.
  a = p.On(Failed(1, FailureClass::kHardware));
  ASSERT_TRUE(a.broadcast);
  EXPECT_FALSE(a.broadcast->restart);
}

TEST(SparePolicyTest, TheSpareRestartsAtOnceAndExitsZeroWhenTheGangFinishes) {
  GangPolicy spare = MakeWithSpare(2, /*spare=*/true);
  GangActions a = spare.On(gang::Stop{RestartStop(1)});
  EXPECT_TRUE(a.restart);  // no workers to wait for
  spare.On(gang::Assigned{.generation = 1, .spare = true});
  // The leader concludes ok: it tells the spares.
  GangPolicy leader = MakeWithSpare(0);
  leader.On(Ok(1));
  a = leader.On(gang::WorkersDone{true});
  ASSERT_TRUE(a.conclude);
  EXPECT_EQ(a.conclude->kind, Kind::kOk);
  ASSERT_TRUE(a.broadcast);
  EXPECT_EQ(a.broadcast->failure_class, static_cast<std::uint16_t>(FailureClass::kOk));
  a = spare.On(gang::Stop{*a.broadcast});
  ASSERT_TRUE(a.conclude);
  EXPECT_EQ(a.conclude->kind, Kind::kOk);
}

// A waiting spare frozen past the heartbeat timeout (SIGSTOP): the leader gave
// it up; resumed, it leaves as the culprit of its own stall (infra), as an
// active pod does, and does not read the closed connection as a lost leader
// (which would make it rejoin a leader that no longer counts it).
TEST(SparePolicyTest, AFrozenSpareLeavesWithItsOwnStall) {
  GangPolicy spare = MakeWithSpare(2, /*spare=*/true);
  GangActions a = spare.On(gang::OwnStall{"this pod's event loop did not run for 5.0 s"});
  ASSERT_TRUE(a.conclude);
  EXPECT_EQ(a.conclude->kind, Kind::kStall);
  EXPECT_EQ(a.conclude->failure_class, FailureClass::kInfra);
  EXPECT_FALSE(a.restart);
  EXPECT_EQ(spare.On(gang::Lost{0, "closed"}), GangActions{}) << "concluded: no rejoin";
}

TEST(SparePolicyTest, ASpareOfAGangThatStopsForGoodIsCollateral) {
  GangPolicy spare = MakeWithSpare(2, /*spare=*/true);
  GangActions a = spare.On(gang::Stop{FinalStop(1, FailureClass::kBug)});
  ASSERT_TRUE(a.conclude);
  EXPECT_EQ(a.conclude->kind, Kind::kPeerFailed);
}

TEST(SparePolicyTest, ASpareLeavingToRejoinDuringARestartIsNotLost) {
  GangPolicy p = MakeWithSpare(0);
  GangActions a = p.On(Failed(1, FailureClass::kWorker));
  ASSERT_TRUE(a.broadcast && a.broadcast->restart);
  a = p.On(gang::Lost{2, "its connection closed"});
  EXPECT_TRUE(a.log.empty());
  EXPECT_FALSE(a.conclude);
  EXPECT_TRUE(p.On(gang::WorkersDone{false}).restart);
}

TEST(SparePolicyTest, ASpareThatLosesTheLeaderRejoins) {
  GangPolicy spare = MakeWithSpare(2, /*spare=*/true);
  GangActions a = spare.On(gang::Lost{0, "no heartbeat"});
  EXPECT_TRUE(a.restart);
}

}  // namespace spares

}  // namespace
}  // namespace trainlet::agent

namespace trainlet::agent {
namespace {

// Ranks by arrival (rendezvous/arrival.h): a member starts without an index
// and takes the one its first assignment gives; its reports and the leader's
// stops are judged by that index from then on.
TEST(MemberPolicyTest, AMemberNumberedByArrivalReportsWithTheIndexItWasGiven) {
  GangPolicy p({.index = rendezvous::wire::kNoIndex, .nnodes = 3, .max_restarts = 0,
                .hang_signal = SIGUSR1});
  EXPECT_FALSE(p.is_leader());
  p.AdoptIndex(2);
  EXPECT_FALSE(p.is_leader()) << "the role stays";
  p.On(gang::Assigned{0});
  GangActions a = p.On(gang::LocalFailure{FailureClass::kWorker, "rank 4 failed", false});
  if (!a.report) a = p.On(gang::WorkersDone{false});  // the report may wait for the workers
  ASSERT_TRUE(a.report);
  EXPECT_EQ(a.report->index, 2u);
  EXPECT_FALSE(a.report->ok);
}

}  // namespace
}  // namespace trainlet::agent

// ---- Elastic --nnodes MIN:MAX: joins grow the gang without a restart ----

namespace trainlet::agent {
namespace {

using exitcodes::FailureClass;
namespace wire = rendezvous::wire;

// --nnodes 2:3 --max-restarts `max`: generation `g` runs with `active` pods.
GangPolicy MakeElastic(std::uint32_t index, std::uint32_t max, std::uint32_t g,
                       std::uint32_t active, std::uint32_t restarts) {
  GangPolicy p({.index = index, .nnodes = 3, .max_restarts = max, .hang_signal = SIGUSR1,
                .min_nodes = 2});
  p.On(gang::Assigned{.generation = g, .nnodes = active, .restarts = restarts});
  return p;
}

wire::Report FailedReport(std::uint32_t index) {
  return {.index = index, .ok = false,
          .failure_class = static_cast<std::uint16_t>(FailureClass::kWorker), .reason = "x"};
}

TEST(ElasticPolicyTest, AJoinGrowsTheGangWithoutARestart) {
  GangPolicy p = MakeElastic(0, 0, 0, 2, 0);  // no restarts allowed at all
  GangActions a = p.On(gang::Joined{.index = 2});
  ASSERT_TRUE(a.broadcast);
  EXPECT_TRUE(a.broadcast->restart);
  EXPECT_EQ(a.broadcast->failed_index, 2u);
  EXPECT_EQ(a.broadcast->next_generation, 1u);
  EXPECT_EQ(a.broadcast->failure_class, static_cast<std::uint16_t>(FailureClass::kOk));
  EXPECT_EQ(a.stop_workers, 0);
  EXPECT_TRUE(p.role().gen().restarting());
  // Members close their connections to rejoin: no loss, no failure.
  EXPECT_EQ(p.On(gang::Lost{1, "its connection closed"}), GangActions{});
  a = p.On(gang::WorkersDone{false});
  EXPECT_TRUE(a.restart);
  EXPECT_EQ(p.role().restarts(), 0u) << "a join is no restart";
}

TEST(ElasticPolicyTest, AMemberFollowsAGrowingGangAndCountsNoRestart) {
  GangPolicy m = MakeElastic(1, 0, 0, 2, 0);
  wire::Stop grow{.failed_index = 2, .reason = "pod 2 joined: the gang grows", .restart = true,
                  .next_generation = 1, .failure_class = 0};
  GangActions a = m.On(gang::Stop{grow});
  EXPECT_EQ(a.stop_workers, 0);
  EXPECT_FALSE(a.conclude);
  a = m.On(gang::WorkersDone{false});
  EXPECT_TRUE(a.restart);
  EXPECT_FALSE(a.report) << "a stop for growth is no failure to report";
  EXPECT_EQ(m.role().restarts(), 0u);
}

// A failure while the gang stops to grow is collateral of that stop
// (membership.h M12): the members that already rejoined for the growth could
// never hear a restart decided after it, so the counts would differ.
TEST(ElasticPolicyTest, AFailureWhileGrowingIsCollateralAndCountsNoRestart) {
  GangPolicy p = MakeElastic(0, 1, 0, 2, 0);
  ASSERT_TRUE(p.On(gang::Joined{.index = 2}).broadcast);
  GangActions a = p.On(gang::Report{1, FailedReport(1)});
  EXPECT_FALSE(a.broadcast) << "the growth's stop stands";
  a = p.On(gang::WorkersDone{false});
  EXPECT_TRUE(a.restart);
  EXPECT_EQ(p.role().restarts(), 0u) << "as every member counts";
}

TEST(ElasticPolicyTest, RestartsAreCountedNotGenerations) {
  // Generation 5 after four joins and one failure: one restart left of two.
  GangPolicy p = MakeElastic(0, 2, 5, 3, 1);
  GangActions a = p.On(gang::Report{1, FailedReport(1)});
  ASSERT_TRUE(a.broadcast);
  EXPECT_TRUE(a.broadcast->restart) << "generation 5 > --max-restarts 2, but only 1 restart";
  EXPECT_TRUE(p.On(gang::WorkersDone{false}).restart);
  EXPECT_EQ(p.role().restarts(), 2u);
  p.On(gang::Assigned{.generation = 6, .nnodes = 3, .restarts = 2});
  a = p.On(gang::Report{1, FailedReport(1)});
  EXPECT_FALSE(a.broadcast->restart) << "the restarts are spent";
}

TEST(ElasticPolicyTest, AJoinAtMaxOrAfterAFailureGrowsNothing) {
  GangPolicy p = MakeElastic(0, 2, 0, 3, 0);
  GangActions a = p.On(gang::Joined{.index = 3});
  EXPECT_FALSE(a.broadcast);
  EXPECT_EQ(p.membership()->spares(), std::set<std::uint32_t>{3}) << "it waits as a spare";
  GangPolicy q = MakeElastic(0, 2, 0, 2, 0);
  ASSERT_TRUE(q.On(gang::Report{1, FailedReport(1)}).broadcast);
  a = q.On(gang::Joined{.index = 2});
  EXPECT_FALSE(a.broadcast) << "the restart under way takes it in";
  EXPECT_TRUE(q.membership()->spares().empty());
  EXPECT_TRUE(q.On(gang::WorkersDone{false}).restart);
  EXPECT_EQ(q.role().restarts(), 1u) << "the failure counts";
}

wire::Report Leaving(std::uint32_t index) {
  return {.index = index, .ok = false,
          .failure_class = static_cast<std::uint16_t>(FailureClass::kTerminated),
          .reason = "stopped by SIGTERM", .leaving = true};
}

TEST(ElasticPolicyTest, AMemberLeavingAboveMinResizesTheGangWithoutARestart) {
  GangPolicy p = MakeElastic(0, 0, 0, 3, 0);  // no restarts allowed at all
  GangActions a = p.On(gang::Report{2, Leaving(2)});
  EXPECT_TRUE(a.arm_settle_timer) << "leaves close together are decided once";
  EXPECT_EQ(a.leaving, std::vector<std::uint32_t>{2});
  EXPECT_FALSE(a.broadcast);
  a = p.On(gang::Timer{gang::TimerKind::kSettle});
  ASSERT_TRUE(a.broadcast);
  EXPECT_TRUE(a.broadcast->restart);
  EXPECT_EQ(a.broadcast->failure_class, static_cast<std::uint16_t>(FailureClass::kOk));
  EXPECT_EQ(a.broadcast->failed_index, 2u);
  EXPECT_TRUE(a.resize);
  EXPECT_FALSE(a.note_failure) << "a leave is no failure";
  EXPECT_EQ(p.On(gang::Lost{2, "closed"}).lost, std::vector<std::uint32_t>{});
  EXPECT_TRUE(p.On(gang::WorkersDone{false}).restart);
  EXPECT_EQ(p.role().restarts(), 0u) << "a leave is no restart";
}

TEST(ElasticPolicyTest, TheLeaderLeavingSendsTheMembersToItsReplacement) {
  GangPolicy p = MakeElastic(0, 2, 3, 3, 1);
  GangActions a = p.On(gang::StopSignal{SIGTERM});
  ASSERT_TRUE(a.broadcast);
  EXPECT_TRUE(a.broadcast->restart);
  EXPECT_EQ(a.broadcast->failure_class, static_cast<std::uint16_t>(FailureClass::kOk));
  EXPECT_FALSE(a.stop_workers) << "the supervisor forwards the signal itself";
  a = p.On(gang::WorkersDone{false});
  EXPECT_FALSE(a.restart);
  EXPECT_EQ(KindOf(a), Conclusion::Kind::kTerminated);
  GangPolicy m = MakeElastic(1, 2, 3, 3, 1);  // a member hears it
  wire::Stop rejoin = *MakeElastic(0, 2, 3, 3, 1).On(gang::StopSignal{SIGTERM}).broadcast;
  m.On(gang::Stop{rejoin});
  EXPECT_TRUE(m.On(gang::WorkersDone{false}).restart);
  EXPECT_EQ(m.role().restarts(), 1u) << "the count is kept for the replacement leader";
}

TEST(ElasticPolicyTest, ALeaveAtMinStopsTheGangAsBefore) {
  GangPolicy p = MakeElastic(0, 2, 0, 2, 0);
  p.On(gang::Report{1, Leaving(1)});
  GangActions a = p.On(gang::Timer{gang::TimerKind::kSettle});
  ASSERT_TRUE(a.broadcast);
  EXPECT_FALSE(a.broadcast->restart);
  EXPECT_EQ(a.broadcast->failure_class, static_cast<std::uint16_t>(FailureClass::kTerminated));
  EXPECT_EQ(KindOf(p.On(gang::WorkersDone{false})), Conclusion::Kind::kPeerFailed);
}

TEST(ElasticPolicyTest, AFixedGangStopsAtTheLeaveItself) {
  GangPolicy p({.index = 0, .nnodes = 3, .max_restarts = 2});
  p.On(gang::Assigned{.generation = 0});
  GangActions a = p.On(gang::Report{1, Leaving(1)});
  ASSERT_TRUE(a.broadcast) << "no window: nothing could go on";
  EXPECT_FALSE(a.broadcast->restart);
  EXPECT_EQ(a.broadcast->reason, "pod 1: stopped by SIGTERM");
}

TEST(ElasticPolicyTest, TheGangThatSucceededIsThisGenerationsActivePods) {
  // MAX 3, but generation 0 runs with 2: one member's success settles it.
  GangPolicy p = MakeElastic(0, 0, 0, 2, 0);
  p.On(Ok(1));
  GangActions a = p.On(gang::WorkersDone{true});
  ASSERT_TRUE(a.conclude);
  EXPECT_EQ(a.conclude->kind, Conclusion::Kind::kOk);
}


// G12: the restart says whether it counts; the wiring logs and meters by it.
TEST(WiringActionsTest, AFailuresRestartIsCountedAndAJoinsIsNot) {
  GangPolicy p = MakeElastic(0, 2, 0, 2, 0);
  ASSERT_TRUE(p.On(gang::Report{1, FailedReport(1)}).broadcast);
  GangActions a = p.On(gang::WorkersDone{false});
  ASSERT_TRUE(a.restart);
  EXPECT_TRUE(a.counted);
  GangPolicy q = MakeElastic(0, 2, 0, 2, 0);
  ASSERT_TRUE(q.On(gang::Joined{.index = 2}).broadcast);
  a = q.On(gang::WorkersDone{false});
  ASSERT_TRUE(a.restart);
  EXPECT_FALSE(a.counted) << "a join grows the gang: no restart";
}

TEST(WiringActionsTest, AMembersRestartCountsAsTheLeadersStopSays) {
  GangPolicy m = MakeElastic(1, 2, 0, 2, 0);
  wire::Stop grow{.failed_index = 2, .reason = "pod 2 joined: the gang grows", .restart = true,
                  .next_generation = 1, .failure_class = 0};
  m.On(gang::Stop{grow});
  GangActions a = m.On(gang::WorkersDone{false});
  ASSERT_TRUE(a.restart);
  EXPECT_FALSE(a.counted);
  GangPolicy n = MakeElastic(1, 2, 0, 2, 0);
  wire::Stop failed{.failed_index = 2, .reason = "x", .restart = true, .next_generation = 1,
                    .failure_class = static_cast<std::uint16_t>(FailureClass::kWorker)};
  n.On(gang::Stop{failed});
  a = n.On(gang::WorkersDone{false});
  ASSERT_TRUE(a.restart);
  EXPECT_TRUE(a.counted);
}

// G12: the leader's answer to a pod admitted while the generation runs.
TEST(WiringActionsTest, AJoinSaysWhetherThePodWaitsAsASpare) {
  GangPolicy full = MakeElastic(0, 2, 0, 3, 0);
  EXPECT_TRUE(full.On(gang::Joined{.index = 3}).joins_as_spare) << "at MAX: it waits";
  GangPolicy room = MakeElastic(0, 2, 0, 2, 0);
  GangActions a = room.On(gang::Joined{.index = 2});
  EXPECT_TRUE(a.broadcast);
  EXPECT_FALSE(a.joins_as_spare) << "below MAX: the gang grows for it";
  GangPolicy restarting = MakeElastic(0, 2, 0, 2, 0);
  ASSERT_TRUE(restarting.On(gang::Report{1, FailedReport(1)}).broadcast);
  EXPECT_FALSE(restarting.On(gang::Joined{.index = 2}).joins_as_spare)
      << "a next generation is decided: it joins that one";
}


}  // namespace
}  // namespace trainlet::agent
