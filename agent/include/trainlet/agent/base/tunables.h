// trainlet/agent/base/tunables.h — the agent front end's defaults and limits, each
// written once, with its unit and why. The rendezvous's timings live in
// trainlet/rendezvous/tunables.h.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string_view>
#include <utility>

#include "trainlet/exitcodes/ports.h"
#include "trainlet/rendezvous/tunables.h"

namespace trainlet::agent {

// The leader's rendezvous port when none is given, and the JAX coordinator port
// handed to the workers: the default ports' one home is trainlet/exitcodes/ports.h.
inline constexpr std::uint16_t kDefaultRdzvPort = exitcodes::ports::kRendezvous;
inline constexpr std::uint16_t kDefaultJaxPort = exitcodes::ports::kJaxCoordinator;

// Seconds between forwarding SIGTERM and SIGKILL: a few below Kubernetes'
// default terminationGracePeriodSeconds of 30 (README "Grace period").
inline constexpr std::chrono::seconds kDefaultGrace{25};

// Seconds to find the leader and form the gang (--rdzv-timeout), in a pod and
// under `trainlet local` (one machine: a gang that has not formed in a minute
// never will).
inline constexpr std::chrono::seconds kDefaultRdzvTimeout{600};
inline constexpr std::chrono::seconds kLocalRdzvTimeout{60};

// Seconds a rendezvous round waits for more pods once MIN are in (--rdzv-conf
// last_call_timeout): torch's RendezvousTimeout default "last_call"
// (torch/distributed/elastic/rendezvous/dynamic_rendezvous.py).
inline constexpr std::chrono::seconds kDefaultLastCall{30};
// With MIN pods joined, a round forms this long before its deadline at the
// latest (a tenth of --rdzv-timeout when that is shorter), so its assignments
// reach the members before their own deadline ends the wait: a last call that
// would end with the deadline (the defaults: 30 s each) forms instead of
// timing out (formation_policy.h).
inline constexpr std::chrono::milliseconds kFormBeforeDeadline{1000};

// `trainlet local` gives its agents their own grace period plus this before
// SIGKILL: each agent first stops its own workers.
inline constexpr std::chrono::seconds kLocalAgentExtraGrace{2};

// Seconds for the GPU preflight's NCCL init and all-reduces (--preflight-timeout).
inline constexpr std::chrono::seconds kDefaultPreflightTimeout{60};

// Upper bounds on counts a user writes: pods in a gang (an Indexed Job's
// completions are far below) and workers per pod.
inline constexpr std::uint32_t kMaxPods = 1'000'000;
inline constexpr std::uint32_t kMaxWorkersPerPod = 1024;
// `trainlet local` runs its whole gang on one machine.
inline constexpr std::uint32_t kMaxLocalPods = 4096;

// A tunable as the decimal text a flag's default is written in (flags.cc),
// made at compile time so the number is written only above.
template <std::uint64_t N>
struct DecimalText {
  static constexpr auto kDigits = [] {
    std::array<char, 21> out{};
    std::uint64_t n = N;
    std::size_t len = 0;
    do {
      out[len++] = static_cast<char>('0' + n % 10);
      n /= 10;
    } while (n != 0);
    for (std::size_t i = 0; i < len / 2; ++i) std::swap(out[i], out[len - 1 - i]);
    return std::pair{out, len};
  }();
  static constexpr std::string_view value{kDigits.first.data(), kDigits.second};
};
template <std::uint64_t N>
inline constexpr std::string_view kDecimal = DecimalText<N>::value;

}  // namespace trainlet::agent
