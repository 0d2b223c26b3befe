// Table tests of the contract checker: each rule fires on a run that breaks
// it, and a run that keeps the contract passes.
#include "invariants.h"

#include <gtest/gtest.h>

namespace trainlet::invariants {
namespace {

using K = Record::Kind;

Record Start(std::uint32_t inst, std::uint32_t pod, std::int64_t t = 0) {
  return {.kind = K::kStart, .t_ms = t, .inst = inst, .pod = pod};
}
Record Form(std::uint32_t g, std::vector<std::uint32_t> ranks, std::uint32_t restarts = 0,
            std::uint32_t leader = 0) {
  const auto world = static_cast<std::uint32_t>(ranks.size());
  return {.kind = K::kForm, .inst = leader, .generation = g, .world = world,
          .restarts = restarts, .ranks = std::move(ranks)};
}
Record Gen(std::uint32_t inst, std::uint32_t pod, std::uint32_t g, std::uint32_t rank,
           std::uint32_t world, std::uint32_t restarts = 0) {
  return {.kind = K::kGen, .inst = inst, .pod = pod, .generation = g, .rank = rank,
          .world = world, .restarts = restarts};
}
Record Exit(std::uint32_t inst, int code, std::int64_t t = 1000) {
  return {.kind = K::kExit, .t_ms = t, .inst = inst, .code = code};
}
Record Fault(std::uint32_t inst, std::string what) {
  return {.kind = K::kFault, .inst = inst, .what = std::move(what)};
}

// A gang of two that ran generation 0 (restarts as given) and optionally more records.
std::vector<std::string> Check(const std::vector<Record>& extra, Contract c = {.min_nodes = 2,
                                                                              .max_nodes = 2,
                                                                              .max_restarts = 1}) {
  Checker k(c);
  for (const Record& r : {Start(0, 0), Start(1, 1), Form(0, {0, 1}), Gen(0, 0, 0, 0, 2),
                          Gen(1, 1, 0, 1, 2)}) {
    k.On(r);
  }
  for (const Record& r : extra) k.On(r);
  k.Finish(1000);
  return k.violations();
}

bool Has(const std::vector<std::string>& v, std::string_view rule) {
  for (const auto& s : v) {
    if (s.rfind(rule, 0) == 0 && s.size() > rule.size() && s[rule.size()] == ':') return true;
  }
  return false;
}

TEST(InvariantsTest, AGangThatSucceedsKeepsTheContract) {
  EXPECT_TRUE(Check({Exit(1, 0), Exit(0, 0)}).empty());
}

TEST(InvariantsTest, I1RankTwice) {
  EXPECT_TRUE(Has(Check({Gen(2, 2, 0, 1, 2), Exit(0, 0), Exit(1, 0), Exit(2, 0)}), "I1"));
}

TEST(InvariantsTest, I2RankBeyondWorldSize) {
  EXPECT_TRUE(Has(Check({Start(2, 2), Gen(2, 2, 0, 2, 2), Exit(0, 0), Exit(1, 0), Exit(2, 0)}),
                  "I2"));
}

TEST(InvariantsTest, I3RestartCountDiffersFromThePlan) {
  EXPECT_TRUE(Has(Check({Fault(1, "fail"), Form(1, {0, 1}, 1), Gen(0, 0, 1, 0, 2, 1),
                         Gen(1, 1, 1, 1, 2, 0), Exit(0, 0), Exit(1, 0)}),
                  "I3"));
}

TEST(InvariantsTest, I4RestartsBeyondMaxRestarts) {
  EXPECT_TRUE(Has(Check({Fault(1, "fail"), Form(1, {0, 1}, 1), Fault(1, "fail"),
                         Form(2, {0, 1}, 2), Exit(0, 0), Exit(1, 0)}),
                  "I4"));
}

TEST(InvariantsTest, I5ARestartCountedForAJoinOnly) {
  EXPECT_TRUE(Has(Check({Form(1, {0, 1}, 1), Exit(0, 0), Exit(1, 0)}), "I5"));
  EXPECT_FALSE(Has(Check({Fault(1, "fail"), Form(1, {0, 1}, 1), Exit(0, 0), Exit(1, 0)}), "I5"));
}

TEST(InvariantsTest, I6APodDeclaredLostIsActiveAgain) {
  const Contract elastic{.min_nodes = 1, .max_nodes = 2, .max_restarts = 1};
  EXPECT_TRUE(Has(Check({Fault(1, "cut"), {.kind = K::kLost, .inst = 1, .pod = 1},
                         Form(1, {0, 1}, 1), Exit(0, 0), Exit(1, 0)},
                        elastic),
                  "I6"));
  // A fixed gang without spares restarts in place on the same pods.
  EXPECT_FALSE(Has(Check({Fault(1, "cut"), {.kind = K::kLost, .inst = 1, .pod = 1},
                          Form(1, {0, 1}, 1), Exit(0, 0), Exit(1, 0)}),
                   "I6"));
}

TEST(InvariantsTest, I8EveryPodEnds) {
  EXPECT_TRUE(Has(Check({Exit(0, 0)}), "I8"));
  EXPECT_TRUE(Has(Check({Exit(0, 0), Exit(1, 300)}), "I8"));
}

TEST(InvariantsTest, I9TwoCountedExitsForOneFailure) {
  EXPECT_TRUE(Has(Check({Fault(1, "fail"), Exit(1, 1), Exit(0, 75)}), "I9"));
  EXPECT_FALSE(Has(Check({Fault(1, "fail"), Exit(1, 1), Exit(0, 76)}), "I9"));
  // README: below MIN the gang waits up to --rdzv-timeout, then every pod exits 75.
  Record timeout = Exit(0, 75);
  timeout.what = "rdzv_timeout";
  EXPECT_FALSE(Has(Check({Fault(1, "fail"), Exit(1, 1), timeout}), "I9"));
}

TEST(InvariantsTest, I10AFailedGangWithoutACountedExit) {
  EXPECT_TRUE(Has(Check({Fault(1, "fail"), Exit(1, 76), Exit(0, 76)}), "I10"));
  // A cut link: every pod exits 76, no counted exit (README).
  EXPECT_FALSE(Has(Check({Fault(1, "cut"), Exit(1, 76), Exit(0, 76)}), "I10"));
}

TEST(InvariantsTest, I11SigtermFirstMeans143) {
  const Record term{.kind = K::kSignal, .inst = 1, .pod = 1, .what = "term"};
  EXPECT_TRUE(Has(Check({term, Exit(1, 76), Exit(0, 0)}), "I11"));
  EXPECT_FALSE(Has(Check({term, Exit(1, 143), Exit(0, 0)}), "I11"));
  EXPECT_FALSE(Has(Check({Fault(0, "fail"), term, Exit(1, 76), Exit(0, 1)}), "I11"));
}

TEST(InvariantsTest, I12DeadlinesOfTheRoundAndTheGrace) {
  Checker k({.min_nodes = 2, .max_nodes = 2, .rdzv_timeout_ms = 1000, .grace_ms = 1000,
             .slack_ms = 100});
  k.On(Start(0, 0));
  k.On({.kind = K::kSignal, .t_ms = 500, .inst = 0, .pod = 0, .what = "term"});
  k.On(Exit(0, 143, 1200));  // within the grace period, but past the round's deadline
  EXPECT_TRUE(Has(k.violations(), "I12"));
}

TEST(InvariantsTest, I13AStrangerGetsARank) {
  EXPECT_TRUE(Has(Check({{.kind = K::kStart, .inst = 2, .pod = 1, .stranger = true},
                         Gen(2, 1, 0, 1, 2), Exit(0, 0), Exit(1, 0), Exit(2, 75)}),
                  "I13"));
}

}  // namespace
}  // namespace trainlet::invariants
