#include "trainlet/agent/pod/formation_policy.h"

#include <algorithm>

namespace trainlet::agent {

namespace {

using std::chrono::milliseconds;

std::string Count(std::uint32_t n, const char* what) {
  return std::to_string(n) + " " + what;
}

FormationDecision Form(std::string why) {
  return {.kind = FormationDecision::Kind::kForm, .recheck_after = milliseconds(0),
          .why = std::move(why)};
}

}  // namespace

FormationDecision DecideFormation(const RoundState& round, const FormationConfig& c) {
  const std::uint32_t min_nodes = std::max<std::uint32_t>(1, c.min_nodes);
  const std::uint32_t whole = std::max(min_nodes, c.max_nodes) + c.spares;
  const bool enough = round.joined >= min_nodes;
  // Every round takes torch's last call, a fixed gang's first with spares too:
  // a pod arriving after the round formed is admitted while the generation runs
  // (as a spare, or by a next generation that takes it in: membership.h M13).
  if (round.joined >= whole) return Form("the gang is whole (" + Count(round.joined, "pods") + ")");
  if (enough && !round.first && round.alive_back >= round.alive) {
    return Form("every pod still alive is back (" + Count(round.joined, "pods") + ")");
  }
  // A survivor still stopping its workers holds the round (the hold), the
  // last call's end notwithstanding.
  const milliseconds hold_left =
      !round.first && round.alive_back < round.alive ? c.survivor_hold - round.since_start
                                                     : milliseconds(0);
  if (enough && round.since_min && *round.since_min >= c.last_call &&
      hold_left <= milliseconds(0)) {
    return Form("last call ended with " + Count(round.joined, "pods") + " (MIN " +
                std::to_string(min_nodes) + ")");
  }
  const milliseconds to_deadline = c.timeout - round.since_start;
  const milliseconds form_by = c.timeout - std::min(kFormBeforeDeadline, c.timeout / 10);
  if (enough && round.since_start >= form_by) {
    return Form("the deadline (--rdzv-timeout) is near with " + Count(round.joined, "pods") +
                " (MIN " + std::to_string(min_nodes) + "): the last call ends now");
  }
  if (to_deadline <= milliseconds(0)) {
    return {.kind = FormationDecision::Kind::kGiveUp,
            .recheck_after = milliseconds(0),
            .why = Count(round.joined, "pod(s)") + " joined, at least " +
                   std::to_string(min_nodes) + " needed"};
  }
  milliseconds wait = to_deadline;
  if (enough && round.since_min) {
    wait = std::min({wait, std::max(c.last_call - *round.since_min, hold_left),
                     form_by - round.since_start});
  }
  const bool holding = enough && round.since_min && *round.since_min >= c.last_call;
  std::string why = holding ? "waiting up to " + std::to_string(wait.count()) + " ms for " +
                                  Count(round.alive - round.alive_back, "survivor(s)") +
                                  " still stopping their workers (" +
                                  Count(round.joined, "joined") + ")"
                    : enough ? "last call: waiting up to " +
                                 std::to_string(wait.count()) + " ms for more pods (" +
                                 Count(round.joined, "joined") + ", MAX " +
                                 std::to_string(whole) + ")"
                           : Count(round.joined, "pod(s)") + " joined, at least " +
                                 std::to_string(min_nodes) + " needed";
  return {.kind = FormationDecision::Kind::kWait, .recheck_after = wait, .why = std::move(why)};
}

std::optional<std::chrono::steady_clock::time_point> MinReachedAt(
    std::optional<std::chrono::steady_clock::time_point> reached_at, std::uint32_t joined,
    const FormationConfig& c, std::chrono::steady_clock::time_point now) {
  if (joined < std::max<std::uint32_t>(1, c.min_nodes)) return std::nullopt;
  return reached_at ? reached_at : now;
}

}  // namespace trainlet::agent
