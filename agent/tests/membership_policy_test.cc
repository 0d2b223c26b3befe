// MembershipPolicy (membership_policy.h): hot spares and MIN:MAX as one pure
// function. Examples first (each rule), then properties over random rosters
// and random chains of generations (losses, hardware failures, joins):
//   - a generation never has two pods on one node rank, and ranks are dense;
//   - no pod declared lost (or that must leave) is active or waiting;
//   - pod 0 is node rank 0;
//   - MIN <= active <= MAX, and every eligible pod is active or waiting;
//   - rank order is key (index) order, except where a spare took the rank of
//     a pod that left (then the pods that stayed kept theirs);
//   - a pod that stays keeps its node rank while the size is unchanged.
#include "trainlet/agent/pod/membership_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

namespace trainlet::agent {
namespace {

MemberState Fresh(std::uint32_t key) { return {.key = key}; }
MemberState Active(std::uint32_t key, std::uint32_t rank) { return {.key = key, .node_rank = rank}; }
MemberState Lost(std::uint32_t key, std::uint32_t rank) {
  return {.key = key, .node_rank = rank, .lost = true};
}

TEST(MembershipPolicy, FirstGenerationRanksFollowIndicesNotJoinOrder) {
  auto p = PlanGeneration({Fresh(2), Fresh(0), Fresh(1)}, {.min_nodes = 2, .max_nodes = 2});
  ASSERT_TRUE(p.ready);
  EXPECT_EQ(p.active, (std::vector<std::uint32_t>{0, 1}));
  EXPECT_EQ(p.waiting, (std::vector<std::uint32_t>{2}));
}

TEST(MembershipPolicy, SpareTakesTheLostPodsRankOthersKeepTheirs) {
  // 5 pods, N=4, K=1: pod 1 (rank 1) lost; spare 4 takes rank 1; 2 and 3 stay on 2, 3.
  auto p = PlanGeneration({Active(0, 0), Lost(1, 1), Active(2, 2), Active(3, 3), Fresh(4)},
                          {.min_nodes = 4, .max_nodes = 4});
  ASSERT_TRUE(p.ready);
  EXPECT_EQ(p.active, (std::vector<std::uint32_t>{0, 4, 2, 3}));
  EXPECT_TRUE(p.waiting.empty());
  EXPECT_EQ(p.replaced, (std::vector<std::pair<std::uint32_t, std::uint32_t>>{{1, 4}}));
}

// membership.h M16: a replaced leader's first round knows no generation of
// its own; the survivors' hellos say where they were.
TEST(MembershipPolicy, ReplacedLeadersFirstRoundKeepsTheRanksTheSurvivorsHeld) {
  // N=2, K=1: spare 2 took pod 1's rank 1 earlier; pod 1, recreated, waits.
  const std::vector<std::uint32_t> joined{0, 1, 2};
  auto kept = PlanGeneration(WithHeldRanks(joined, {{2, 1}}), {.min_nodes = 2, .max_nodes = 2});
  ASSERT_TRUE(kept.ready);
  EXPECT_EQ(kept.active, (std::vector<std::uint32_t>{0, 2})) << "pod 2 keeps node rank 1";
  EXPECT_EQ(kept.waiting, (std::vector<std::uint32_t>{1}));
  EXPECT_TRUE(kept.replaced.empty());
  // Without the hellos' word (an older peer): dense in index order, as before.
  auto dense = PlanGeneration(WithHeldRanks(joined, {}), {.min_nodes = 2, .max_nodes = 2});
  EXPECT_EQ(dense.active, (std::vector<std::uint32_t>{0, 1}));
}

TEST(MembershipPolicy, HeldRanksThatDisagreeAreRenumbered) {
  // Two pods say they held rank 1: inconsistent, so the plan numbers by index.
  auto p = PlanGeneration(WithHeldRanks({0, 1, 2}, {{1, 1}, {2, 1}}),
                          {.min_nodes = 2, .max_nodes = 2});
  ASSERT_TRUE(p.ready);
  EXPECT_EQ(p.active, (std::vector<std::uint32_t>{0, 1}));
  // A rank past MAX (the gang was larger) is no place either.
  auto q = PlanGeneration(WithHeldRanks({0, 3}, {{3, 5}}), {.min_nodes = 2, .max_nodes = 2});
  ASSERT_TRUE(q.ready);
  EXPECT_EQ(q.active, (std::vector<std::uint32_t>{0, 3}));
}

TEST(MembershipPolicy, TheLeaderIsOnRankZeroOnlyWhenSomePodHeldARank) {
  auto held = WithHeldRanks({0, 4}, {{4, 1}});
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(held[0].node_rank, std::optional<std::uint32_t>(0));
  EXPECT_EQ(held[1].node_rank, std::optional<std::uint32_t>(1));
  auto none = WithHeldRanks({0, 4}, {});
  EXPECT_FALSE(none[0].node_rank.has_value());
  EXPECT_FALSE(none[1].node_rank.has_value());
}

TEST(MembershipPolicy, LowestSpareFirstAndHardwareLeaves) {
  MemberState hw = Active(2, 2);
  hw.must_leave = true;
  auto p = PlanGeneration({Active(0, 0), Active(1, 1), hw, Fresh(6), Fresh(5)},
                          {.min_nodes = 3, .max_nodes = 3});
  ASSERT_TRUE(p.ready);
  EXPECT_EQ(p.active, (std::vector<std::uint32_t>{0, 1, 5}));
  EXPECT_EQ(p.waiting, (std::vector<std::uint32_t>{6}));
  EXPECT_EQ(p.replaced, (std::vector<std::pair<std::uint32_t, std::uint32_t>>{{2, 5}}));
}

TEST(MembershipPolicy, ElasticGrowsAndShrinksInIndexOrder) {
  // --nnodes 2:3: a third pod joins -> 3 active, dense by index.
  auto grow = PlanGeneration({Active(0, 0), Active(2, 1), Fresh(1)}, {.min_nodes = 2, .max_nodes = 3});
  ASSERT_TRUE(grow.ready);
  EXPECT_EQ(grow.active, (std::vector<std::uint32_t>{0, 1, 2}));
  EXPECT_TRUE(grow.replaced.empty());
  // One lost -> 2 remain.
  auto shrink = PlanGeneration({Active(0, 0), Lost(1, 1), Active(2, 2)},
                               {.min_nodes = 2, .max_nodes = 3});
  ASSERT_TRUE(shrink.ready);
  EXPECT_EQ(shrink.active, (std::vector<std::uint32_t>{0, 2}));
}

TEST(MembershipPolicy, BelowMinWaits) {
  auto p = PlanGeneration({Active(0, 0), Lost(1, 1), Lost(2, 2)}, {.min_nodes = 2, .max_nodes = 3});
  EXPECT_FALSE(p.ready);
  EXPECT_NE(p.why.find("at least 2"), std::string::npos) << p.why;
  EXPECT_TRUE(p.active.empty());
}

TEST(MembershipPolicy, NoLeaderNoGeneration) {
  auto p = PlanGeneration({Fresh(1), Fresh(2)}, {.min_nodes = 1, .max_nodes = 2});
  EXPECT_FALSE(p.ready);
  EXPECT_NE(p.why.find("pod 0"), std::string::npos);
}

TEST(MembershipPolicy, StayersArePreferredOverNewcomersWhenFull) {
  // MAX 2: pod 0 and 3 ran; pod 1 (a lower index) arrives: it waits, no reshuffle.
  auto p = PlanGeneration({Active(0, 0), Active(3, 1), Fresh(1)}, {.min_nodes = 2, .max_nodes = 2});
  ASSERT_TRUE(p.ready);
  EXPECT_EQ(p.active, (std::vector<std::uint32_t>{0, 3}));
  EXPECT_EQ(p.waiting, (std::vector<std::uint32_t>{1}));
}

TEST(MembershipPolicy, DuplicateKeyCountsOnce) {
  auto p = PlanGeneration({Fresh(0), Fresh(1), Fresh(1)}, {.min_nodes = 1, .max_nodes = 3});
  ASSERT_TRUE(p.ready);
  EXPECT_EQ(p.active, (std::vector<std::uint32_t>{0, 1}));
}

// ---- Properties ----

void CheckPlan(const std::vector<MemberState>& pods, const MembershipConfig& c,
               const GenerationPlan& p, const std::string& ctx) {
  std::set<std::uint32_t> eligible, gone, keys;
  std::map<std::uint32_t, std::optional<std::uint32_t>> before;
  for (const auto& m : pods) {
    if (!keys.insert(m.key).second) continue;
    before[m.key] = m.node_rank;
    (m.lost || m.must_leave ? gone : eligible).insert(m.key);
  }
  if (!p.ready) {
    EXPECT_TRUE(eligible.size() < c.min_nodes || !eligible.contains(0)) << ctx;
    return;
  }
  ASSERT_FALSE(p.active.empty()) << ctx;
  EXPECT_EQ(p.active[0], 0u) << ctx;
  std::set<std::uint32_t> active(p.active.begin(), p.active.end());
  EXPECT_EQ(active.size(), p.active.size()) << "a pod on two ranks: " << ctx;
  EXPECT_GE(p.active.size(), std::min<std::size_t>(c.min_nodes, eligible.size())) << ctx;
  EXPECT_LE(p.active.size(), std::max<std::uint32_t>(1, c.max_nodes)) << ctx;
  for (auto k : p.active) EXPECT_FALSE(gone.contains(k)) << "lost pod active: " << k << " " << ctx;
  for (auto k : p.waiting) {
    EXPECT_FALSE(gone.contains(k)) << ctx;
    EXPECT_FALSE(active.contains(k)) << ctx;
  }
  EXPECT_EQ(active.size() + p.waiting.size(), eligible.size()) << ctx;
  // Rank order is key order, or else every pod that stays kept its rank and
  // the others took free ranks as spares.
  bool kept = true;
  for (std::size_t r = 0; r < p.active.size(); ++r) {
    const auto& b = before[p.active[r]];
    if (b.has_value() && *b != r) kept = false;
  }
  EXPECT_TRUE(std::is_sorted(p.active.begin(), p.active.end()) || kept)
      << "rank order is neither index order nor kept ranks: " << ctx;
  for (auto [left, spare] : p.replaced) {
    EXPECT_TRUE(gone.contains(left)) << ctx;
    EXPECT_TRUE(active.contains(spare)) << ctx;
    EXPECT_FALSE(before[spare].has_value()) << ctx;
    EXPECT_EQ(p.NodeRankOf(spare), before[left]) << "the spare has not the rank it replaced: " << ctx;
  }
}

TEST(MembershipPolicyProperty, RandomRosters) {
  for (std::uint32_t seed = 1; seed <= 3000; ++seed) {
    std::mt19937 rng_engine(seed);
    auto rng = [&] { return static_cast<std::uint32_t>(rng_engine()); };
    const std::uint32_t n = 1 + rng() % 8;
    const std::uint32_t lo = 1 + rng() % n;
    MembershipConfig c{.min_nodes = lo, .max_nodes = lo + rng() % 4};
    std::vector<MemberState> pods;
    std::vector<std::uint32_t> ranks(n);
    for (std::uint32_t r = 0; r < n; ++r) ranks[r] = r;
    std::shuffle(ranks.begin() + 1, ranks.end(), rng_engine);
    const bool previous = rng() % 2;
    for (std::uint32_t k = 0; k < n + rng() % 4; ++k) {
      MemberState m{.key = k * (1 + rng() % 2)};
      if (previous && k < n && k * 1 == m.key) m.node_rank = ranks[k];
      m.lost = m.key != 0 && rng() % 5 == 0;
      m.must_leave = m.key != 0 && rng() % 9 == 0;
      pods.push_back(m);
    }
    std::shuffle(pods.begin(), pods.end(), rng_engine);
    CheckPlan(pods, c, PlanGeneration(pods, c), "seed " + std::to_string(seed));
  }
}

// Chains of generations as the leader would run them: each plan's ranks are
// the next roster's, with losses, hardware failures and joins between.
TEST(MembershipPolicyProperty, ChainsOfGenerations) {
  for (std::uint32_t seed = 1; seed <= 500; ++seed) {
    std::mt19937 rng_engine(seed);
    auto rng = [&] { return static_cast<std::uint32_t>(rng_engine()); };
    const std::uint32_t lo = 1 + rng() % 4;
    MembershipConfig c{.min_nodes = lo, .max_nodes = lo + rng() % 3};
    std::vector<MemberState> pods;
    std::uint32_t next_key = 0;
    for (std::uint32_t i = 0; i < c.max_nodes + rng() % 3; ++i) pods.push_back(Fresh(next_key++));
    for (int gen = 0; gen < 12; ++gen) {
      std::shuffle(pods.begin(), pods.end(), rng_engine);
      const std::string ctx = "seed " + std::to_string(seed) + " gen " + std::to_string(gen);
      GenerationPlan p = PlanGeneration(pods, c);
      CheckPlan(pods, c, p, ctx);
      // The next roster: who remains, with this plan's ranks; some lost or leaving, some new.
      std::vector<MemberState> next;
      for (const auto& m : pods) {
        if (m.lost || m.must_leave) continue;
        MemberState s{.key = m.key, .node_rank = p.ready ? p.NodeRankOf(m.key) : m.node_rank};
        if (s.key != 0 && rng() % 6 == 0) s.lost = true;
        if (s.key != 0 && rng() % 11 == 0) s.must_leave = true;
        next.push_back(s);
      }
      for (std::uint32_t j = rng() % 3; j > 0; --j) next.push_back(Fresh(next_key++));
      pods = std::move(next);
    }
  }
}

}  // namespace
}  // namespace trainlet::agent
