// trainlet/agent/pod/membership_policy.h — who is in the next generation, and on
// which node rank: hot spares (--spares K) and elastic sizes (--nnodes MIN:MAX)
// as one pure function, beside GangPolicy (gang_policy.h), which decides when
// a generation ends. No sockets, no clocks: the leader gathers the pods that
// joined, what it declared lost and who must leave, and asks PlanGeneration.
// Pure; thread-safe.
//
// The rules (README, "Gang"):
//  - A pod the leader declared lost, or that must leave (its failure class
//    points at its node: hardware), is never active.
//  - At most MAX pods are active; fewer than MIN (or no pod 0: the leader,
//    whose pod hosts rank 0's store) and the generation cannot form.
//  - Pod 0 is always node rank 0 (MASTER_ADDR is the leader's address).
//  - When the active set keeps its size (a spare replaces a pod that left),
//    the pods that stay keep their node ranks and each free node rank goes to
//    the waiting pod with the lowest key, in ascending order: the spare runs
//    with the RANK of the pod it replaces (NVRx's hot spares do the same).
//  - Otherwise (the first generation, the gang grows or shrinks) the active
//    pods are numbered densely in key order: the order of their indices where
//    pods have one, never join order (torchrun's c10d, `--nnodes MIN:MAX`).
//    Pods that stay are preferred over newcomers; then the lowest keys.
//  - The rest wait as spares, lowest key first.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace trainlet::agent {

// One pod the leader knows of for the next generation.
struct MemberState {
  // The pod's key: its gang index where it has one (Job completion index,
  // JobSet layout, --node-rank), else its arrival number (ranks by arrival).
  std::uint32_t key = 0;
  // Its node rank in the generation that just ended; nullopt when it was not
  // active then (a waiting spare, a newcomer, the first generation).
  std::optional<std::uint32_t> node_rank{};
  bool lost = false;        // the leader declared it lost (silent, or its connection closed)
  bool must_leave = false;  // it failed with a class that points at its node (hardware)
};

struct MembershipConfig {
  std::uint32_t min_nodes = 1;  // --nnodes MIN (N for a fixed gang)
  std::uint32_t max_nodes = 1;  // --nnodes MAX (N for a fixed gang)
};

struct GenerationPlan {
  bool ready = false;               // enough pods: the generation can form
  std::string why{};                // when not ready: what is missing, one line
  std::vector<std::uint32_t> active;   // key of the pod on each node rank (active[rank])
  std::vector<std::uint32_t> waiting;  // keys of the waiting spares, ascending
  // (key that left, key of the spare that took its node rank), by node rank.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> replaced;
  // The node rank of `key` in this plan; nullopt for a waiting or absent pod.
  std::optional<std::uint32_t> NodeRankOf(std::uint32_t key) const;
};

// Rule M16 (membership.h): a replaced leader's first round, which knows no
// earlier generation of its own. The pods `joined` (keys), each on the node
// rank it says it held (`held`, by key: wire::Hello::node_rank), and the
// leader (key 0) on node rank 0 when any pod held one: so that
// PlanGeneration keeps the survivors where they were when every rank of the
// last generation is back, and numbers them as before otherwise (a rank held
// twice, or past MAX, is inconsistent input: PlanGeneration renumbers).
std::vector<MemberState> WithHeldRanks(const std::vector<std::uint32_t>& joined,
                                       const std::map<std::uint32_t, std::uint32_t>& held);

// The next generation from the pods known now (any order; a key listed twice
// counts once, its first entry). Never fails: `ready` false says the gang
// must wait (bounded by the caller's --rdzv-timeout).
GenerationPlan PlanGeneration(const std::vector<MemberState>& pods, const MembershipConfig& c);

}  // namespace trainlet::agent
