// trainlet/rendezvous/admission.h — whether the leader admits a member's hello: a pure decision.
//
// The leader (leader.h) turns a hello (after the token's proof, auth.h) and
// what it knows of the gang into one call of Admit; the answer says what to
// do, and the leader does it: admit the member to its index, refuse it (for
// good: it exits config; or for now: it retries until its deadline), stop as
// a rival leader's twin, and what to drop or record on the way. No sockets, no
// clocks, no logging: every rule has a row in tests/admission_test.cc.
// Thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "trainlet/rendezvous/wire.h"

namespace trainlet::rendezvous {

// The member that holds an index already (admitted before), as the leader sees it now.
struct IndexHolder {
  std::string peer;  // "10.0.0.12:41234", for messages
  // It sent a frame within LeaderOptions::holder_liveness (members answer the
  // waiting heartbeats): a live holder is never replaced by a claim.
  bool live = true;
  std::string job_name;  // its hello's (JobSet's Job)
  std::optional<std::uint32_t> job_restart_attempt;
  std::string instance_id{};  // its hello's (wire::Hello::instance_id); empty: an older peer
};

// Whether a hello comes from the pod the leader knows at its index, by
// instance id (wire::Hello::instance_id): index and id together are "alive by
// identity". `known`: the id the leader holds for the index (its holder's, or
// the survivor's it keeps the index for); `claimed`: the hello's.
enum class Identity {
  kSame,     // both ids, equal: the same pod (a survivor rejoining, a reconnect)
  kOther,    // the leader knows an id and the hello does not carry it (another id,
             // or none: the pod it knows sends its id in every generation)
  kUnknown,  // the leader knows none (an older peer, a replaced leader's first
             // round): matched by index alone, as before ids
};
Identity MatchIdentity(std::string_view known, std::string_view claimed);

// What the leader knows when a hello arrives. References: valid for the call.
struct AdmissionState {
  const wire::Hello& own;  // the leader's own hello (index 0)
  std::uint32_t nnodes = 1;
  // LeaderOptions::max_generation: the highest generation a hello may ask for;
  // nullopt: no bound (elastic sizes, where a join starts a generation that is
  // no restart, so generations are not bounded by --max-restarts).
  std::optional<std::uint32_t> max_generation = 0;
  const std::string& leader_id;      // LeaderOptions::leader_id; empty: none
  // JobSet's job-restart-attempt, the highest seen per Job (the leader's own included).
  const std::map<std::string, std::uint32_t>& job_attempts;
  std::optional<IndexHolder> holder;  // the admitted member holding hello.index, if any
  // The latest generation in which a spare took hello.index's node rank (it
  // was lost, or left with class hardware); nullopt: never.
  std::optional<wire::Replaced> replaced;
  // Elastic sizes: the latest generation that formed without hello.index after
  // the leader declared it lost (the gang shrank); nullopt: never.
  std::optional<std::uint32_t> left;
  // Hot spares: the generation that ran when the leader declared a waiting
  // spare holding hello.index lost (silent past the heartbeat timeout, its
  // connection closed); nullopt: none since that index was last admitted.
  std::optional<std::uint32_t> lost_spare;
  // The lowest index of 1..nnodes-1 nobody holds (ranks by arrival: the one a
  // pod without an index gets); nullopt when every one is held. Read only for a
  // hello without an index (wire::kNoIndex); the leader computes it only then.
  std::optional<std::uint32_t> free_index;
  // Whether the gang has a shared token (LeaderOptions::token): a second live
  // claim of an index is then a misconfiguration (refused for good: config);
  // without one a stranger cannot be told from a mistake (refused for now).
  bool token = false;
  // The instance id of the pod that held hello.index in the generation that
  // ended, a survivor expected back in this round, while the round keeps the
  // index for it (LeaderOptions::kept_ids); empty: none kept.
  std::string kept_id{};
  std::string peer;     // the claimant's "address:port", for messages
  std::string address;  // the claimant's address alone
  std::string local;  // the leader's end of the claimant's connection, "address:port"
};

struct Admission {
  enum class Verdict {
    kAdmit,   // the member takes hello.index
    kRefuse,  // send `reject` (retriable or not) and close
    // Another pod acts as leader of this job and attempt: send `reject` (for
    // good), then this leader fails config with reject.reason.
    kRivalLeader,
  };
  Verdict verdict = Verdict::kAdmit;
  wire::Reject reject;  // kRefuse, kRivalLeader
  // Record job_attempts[hello.job_name] = *record_job_attempt (its first pod, or
  // a recreated Job's), whatever the verdict: the fence has been passed.
  std::optional<std::uint32_t> record_job_attempt;
  // The hello's Job was recreated (a higher job-restart-attempt): drop every
  // admitted member of that Job with a lower one (kubernetes-sigs/jobset
  // pkg/controllers/jobset_controller.go deletes them too).
  bool drop_older_of_job = false;
  // kAdmit: the holder of the index went silent; drop it first.
  bool replace_holder = false;
  // kAdmit: the index the member takes: its hello's, or, for a pod without
  // one (wire::kNoIndex), free_index.
  std::uint32_t index = 0;
};

// The rules, in order (the first that applies decides):
//  1. another job id: refuse, retriable (a Job deleted and created again under
//     the same name has a new UID while its old pods still hold the names);
//  2. another attempt (JobSet's restart-attempt): refuse, retriable (whichever
//     side is stale is about to be replaced);
//  3. index 0: this leader's own probe (leader_id) is refused, retriable;
//     another pod is a rival leader (kRivalLeader);
//  4. JobSet's job-restart-attempt lower than seen for its Job: refuse,
//     retriable (a stale pod of the old Job); higher: a recreated Job
//     (drop_older_of_job);
//  5. another launch configuration: refuse for good, naming the first field
//     that differs and both values (a pod with an index and one without:
//     config "ranks", launch.h, said as such);
//  6. a generation beyond max_generation (--max-restarts; none when elastic):
//     refuse for good;
//  7. no index (wire::kNoIndex, ranks by arrival): admit to free_index; with
//     none free, refuse, retriable (the gang is full; a pod of it may leave);
//     an index outside 1..nnodes-1: refuse for good;
//  8. the index replaced by a spare (`replaced`) and the hello asks for a
//     generation from 1 up to the replacement's (the replaced pod itself, come
//     back): refuse for good, field wire::kReplacedField, naming the spare;
//     likewise the index an elastic gang went on without, or whose pod was
//     declared lost while active and the next generation is still to form
//     (`left`: that generation): refuse for good, field wire::kLeftField; likewise a waiting spare declared lost
//     while generation `lost_spare` ran, asking for a generation from 1 up to
//     the next one (cut off or frozen, it lost the leader as the leader lost
//     it): refuse for good, field wire::kLeftField (it exits infra, as a lost
//     active pod does, instead of the two refusing each other in a loop);
//  9. in a round of a known generation (own.generation > 0: neither the
//     gang's first nor a replaced leader's first round, which adopts the
//     largest generation it hears), a generation other than the round's (its
//     survivors and the pods admitted for it) or 0 (a pod new to the gang:
//     recreated, or a first join): refuse, retriable (a stale or replayed
//     hello; no pod of this gang asks for it);
// 10. an index kept for its survivor (kept_id) and no holder: another
//     identity (MatchIdentity kOther) is refused, retriable, whatever
//     generation it asks for (a pod new to the gang stands in for a survivor
//     only once the round stops keeping the index);
// 11. the index held: by the same identity (kSame: the pod reconnected):
//     admit, replacing the holder; by a silent holder: admit, replacing it;
//     by a holder of another job-restart-attempt: refuse, retriable; by a
//     live one of another identity while the index is kept for the claimant
//     (the survivor finds another pod in its place): admit, replacing the
//     holder; by a live one otherwise: a clash, refused naming both pods, for
//     good with a token (config: two pods given one index), for now without
//     one (a stranger cannot be told from a mistake: the claimant retries
//     until --rdzv-timeout, then exits infra); ranks by arrival, where the
//     leader gave every index: the claimant was declared lost and its index
//     given away, refuse for good, field wire::kReplacedField (it exits infra);
// 12. admit.
Admission Admit(const AdmissionState& state, const wire::Hello& hello);

// Ranks by arrival: the index a pod without one gets (AdmissionState::free_index):
// the lowest of 1..nnodes-1 that no admitted member holds (`held`) and that is
// not kept for a pod expected back (`reserved`: with elastic sizes, the pods
// of the generation that ended, which rejoin the next round with their
// indices, and pods admitted while it ran for the next one). A lost pod's
// index is in neither, so it is free again. nullopt: none free.
std::optional<std::uint32_t> LowestFreeIndex(std::uint32_t nnodes,
                                             const std::function<bool(std::uint32_t)>& held,
                                             const std::set<std::uint32_t>& reserved);

// The first field that differs between two launch configurations ("" when they
// agree), with the leader's and the member's value ("(absent)" when missing).
std::string FirstDifference(const wire::LaunchConfig& leader, const wire::LaunchConfig& member,
                            std::string* leader_value, std::string* member_value);

}  // namespace trainlet::rendezvous
