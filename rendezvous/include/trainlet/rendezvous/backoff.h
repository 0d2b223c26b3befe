// trainlet/rendezvous/backoff.h — capped exponential backoff with jitter.
//
// A `Backoff` yields the delays between retries of an operation that fails for
// environmental reasons (NXDOMAIN while the leader pod is still being scheduled,
// connection refused, ...). Delays grow from `initial` by `multiplier` up to
// `cap`, are randomised so that a gang of pods does not retry in lock step, and
// always lie in [min_delay, cap]. Randomness is injected (a seed or a uniform
// source) so tests are deterministic.
//
// Thread rules: a plain value type with no internal locking. One instance
// belongs to one retry loop; copies are independent.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <string_view>

#include "trainlet/exitcodes/status.h"

namespace trainlet::rendezvous {

// How a delay is drawn from the exponential ceiling
// `ceil(n) = min(cap, initial * multiplier^n)` of attempt n (0-based).
// See https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/.
enum class Jitter {
  kNone,           // ceil(n): deterministic, for tests and tools.
  kFull,           // uniform in [min_delay, ceil(n)].
  kEqual,          // uniform in [ceil(n)/2, ceil(n)]: never below half the ceiling.
  kDecorrelated,   // uniform in [initial, 3 * previous delay], capped; ignores multiplier.
};

// Stable lower-case name ("none", "full", "equal", "decorrelated").
std::string_view JitterName(Jitter j);

struct BackoffOptions {
  std::chrono::milliseconds initial{100};   // ceiling of the first delay; > 0.
  std::chrono::milliseconds cap{2000};      // no delay is longer; >= initial.
  // No delay is shorter; 0 < min_delay <= initial. Bounds the retry rate of a
  // loop to 1000/min_delay per second even with full jitter.
  std::chrono::milliseconds min_delay{50};
  double multiplier = 2.0;                  // growth per attempt; in [1, 16].
  // The default keeps every delay at the cap in [cap/2, cap] = [1 s, 2 s], so a
  // pod that keeps retrying sends at most one attempt per second.
  Jitter jitter = Jitter::kEqual;
};

// OK, or a kConfig Status naming the first field out of range.
[[nodiscard]] exitcodes::Status ValidateBackoffOptions(const BackoffOptions& options);

class Backoff {
 public:
  // Returns a number uniformly distributed in [0, 1). Values outside are clamped.
  using UniformSource = std::function<double()>;

  // Draws jitter from a std::mt19937_64 seeded with `seed`: the same seed gives
  // the same delays on every platform. Precondition: ValidateBackoffOptions(options)
  // is OK; otherwise the process aborts (a broken invariant, not an input error).
  Backoff(BackoffOptions options, std::uint64_t seed);

  // Draws jitter from `uniform` (must be non-null), e.g. a fixed value in tests.
  // Same precondition as above.
  Backoff(BackoffOptions options, UniformSource uniform);

  // The delay to wait before the next attempt, in [min_delay, cap]. Advances
  // the attempt counter. Never blocks.
  [[nodiscard]] std::chrono::milliseconds Next();

  // Starts over from `initial`, e.g. after a success or a state change. The
  // random stream is not rewound.
  void Reset();

  // How many times Next() was called since construction or the last Reset().
  [[nodiscard]] int attempts() const { return attempts_; }

  [[nodiscard]] const BackoffOptions& options() const { return options_; }

 private:
  double Uniform();

  BackoffOptions options_;
  UniformSource uniform_;       // Set when injected; otherwise engine_ is used.
  std::mt19937_64 engine_;
  int attempts_ = 0;
  double ceiling_ms_ = 0;       // ceil(attempts_) before it is capped, in ms.
  double previous_ms_ = 0;      // The last delay, for kDecorrelated, in ms.
};

}  // namespace trainlet::rendezvous
