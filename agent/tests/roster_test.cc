// Roster (trainlet/agent/pod/roster.h): the leader's state between rounds over
// the pure policies. A pure value: every test gives the time as an argument
// (no clock, no loop), and checks when the roster asks to be reconsidered.
#include "trainlet/agent/pod/roster.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include "../src/pod/roster_membership.h"

#include <random>
#include <string>

namespace trainlet::agent {
namespace {

using namespace std::chrono_literals;
using Ranks = Roster::Ranks;
using TimePoint = Roster::TimePoint;

// Any time will do: the roster reads no clock.
constexpr TimePoint kT0{std::chrono::hours(5)};

class RosterTest : public ::testing::Test {
 protected:
  Roster roster_;
  TimePoint now_ = kT0;
  // A round of --nnodes 2 --spares 1 with a 50 ms last call and a 100 ms hold
  // for the survivors (formation_policy.h), starting now.
  void Round() {
    roster_.StartRound(now_, {.min_nodes = 2, .max_nodes = 2, .spares = 1, .last_call = 50ms,
                              .timeout = 10s, .survivor_hold = 100ms});
  }
  // An elastic round of --nnodes 2:3 with the same last call and hold.
  void ElasticRound() {
    roster_.StartRound(now_, {.min_nodes = 2, .max_nodes = 3, .last_call = 50ms, .timeout = 10s,
                              .survivor_hold = 100ms});
  }
  // The round's pods `joined`, asked now.
  std::optional<Ranks> Plan(const std::vector<std::uint32_t>& joined) {
    return roster_.Plan(joined, now_);
  }
  // The time passes until the roster's reconsideration is due (as the
  // wiring's timer would fire); false: none was due.
  bool AtReconsideration() {
    if (!roster_.ReconsiderAt()) return false;
    now_ = *roster_.ReconsiderAt();
    return true;
  }
};

TEST_F(RosterTest, WholeGangFormsAtOnceAndTheSpareWaits) {
  Round();
  EXPECT_EQ(roster_.Expected(), std::set<std::uint32_t>{});  // every index, first round
  EXPECT_EQ(Plan({0, 1, 2}), (Ranks{{0, 0}, {1, 1}}));
  roster_.Adopt(0);
  EXPECT_EQ(roster_.Unranked(), std::set<std::uint32_t>{2});
  EXPECT_EQ(roster_.Expected(), (std::set<std::uint32_t>{0, 1, 2}));
}

// A fixed gang's first round takes the last call too (formation_policy.h): a
// spare arriving later is admitted while the generation runs (AddJoined).
TEST_F(RosterTest, FirstRoundWithoutTheSpareFormsAfterTheLastCall) {
  Round();
  EXPECT_FALSE(Plan({0, 1})) << "formed before its last call";
  ASSERT_TRUE(AtReconsideration());
  EXPECT_EQ(now_, kT0 + 50ms) << "the last call's end";
  EXPECT_EQ(Plan({0, 1}), (Ranks{{0, 0}, {1, 1}}));
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
  ElasticRound();
  EXPECT_FALSE(Plan({0, 2})) << "formed before its last call";
  ASSERT_TRUE(AtReconsideration());
  EXPECT_EQ(Plan({0, 2}), (Ranks{{0, 0}, {2, 1}}));
  roster_.Adopt(0);
  roster_.AddJoined(1);  // joins the next generation (the membership machine's word)
  EXPECT_EQ(roster_.Unranked(), std::set<std::uint32_t>{1}) << "counted, with no node rank";
  EXPECT_EQ(roster_.Expected(), (std::set<std::uint32_t>{0, 1, 2}));
  ElasticRound();
  EXPECT_FALSE(Plan({0, 2})) << "the joiner is expected: no forming without it at once";
  EXPECT_EQ(Plan({0, 1, 2}), (Ranks{{0, 0}, {1, 1}, {2, 2}}));  // index order
  roster_.Adopt(1);
  roster_.AddJoined(2);  // rejoining early: keeps node rank 2
  roster_.MarkLost(1);
  ElasticRound();
  EXPECT_EQ(Plan({0, 2}), (Ranks{{0, 0}, {2, 1}}));  // the survivors, at once
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
  ElasticRound();
  ASSERT_TRUE(Plan({0, 1, 2}));
  roster_.Adopt(0);
  roster_.MarkLost(2);
  ElasticRound();
  ASSERT_EQ(Plan({0, 1}), (Ranks{{0, 0}, {1, 1}}));
  roster_.Adopt(1);
  EXPECT_EQ(roster_.LeftIn(2), std::optional<std::uint32_t>(1));
  EXPECT_EQ(roster_.LeftIn(1), std::nullopt);
  EXPECT_EQ(roster_.LastReplacementOf(2), std::nullopt);
  roster_.AddJoined(2);  // recreated: joins the next generation
  ElasticRound();
  ASSERT_EQ(Plan({0, 1, 2}), (Ranks{{0, 0}, {1, 1}, {2, 2}}));
  roster_.Adopt(2);
  EXPECT_EQ(roster_.LeftIn(2), std::nullopt) << "active again";
  ElasticRound();  // pod 1 does not come back after a restart (never declared lost)
  EXPECT_FALSE(Plan({0, 2}));
  ASSERT_TRUE(AtReconsideration());
  ASSERT_EQ(Plan({0, 2}), (Ranks{{0, 0}, {2, 1}}));
  roster_.Adopt(3);
  EXPECT_EQ(roster_.LeftIn(1), std::nullopt) << "slow, not lost: it may join again";
}

// A pod declared lost while active is left in the next generation before
// that generation forms (admission.h rule 8 refuses it coming back for the
// restart's round: membership.h M3, M14); a recreated pod admitted since
// (AddJoined) is not.
TEST_F(RosterTest, APodLostWhileActiveIsLeftInTheNextGenerationBeforeItForms) {
  ElasticRound();
  ASSERT_TRUE(Plan({0, 1, 2}));
  roster_.Adopt(0);
  EXPECT_EQ(roster_.LeftIn(2), std::nullopt) << "active";
  roster_.MarkLost(2);
  EXPECT_EQ(roster_.LeftIn(2), std::optional<std::uint32_t>(1)) << "lost: generation 1 goes on without it";
  EXPECT_EQ(roster_.LeftIn(1), std::nullopt) << "a survivor";
  ElasticRound();
  EXPECT_EQ(roster_.LeftIn(2), std::optional<std::uint32_t>(1)) << "while the round forms";
  roster_.AddJoined(2);  // recreated, admitted late
  EXPECT_EQ(roster_.LeftIn(2), std::nullopt) << "a new pod at its index";
}

TEST_F(RosterTest, ASpareTakingALostPodsRankIsNoLeaving) {
  Round();
  ASSERT_TRUE(Plan({0, 1, 2}));
  roster_.Adopt(0);
  roster_.MarkLost(1);
  Round();
  ASSERT_EQ(Plan({0, 2}), (Ranks{{0, 0}, {2, 1}}));
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
  ASSERT_TRUE(Plan({0, 1, 2}));
  roster_.Adopt(0);
  roster_.MarkLost(1);  // active, not a spare: the replacement says so
  EXPECT_EQ(roster_.LostSpareIn(1), std::nullopt);
  roster_.MarkLost(2, /*waiting_spare=*/true);  // the membership machine's word (M6)
  EXPECT_EQ(roster_.LostSpareIn(2), std::optional<std::uint32_t>(0));
  roster_.AddJoined(2);  // the Job recreated index 2
  EXPECT_EQ(roster_.LostSpareIn(2), std::nullopt);
  roster_.MarkLost(2, /*waiting_spare=*/true);
  Round();
  ASSERT_EQ(Plan({0, 2}), (Ranks{{0, 0}, {2, 1}}));
  roster_.Adopt(1);
  EXPECT_EQ(roster_.LostSpareIn(2), std::nullopt) << "active in generation 1";
}

// A pod gone while the gang restarted (never declared lost: every connection
// closes to rejoin) may be a survivor still stopping its workers: it holds
// the round past the last call (50 ms) until the survivors' hold (100 ms)
// ends, then the spare takes its rank.
TEST_F(RosterTest, PodGoneInTheRestartWindowIsReplacedAfterTheSurvivorsHold) {
  Round();
  ASSERT_TRUE(Plan({0, 1, 2}));
  roster_.Adopt(0);
  Round();
  EXPECT_FALSE(Plan({0, 2})) << "formed before its last call";
  now_ = kT0 + 70ms;
  EXPECT_FALSE(Plan({0, 2})) << "formed after the last call, within the hold";
  ASSERT_TRUE(AtReconsideration());
  EXPECT_EQ(now_, kT0 + 100ms) << "the survivors' hold's end";
  EXPECT_EQ(Plan({0, 2}), (Ranks{{0, 0}, {2, 1}}));
  roster_.Adopt(1);
  EXPECT_EQ(roster_.replacements(),
            (std::vector<Replacement>{{.generation = 1, .node_rank = 1, .replaced = 1, .spare = 2}}));
  EXPECT_TRUE(roster_.Unranked().empty());
}

TEST_F(RosterTest, SurvivorsBackFormAtOnceAndALostPodIsReplaced) {
  Round();
  ASSERT_TRUE(Plan({0, 1, 2}));
  roster_.Adopt(0);
  roster_.MarkLost(1);
  Round();
  EXPECT_EQ(roster_.Expected(), (std::set<std::uint32_t>{0, 2}));
  EXPECT_EQ(Plan({0, 2}), (Ranks{{0, 0}, {2, 1}}));
  EXPECT_EQ(roster_.ReconsiderAt(), std::nullopt) << "formed: nothing to reconsider";
}

// The assignments of pods that start workers from nothing go out first
// (LeaderMembership::AssignFirst): every pod of the first generation, then only
// the spare taking a lost pod's node rank; not a survivor, a waiting spare,
// or a pod the round leaves out.
TEST_F(RosterTest, NewlyActiveIsTheSpareTakingANodeRank) {
  Round();
  EXPECT_FALSE(roster_.NewlyActive(0)) << "no round formed yet";
  ASSERT_TRUE(Plan({0, 1, 2}));
  EXPECT_TRUE(roster_.NewlyActive(0));
  EXPECT_TRUE(roster_.NewlyActive(1));
  EXPECT_FALSE(roster_.NewlyActive(2)) << "waits as a spare";
  roster_.Adopt(0);
  EXPECT_FALSE(roster_.NewlyActive(0)) << "no round being formed";
  roster_.MarkLost(1);
  Round();
  ASSERT_EQ(Plan({0, 2}), (Ranks{{0, 0}, {2, 1}}));
  EXPECT_FALSE(roster_.NewlyActive(0)) << "a survivor";
  EXPECT_TRUE(roster_.NewlyActive(2)) << "the spare taking node rank 1";
  EXPECT_FALSE(roster_.NewlyActive(1)) << "lost";
}

// The Stop names the spare the next generation gives the leaving pod's node
// rank: the lowest waiting index; none for a pod that keeps its rank, for a
// waiting spare, or once no spare waits.
TEST_F(RosterTest, PlannedReplacementIsTheLowestWaitingSpare) {
  roster_.StartRound(now_, {.min_nodes = 3, .max_nodes = 3, .spares = 2, .timeout = 10s});
  ASSERT_EQ(Plan({0, 1, 2, 3, 4}), (Ranks{{0, 0}, {1, 1}, {2, 2}}));
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
    roster.StartRound(kT0, c);
    std::vector<std::uint32_t> all(n + k);
    for (std::uint32_t i = 0; i < n + k; ++i) all[i] = i;
    ASSERT_TRUE(roster.Plan(all, kT0));
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
    roster.StartRound(kT0, c);
    const std::set<std::uint32_t> back = roster.Expected();
    const auto ranks = roster.Plan(std::vector<std::uint32_t>(back.begin(), back.end()), kT0);
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
  EXPECT_EQ(Plan({0, 1, 2}), (Ranks{{0, 0}, {2, 1}}));
  roster_.Adopt(3);
  EXPECT_EQ(roster_.Unranked(), std::set<std::uint32_t>{1});
  Round();
  rendezvous::wire::Hello lying;
  lying.node_rank = 0;
  roster_.OnAdmitted(1, lying);  // the roster knows better now
  EXPECT_EQ(Plan({0, 1, 2}), (Ranks{{0, 0}, {2, 1}}));
}

// A round that ended without adopting (it failed, the pod stops) wants no
// reconsideration; nor does one that adopted its plan.
TEST_F(RosterTest, AnEndedRoundIsNotReconsidered) {
  Round();
  EXPECT_FALSE(Plan({0, 1}));
  ASSERT_TRUE(roster_.ReconsiderAt());
  roster_.EndRound();
  EXPECT_EQ(roster_.ReconsiderAt(), std::nullopt);
  Round();
  EXPECT_FALSE(Plan({0, 1}));
  ASSERT_TRUE(AtReconsideration());
  ASSERT_TRUE(Plan({0, 1}));
  roster_.Adopt(0);
  EXPECT_EQ(roster_.ReconsiderAt(), std::nullopt);
}

// When the round is to be asked again without a join: torch's last call runs
// from the moment the pod count reached MIN (a count back below MIN forgets
// it), the gang's deadline bounds it (--rdzv-timeout less
// kFormBeforeDeadline, or a tenth of it), and below MIN only the deadline
// itself is due. Each row: the round's settings, the Plans asked (pods
// joined, ms after the round's start), and when the roster wants the round
// reconsidered after the last of them (ms after the start).
struct ReconsiderRow {
  std::string name;
  FormationConfig config;
  std::vector<std::pair<std::vector<std::uint32_t>, int>> plans;
  int reconsider_ms = 0;
};

TEST(RosterReconsiderTest, TheRoundIsReconsideredAtTheLastCallsEndOrTheDeadline) {
  const FormationConfig elastic{.min_nodes = 2, .max_nodes = 3, .last_call = 50ms,
                                .timeout = 10s};
  const FormationConfig spare{.min_nodes = 2, .max_nodes = 2, .spares = 1, .last_call = 50ms,
                              .timeout = 10s};
  const FormationConfig long_call{.min_nodes = 2, .max_nodes = 3, .last_call = 30s,
                                  .timeout = 10s};
  const FormationConfig short_timeout{.min_nodes = 2, .max_nodes = 3, .last_call = 30s,
                                      .timeout = 5s};
  const std::vector<ReconsiderRow> rows = {
      {"MIN reached at the start: the last call ends 50 ms in", elastic, {{{0, 2}, 0}}, 50},
      {"MIN reached 10 ms in: the last call ends at 60 ms", elastic, {{{0}, 0}, {{0, 2}, 10}}, 60},
      {"a later join keeps the last call where MIN was reached", elastic,
       {{{0}, 0}, {{0, 2}, 10}, {{0, 2}, 30}}, 60},
      {"a count back below MIN forgets the last call", elastic,
       {{{0, 2}, 0}, {{0}, 20}, {{0, 1}, 40}}, 90},
      {"a fixed gang's first round without its spare takes the last call", spare,
       {{{0, 1}, 5}}, 55},
      {"below MIN only the deadline is due", elastic, {{{0}, 0}, {{0}, 300}}, 10000},
      {"a last call past the deadline ends a second before it", long_call, {{{0, 1}, 0}}, 9000},
      {"with a short timeout, a tenth of it before the deadline", short_timeout,
       {{{0, 1}, 0}}, 4500},
  };
  for (const ReconsiderRow& row : rows) {
    Roster roster;
    roster.StartRound(kT0, row.config);
    for (const auto& [joined, at_ms] : row.plans) {
      EXPECT_FALSE(roster.Plan(joined, kT0 + std::chrono::milliseconds(at_ms))) << row.name;
    }
    EXPECT_EQ(roster.ReconsiderAt(), kT0 + std::chrono::milliseconds(row.reconsider_ms))
        << row.name;
  }
}

// The round forms exactly when the roster said to reconsider it, not a
// nanosecond before (the timer's word is never early, and asking early
// decides nothing); a round below MIN gives up at its deadline and then
// wants no reconsideration. Each row: the round's settings and pods, the
// Plan asked just before ReconsiderAt, then the one at it.
struct FormsAtRow {
  std::string name;
  FormationConfig config;
  std::vector<std::uint32_t> joined;
  std::optional<Ranks> at;  // the plan at ReconsiderAt; nullopt: gives up
};

TEST(RosterReconsiderTest, APlanFormsExactlyWhenReconsideredNotBefore) {
  const std::vector<FormsAtRow> rows = {
      {"the last call's end",
       {.min_nodes = 2, .max_nodes = 3, .last_call = 50ms, .timeout = 10s},
       {0, 2},
       Ranks{{0, 0}, {2, 1}}},
      {"the form-before-deadline point",
       {.min_nodes = 2, .max_nodes = 3, .last_call = 30s, .timeout = 10s},
       {0, 1},
       Ranks{{0, 0}, {1, 1}}},
      {"the deadline below MIN: it gives up",
       {.min_nodes = 2, .max_nodes = 3, .last_call = 50ms, .timeout = 10s},
       {0},
       std::nullopt},
  };
  for (const FormsAtRow& row : rows) {
    Roster roster;
    roster.StartRound(kT0, row.config);
    ASSERT_FALSE(roster.Plan(row.joined, kT0)) << row.name;
    const std::optional<TimePoint> at = roster.ReconsiderAt();
    ASSERT_TRUE(at) << row.name;
    EXPECT_FALSE(roster.Plan(row.joined, *at - 1ns)) << row.name << ": formed before its time";
    const std::optional<TimePoint> again = roster.ReconsiderAt();
    ASSERT_TRUE(again) << row.name << ": a wait names its next time";
    EXPECT_GE(*again, *at) << row.name << ": asking early moves the time no earlier";
    EXPECT_EQ(roster.Plan(row.joined, *at), row.at) << row.name;
    EXPECT_EQ(roster.ReconsiderAt(), std::nullopt) << row.name << ": decided";
  }
}

// The wiring's side (roster_membership.h), on a real event loop: the timer
// asks the round again at the roster's ReconsiderAt (torch's last call, here
// 50 ms), once; a round that formed, or a Cancel, stops it.
class RosterMembershipTest : public ::testing::Test {
 protected:
  boost::asio::io_context io_;  // first: the adapter's timer is destroyed before its loop
  Roster roster_;
  RosterMembership membership_{io_.get_executor()};
  int reconsidered_ = 0;
  void Round() {
    membership_.StartRound(roster_, Roster::Clock::now(),
                           {.min_nodes = 2, .max_nodes = 2, .spares = 1, .last_call = 50ms,
                            .timeout = 10s},
                           [this] { ++reconsidered_; });
  }
  void RunFor(std::chrono::milliseconds d) {
    io_.restart();
    io_.run_for(d);
  }
};

TEST_F(RosterMembershipTest, TheTimerReconsidersTheRoundOnceAtTheLastCallsEnd) {
  Round();
  EXPECT_FALSE(membership_.Plan({0, 1}));
  RunFor(300ms);  // when exactly: the pure tests above (a loaded host only delays it)
  EXPECT_EQ(reconsidered_, 1);
  EXPECT_EQ(membership_.Plan({0, 1}), (Ranks{{0, 0}, {1, 1}}));
  EXPECT_TRUE(membership_.AssignFirst(1)) << "forwarded: every pod of the first generation";
}

TEST_F(RosterMembershipTest, CancelOrAFormedRoundStopsTheTimer) {
  Round();
  EXPECT_FALSE(membership_.Plan({0, 1}));
  membership_.Cancel();
  RunFor(150ms);
  EXPECT_EQ(reconsidered_, 0) << "cancelled";
  Round();
  EXPECT_FALSE(membership_.Plan({0, 1}));
  EXPECT_TRUE(membership_.Plan({0, 1, 2})) << "the gang is whole";
  RunFor(150ms);
  EXPECT_EQ(reconsidered_, 0) << "formed: nothing to reconsider";
}

}  // namespace
}  // namespace trainlet::agent
