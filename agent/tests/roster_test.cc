// Roster (agent/src/pod/roster.h): the leader's state between rounds over the
// pure policies, with its last-call timer on a real event loop.
#include "../src/pod/roster.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

namespace trainlet::agent {
namespace {

using namespace std::chrono_literals;
using Ranks = std::map<std::uint32_t, std::uint32_t>;

class RosterTest : public ::testing::Test {
 protected:
  boost::asio::io_context io_;  // first: the roster's timer runs on it
  Roster roster_;
  int reconsidered_ = 0;
  // A round of --nnodes 2 --spares 1 with a 50 ms last call.
  void Round() {
    roster_.StartRound(io_.get_executor(), Roster::Clock::now(),
                       {.min_nodes = 2, .max_nodes = 2, .spares = 1, .last_call = 50ms,
                        .timeout = 10s},
                       [this] { ++reconsidered_; });
  }
  void RunFor(std::chrono::milliseconds d) {
    io_.restart();
    io_.run_for(d);
  }
};

TEST_F(RosterTest, WholeGangFormsAtOnceAndTheSpareWaits) {
  Round();
  EXPECT_EQ(roster_.Expected(), std::set<std::uint32_t>{});  // every index, first round
  EXPECT_EQ(roster_.Plan({0, 1, 2}), (Ranks{{0, 0}, {1, 1}}));
  roster_.Adopt(0);
  EXPECT_EQ(roster_.spares_waiting(), std::set<std::uint32_t>{2});
  EXPECT_EQ(roster_.Expected(), (std::set<std::uint32_t>{0, 1, 2}));
}

// A fixed gang's first round has no last call: it waits for the spare until the
// round's deadline (formation_policy.h), then forms with the N pods that came.
TEST_F(RosterTest, FirstRoundWithoutTheSpareWaitsForItUntilTheDeadline) {
  Round();
  EXPECT_FALSE(roster_.Plan({0, 1}));
  RunFor(200ms);  // four last calls
  EXPECT_EQ(reconsidered_, 0);
  EXPECT_FALSE(roster_.Plan({0, 1})) << "formed without the spare before the deadline";
  roster_.StartRound(io_.get_executor(), Roster::Clock::now(),
                     {.min_nodes = 2, .max_nodes = 2, .spares = 1, .last_call = 50ms,
                      .timeout = 100ms},
                     [this] { ++reconsidered_; });
  EXPECT_FALSE(roster_.Plan({0, 1}));
  RunFor(300ms);
  EXPECT_EQ(reconsidered_, 1);
  EXPECT_EQ(roster_.Plan({0, 1}), (Ranks{{0, 0}, {1, 1}}));
}

// A pod gone while the gang restarted (never declared lost: every connection
// closes to rejoin) is not waited for past the last call: the spare takes its rank.
TEST_F(RosterTest, PodGoneInTheRestartWindowIsReplacedAfterTheLastCall) {
  Round();
  ASSERT_TRUE(roster_.Plan({0, 1, 2}));
  roster_.Adopt(0);
  Round();
  EXPECT_FALSE(roster_.Plan({0, 2})) << "formed before its last call";
  RunFor(200ms);
  EXPECT_EQ(reconsidered_, 1);
  EXPECT_EQ(roster_.Plan({0, 2}), (Ranks{{0, 0}, {2, 1}}));
  roster_.Adopt(1);
  EXPECT_EQ(roster_.replacements(),
            (std::vector<Replacement>{{.generation = 1, .node_rank = 1, .replaced = 1, .spare = 2}}));
  EXPECT_TRUE(roster_.spares_waiting().empty());
}

TEST_F(RosterTest, SurvivorsBackFormAtOnceAndALostPodIsReplaced) {
  Round();
  ASSERT_TRUE(roster_.Plan({0, 1, 2}));
  roster_.Adopt(0);
  roster_.MarkLost(1);
  Round();
  EXPECT_EQ(roster_.Expected(), (std::set<std::uint32_t>{0, 2}));
  EXPECT_EQ(roster_.Plan({0, 2}), (Ranks{{0, 0}, {2, 1}}));
  EXPECT_EQ(reconsidered_, 0);
}

// The Stop names the spare the next generation gives the leaving pod's node
// rank: the lowest waiting index; none for a pod that keeps its rank, for a
// waiting spare, or once no spare waits.
TEST_F(RosterTest, PlannedReplacementIsTheLowestWaitingSpare) {
  roster_.StartRound(io_.get_executor(), Roster::Clock::now(),
                     {.min_nodes = 3, .max_nodes = 3, .spares = 2, .timeout = 10s}, [] {});
  ASSERT_EQ(roster_.Plan({0, 1, 2, 3, 4}), (Ranks{{0, 0}, {1, 1}, {2, 2}}));
  roster_.Adopt(0);
  EXPECT_EQ(roster_.PlannedReplacement(2), std::nullopt) << "pod 2 has not left";
  roster_.MarkLeaving(2);
  EXPECT_EQ(roster_.PlannedReplacement(2), std::optional<std::uint32_t>(3));
  EXPECT_EQ(roster_.PlannedReplacement(1), std::nullopt);
  roster_.MarkLost(3);  // the spare meant for it is gone too: the next one
  EXPECT_EQ(roster_.PlannedReplacement(2), std::optional<std::uint32_t>(4));
  EXPECT_EQ(roster_.PlannedReplacement(3), std::nullopt) << "a spare has no rank to hand on";
  roster_.MarkLost(4);
  EXPECT_EQ(roster_.PlannedReplacement(2), std::nullopt) << "no spare left";
}

TEST_F(RosterTest, CancelStopsTheTimer) {
  Round();
  EXPECT_FALSE(roster_.Plan({0, 1}));
  roster_.Cancel();
  RunFor(150ms);
  EXPECT_EQ(reconsidered_, 0);
}

}  // namespace
}  // namespace trainlet::agent
