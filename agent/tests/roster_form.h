// A leader's roster put in a given state through its own API, for the tests of
// the machines that hold it (membership.h, gang_policy.h): the roster's
// generation ran with `active` on node ranks in key order, and `waiting` wait
// as spares (admitted since: Roster::AddJoined), as after the wiring adopted a
// round's plan. The roster's history (replacements, leavers) starts over.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

#include "trainlet/agent/pod/roster.h"

namespace trainlet::agent::roster_testing {

inline void FormRoster(Roster& roster, std::vector<std::uint32_t> active,
                       const std::set<std::uint32_t>& waiting, std::uint32_t generation = 0) {
  roster = Roster{};
  const auto n = static_cast<std::uint32_t>(active.size());
  const Roster::TimePoint t0{};
  roster.StartRound(t0, {.min_nodes = n, .max_nodes = n});
  roster.Plan(active, t0);  // the gang is whole: it forms at once
  roster.Adopt(generation);
  for (std::uint32_t key : waiting) roster.AddJoined(key);
}

// The first `n` keys not in `waiting`: the active pods beside those spares.
inline std::vector<std::uint32_t> ActiveBeside(std::uint32_t n,
                                               const std::set<std::uint32_t>& waiting) {
  std::vector<std::uint32_t> active;
  for (std::uint32_t key = 0; active.size() < n; ++key) {
    if (!waiting.contains(key)) active.push_back(key);
  }
  return active;
}

}  // namespace trainlet::agent::roster_testing
