#include "trainlet/agent/pod/roster.h"

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

void Roster::StartRound(TimePoint now, const FormationConfig& config) {
  formation_ = config;
  round_started_ = now;
  min_reached_at_.reset();
  reconsider_at_.reset();
}

// Whether the round forms at `now` (formation_policy.h); when it waits, it is
// to be asked again at the latest when its last call or deadline comes.
bool Roster::Forms(const std::vector<std::uint32_t>& joined, TimePoint now) {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  const auto count = static_cast<std::uint32_t>(joined.size());
  min_reached_at_ = MinReachedAt(min_reached_at_, count, formation_, now);
  RoundState r{.joined = count,
               .first = pods_.empty(),
               .since_start = duration_cast<milliseconds>(now - round_started_)};
  for (const auto& [key, m] : pods_) {
    if (m.lost || m.must_leave) continue;
    ++r.alive;
    if (std::find(joined.begin(), joined.end(), key) != joined.end()) ++r.alive_back;
  }
  if (min_reached_at_) r.since_min = duration_cast<milliseconds>(now - *min_reached_at_);
  const FormationDecision d = DecideFormation(r, formation_);
  reconsider_at_.reset();
  if (d.kind == FormationDecision::Kind::kForm) return true;
  spdlog::debug("leader: {}", d.why);
  if (d.kind == FormationDecision::Kind::kWait) reconsider_at_ = now + d.recheck_after;
  return false;  // kGiveUp: the pod's rendezvous deadline reports it
}

std::optional<Roster::Ranks> Roster::Plan(const std::vector<std::uint32_t>& joined,
                                          TimePoint now) {
  if (!Forms(joined, now)) return std::nullopt;
  // No generation known here (a replaced leader's first round): the node
  // ranks the hellos say the pods held (M16); else the roster's own.
  static const std::map<std::uint32_t, std::uint32_t> kNone;
  std::vector<MemberState> pods = WithHeldRanks(joined, pods_.empty() ? held_ : kNone);
  for (MemberState& m : pods) {
    auto it = pods_.find(m.key);
    if (it != pods_.end() && !it->second.lost && !it->second.must_leave) {
      m.node_rank = it->second.node_rank;
    }
  }
  for (const auto& [key, m] : pods_) {
    if (std::find(joined.begin(), joined.end(), key) != joined.end()) continue;
    MemberState absent = m;  // not in this round: lost, leaving, or gone while restarting
    absent.lost = true;
    pods.push_back(absent);
  }
  GenerationPlan plan = PlanGeneration(
      pods, {.min_nodes = formation_.min_nodes, .max_nodes = formation_.max_nodes});
  if (!plan.ready) return std::nullopt;
  Ranks ranks;
  for (std::uint32_t r = 0; r < plan.active.size(); ++r) ranks[plan.active[r]] = r;
  planned_ = std::move(plan);
  return ranks;
}

void Roster::Adopt(std::uint32_t generation) {
  EndRound();
  if (!planned_) return;
  adopted_ = generation;
  RecordLeft(generation);
  for (std::uint32_t key : planned_->active) lost_spares_.erase(key);
  for (std::uint32_t key : planned_->waiting) lost_spares_.erase(key);
  pods_.clear();
  for (std::uint32_t r = 0; r < planned_->active.size(); ++r) {
    pods_[planned_->active[r]] = {.key = planned_->active[r], .node_rank = r};
  }
  for (std::uint32_t key : planned_->waiting) pods_[key] = {.key = key};
  for (const auto& [left, spare] : planned_->replaced) {
    const std::uint32_t node_rank = *planned_->NodeRankOf(spare);
    replacements_.push_back(
        {.generation = generation, .node_rank = node_rank, .replaced = left, .spare = spare});
    spdlog::warn("generation {}: spare pod {} takes node rank {} of pod {}", generation, spare,
                 node_rank, left);
  }
  planned_.reset();
}

void Roster::RecordLeft(std::uint32_t generation) {
  for (std::uint32_t key : planned_->active) left_.erase(key);
  for (const auto& [key, m] : pods_) {
    if (!m.lost || !m.node_rank || planned_->NodeRankOf(key)) continue;
    const bool spare_took_it =
        std::any_of(planned_->replaced.begin(), planned_->replaced.end(),
                    [k = key](const auto& r) { return r.first == k; });  // clang 14: no binding capture
    if (spare_took_it) continue;  // LastReplacementOf says who
    left_[key] = generation;
    spdlog::warn("generation {}: pod {} was lost; the gang goes on without it ({} active)",
                 generation, key, planned_->active.size());
  }
}

std::optional<std::uint32_t> Roster::LostSpareIn(std::uint32_t key) const {
  auto it = lost_spares_.find(key);
  if (it == lost_spares_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::uint32_t> Roster::LeftIn(std::uint32_t key) const {
  // Declared lost while active in the generation adopted last (membership.h
  // M3): the next generation goes on without it (M14), also before it forms.
  if (auto p = pods_.find(key); p != pods_.end() && p->second.lost && p->second.node_rank) {
    return adopted_ + 1;
  }
  auto it = left_.find(key);
  if (it == left_.end()) return std::nullopt;
  return it->second;
}

std::set<std::uint32_t> Roster::Unranked() const {
  std::set<std::uint32_t> out;
  for (const auto& [key, m] : pods_) {
    if (!m.node_rank && !m.lost && !m.must_leave) out.insert(key);
  }
  return out;
}

void Roster::AddJoined(std::uint32_t key) {
  // A pod counted alive keeps its place (it came back early for the next round).
  auto it = pods_.find(key);
  if (it == pods_.end() || it->second.lost || it->second.must_leave) pods_[key] = {.key = key};
  lost_spares_.erase(key);  // admitted again: a new pod (a lost one coming back is refused)
}

bool Roster::NewlyActive(std::uint32_t key) const {
  if (!planned_ || !planned_->NodeRankOf(key)) return false;
  auto it = pods_.find(key);
  return it == pods_.end() || !it->second.node_rank;
}

std::optional<std::uint32_t> Roster::PlannedReplacement(std::uint32_t key) const {
  std::vector<MemberState> pods;
  for (const auto& [k, m] : pods_) pods.push_back(m);
  const GenerationPlan plan = PlanGeneration(
      pods, {.min_nodes = formation_.min_nodes, .max_nodes = formation_.max_nodes});
  for (const auto& [left, spare] : plan.replaced) {
    if (left == key) return spare;
  }
  return std::nullopt;
}

std::optional<rendezvous::wire::Replaced> Roster::LastReplacementOf(std::uint32_t key) const {
  for (auto it = replacements_.rbegin(); it != replacements_.rend(); ++it) {
    if (it->replaced == key) {
      return rendezvous::wire::Replaced{
          .spare = it->spare, .node_rank = it->node_rank, .generation = it->generation};
    }
  }
  return std::nullopt;
}

void Roster::OnAdmitted(std::uint32_t index, const rendezvous::wire::Hello& hello) {
  if (hello.node_rank) {
    held_[index] = *hello.node_rank;
  } else {
    held_.erase(index);
  }
}

void Roster::MarkLost(std::uint32_t key, bool waiting_spare) {
  if (auto it = pods_.find(key); it != pods_.end()) it->second.lost = true;
  if (waiting_spare) lost_spares_[key] = adopted_;
}

void Roster::MarkLeaving(std::uint32_t key) {
  if (auto it = pods_.find(key); it != pods_.end()) it->second.must_leave = true;
}

}  // namespace trainlet::agent
