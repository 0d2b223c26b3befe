#include "trainlet/rendezvous/backoff.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <utility>

namespace trainlet::rendezvous {
namespace {

// A construction with invalid options is a programming error (options come from
// constants or from a config layer that validated them), so abort loudly.
void CheckOrDie(const BackoffOptions& options) {
  exitcodes::Status s = ValidateBackoffOptions(options);
  if (!s.ok()) {
    std::fprintf(stderr, "trainlet: invalid BackoffOptions: %s\n", s.message().c_str());
    std::abort();
  }
}

}  // namespace

std::string_view JitterName(Jitter j) {
  switch (j) {
    case Jitter::kNone: return "none";
    case Jitter::kFull: return "full";
    case Jitter::kEqual: return "equal";
    case Jitter::kDecorrelated: return "decorrelated";
  }
  return "unknown";
}

exitcodes::Status ValidateBackoffOptions(const BackoffOptions& o) {
  using exitcodes::Status;
  if (o.initial.count() <= 0) return Status::Config("backoff initial must be > 0 ms");
  if (o.cap < o.initial) return Status::Config("backoff cap must be >= initial");
  if (o.min_delay.count() <= 0 || o.min_delay > o.initial) {
    return Status::Config("backoff min_delay must be in (0, initial]");
  }
  // The negated form also rejects NaN.
  if (!(o.multiplier >= 1.0 && o.multiplier <= 16.0)) {
    return Status::Config("backoff multiplier must be in [1, 16]");
  }
  switch (o.jitter) {
    case Jitter::kNone:
    case Jitter::kFull:
    case Jitter::kEqual:
    case Jitter::kDecorrelated:
      return Status::Ok();
  }
  return Status::Config("backoff jitter is not a known kind");
}

Backoff::Backoff(BackoffOptions options, std::uint64_t seed)
    : options_(options), engine_(seed) {
  CheckOrDie(options_);
  Reset();
}

Backoff::Backoff(BackoffOptions options, UniformSource uniform)
    : options_(options), uniform_(std::move(uniform)) {
  CheckOrDie(options_);
  if (!uniform_) {
    std::fprintf(stderr, "trainlet: Backoff needs a non-null uniform source\n");
    std::abort();
  }
  Reset();
}

void Backoff::Reset() {
  attempts_ = 0;
  ceiling_ms_ = static_cast<double>(options_.initial.count());
  previous_ms_ = ceiling_ms_;
}

double Backoff::Uniform() {
  double u;
  if (uniform_) {
    u = uniform_();
  } else {
    // The top 53 bits as a double in [0, 1): unlike std::uniform_real_distribution,
    // identical on every standard library, so a seed pins the delays everywhere.
    u = static_cast<double>(engine_() >> 11) * 0x1.0p-53;
  }
  if (!(u >= 0.0)) return 0.0;  // Also maps NaN to 0.
  return std::min(u, std::nextafter(1.0, 0.0));
}

std::chrono::milliseconds Backoff::Next() {
  const double lo = static_cast<double>(options_.min_delay.count());
  const double cap = static_cast<double>(options_.cap.count());
  const double ceiling = std::min(ceiling_ms_, cap);
  double delay = ceiling;
  switch (options_.jitter) {
    case Jitter::kNone:
      break;
    case Jitter::kFull:
      delay = lo + Uniform() * (ceiling - lo);
      break;
    case Jitter::kEqual:
      delay = ceiling / 2 + Uniform() * (ceiling / 2);
      break;
    case Jitter::kDecorrelated: {
      // "Decorrelated jitter": sleep = min(cap, random_between(base, sleep * 3)).
      const double base = static_cast<double>(options_.initial.count());
      delay = base + Uniform() * (3 * previous_ms_ - base);
      break;
    }
  }
  // Rounding to whole milliseconds must not escape [min_delay, cap].
  delay = std::clamp(std::round(delay), lo, cap);
  previous_ms_ = delay;
  // Grow the ceiling, stopping at the cap so it can never overflow.
  ceiling_ms_ = std::min(ceiling_ms_ * options_.multiplier, cap);
  if (attempts_ < std::numeric_limits<int>::max()) ++attempts_;
  return std::chrono::milliseconds(static_cast<std::chrono::milliseconds::rep>(delay));
}

}  // namespace trainlet::rendezvous
