// FormationPolicy (formation_policy.h): when a round forms, late joins, and
// which generations count. Tables first (each rule, torch's semantics cited in
// the header), then a property over random rounds: the decision never forms
// below MIN, always forms a whole gang, never waits past the deadline, and a
// wait's recheck never overshoots the last call or the deadline.
#include "trainlet/agent/pod/formation_policy.h"

#include <gtest/gtest.h>

#include <random>

namespace trainlet::agent {
namespace {

using std::chrono::milliseconds;
using Kind = FormationDecision::Kind;
constexpr milliseconds kLastCall{30'000};  // torch's default last_call_timeout
constexpr milliseconds kTimeout{600'000};  // torch's default join_timeout

FormationConfig Elastic(std::uint32_t lo, std::uint32_t hi, std::uint32_t spares = 0) {
  return {.min_nodes = lo, .max_nodes = hi, .spares = spares, .last_call = kLastCall,
          .timeout = kTimeout};
}

// --rdzv-timeout as long as the last call (torch's defaults: 30 s, 30 s).
FormationConfig Short(std::uint32_t lo, std::uint32_t hi) {
  FormationConfig c = Elastic(lo, hi);
  c.timeout = kLastCall;
  return c;
}

struct Row {
  const char* name;
  FormationConfig config;
  RoundState round;
  Kind kind;
  milliseconds recheck;  // kWait only
};

// Each row's decision, and its recheck for a wait.
template <std::size_t N>
void ExpectRows(const Row (&rows)[N]) {
  for (const Row& row : rows) {
    FormationDecision d = DecideFormation(row.round, row.config);
    EXPECT_EQ(d.kind, row.kind) << row.name << ": " << d.why;
    EXPECT_FALSE(d.why.empty()) << row.name;
    if (row.kind == Kind::kWait) {
      EXPECT_EQ(d.recheck_after, row.recheck) << row.name;
    }
  }
}

TEST(FormationPolicy, Table) {
  const std::optional<milliseconds> none;
  const Row rows[] = {
      // --nnodes 2:3, first generation (torch's join op).
      {"MAX joined forms at once", Elastic(2, 3), {.joined = 3, .since_min = milliseconds(5)},
       Kind::kForm, {}},
      {"below MIN waits for the deadline", Elastic(2, 3),
       {.joined = 1, .since_min = none, .since_start = milliseconds(1000)}, Kind::kWait,
       kTimeout - milliseconds(1000)},
      {"MIN reached: waits out the last call", Elastic(2, 3),
       {.joined = 2, .since_min = milliseconds(10'000), .since_start = milliseconds(12'000)},
       Kind::kWait, milliseconds(20'000)},
      {"last call ended: forms with MIN", Elastic(2, 3),
       {.joined = 2, .since_min = kLastCall, .since_start = milliseconds(40'000)}, Kind::kForm,
       {}},
      {"deadline before the last call: forms with MIN", Elastic(2, 3),
       {.joined = 2, .since_min = milliseconds(1), .since_start = kTimeout}, Kind::kForm, {}},
      {"deadline below MIN: gives up", Elastic(2, 3),
       {.joined = 1, .since_min = none, .since_start = kTimeout}, Kind::kGiveUp, {}},
      {"last call shorter than the time left to the deadline", Elastic(2, 3),
       {.joined = 2, .since_min = milliseconds(0), .since_start = kTimeout - milliseconds(1005)},
       Kind::kWait, milliseconds(5)},
      // --nnodes 2:3 --rdzv-timeout 30 (torch's last call, 30 s, ends with the
      // deadline): the round forms kFormBeforeDeadline before it, not at it,
      // where the members' own deadline would have ended their wait.
      {"last call ending with the deadline: waits until shortly before it", Short(2, 3),
       {.joined = 2, .since_min = milliseconds(0), .since_start = milliseconds(0)}, Kind::kWait,
       kLastCall - kFormBeforeDeadline},
      {"last call ending with the deadline: forms shortly before it", Short(2, 3),
       {.joined = 2, .since_min = kLastCall - kFormBeforeDeadline,
        .since_start = kLastCall - kFormBeforeDeadline},
       Kind::kForm, {}},
      {"a short deadline: forms a tenth of it before",
       {.min_nodes = 2, .max_nodes = 3, .last_call = kLastCall, .timeout = milliseconds(3000)},
       {.joined = 2, .since_min = milliseconds(0), .since_start = milliseconds(0)},
       Kind::kWait, milliseconds(2700)},
      // Later rounds: every pod still alive is back.
      {"restart: survivors back, at least MIN", Elastic(2, 3),
       {.joined = 2, .first = false, .alive = 2, .alive_back = 2, .since_min = milliseconds(0)},
       Kind::kForm, {}},
      {"restart: a survivor still missing", Elastic(2, 3),
       {.joined = 2, .first = false, .alive = 3, .alive_back = 2, .since_min = milliseconds(0)},
       Kind::kWait, kLastCall},
      {"restart: a newcomer does not stand in for a survivor still stopping", Elastic(3, 5),
       {.joined = 3, .first = false, .alive = 3, .alive_back = 2, .since_min = milliseconds(0)},
       Kind::kWait, kLastCall},
      {"restart: survivors back and a newcomer: forms", Elastic(3, 5),
       {.joined = 4, .first = false, .alive = 3, .alive_back = 3, .since_min = milliseconds(0)},
       Kind::kForm, {}},
      {"restart: survivors below MIN wait", Elastic(2, 3),
       {.joined = 1, .first = false, .alive = 1, .alive_back = 1, .since_min = none},
       Kind::kWait, kTimeout},
      // Fixed gangs: as before, every pod.
      {"fixed gang of 4, all in", Elastic(4, 4), {.joined = 4, .since_min = milliseconds(0)},
       Kind::kForm, {}},
      {"fixed gang of 4, 3 in", Elastic(4, 4), {.joined = 3, .since_min = none}, Kind::kWait,
       kTimeout},
      // Hot spares: whole = N + K. The first round takes the last call too: a
      // spare arriving later is admitted while the generation runs (membership.h M13).
      {"spares: N + K forms at once", Elastic(2, 2, 1), {.joined = 3, .since_min = milliseconds(0)},
       Kind::kForm, {}},
      {"spares: N in, the first round waits out the last call", Elastic(2, 2, 1),
       {.joined = 2, .since_min = milliseconds(0)}, Kind::kWait, kLastCall},
      {"spares: N in, the last call over: forms without the spare", Elastic(2, 2, 1),
       {.joined = 2, .since_min = kLastCall, .since_start = kLastCall}, Kind::kForm, {}},
      {"fixed gang without spares: N - 1 in after the last call still waits", Elastic(3, 3),
       {.joined = 2, .since_min = none, .since_start = kLastCall}, Kind::kWait,
       kTimeout - kLastCall},
      {"spares: N in at the deadline forms", Elastic(2, 2, 1),
       {.joined = 2, .since_min = kLastCall, .since_start = kTimeout}, Kind::kForm, {}},
      {"spares: a later round takes the last call once the survivors' hold is over",
       Elastic(2, 2, 1),
       {.joined = 2, .first = false, .alive = 3, .alive_back = 2, .since_min = kLastCall,
        .since_start = kLastCall},
       Kind::kForm, {}},
      {"a single pod", Elastic(1, 1), {.joined = 1, .since_min = milliseconds(0)}, Kind::kForm,
       {}},
  };
  ExpectRows(rows);
}

// A survivor the leader counts alive (not lost, not leaving) may take the
// whole grace period to stop its workers (a checkpoint on SIGTERM) before it
// rejoins: a later round waits for it survivor_hold after its start
// (SurvivorHold: grace + the diagnostics delay + the heartbeat timeout), past
// a shorter last call,
// but never past the deadline's forming; the first round and a round whose
// survivors are all back keep torch's rules.
TEST(FormationPolicy, ASurvivorStillStoppingItsWorkersHoldsALaterRoundPastTheLastCall) {
  using std::chrono::seconds;
  // --nnodes 7:13 --rdzv-conf last_call_timeout=5 --grace-period 25 (the finding's).
  FormationConfig c = Elastic(7, 13);
  c.last_call = seconds(5);
  c.survivor_hold = SurvivorHold(seconds(25));
  const milliseconds hold = c.survivor_hold;
  ASSERT_EQ(hold, seconds(25) + milliseconds(2000) + milliseconds(2400));
  ASSERT_EQ(FormationConfig{}.survivor_hold, hold) << "the default grace period's";
  FormationConfig near = c;  // a deadline inside the hold
  near.timeout = seconds(20);
  const Row rows[] = {
      {"the last call ended, a survivor still stopping: waits out the hold", c,
       {.joined = 8, .first = false, .alive = 9, .alive_back = 8, .since_min = seconds(6),
        .since_start = seconds(6)},
       Kind::kWait, hold - seconds(6)},
      {"the hold over: forms without the survivor", c,
       {.joined = 8, .first = false, .alive = 9, .alive_back = 8, .since_min = hold,
        .since_start = hold},
       Kind::kForm, {}},
      {"the survivor back: forms at once", c,
       {.joined = 9, .first = false, .alive = 9, .alive_back = 9, .since_min = seconds(6),
        .since_start = seconds(6)},
       Kind::kForm, {}},
      {"a newcomer does not end the hold", c,
       {.joined = 9, .first = false, .alive = 9, .alive_back = 8, .since_min = seconds(6),
        .since_start = seconds(6)},
       Kind::kWait, hold - seconds(6)},
      {"the whole gang forms at once, hold or not", c,
       {.joined = 13, .first = false, .alive = 13, .alive_back = 12, .since_min = seconds(1),
        .since_start = seconds(1)},
       Kind::kForm, {}},
      {"a last call longer than the hold is waited out as before", Elastic(2, 3),
       {.joined = 2, .first = false, .alive = 3, .alive_back = 2, .since_min = hold,
        .since_start = hold},
       Kind::kWait, kLastCall - hold},
      {"the first round has no survivors to hold it", c,
       {.joined = 8, .first = true, .alive = 0, .alive_back = 0, .since_min = seconds(5),
        .since_start = seconds(6)},
       Kind::kForm, {}},
      {"the deadline near: forms inside the hold", near,
       {.joined = 8, .first = false, .alive = 9, .alive_back = 8, .since_min = seconds(19),
        .since_start = seconds(19)},
       Kind::kForm, {}},
      {"the deadline bounds the hold's wait", near,
       {.joined = 8, .first = false, .alive = 9, .alive_back = 8, .since_min = seconds(6),
        .since_start = seconds(6)},
       Kind::kWait, seconds(13)},
  };
  ExpectRows(rows);
  const FormationDecision d = DecideFormation(rows[0].round, c);
  EXPECT_EQ(d.why, "waiting up to 23400 ms for 1 survivor(s) still stopping their workers "
                   "(8 joined)");
}

TEST(FormationPolicy, GiveUpSaysWhatIsMissing) {
  auto d = DecideFormation({.joined = 1, .since_start = kTimeout}, Elastic(2, 3));
  EXPECT_EQ(d.why, "1 pod(s) joined, at least 2 needed");
}

TEST(FormationPolicy, MinReachedAtFollowsTorchsDeadline) {
  using TP = std::chrono::steady_clock::time_point;
  const FormationConfig c = Elastic(2, 3);
  const TP t0{milliseconds(1000)}, t1{milliseconds(2000)}, t2{milliseconds(3000)};
  EXPECT_EQ(MinReachedAt(std::nullopt, 1, c, t0), std::nullopt);
  EXPECT_EQ(MinReachedAt(std::nullopt, 2, c, t0), t0);       // reached now
  EXPECT_EQ(MinReachedAt(t0, 3, c, t1), t0);                 // stays: more pods do not reset it
  EXPECT_EQ(MinReachedAt(t0, 1, c, t1), std::nullopt);       // dropped below: forgotten
  EXPECT_EQ(MinReachedAt(std::nullopt, 2, c, t2), t2);       // reached again: a new last call
}

TEST(FormationPolicyProperty, RandomRounds) {
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) {
    const std::uint32_t lo = 1 + rng() % 5, hi = lo + rng() % 4, spares = rng() % 3;
    FormationConfig c{.min_nodes = lo, .max_nodes = hi, .spares = spares,
                      .last_call = milliseconds(rng() % 5000),
                      .timeout = milliseconds(rng() % 20000),
                      .survivor_hold = milliseconds(rng() % 10000)};
    RoundState r{.joined = static_cast<std::uint32_t>(rng() % (hi + spares + 2)),
                 .first = rng() % 2 == 0,
                 .alive = static_cast<std::uint32_t>(rng() % (hi + spares + 1)),
                 .since_start = milliseconds(rng() % 25000)};
    r.alive_back = static_cast<std::uint32_t>(rng() % (std::min(r.alive, r.joined) + 1));
    if (r.joined >= lo) r.since_min = milliseconds(rng() % (r.since_start.count() + 1));
    const FormationDecision d = DecideFormation(r, c);
    const std::string ctx = "case " + std::to_string(i) + ": " + d.why;
    if (d.kind == Kind::kForm) {
      EXPECT_GE(r.joined, lo) << ctx;
    }
    // Before the last call (and a survivor's hold) and the deadline, a later
    // round below the whole gang forms only with every pod still alive back,
    // whoever else joined.
    const bool in_hold = !r.first && r.since_start < c.survivor_hold;
    const bool early = !r.since_min.has_value() || *r.since_min < c.last_call || in_hold;
    const milliseconds form_by = c.timeout - std::min(kFormBeforeDeadline, c.timeout / 10);
    if (!r.first && r.joined < hi + spares && r.alive_back < r.alive && early &&
        r.since_start < form_by) {
      EXPECT_NE(d.kind, Kind::kForm) << ctx;
    }
    if (r.joined >= hi + spares) {
      EXPECT_EQ(d.kind, Kind::kForm) << ctx;
    }
    if (d.kind == Kind::kGiveUp) {
      EXPECT_LT(r.joined, lo) << ctx;
      EXPECT_GE(r.since_start, c.timeout) << ctx;
    }
    if (d.kind != Kind::kWait) continue;
    EXPECT_GT(d.recheck_after, milliseconds(0)) << ctx;
    EXPECT_LE(r.since_start + d.recheck_after, c.timeout) << ctx;
    if (r.since_min) {  // every round takes the last call, a later one the hold too
      const milliseconds hold_left = r.first || r.alive_back >= r.alive
                                         ? milliseconds(0)
                                         : c.survivor_hold - r.since_start;
      EXPECT_LE(d.recheck_after, std::max(c.last_call - *r.since_min, hold_left)) << ctx;
    }
  }
}

}  // namespace
}  // namespace trainlet::agent
