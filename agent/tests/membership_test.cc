// The membership machine's rule table (membership.h): one test per rule, named
// after what the rule says.
#include "trainlet/agent/pod/membership.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "roster_form.h"

namespace trainlet::agent {
namespace {

using exitcodes::FailureClass;
using End = MembershipActions::End;
namespace ev = member_event;

// --nnodes min:max --max-restarts r --spares k, generation 0 running with
// `active` pods (0: max) and `spares` waiting, `restarts` counted.
Membership Make(std::uint32_t min, std::uint32_t max, std::uint32_t r, std::uint32_t k = 0,
                std::uint32_t active = 0, std::set<std::uint32_t> spares = {},
                std::uint32_t restarts = 0) {
  Membership m({.min_nodes = min, .max_nodes = max, .max_restarts = r, .spares = k});
  // The spares waiting are the roster's (the plan the wiring adopted).
  roster_testing::FormRoster(m.roster(), roster_testing::ActiveBeside(active != 0 ? active : max, spares),
                      spares);
  m.On(ev::Formed{.generation = 0, .active = active, .restarts = restarts});
  return m;
}

TEST(MembershipRules, M1_ARestartNeedsARestartableClassBudgetLeftAndNoStopSignal) {
  EXPECT_TRUE(RestartAllowed(FailureClass::kWorker, 0, 1, false));
  EXPECT_TRUE(RestartAllowed(FailureClass::kInfra, 0, 1, false));
  EXPECT_TRUE(RestartAllowed(FailureClass::kOom, 0, 1, false));
  EXPECT_TRUE(RestartAllowed(FailureClass::kPeerFailed, 0, 1, false));
  EXPECT_FALSE(RestartAllowed(FailureClass::kWorker, 1, 1, false)) << "budget spent";
  EXPECT_FALSE(RestartAllowed(FailureClass::kWorker, 0, 1, true)) << "after a stop signal";
  for (FailureClass c : {FailureClass::kBug, FailureClass::kConfig, FailureClass::kHardware,
                         FailureClass::kTerminated, FailureClass::kOk}) {
    EXPECT_FALSE(RestartAllowed(c, 0, 5, false)) << static_cast<int>(c);
  }
}

TEST(MembershipRules, M2_ACountedRestartRaisesTheCountAndAResizeKeepsIt) {
  Membership m = Make(2, 3, 3, 0, 3, {}, 1);
  EXPECT_EQ(m.On(ev::Failed{.key = 1}).next_restarts, 2u);
  Membership r = Make(2, 3, 3, 0, 3, {}, 1);
  r.On(ev::Leaving{.key = 2});
  const MembershipActions a = r.On(ev::SettleEnded{});
  EXPECT_EQ(a.end, End::kResize);
  EXPECT_EQ(a.next_restarts, 1u);
}

TEST(MembershipRules, M3_AMemberFailureOrLossWithBudgetLeftRestartsInPlace) {
  Membership m = Make(3, 3, 1);
  const MembershipActions lost = m.On(ev::Lost{.key = 2});
  EXPECT_EQ(lost.lost, std::vector<std::uint32_t>{2}) << "never active again";
  EXPECT_EQ(lost.end, End::kNone) << "the failure path decides";
  const MembershipActions a = m.On(ev::Failed{.key = 2, .failure_class = FailureClass::kInfra});
  EXPECT_EQ(a.end, End::kRestart);
  EXPECT_TRUE(m.decided());
}

TEST(MembershipRules, M4_AHardwareFailureWithASpareWaitingSwapsTheSpareIn) {
  Membership m = Make(2, 2, 1, 1, 2, {2});
  const MembershipActions a = m.On(ev::Failed{.key = 1, .failure_class = FailureClass::kHardware});
  EXPECT_EQ(a.end, End::kRestart);
  EXPECT_EQ(a.next_restarts, 1u) << "a failure: counted";
  EXPECT_EQ(a.leaving, std::vector<std::uint32_t>{1});
  Membership none = Make(2, 2, 1);
  EXPECT_EQ(none.On(ev::Failed{.key = 1, .failure_class = FailureClass::kHardware}).end,
            End::kStop) << "no spare: hardware is no restartable class";
  Membership spent = Make(2, 2, 1, 1, 2, {2}, 1);
  EXPECT_EQ(spent.On(ev::Failed{.key = 1, .failure_class = FailureClass::kHardware}).end,
            End::kStop) << "no budget left";
}

TEST(MembershipRules, M5_ABudgetSpentAClassNoRestartFixesOrASuccessStopsTheGang) {
  EXPECT_EQ(Make(2, 2, 0).On(ev::Failed{.key = 1}).end, End::kStop);
  EXPECT_EQ(Make(2, 2, 3).On(ev::Failed{.key = 1, .failure_class = FailureClass::kBug}).end,
            End::kStop);
  EXPECT_EQ(Make(2, 2, 3).On(ev::Failed{.key = 1, .succeeded = true}).end, End::kStop);
  EXPECT_EQ(Make(2, 2, 3).On(ev::Failed{.key = 0, .stopped = true}).end, End::kStop);
}

TEST(MembershipRules, M6_TheLossOfAWaitingSpareEndsNoGeneration) {
  Membership m = Make(2, 2, 1, 1, 2, {2});
  const MembershipActions a = m.On(ev::Lost{.key = 2});
  EXPECT_EQ(a.end, End::kNone);
  EXPECT_EQ(a.lost, std::vector<std::uint32_t>{2});
  EXPECT_EQ(a.lost_spares, std::vector<std::uint32_t>{2}) << "the roster records a lost spare";
  EXPECT_TRUE(m.spares().empty());
  EXPECT_FALSE(m.decided());
}

// The machine keeps the one copy of who waits: a lost active member is no lost spare.
TEST(MembershipRules, M6_OnlyAWaitingSparesLossIsALostSpare) {
  Membership m = Make(2, 2, 1, 1, 2, {2});
  const MembershipActions a = m.On(ev::Lost{.key = 1});
  EXPECT_EQ(a.lost, std::vector<std::uint32_t>{1});
  EXPECT_TRUE(a.lost_spares.empty());
  EXPECT_EQ(m.spares(), std::set<std::uint32_t>{2});
}

TEST(MembershipRules, M7_LeavesWithinTheSettleWindowAreDecidedOnce) {
  Membership m = Make(2, 4, 0, 0, 4);
  MembershipActions a = m.On(ev::Leaving{.key = 3});
  EXPECT_TRUE(a.arm_settle) << "the first leave opens the window";
  EXPECT_EQ(a.end, End::kNone);
  EXPECT_EQ(a.leaving, std::vector<std::uint32_t>{3});
  a = m.On(ev::Leaving{.key = 1});
  EXPECT_FALSE(a.arm_settle) << "one window";
  a = m.On(ev::SettleEnded{});
  EXPECT_EQ(a.end, End::kResize) << "4 - 2 = MIN: one resize";
  EXPECT_EQ(a.subject, std::optional<std::uint32_t>(3)) << "the Stop names the first leaver";
  EXPECT_EQ(m.On(ev::SettleEnded{}).end, End::kNone) << "decided once";
}

TEST(MembershipRules, M8_ASpareTakesTheLeaversNodeRankWithoutARestart) {
  Membership m = Make(2, 2, 0, 1, 2, {2});
  m.On(ev::Leaving{.key = 1});
  const MembershipActions a = m.On(ev::SettleEnded{});
  EXPECT_EQ(a.end, End::kSwap);
  EXPECT_EQ(a.next_restarts, 0u) << "no restart, even with none allowed";
  Membership elastic = Make(2, 3, 0, 0, 3, {4});  // at MAX, pod 4 waits
  elastic.On(ev::Leaving{.key = 2});
  EXPECT_EQ(elastic.On(ev::SettleEnded{}).end, End::kSwap);
}

TEST(MembershipRules, M9_AnElasticGangAboveMinGoesOnWithoutTheLeavers) {
  Membership m = Make(2, 3, 0, 0, 3);
  m.On(ev::Leaving{.key = 2});
  const MembershipActions a = m.On(ev::SettleEnded{});
  EXPECT_EQ(a.end, End::kResize);
  EXPECT_EQ(a.next_restarts, 0u);
  EXPECT_NE(a.why.find("goes on with 2 pods"), std::string::npos) << a.why;
}

TEST(MembershipRules, M10_AFixedGangShortOfSparesOrAGangBelowMinStops) {
  Membership fixed = Make(3, 3, 5);
  const MembershipActions now = fixed.On(ev::Leaving{.key = 2});
  EXPECT_EQ(now.end, End::kStop) << "no spare configured: decided at the leave";
  EXPECT_FALSE(now.arm_settle);
  Membership at_min = Make(2, 3, 5, 0, 2);
  at_min.On(ev::Leaving{.key = 1});
  EXPECT_EQ(at_min.On(ev::SettleEnded{}).end, End::kStop);
  Membership two_for_one = Make(2, 2, 5, 1, 2, {3});  // a fixed gang: two leave, one spare
  two_for_one.On(ev::Leaving{.key = 1});
  two_for_one.On(ev::Leaving{.key = 2});
  EXPECT_EQ(two_for_one.On(ev::SettleEnded{}).end, End::kStop);
}

TEST(MembershipRules, M11_TheLeaderLeavingHasTheMembersWaitForItsReplacement) {
  Membership elastic = Make(2, 3, 0, 0, 3);
  const MembershipActions a = elastic.On(ev::LeaderLeaving{});
  EXPECT_EQ(a.end, End::kRejoin);
  EXPECT_EQ(a.next_restarts, 0u);
  Membership spares = Make(2, 2, 0, 1, 2, {2});
  EXPECT_EQ(spares.On(ev::LeaderLeaving{}).end, End::kRejoin);
  Membership fixed = Make(2, 2, 3);
  EXPECT_EQ(fixed.On(ev::LeaderLeaving{}).end, End::kStop) << "today's contract";
}

TEST(MembershipRules, M12_AFailureDecidesAtOnceInTheSettleWindowAndIsCollateralAfterAnEnd) {
  Membership m = Make(2, 3, 2, 0, 3);
  m.On(ev::Leaving{.key = 2});
  EXPECT_EQ(m.On(ev::Failed{.key = 1}).end, End::kRestart);
  EXPECT_EQ(m.On(ev::SettleEnded{}).end, End::kNone) << "the failure decided";
  EXPECT_EQ(m.leaving(), std::set<std::uint32_t>{2}) << "the leaver stays out";
  Membership grown = Make(2, 3, 2, 0, 2);
  ASSERT_EQ(grown.On(ev::Joined{.key = 2}).end, End::kResize);
  EXPECT_EQ(grown.On(ev::Failed{.key = 1}).end, End::kNone)
      << "after the end is decided, collateral: every pod counts the same";
}

TEST(MembershipRules, M13_AJoinBelowMaxGrowsTheGangElseItWaitsAsASpare) {
  Membership m = Make(2, 3, 0, 0, 2);
  const MembershipActions a = m.On(ev::Joined{.key = 2});
  EXPECT_EQ(a.end, End::kResize);
  EXPECT_EQ(a.next_restarts, 0u);
  EXPECT_EQ(a.subject, std::optional<std::uint32_t>(2));
  Membership full = Make(2, 3, 0, 0, 3);
  const MembershipActions w = full.On(ev::Joined{.key = 3});
  EXPECT_TRUE(w.joins_as_spare);
  EXPECT_EQ(full.spares(), std::set<std::uint32_t>{3});
  Membership failed = Make(2, 3, 1, 0, 2);
  failed.On(ev::Failed{.key = 1});
  const MembershipActions n = failed.On(ev::Joined{.key = 2});
  EXPECT_FALSE(n.joins_as_spare) << "it joins the restart's generation";
  EXPECT_EQ(n.end, End::kNone);
  Membership closed = Make(2, 3, 1, 0, 2);
  EXPECT_TRUE(closed.On(ev::Joined{.key = 2, .open = false}).joins_as_spare);
}

TEST(MembershipRules, M14_AConnectionClosingAfterTheNextGenerationIsDecidedIsNoLoss) {
  Membership m = Make(2, 3, 1, 0, 3);
  m.On(ev::Failed{.key = 2});
  EXPECT_EQ(m.On(ev::Lost{.key = 1}), MembershipActions{}) << "it closes to rejoin";
  Membership leave = Make(2, 3, 1, 0, 3);
  leave.On(ev::Leaving{.key = 2});
  EXPECT_TRUE(leave.On(ev::Lost{.key = 2}).lost.empty()) << "a leaver closing after its word";
  EXPECT_EQ(leave.On(ev::Lost{.key = 1}).lost, std::vector<std::uint32_t>{1});
}

TEST(MembershipRules, M15_TheAssignmentsCountIsKeptAcrossAReplacedLeader) {
  Membership fresh({.min_nodes = 2, .max_nodes = 3, .max_restarts = 3});
  EXPECT_EQ(fresh.restarts(), 0u);
  fresh.On(ev::Formed{.generation = 7, .active = 3, .restarts = 2});  // the members' count
  EXPECT_EQ(fresh.restarts(), 2u);
  EXPECT_EQ(fresh.generation(), 7u);
  EXPECT_EQ(fresh.On(ev::Failed{.key = 1}).next_restarts, 3u);
  Membership spent({.min_nodes = 2, .max_nodes = 3, .max_restarts = 3});
  spent.On(ev::Formed{.generation = 9, .active = 3, .restarts = 3});
  EXPECT_EQ(spent.On(ev::Failed{.key = 1}).end, End::kStop) << "the budget continues too";
}

// The machine holds the leader's one roster and marks it as it decides (the
// wiring relays nothing): a lost member and a leaver are no longer expected
// in the next round, a lost spare is recorded for the admission (rule 8), a
// joiner is counted unranked, and the spares of a generation that forms are
// the roster's unranked pods. Each row: the events after generation 0 formed
// with pods 0 and 1 active and spare 2 waiting (--nnodes 2:3 --spares 1),
// then what the roster holds.
struct RosterRow {
  std::string name;
  std::vector<MembershipEvent> events;
  std::set<std::uint32_t> expected;   // Roster::Expected
  std::set<std::uint32_t> unranked;   // Roster::Unranked
  std::optional<std::uint32_t> lost_spare_of_2;  // Roster::LostSpareIn(2)
};

TEST(MembershipRoster, TheMachinesWordIsMarkedOnItsRoster) {
  const std::vector<RosterRow> rows = {
      {"nothing happened", {}, {0, 1, 2}, {2}, std::nullopt},
      {"a lost member", {ev::Lost{.key = 1}}, {0, 2}, {2}, std::nullopt},
      {"a lost spare", {ev::Lost{.key = 2}}, {0, 1}, {}, 0},
      {"a spare lost once the end is decided is a rejoin",
       {ev::Failed{.key = 1}, ev::Lost{.key = 2}}, {0, 1, 2}, {2}, std::nullopt},
      {"a leaver", {ev::Leaving{.key = 1}}, {0, 2}, {2}, std::nullopt},
      {"a hardware failure with a spare waiting",
       {ev::Failed{.key = 1, .failure_class = FailureClass::kHardware}}, {0, 2}, {2},
       std::nullopt},
      {"a joiner, the gang growing", {ev::Joined{.key = 3}}, {0, 1, 2, 3}, {2, 3},
       std::nullopt},
  };
  for (const RosterRow& row : rows) {
    Membership m = Make(2, 3, 1, 1, 2, {2});
    for (const MembershipEvent& e : row.events) m.On(e);
    EXPECT_EQ(m.roster().Expected(), row.expected) << row.name;
    EXPECT_EQ(m.roster().Unranked(), row.unranked) << row.name;
    EXPECT_EQ(m.roster().LostSpareIn(2), row.lost_spare_of_2) << row.name;
  }
}

TEST(MembershipRoster, AGenerationsSparesAreTheRostersUnrankedPods) {
  Membership m({.min_nodes = 2, .max_nodes = 2, .max_restarts = 1, .spares = 2});
  m.roster().StartRound(Roster::TimePoint{}, {.min_nodes = 2, .max_nodes = 2, .spares = 2});
  ASSERT_TRUE(m.roster().Plan({0, 1, 2, 3}, Roster::TimePoint{}));
  m.roster().Adopt(0);
  m.On(ev::Formed{.generation = 0, .active = 2});
  EXPECT_EQ(m.spares(), (std::set<std::uint32_t>{2, 3}));
  m.On(ev::Lost{.key = 3});
  EXPECT_EQ(m.spares(), std::set<std::uint32_t>{2});
  EXPECT_EQ(m.roster().Unranked(), std::set<std::uint32_t>{2}) << "one copy, the same word";
}

}  // namespace
}  // namespace trainlet::agent
