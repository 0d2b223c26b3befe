#include "pod/roster.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace trainlet::agent {

std::set<std::uint32_t> Roster::Expected() const {
  std::set<std::uint32_t> out;
  for (const auto& [key, m] : pods_) {
    if (!m.lost && !m.must_leave) out.insert(key);
  }
  return out;
}

std::optional<std::map<std::uint32_t, std::uint32_t>> Roster::Plan(
    const std::vector<std::uint32_t>& joined, const MembershipConfig& sizes) {
  std::vector<MemberState> pods;
  for (std::uint32_t key : joined) {
    MemberState m{.key = key};
    auto it = pods_.find(key);
    if (it != pods_.end() && !it->second.lost && !it->second.must_leave) {
      m.node_rank = it->second.node_rank;
    }
    pods.push_back(m);
  }
  for (const auto& [key, m] : pods_) {
    if (std::find(joined.begin(), joined.end(), key) == joined.end()) pods.push_back(m);
  }
  GenerationPlan plan = PlanGeneration(pods, sizes);
  if (!plan.ready) return std::nullopt;
  std::map<std::uint32_t, std::uint32_t> ranks;
  for (std::uint32_t r = 0; r < plan.active.size(); ++r) ranks[plan.active[r]] = r;
  planned_ = std::move(plan);
  return ranks;
}

void Roster::Adopt(std::uint32_t generation) {
  if (!planned_) return;
  pods_.clear();
  for (std::uint32_t r = 0; r < planned_->active.size(); ++r) {
    pods_[planned_->active[r]] = {.key = planned_->active[r], .node_rank = r};
  }
  for (std::uint32_t key : planned_->waiting) pods_[key] = {.key = key};
  for (const auto& [left, spare] : planned_->replaced) {
    replacements_.emplace_back(left, spare);
    spdlog::warn("generation {}: spare pod {} takes node rank {} of pod {}", generation, spare,
                 *planned_->NodeRankOf(spare), left);
  }
  spares_waiting_ = std::set<std::uint32_t>(planned_->waiting.begin(), planned_->waiting.end());
  planned_.reset();
}

void Roster::MarkLost(std::uint32_t key) {
  if (auto it = pods_.find(key); it != pods_.end()) it->second.lost = true;
}

void Roster::MarkLeaving(std::uint32_t key) {
  if (auto it = pods_.find(key); it != pods_.end()) it->second.must_leave = true;
}

}  // namespace trainlet::agent
