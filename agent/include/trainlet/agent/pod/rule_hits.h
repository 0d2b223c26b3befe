// trainlet/agent/pod/rule_hits.h — how often each numbered rule of the gang's
// (gang_policy.h, G1-G12) and membership's (membership.h, M1-M16) rule tables
// decided something, for the simulator's coverage report (tests/sim). One
// relaxed atomic increment where a rule decides: no lock, no allocation, no
// effect on what the machines decide. Counters only grow; readers take a copy.
// Thread-safe (relaxed atomics: counts, no ordering).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace trainlet::agent::rule_hits {

inline constexpr std::size_t kGangRules = 12;        // G1..G12
inline constexpr std::size_t kMembershipRules = 16;  // M1..M16

// Index 0 unused: index k counts rule k.
inline std::array<std::atomic<std::uint64_t>, kGangRules + 1> gang{};
inline std::array<std::atomic<std::uint64_t>, kMembershipRules + 1> membership{};

inline void G(std::size_t rule) { gang[rule].fetch_add(1, std::memory_order_relaxed); }
inline void M(std::size_t rule) { membership[rule].fetch_add(1, std::memory_order_relaxed); }

}  // namespace trainlet::agent::rule_hits
