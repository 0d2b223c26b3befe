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

// A fixed gang's first round takes the last call too (formation_policy.h): a
// spare arriving later is admitted while the generation runs (AddJoined).
TEST_F(RosterTest, FirstRoundWithoutTheSpareFormsAfterTheLastCall) {
  Round();
  EXPECT_FALSE(roster_.Plan({0, 1})) << "formed before its last call";
  RunFor(200ms);
  EXPECT_EQ(reconsidered_, 1);
  EXPECT_EQ(roster_.Plan({0, 1}), (Ranks{{0, 0}, {1, 1}}));
  roster_.Adopt(0);
  EXPECT_TRUE(roster_.spares_waiting().empty());
  roster_.AddJoined(2, /*waiting=*/true);  // the spare, late: it waits
  EXPECT_EQ(roster_.spares_waiting(), std::set<std::uint32_t>{2});
  EXPECT_EQ(roster_.Expected(), (std::set<std::uint32_t>{0, 1, 2}));
}

// Elastic --nnodes 2:3: a pod admitted while generation 0 runs with 2 is
// waited for in the next round (no last call cuts it off once it is back) and
// the gang grows to 3, node ranks in index order; a loss then shrinks it.
TEST_F(RosterTest, ElasticJoinGrowsTheNextRoundAndALossShrinksIt) {
  auto round = [this] {
    roster_.StartRound(io_.get_executor(), Roster::Clock::now(),
                       {.min_nodes = 2, .max_nodes = 3, .last_call = 50ms, .timeout = 10s},
                       [this] { ++reconsidered_; });
  };
  round();
  EXPECT_FALSE(roster_.Plan({0, 2})) << "formed before its last call";
  RunFor(200ms);
  EXPECT_EQ(roster_.Plan({0, 2}), (Ranks{{0, 0}, {2, 1}}));
  roster_.Adopt(0);
  roster_.AddJoined(1, /*waiting=*/false);  // joins the next generation
  EXPECT_TRUE(roster_.spares_waiting().empty());
  EXPECT_EQ(roster_.Expected(), (std::set<std::uint32_t>{0, 1, 2}));
  round();
  EXPECT_FALSE(roster_.Plan({0, 2})) << "the joiner is expected: no forming without it at once";
  EXPECT_EQ(roster_.Plan({0, 1, 2}), (Ranks{{0, 0}, {1, 1}, {2, 2}}));  // index order
  roster_.Adopt(1);
  roster_.AddJoined(2, /*waiting=*/false);  // rejoining early: keeps node rank 2
  roster_.MarkLost(1);
  round();
  EXPECT_EQ(roster_.Plan({0, 2}), (Ranks{{0, 0}, {2, 1}}));  // the survivors, at once
  roster_.Adopt(2);
  roster_.MarkLost(2);
  roster_.AddJoined(2, /*waiting=*/true);  // recreated after its loss: a spare, no rank
  EXPECT_EQ(roster_.spares_waiting(), std::set<std::uint32_t>{2});
  EXPECT_EQ(roster_.Expected(), (std::set<std::uint32_t>{0, 2}));
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
            (std::vector<std::pair<std::uint32_t, std::uint32_t>>{{1, 2}}));
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

TEST_F(RosterTest, CancelStopsTheTimer) {
  Round();
  EXPECT_FALSE(roster_.Plan({0, 1}));
  roster_.Cancel();
  RunFor(150ms);
  EXPECT_EQ(reconsidered_, 0);
}

}  // namespace
}  // namespace trainlet::agent
