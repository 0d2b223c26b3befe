// roster.h — the leader's roster across generations: which pods it knows,
// their last node ranks, who was lost or must leave, and every replacement.
// The wiring around PlanGeneration (membership_policy.h, which decides): each
// rendezvous round asks Plan() with the pods that joined; the round that
// forms adopts its plan. One event-loop thread (the leader's pod).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "trainlet/agent/pod/membership_policy.h"

namespace trainlet::agent {

class Roster {
 public:
  // The pods the next round waits for: every pod of the roster not lost and
  // not leaving; empty (all indices) before the first generation.
  std::set<std::uint32_t> Expected() const;

  // The round with `joined` (pod keys): their last node ranks and those that
  // left, through PlanGeneration with `sizes`; node rank by key, or nullopt
  // to wait on. The plan is kept for Adopt.
  std::optional<std::map<std::uint32_t, std::uint32_t>> Plan(
      const std::vector<std::uint32_t>& joined, const MembershipConfig& sizes);

  // Generation `generation` formed as last planned: the roster is the plan;
  // who replaced whom is logged. No plan: nothing changes.
  void Adopt(std::uint32_t generation);

  // Pod `key` was lost (silent, or its connection closed); unknown keys are ignored.
  void MarkLost(std::uint32_t key);
  // Pod `key` failed with a class that points at its node: it leaves.
  void MarkLeaving(std::uint32_t key);

  // The pods waiting as spares in the generation adopted last.
  const std::set<std::uint32_t>& spares_waiting() const { return spares_waiting_; }
  // Every replacement so far: (the pod that left, the spare), oldest first.
  const std::vector<std::pair<std::uint32_t, std::uint32_t>>& replacements() const {
    return replacements_;
  }

 private:
  std::map<std::uint32_t, MemberState> pods_;  // by key: the last generation's
  std::optional<GenerationPlan> planned_;      // the round being formed
  std::set<std::uint32_t> spares_waiting_;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> replacements_;
};

}  // namespace trainlet::agent
