// Roster (agent/src/pod/roster.h): the leader's state between rounds over the
// pure policies, with its last-call timer on a real event loop.
#include "../src/pod/roster.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include <random>

namespace trainlet::agent {
namespace {

using namespace std::chrono_literals;
using Ranks = std::map<std::uint32_t, std::uint32_t>;

class RosterTest : public ::testing::Test {
 protected:
  boost::asio::io_context io_;  // first: the roster's timer runs on it
  Roster roster_;
  int reconsidered_ = 0;
  // A round of --nnodes 2 --spares 1 with a 50 ms last call and a 100 ms hold
  // for the survivors (formation_policy.h).
  void Round() {
    roster_.StartRound(io_.get_executor(), Roster::Clock::now(),
                       {.min_nodes = 2, .max_nodes = 2, .spares = 1, .last_call = 50ms,
                        .timeout = 10s, .survivor_hold = 100ms},
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
  EXPECT_EQ(roster_.Unranked(), std::set<std::uint32_t>{2});
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
  EXPECT_TRUE(roster_.Unranked().empty());
  roster_.AddJoined(2);  // the spare, late: it waits
  EXPECT_EQ(roster_.Unranked(), std::set<std::uint32_t>{2});
  EXPECT_EQ(roster_.Expected(), (std::set<std::uint32_t>{0, 1, 2}));
}

// Elastic --nnodes 2:3: a pod admitted while generation 0 runs with 2 is
// waited for in the next round (no last call cuts it off once it is back) and
// the gang grows to 3, node ranks in index order; a loss then shrinks it.
TEST_F(RosterTest, ElasticJoinGrowsTheNextRoundAndALossShrinksIt) {
  auto round = [this] {
    roster_.StartRound(io_.get_executor(), Roster::Clock::now(),
                       {.min_nodes = 2, .max_nodes = 3, .last_call = 50ms, .timeout = 10s,
                        .survivor_hold = 100ms},
                       [this] { ++reconsidered_; });
  };
  round();
  EXPECT_FALSE(roster_.Plan({0, 2})) << "formed before its last call";
  RunFor(200ms);
  EXPECT_EQ(roster_.Plan({0, 2}), (Ranks{{0, 0}, {2, 1}}));
  roster_.Adopt(0);
  roster_.AddJoined(1);  // joins the next generation (the membership machine's word)
  EXPECT_EQ(roster_.Unranked(), std::set<std::uint32_t>{1}) << "counted, with no node rank";
  EXPECT_EQ(roster_.Expected(), (std::set<std::uint32_t>{0, 1, 2}));
  round();
  EXPECT_FALSE(roster_.Plan({0, 2})) << "the joiner is expected: no forming without it at once";
  EXPECT_EQ(roster_.Plan({0, 1, 2}), (Ranks{{0, 0}, {1, 1}, {2, 2}}));  // index order
  roster_.Adopt(1);
  roster_.AddJoined(2);  // rejoining early: keeps node rank 2
  roster_.MarkLost(1);
  round();
  EXPECT_EQ(roster_.Plan({0, 2}), (Ranks{{0, 0}, {2, 1}}));  // the survivors, at once
  roster_.Adopt(2);
  roster_.MarkLost(2);
  roster_.AddJoined(2);  // recreated after its loss: no rank
  EXPECT_EQ(roster_.Unranked(), std::set<std::uint32_t>{2});
  EXPECT_EQ(roster_.Expected(), (std::set<std::uint32_t>{0, 2}));
}

// Elastic --nnodes 2:3: pod 2, declared lost while active, is left out of
// generation 1 (the gang shrinks): LeftIn says so, for the admission to refuse
// it when it comes back (a frozen pod resumed). A spare's replacement is not
// "left" (LastReplacementOf says who took it), a pod gone in the restart
// window without being declared lost is not either, and a pod active again
// (recreated, joined) is cleared.
TEST_F(RosterTest, ElasticLossIsRecordedAsLeftUntilThePodIsActiveAgain) {
  auto round = [this] {
    roster_.StartRound(io_.get_executor(), Roster::Clock::now(),
                       {.min_nodes = 2, .max_nodes = 3, .last_call = 50ms, .timeout = 10s,
                        .survivor_hold = 100ms},
                       [this] { ++reconsidered_; });
  };
  round();
  ASSERT_TRUE(roster_.Plan({0, 1, 2}));
  roster_.Adopt(0);
  roster_.MarkLost(2);
  round();
  ASSERT_EQ(roster_.Plan({0, 1}), (Ranks{{0, 0}, {1, 1}}));
  roster_.Adopt(1);
  EXPECT_EQ(roster_.LeftIn(2), std::optional<std::uint32_t>(1));
  EXPECT_EQ(roster_.LeftIn(1), std::nullopt);
  EXPECT_EQ(roster_.LastReplacementOf(2), std::nullopt);
  roster_.AddJoined(2);  // recreated: joins the next generation
  round();
  ASSERT_EQ(roster_.Plan({0, 1, 2}), (Ranks{{0, 0}, {1, 1}, {2, 2}}));
  roster_.Adopt(2);
  EXPECT_EQ(roster_.LeftIn(2), std::nullopt) << "active again";
  round();  // pod 1 does not come back after a restart (never declared lost)
  EXPECT_FALSE(roster_.Plan({0, 2}));
  RunFor(200ms);
  ASSERT_EQ(roster_.Plan({0, 2}), (Ranks{{0, 0}, {2, 1}}));
  roster_.Adopt(3);
  EXPECT_EQ(roster_.LeftIn(1), std::nullopt) << "slow, not lost: it may join again";
}

TEST_F(RosterTest, ASpareTakingALostPodsRankIsNoLeaving) {
  Round();
  ASSERT_TRUE(roster_.Plan({0, 1, 2}));
  roster_.Adopt(0);
  roster_.MarkLost(1);
  Round();
  ASSERT_EQ(roster_.Plan({0, 2}), (Ranks{{0, 0}, {2, 1}}));
  roster_.Adopt(1);
  EXPECT_EQ(roster_.LeftIn(1), std::nullopt);
  EXPECT_TRUE(roster_.LastReplacementOf(1));
}

// A waiting spare declared lost (cut off, frozen) is recorded with the
// generation that ran, for the admission to refuse it when it comes back;
// a pod admitted at its index again (recreated) clears it, as does a plan
// that counts the index.
TEST_F(RosterTest, ALostWaitingSpareIsRecordedUntilItsIndexIsAdmittedAgain) {
  Round();
  ASSERT_TRUE(roster_.Plan({0, 1, 2}));
  roster_.Adopt(0);
  roster_.MarkLost(1);  // active, not a spare: the replacement says so
  EXPECT_EQ(roster_.LostSpareIn(1), std::nullopt);
  roster_.MarkLost(2, /*waiting_spare=*/true);  // the membership machine's word (M6)
  EXPECT_EQ(roster_.LostSpareIn(2), std::optional<std::uint32_t>(0));
  roster_.AddJoined(2);  // the Job recreated index 2
  EXPECT_EQ(roster_.LostSpareIn(2), std::nullopt);
  roster_.MarkLost(2, /*waiting_spare=*/true);
  Round();
  ASSERT_EQ(roster_.Plan({0, 2}), (Ranks{{0, 0}, {2, 1}}));
  roster_.Adopt(1);
  EXPECT_EQ(roster_.LostSpareIn(2), std::nullopt) << "active in generation 1";
}

// A pod gone while the gang restarted (never declared lost: every connection
// closes to rejoin) may be a survivor still stopping its workers: it holds
// the round past the last call (50 ms) until the survivors' hold (100 ms)
// ends, then the spare takes its rank.
TEST_F(RosterTest, PodGoneInTheRestartWindowIsReplacedAfterTheSurvivorsHold) {
  Round();
  ASSERT_TRUE(roster_.Plan({0, 1, 2}));
  roster_.Adopt(0);
  Round();
  EXPECT_FALSE(roster_.Plan({0, 2})) << "formed before its last call";
  RunFor(70ms);
  EXPECT_FALSE(roster_.Plan({0, 2})) << "formed after the last call, within the hold";
  RunFor(200ms);
  EXPECT_EQ(reconsidered_, 1);
  EXPECT_EQ(roster_.Plan({0, 2}), (Ranks{{0, 0}, {2, 1}}));
  roster_.Adopt(1);
  EXPECT_EQ(roster_.replacements(),
            (std::vector<Replacement>{{.generation = 1, .node_rank = 1, .replaced = 1, .spare = 2}}));
  EXPECT_TRUE(roster_.Unranked().empty());
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

// The assignments of pods that start workers from nothing go out first
// (LeaderMembership::AssignFirst): every pod of the first generation, then only
// the spare taking a lost pod's node rank; not a survivor, a waiting spare,
// or a pod the round leaves out.
TEST_F(RosterTest, NewlyActiveIsTheSpareTakingANodeRank) {
  Round();
  EXPECT_FALSE(roster_.NewlyActive(0)) << "no round formed yet";
  ASSERT_TRUE(roster_.Plan({0, 1, 2}));
  EXPECT_TRUE(roster_.NewlyActive(0));
  EXPECT_TRUE(roster_.NewlyActive(1));
  EXPECT_FALSE(roster_.NewlyActive(2)) << "waits as a spare";
  roster_.Adopt(0);
  EXPECT_FALSE(roster_.NewlyActive(0)) << "no round being formed";
  roster_.MarkLost(1);
  Round();
  ASSERT_EQ(roster_.Plan({0, 2}), (Ranks{{0, 0}, {2, 1}}));
  EXPECT_FALSE(roster_.NewlyActive(0)) << "a survivor";
  EXPECT_TRUE(roster_.NewlyActive(2)) << "the spare taking node rank 1";
  EXPECT_FALSE(roster_.NewlyActive(1)) << "lost";
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

// Property: when every pod the roster still counts alive comes back, the
// generation that forms gives the leaving (or lost) member's node rank to
// exactly the spare PlannedReplacement named at the stop; with no spare
// waiting it names none. Random gangs of 2..6 active pods and 0..3 spares.
TEST_F(RosterTest, PlannedReplacementIsTheOneTheNextGenerationMakes) {
  std::mt19937 rng(7);
  for (int round = 0; round < 300; ++round) {
    const std::uint32_t n = 2 + rng() % 5, k = rng() % 4;
    const FormationConfig c{.min_nodes = n, .max_nodes = n, .spares = k, .timeout = 10s};
    Roster roster;
    roster.StartRound(io_.get_executor(), Roster::Clock::now(), c, [] {});
    std::vector<std::uint32_t> all(n + k);
    for (std::uint32_t i = 0; i < n + k; ++i) all[i] = i;
    ASSERT_TRUE(roster.Plan(all));
    roster.Adopt(0);
    std::set<std::uint32_t> gone;  // a few spares lost first, then one member leaves
    for (std::uint32_t spare = n; spare < n + k; ++spare) {
      if (rng() % 3 == 0) {
        roster.MarkLost(spare);
        gone.insert(spare);
      }
    }
    const std::uint32_t victim = 1 + rng() % (n - 1);
    if (rng() % 2 == 0) roster.MarkLost(victim); else roster.MarkLeaving(victim);
    const std::optional<std::uint32_t> planned = roster.PlannedReplacement(victim);
    roster.StartRound(io_.get_executor(), Roster::Clock::now(), c, [] {});
    const std::set<std::uint32_t> back = roster.Expected();
    const auto ranks = roster.Plan(std::vector<std::uint32_t>(back.begin(), back.end()));
    if (back.size() < n) {  // no spare left: the gang cannot keep its size
      EXPECT_FALSE(planned) << "round " << round;
      continue;
    }
    ASSERT_TRUE(ranks) << "round " << round;
    ASSERT_TRUE(planned) << "round " << round;
    EXPECT_FALSE(gone.contains(*planned));
    EXPECT_EQ(ranks->at(*planned), victim) << "round " << round << ": node rank of the victim";
    roster.Adopt(1);
    ASSERT_EQ(roster.replacements().size(), 1u);
    EXPECT_EQ(roster.replacements()[0].spare, *planned);
    EXPECT_EQ(roster.replacements()[0].replaced, victim);
  }
}

// membership.h M16: a replaced leader (a fresh roster) keeps each survivor on
// the node rank its hello says it held; once a generation formed, the
// roster's own ranks decide and the hellos' word is ignored.
TEST_F(RosterTest, AReplacedLeadersFirstRoundKeepsTheSurvivorsHeldRanks) {
  Round();
  rendezvous::wire::Hello spare_now_active;
  spare_now_active.node_rank = 1;  // spare 2 took pod 1's rank under the old leader
  roster_.OnAdmitted(2, spare_now_active);
  roster_.OnAdmitted(1, rendezvous::wire::Hello{});  // pod 1 recreated: held none
  EXPECT_EQ(roster_.Plan({0, 1, 2}), (Ranks{{0, 0}, {2, 1}}));
  roster_.Adopt(3);
  EXPECT_EQ(roster_.Unranked(), std::set<std::uint32_t>{1});
  Round();
  rendezvous::wire::Hello lying;
  lying.node_rank = 0;
  roster_.OnAdmitted(1, lying);  // the roster knows better now
  EXPECT_EQ(roster_.Plan({0, 1, 2}), (Ranks{{0, 0}, {2, 1}}));
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
