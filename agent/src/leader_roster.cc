#include "leader_roster.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace trainlet::agent {

LeaderRoster::LeaderRoster(boost::asio::any_io_executor executor, FormationConfig config)
    : config_(config), timer_(std::move(executor)) {}

void LeaderRoster::StartRound(Clock::time_point now, std::function<void()> reconsider) {
  Cancel();
  round_started_ = now;
  min_reached_at_.reset();
  reconsider_ = std::move(reconsider);
}

void LeaderRoster::Cancel() { timer_.cancel(); }

std::set<std::uint32_t> LeaderRoster::Expected() const {
  std::set<std::uint32_t> out;
  for (const auto& [key, m] : roster_) {
    if (!m.lost && !m.must_leave) out.insert(key);
  }
  return out;
}

RoundState LeaderRoster::Round(std::uint32_t joined, Clock::time_point now) const {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  RoundState r{.joined = joined,
               .first = roster_.empty(),
               .since_start = duration_cast<milliseconds>(now - round_started_)};
  for (const auto& [key, m] : roster_) r.alive += (!m.lost && !m.must_leave) ? 1 : 0;
  if (min_reached_at_) r.since_min = duration_cast<milliseconds>(now - *min_reached_at_);
  return r;
}

void LeaderRoster::Recheck(std::chrono::milliseconds after) {
  timer_.expires_after(after);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec && reconsider_) reconsider_();
  });
}

std::optional<std::map<std::uint32_t, std::uint32_t>> LeaderRoster::Plan(
    const std::vector<std::uint32_t>& joined) {
  const Clock::time_point now = Clock::now();
  const auto count = static_cast<std::uint32_t>(joined.size());
  min_reached_at_ = MinReachedAt(min_reached_at_, count, config_, now);
  const FormationDecision d = DecideFormation(Round(count, now), config_);
  if (d.kind == FormationDecision::Kind::kWait) {
    spdlog::debug("leader: {}", d.why);
    Recheck(d.recheck_after);
    return std::nullopt;
  }
  if (d.kind == FormationDecision::Kind::kGiveUp) return std::nullopt;
  // The pods joined, with their last node ranks; the roster's others are not
  // in this round (lost, leaving, or gone while the gang restarted).
  std::vector<MemberState> pods;
  for (std::uint32_t key : joined) {
    MemberState m{.key = key};
    auto it = roster_.find(key);
    if (it != roster_.end() && !it->second.lost && !it->second.must_leave) {
      m.node_rank = it->second.node_rank;
    }
    pods.push_back(m);
  }
  for (const auto& [key, m] : roster_) {
    if (std::find(joined.begin(), joined.end(), key) != joined.end()) continue;
    MemberState absent = m;
    absent.lost = true;
    pods.push_back(absent);
  }
  GenerationPlan plan =
      PlanGeneration(pods, {.min_nodes = config_.min_nodes, .max_nodes = config_.max_nodes});
  if (!plan.ready) return std::nullopt;
  spdlog::debug("leader: the round forms: {}", d.why);
  std::map<std::uint32_t, std::uint32_t> ranks;
  for (std::uint32_t r = 0; r < plan.active.size(); ++r) ranks[plan.active[r]] = r;
  planned_ = std::move(plan);
  return ranks;
}

void LeaderRoster::Adopt(std::uint32_t generation) {
  Cancel();
  if (!planned_) return;
  roster_.clear();
  for (std::uint32_t r = 0; r < planned_->active.size(); ++r) {
    roster_[planned_->active[r]] = {.key = planned_->active[r], .node_rank = r};
  }
  for (std::uint32_t key : planned_->waiting) roster_[key] = {.key = key};
  for (const auto& [left, spare] : planned_->replaced) {
    replacements_.emplace_back(left, spare);
    spdlog::warn("generation {}: spare pod {} takes node rank {} of pod {}", generation, spare,
                 *planned_->NodeRankOf(spare), left);
  }
  waiting_ = std::set<std::uint32_t>(planned_->waiting.begin(), planned_->waiting.end());
  planned_.reset();
}

void LeaderRoster::MarkLost(std::uint32_t index) {
  if (auto it = roster_.find(index); it != roster_.end()) it->second.lost = true;
}

void LeaderRoster::MarkMustLeave(std::uint32_t index) {
  if (auto it = roster_.find(index); it != roster_.end()) it->second.must_leave = true;
}

}  // namespace trainlet::agent
