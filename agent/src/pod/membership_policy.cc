#include "trainlet/agent/pod/membership_policy.h"
#include "trainlet/agent/pod/rule_hits.h"

#include <algorithm>
#include <map>
#include <set>

namespace trainlet::agent {

namespace {

// Pods that may be active, by key (first entry of a key wins), and the node
// ranks of the generation that just ended (kept or free).
struct Pool {
  std::map<std::uint32_t, const MemberState*> eligible;  // by key: ascending
  std::set<std::uint32_t> seen;
  std::uint32_t previous_size = 0;  // active pods in the generation that ended
};

Pool MakePool(const std::vector<MemberState>& pods) {
  Pool p;
  std::set<std::uint32_t> ranks;
  for (const MemberState& m : pods) {
    if (!p.seen.insert(m.key).second) continue;
    if (m.node_rank) ranks.insert(*m.node_rank);
    if (!m.lost && !m.must_leave) p.eligible.emplace(m.key, &m);
  }
  p.previous_size = static_cast<std::uint32_t>(ranks.size());
  return p;
}

// Same size as before: those who stay keep their ranks, spares fill the gaps.
bool KeepRanks(const Pool& p, std::uint32_t size, GenerationPlan* plan,
               const std::vector<MemberState>& pods) {
  std::vector<std::optional<std::uint32_t>> by_rank(size);
  for (const auto& [key, m] : p.eligible) {
    if (!m->node_rank) continue;
    if (*m->node_rank >= size || by_rank[*m->node_rank]) return false;  // inconsistent input
    by_rank[*m->node_rank] = key;
  }
  // Who held each free rank before (for `replaced`).
  std::map<std::uint32_t, std::uint32_t> left;
  std::set<std::uint32_t> seen;
  for (const MemberState& m : pods) {
    if (seen.insert(m.key).second && m.node_rank && !p.eligible.contains(m.key)) {
      left.emplace(*m.node_rank, m.key);
    }
  }
  auto spare = p.eligible.begin();
  for (std::uint32_t r = 0; r < size; ++r) {
    if (by_rank[r]) continue;
    while (spare != p.eligible.end() && spare->second->node_rank) ++spare;
    if (spare == p.eligible.end()) return false;
    by_rank[r] = spare->first;
    if (auto it = left.find(r); it != left.end()) plan->replaced.emplace_back(it->second, spare->first);
    ++spare;
  }
  for (const auto& k : by_rank) plan->active.push_back(*k);
  return plan->active.empty() || plan->active[0] == 0;  // the leader stays on rank 0
}

// A new size: the leader, those who stay, then newcomers, each by key; then dense by key.
void Renumber(const Pool& p, std::uint32_t size, GenerationPlan* plan) {
  std::vector<std::uint32_t> chosen{0};  // the leader, always (PlanGeneration checked it)
  for (int stayers = 1; stayers >= 0; --stayers) {
    for (const auto& [key, m] : p.eligible) {
      if (chosen.size() == size) break;
      if (key != 0 && m->node_rank.has_value() == (stayers == 1)) chosen.push_back(key);
    }
  }
  std::sort(chosen.begin(), chosen.end());
  plan->active = std::move(chosen);
}

}  // namespace

std::optional<std::uint32_t> GenerationPlan::NodeRankOf(std::uint32_t key) const {
  auto it = std::find(active.begin(), active.end(), key);
  if (it == active.end()) return std::nullopt;
  return static_cast<std::uint32_t>(it - active.begin());
}

std::vector<MemberState> WithHeldRanks(const std::vector<std::uint32_t>& joined,
                                       const std::map<std::uint32_t, std::uint32_t>& held) {
  std::vector<MemberState> pods;
  const bool any = std::any_of(joined.begin(), joined.end(),
                               [&held](std::uint32_t key) { return held.contains(key); });
  if (any) rule_hits::M(16);
  for (std::uint32_t key : joined) {
    MemberState m{.key = key};
    if (auto it = held.find(key); it != held.end()) m.node_rank = it->second;
    if (key == 0 && any) m.node_rank = 0;  // the leader's pod hosts rank 0's store
    pods.push_back(m);
  }
  return pods;
}

GenerationPlan PlanGeneration(const std::vector<MemberState>& pods, const MembershipConfig& c) {
  GenerationPlan plan;
  const Pool pool = MakePool(pods);
  const auto available = static_cast<std::uint32_t>(pool.eligible.size());
  if (!pool.eligible.contains(0)) {
    plan.why = "pod 0 (the leader) is not in the gang";
    return plan;
  }
  if (available < c.min_nodes) {
    plan.why = std::to_string(available) + " pod(s) available, at least " +
               std::to_string(c.min_nodes) + " needed";
    return plan;
  }
  const std::uint32_t size = std::max<std::uint32_t>(1, std::min(available, c.max_nodes));
  if (size != pool.previous_size || !KeepRanks(pool, size, &plan, pods)) {
    plan.replaced.clear();
    Renumber(pool, size, &plan);
  }
  for (const auto& [key, m] : pool.eligible) {
    if (!plan.NodeRankOf(key)) plan.waiting.push_back(key);
  }
  plan.ready = true;
  return plan;
}

}  // namespace trainlet::agent
