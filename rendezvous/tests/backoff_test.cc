#include "trainlet/rendezvous/backoff.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

namespace trainlet::rendezvous {
namespace {

using std::chrono::milliseconds;

// Just below 1: the largest value a UniformSource may return.
constexpr double kAlmostOne = 0.9999999999;

BackoffOptions Options(Jitter jitter) {
  BackoffOptions o;  // 100 ms, cap 2 s, floor 50 ms, x2.
  o.jitter = jitter;
  return o;
}

std::vector<long> Draw(Backoff& b, int n) {
  std::vector<long> out;
  for (int i = 0; i < n; ++i) out.push_back(static_cast<long>(b.Next().count()));
  return out;
}

TEST(BackoffOptionsTest, DefaultsAreValid) {
  EXPECT_TRUE(ValidateBackoffOptions(BackoffOptions{}).ok());
}

TEST(BackoffOptionsTest, RejectsOutOfRange) {
  struct Case {
    const char* what;
    BackoffOptions options;
  };
  auto with = [](auto mutate) {
    BackoffOptions o;
    mutate(o);
    return o;
  };
  const Case cases[] = {
      {"zero initial", with([](BackoffOptions& o) { o.initial = milliseconds(0); })},
      {"cap below initial", with([](BackoffOptions& o) { o.cap = milliseconds(99); })},
      {"zero floor", with([](BackoffOptions& o) { o.min_delay = milliseconds(0); })},
      {"floor above initial", with([](BackoffOptions& o) { o.min_delay = milliseconds(101); })},
      {"shrinking", with([](BackoffOptions& o) { o.multiplier = 0.5; })},
      {"huge multiplier", with([](BackoffOptions& o) { o.multiplier = 100; })},
      {"NaN multiplier",
       with([](BackoffOptions& o) { o.multiplier = std::numeric_limits<double>::quiet_NaN(); })},
      {"unknown jitter", with([](BackoffOptions& o) { o.jitter = static_cast<Jitter>(42); })},
  };
  for (const Case& c : cases) {
    exitcodes::Status s = ValidateBackoffOptions(c.options);
    EXPECT_FALSE(s.ok()) << c.what;
    EXPECT_EQ(s.failure_class(), exitcodes::FailureClass::kConfig) << c.what;
  }
}

TEST(BackoffTest, WithoutJitterDoublesUpToTheCap) {
  Backoff b(Options(Jitter::kNone), /*seed=*/1);
  EXPECT_EQ(b.attempts(), 0);
  EXPECT_EQ(Draw(b, 8), (std::vector<long>{100, 200, 400, 800, 1600, 2000, 2000, 2000}));
  EXPECT_EQ(b.attempts(), 8);
}

TEST(BackoffTest, ResetStartsOver) {
  Backoff b(Options(Jitter::kNone), /*seed=*/1);
  (void)Draw(b, 6);
  b.Reset();
  EXPECT_EQ(b.attempts(), 0);
  EXPECT_EQ(b.Next(), milliseconds(100));
  EXPECT_EQ(b.attempts(), 1);
}

TEST(BackoffTest, MultiplierOneIsConstant) {
  BackoffOptions o = Options(Jitter::kNone);
  o.multiplier = 1.0;
  Backoff b(o, /*seed=*/1);
  EXPECT_EQ(Draw(b, 4), (std::vector<long>{100, 100, 100, 100}));
}

// The extremes of each jitter kind, drawn with u = 0 and u just below 1.
TEST(BackoffTest, JitterBoundsPerAttempt) {
  struct Case {
    Jitter jitter;
    double u;
    std::vector<long> want;
  };
  const Case cases[] = {
      // Full: [min_delay, ceiling].
      {Jitter::kFull, 0.0, {50, 50, 50, 50, 50, 50, 50}},
      {Jitter::kFull, kAlmostOne, {100, 200, 400, 800, 1600, 2000, 2000}},
      // Equal: [ceiling / 2, ceiling], and never under the floor.
      {Jitter::kEqual, 0.0, {50, 100, 200, 400, 800, 1000, 1000}},
      {Jitter::kEqual, kAlmostOne, {100, 200, 400, 800, 1600, 2000, 2000}},
      // Decorrelated: [initial, 3 * previous], capped.
      {Jitter::kDecorrelated, 0.0, {100, 100, 100, 100, 100, 100, 100}},
      {Jitter::kDecorrelated, kAlmostOne, {300, 900, 2000, 2000, 2000, 2000, 2000}},
  };
  for (const Case& c : cases) {
    Backoff b(Options(c.jitter), [u = c.u] { return u; });
    EXPECT_EQ(Draw(b, 7), c.want) << JitterName(c.jitter) << " u=" << c.u;
  }
}

TEST(BackoffTest, OutOfRangeUniformSourceIsClamped) {
  for (double u : {-1.0, 1.0, 7.5, std::numeric_limits<double>::quiet_NaN(),
                   std::numeric_limits<double>::infinity()}) {
    for (Jitter j : {Jitter::kFull, Jitter::kEqual, Jitter::kDecorrelated}) {
      Backoff b(Options(j), [u] { return u; });
      for (long d : Draw(b, 10)) {
        EXPECT_GE(d, 50) << JitterName(j) << " u=" << u;
        EXPECT_LE(d, 2000) << JitterName(j) << " u=" << u;
      }
    }
  }
}

TEST(BackoffTest, SeededDelaysStayInBoundsAndRepeat) {
  for (Jitter j : {Jitter::kFull, Jitter::kEqual, Jitter::kDecorrelated}) {
    Backoff a(Options(j), /*seed=*/42);
    Backoff same(Options(j), /*seed=*/42);
    Backoff other(Options(j), /*seed=*/43);
    const std::vector<long> da = Draw(a, 2000);
    EXPECT_EQ(da, Draw(same, 2000)) << JitterName(j);
    EXPECT_NE(da, Draw(other, 2000)) << JitterName(j);
    for (long d : da) {
      ASSERT_GE(d, 50) << JitterName(j);
      ASSERT_LE(d, 2000) << JitterName(j);
    }
  }
}

// At the cap, equal jitter keeps a retry loop at or under one attempt per second
// while still spreading a gang of pods over [1 s, 2 s].
TEST(BackoffTest, EqualJitterAtTheCapSpreadsOverItsUpperHalf) {
  Backoff b(Options(Jitter::kEqual), /*seed=*/7);
  (void)Draw(b, 5);  // Reach the cap.
  long lo = 2000, hi = 0;
  for (long d : Draw(b, 1000)) {
    ASSERT_GE(d, 1000);
    ASSERT_LE(d, 2000);
    lo = std::min(lo, d);
    hi = std::max(hi, d);
  }
  EXPECT_LT(lo, 1100);  // The draws cover the range, not one point of it.
  EXPECT_GT(hi, 1900);
}

TEST(BackoffTest, CopiesAreIndependent) {
  Backoff a(Options(Jitter::kFull), /*seed=*/9);
  (void)a.Next();
  Backoff b = a;
  EXPECT_EQ(Draw(a, 5), Draw(b, 5));
  EXPECT_EQ(a.attempts(), 6);
}

}  // namespace
}  // namespace trainlet::rendezvous
