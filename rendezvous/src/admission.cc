#include "trainlet/rendezvous/admission.h"

#include <map>

#include "trainlet/rendezvous/launch.h"

namespace trainlet::rendezvous {

namespace {

using Verdict = Admission::Verdict;

Admission Refusal(std::string field, std::string reason, bool retriable,
                  Verdict verdict = Verdict::kRefuse) {
  Admission a;
  a.verdict = verdict;
  a.reject = {std::move(field), std::move(reason), retriable};
  return a;
}

std::string Who(const AdmissionState& state, const wire::Hello& hello) {
  if (hello.index == wire::kNoIndex) return "a pod without an index (" + state.peer + ")";
  return "pod " + std::to_string(hello.index) + " (" + state.peer + ")";
}

// Rule 3: a hello with index 0 (leader.h, LeaderProbe).
Admission IndexZero(const AdmissionState& state, const wire::Hello& hello) {
  if (!state.leader_id.empty() && hello.leader_id == state.leader_id) {
    return Refusal("leader", "this is the probing leader itself", /*retriable=*/true);
  }
  return Refusal("leader",
                 "two pods act as leader (index 0) of job '" + hello.job_id + "' attempt " +
                     std::to_string(hello.attempt) + ": " + state.local + " and " + state.address +
                     ". Exactly one pod may have index 0 (--node-rank, JOB_COMPLETION_INDEX) "
                     "and the leader's name must lead to it alone",
                 /*retriable=*/false, Verdict::kRivalLeader);
}

// Rule 4: JobSet recreates one failed Job (failurePolicy action RestartJob)
// with its label jobset.sigs.k8s.io/job-restart-attempt raised, the
// JobSet-wide restart-attempt unchanged (kubernetes-sigs/jobset
// pkg/constants/constants.go JobRestartAttemptKey; pkg/controllers/
// jobset_controller.go: a Job whose job-restart-attempt is below
// jobset.status...jobRestarts[jobIndex] is deleted as a previous one). A pod
// of a lower one is a stale pod of the old Job: refused, retriable (it is
// being deleted; at its deadline it exits infra, not config). Returns the
// refusal, or nullopt with the fence's effects in *out.
std::optional<Admission> JobRestartFence(const AdmissionState& state, const wire::Hello& hello,
                                         Admission* out) {
  if (!hello.job_restart_attempt) return std::nullopt;
  const std::uint32_t jra = *hello.job_restart_attempt;
  auto seen = state.job_attempts.find(hello.job_name);
  if (seen == state.job_attempts.end()) {
    out->record_job_attempt = jra;
    return std::nullopt;
  }
  if (jra < seen->second) {
    return Refusal("job_restart_attempt",
                   Who(state, hello) + " of Job '" + hello.job_name +
                       "' is from job-restart-attempt " + std::to_string(jra) +
                       ", but that Job was recreated: attempt " + std::to_string(seen->second) +
                       " already joined (a stale pod of the old Job)",
                   /*retriable=*/true);
  }
  if (jra > seen->second) {
    out->record_job_attempt = jra;
    out->drop_older_of_job = true;
  }
  return std::nullopt;
}

// Rules 5 to 7: what no retry changes.
std::optional<Admission> LaunchFence(const AdmissionState& state, const wire::Hello& hello) {
  const wire::Hello& own = state.own;
  const std::string who = Who(state, hello);
  std::string lv, mv;
  std::string field = hello.fingerprint == own.fingerprint && hello.config == own.config
                          ? ""
                          : FirstDifference(own.config, hello.config, &lv, &mv);
  if (field == "ranks") {
    return Refusal(field,
                   (hello.index == wire::kNoIndex ? who + " and pod 0 (the leader) with one"
                                                  : who + " and pod 0 (the leader) without one") +
                       " cannot share a gang: either every pod has an index (--node-rank, "
                       "JOB_COMPLETION_INDEX) or none has, and the leader numbers them as they "
                       "join",
                   /*retriable=*/false);
  }
  if (!field.empty()) {
    // That member's own launch is wrong (or it is no member of this gang at
    // all: a hello is unauthenticated without a token). It exits config; the
    // leader and the pods already admitted wait on for a pod that agrees.
    return Refusal(field,
                   "launch configuration differs: " + field + "=" + mv + " on " + who + ", " +
                       field + "=" + lv + " on pod 0 (the leader)",
                   /*retriable=*/false);
  }
  if (state.max_generation && hello.generation > *state.max_generation) {
    // No pod of this gang runs past --max-restarts: a stranger's number, or a
    // pod launched with another --max-restarts history. Never adopted.
    return Refusal("generation",
                   who + " asks for generation " + std::to_string(hello.generation) +
                       ", beyond --max-restarts " + std::to_string(*state.max_generation),
                   /*retriable=*/false);
  }
  if (hello.index == wire::kNoIndex) {
    if (state.free_index) return std::nullopt;
    return Refusal("index",
                   who + " finds every node rank 1.." + std::to_string(state.nnodes - 1) +
                       " taken (--nnodes " + std::to_string(state.nnodes) + ")",
                   /*retriable=*/true);
  }
  if (hello.index == 0 || hello.index >= state.nnodes) {
    return Refusal("index",
                   who + " has an index outside 1.." + std::to_string(state.nnodes - 1) +
                       " (index 0 is this leader)",
                   /*retriable=*/false);
  }
  return std::nullopt;
}

// Rule 11: a second claim of an admitted index: the holder itself on a new
// connection, a survivor finding another pod in its place, a recreated pod
// whose predecessor's connection has not closed yet (no FIN: keepalive or
// silence tells later), or two live pods given one index.
Admission HeldIndex(const AdmissionState& state, const wire::Hello& hello, Admission out) {
  const IndexHolder& holder = *state.holder;
  const bool dropped_by_fence = out.drop_older_of_job && holder.job_name == hello.job_name &&
                                holder.job_restart_attempt.value_or(0) < *out.record_job_attempt;
  if (dropped_by_fence) return out;
  const bool same = MatchIdentity(holder.instance_id, hello.instance_id) == Identity::kSame;
  const bool survivor_back =
      MatchIdentity(state.kept_id, hello.instance_id) == Identity::kSame &&
      MatchIdentity(state.kept_id, holder.instance_id) == Identity::kOther;
  if (!holder.live || same || survivor_back) {
    out.replace_holder = true;
    return out;
  }
  const std::string index = "index " + std::to_string(hello.index);
  if (hello.job_restart_attempt != holder.job_restart_attempt) {
    // Another Job attempt: the holder is on its way out; the claimant may retry.
    return Refusal("index", index + " is held by " + holder.peer + " of another Job attempt",
                   /*retriable=*/true);
  }
  if (RanksByArrival(state.own.config)) {
    // The leader gave every index itself: the claimant lost it (declared
    // lost, its index given to the next pod to arrive) and came back (a
    // frozen pod resumed, a cut link restored). Lost, not misconfigured.
    return Refusal(wire::kReplacedField,
                   "pod " + std::to_string(hello.index) + " (" + state.peer +
                       ") was declared lost; its index, numbered by arrival, is " +
                       holder.peer + "'s now: it leaves with its own failure",
                   /*retriable=*/false);
  }
  // With a token both hold the secret: two pods of this gang were given one
  // index. Without one the claimant may be anyone who reached the port: it
  // retries (its deadline makes it exit infra), and the holder keeps its place.
  return Refusal(
      "index",
      "two live pods claim " + index + " of job '" + hello.job_id + "' attempt " +
          std::to_string(hello.attempt) + ": " + holder.peer +
          " joined first and answers heartbeats; refusing " + state.peer +
          ". Each pod needs its own index (--node-rank, JOB_COMPLETION_INDEX)" +
          (state.token ? "" : "; it retries until --rdzv-timeout (no --token-file: a pod "
                              "cannot be told from a stranger)"),
      /*retriable=*/!state.token);
}

// Rule 9: the generations a round of a known generation admits.
std::optional<Admission> StaleGeneration(const AdmissionState& state, const wire::Hello& hello) {
  const std::uint32_t round = state.own.generation;
  if (round == 0 || hello.generation == 0 || hello.generation == round) return std::nullopt;
  return Refusal("generation",
                 Who(state, hello) + " asks for generation " + std::to_string(hello.generation) +
                     "; this round runs generation " + std::to_string(round) +
                     " (a stale or replayed hello: pods new to the gang ask for 0)",
                 /*retriable=*/true);
}

// Rule 10: an index the round keeps for its survivor, not claimed yet.
std::optional<Admission> KeptIndex(const AdmissionState& state, const wire::Hello& hello) {
  if (state.holder || MatchIdentity(state.kept_id, hello.instance_id) != Identity::kOther) {
    return std::nullopt;
  }
  return Refusal("index",
                 Who(state, hello) + " is not the pod that ran index " +
                     std::to_string(hello.index) +
                     " in the last generation; the round keeps that index for it",
                 /*retriable=*/true);
}

// Rule 8's window: the pod, declared lost, asks for a generation from 1 up to
// `formed` (the one that went on without it), i.e. one it missed. A recreated
// pod starts at generation 0; one admitted since asks for a later one.
bool MissedGeneration(const wire::Hello& hello, std::optional<std::uint32_t> formed) {
  return formed && hello.index != wire::kNoIndex && hello.generation != 0 &&
         hello.generation <= *formed;
}

// Rule 8: a pod the leader declared lost, whose node rank a spare took,
// comes back asking for a generation it missed (hello.generation from 1 to the
// replacement's: a frozen pod resumed, a cut link restored). A recreated pod
// starts at generation 0, and a spare admitted since asks for a later one.
std::optional<Admission> ReplacedIndex(const AdmissionState& state, const wire::Hello& hello) {
  if (!state.replaced || !MissedGeneration(hello, state.replaced->generation)) {
    return std::nullopt;
  }
  const wire::Replaced& by = *state.replaced;
  Admission a = Refusal(
      wire::kReplacedField,
      "pod " + std::to_string(hello.index) + " (" + state.peer +
          ") was declared lost; spare pod " + std::to_string(by.spare) + " took its node rank " +
          std::to_string(by.node_rank) + " in generation " + std::to_string(by.generation) +
          ": it leaves with its own failure (the Job recreates its index, which joins as a spare)",
      /*retriable=*/false);
  a.reject.replaced = by;
  return a;
}

// Rule 8: `what` happened to a pod declared lost, come back: refused for
// good, field wire::kLeftField (it exits infra, the loss's one culprit).
Admission LeavesAsLost(const std::string& what, const char* joins_as) {
  return Refusal(wire::kLeftField,
                 what + ": it leaves with its own failure (the Job recreates its index, which "
                        "joins as " + joins_as + ")",
                 /*retriable=*/false);
}

// Rule 8, elastic: a pod the leader declared lost, that the gang went on
// without (generation `state.left` formed with the rest), comes back asking
// for a generation from 1 up to that one. A recreated pod starts at 0.
std::optional<Admission> LeftIndex(const AdmissionState& state, const wire::Hello& hello) {
  if (!MissedGeneration(hello, state.left)) return std::nullopt;
  return LeavesAsLost("pod " + std::to_string(hello.index) + " (" + state.peer +
                          ") was declared lost; the gang went on without it in generation " +
                          std::to_string(*state.left),
                      "a new pod");
}

// Rule 8, spares: a waiting spare the leader declared lost while generation
// `state.lost_spare` ran comes back asking for a generation from 1 up to the
// next (it lost the leader too, and rejoins for a restart it thinks is due).
// A recreated pod starts at 0.
std::optional<Admission> LostSpare(const AdmissionState& state, const wire::Hello& hello) {
  if (!state.lost_spare || !MissedGeneration(hello, *state.lost_spare + 1)) return std::nullopt;
  return LeavesAsLost("spare pod " + std::to_string(hello.index) + " (" + state.peer +
                          ") was declared lost while it waited (generation " +
                          std::to_string(*state.lost_spare) + ")",
                      "a spare");
}

}  // namespace

Admission Admit(const AdmissionState& state, const wire::Hello& hello) {
  const wire::Hello& own = state.own;
  const std::string who = Who(state, hello);
  if (hello.job_id != own.job_id) {
    return Refusal("job_id",
                   who + " belongs to job '" + hello.job_id + "', this leader to '" + own.job_id +
                       "'",
                   /*retriable=*/true);
  }
  if (hello.attempt != own.attempt) {
    return Refusal("attempt",
                   who + " is from attempt " + std::to_string(hello.attempt) +
                       ", this leader runs attempt " + std::to_string(own.attempt),
                   /*retriable=*/true);
  }
  if (hello.index == 0) return IndexZero(state, hello);
  Admission out;
  out.index = hello.index == wire::kNoIndex ? state.free_index.value_or(0) : hello.index;
  if (auto fenced = JobRestartFence(state, hello, &out)) return *fenced;
  Admission decided = out;
  if (auto refused = LaunchFence(state, hello)) {
    decided = *refused;
  } else if (auto replaced = ReplacedIndex(state, hello)) {
    decided = *replaced;
  } else if (auto left = LeftIndex(state, hello)) {
    decided = *left;
  } else if (auto lost = LostSpare(state, hello)) {
    decided = *lost;
  } else if (auto stale = StaleGeneration(state, hello)) {
    decided = *stale;
  } else if (auto kept = hello.index != wire::kNoIndex ? KeptIndex(state, hello) : std::nullopt) {
    decided = *kept;
  } else if (state.holder && hello.index != wire::kNoIndex) {
    decided = HeldIndex(state, hello, out);
  }
  // The fence's effects stand whatever the verdict: it has been passed.
  decided.record_job_attempt = out.record_job_attempt;
  decided.drop_older_of_job = out.drop_older_of_job;
  return decided;
}

Identity MatchIdentity(std::string_view known, std::string_view claimed) {
  if (known.empty()) return Identity::kUnknown;
  return known == claimed ? Identity::kSame : Identity::kOther;
}

std::optional<std::uint32_t> LowestFreeIndex(std::uint32_t nnodes,
                                             const std::function<bool(std::uint32_t)>& held,
                                             const std::set<std::uint32_t>& reserved) {
  for (std::uint32_t i = 1; i < nnodes; ++i) {
    if (!held(i) && !reserved.contains(i)) return i;
  }
  return std::nullopt;
}

std::string FirstDifference(const wire::LaunchConfig& leader, const wire::LaunchConfig& member,
                            std::string* leader_value, std::string* member_value) {
  std::map<std::string, std::string> a(leader.begin(), leader.end());
  std::map<std::string, std::string> b(member.begin(), member.end());
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    std::string mv = it == b.end() ? "(absent)" : it->second;
    if (mv != v) {
      *leader_value = v;
      *member_value = mv;
      return k;
    }
  }
  for (const auto& [k, v] : b) {
    if (!a.contains(k)) {
      *leader_value = "(absent)";
      *member_value = v;
      return k;
    }
  }
  return "";
}

}  // namespace trainlet::rendezvous
