// leader_roster.h — the leader pod's roster across generations, for hot spares
// (--spares) and elastic sizes: what a rendezvous round waits for, when it
// forms (formation_policy.h: torch's last call) and who takes which node rank
// (membership_policy.h). The decisions are those pure functions; this class
// only keeps their state between rounds and owns the round's timer.
//
// Thread rules: every method runs on the agent's event loop (the executor
// given at construction), as does the `reconsider` callback.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "trainlet/agent/formation_policy.h"
#include "trainlet/agent/membership_policy.h"

namespace trainlet::agent {

class LeaderRoster {
 public:
  using Clock = std::chrono::steady_clock;
  LeaderRoster(boost::asio::any_io_executor executor, FormationConfig config);

  // A rendezvous round starts at `now`: the last call is forgotten and
  // `reconsider` (asks the leader to call Plan again: Leader::Reconsider) runs
  // when the round is due to be decided again without a join.
  void StartRound(Clock::time_point now, std::function<void()> reconsider);
  // Stops the round's timer (the round formed, failed, or the pod stops).
  void Cancel();

  // LeaderOptions::expected: the pods the round waits for (every pod of the
  // roster not lost and not leaving); empty (every index) before the first.
  std::set<std::uint32_t> Expected() const;

  // LeaderOptions::plan: for the indices joined (0 first), each active pod's
  // node rank once the round forms (the rest wait as spares); nullopt while it
  // waits for pods or for its last call (the timer then reconsiders), or when
  // it gave up below MIN (the pod's rendezvous deadline reports that).
  std::optional<std::map<std::uint32_t, std::uint32_t>> Plan(
      const std::vector<std::uint32_t>& joined);
  // The round formed as planned: the roster is the plan; logs who replaced whom.
  void Adopt(std::uint32_t generation);

  // The leader declared pod `index` lost (outside a restart), or it must leave
  // (its failure points at its node: hardware).
  void MarkLost(std::uint32_t index);
  void MarkMustLeave(std::uint32_t index);

  // The spares waiting in the generation that formed last, and every
  // (replaced, spare) pair so far.
  const std::set<std::uint32_t>& waiting() const { return waiting_; }
  const std::vector<std::pair<std::uint32_t, std::uint32_t>>& replacements() const {
    return replacements_;
  }

 private:
  RoundState Round(std::uint32_t joined, Clock::time_point now) const;
  void Recheck(std::chrono::milliseconds after);

  FormationConfig config_;
  boost::asio::steady_timer timer_;
  std::function<void()> reconsider_;
  Clock::time_point round_started_{};
  std::optional<Clock::time_point> min_reached_at_;
  std::map<std::uint32_t, MemberState> roster_;  // the last generation's pods, by index
  std::optional<GenerationPlan> planned_;
  std::set<std::uint32_t> waiting_;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> replacements_;
};

}  // namespace trainlet::agent
