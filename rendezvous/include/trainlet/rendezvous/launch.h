// trainlet/rendezvous/launch.h — the Hello a pod sends, built in one place.
//
// The agent (agent/src/pod/pod.cc) and the benchmarks' load generator (bench/) both
// build their Hello here, so a simulated pod presents exactly the launch
// configuration a real one does and stays admissible when that set changes.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "trainlet/rendezvous/tunables.h"
#include "trainlet/rendezvous/wire.h"

namespace trainlet::rendezvous {

struct LaunchSettings {
  std::string job_id;               // --job-id (or the downward-API identity)
  std::uint32_t attempt = 0;        // --attempt
  std::uint32_t index = 0;          // completion index of this pod
  std::uint32_t nnodes = 1;         // pods in the gang (--nnodes; elastic: MAX)
  // Elastic --nnodes MIN:MAX: MIN (0 or nnodes: a fixed gang). Config "nnodes"
  // is then "MIN:MAX", so pods that disagree on the range are refused as config.
  std::uint32_t min_nodes = 0;
  std::uint32_t nproc_per_node = 1; // workers per pod (--nproc-per-node)
  std::uint16_t master_port = tunables::kMasterPort;  // trainers' store port (--master-port)
  std::uint32_t max_restarts = 0;   // --max-restarts
  std::string gang{};               // --gang layout, canonical form; empty without it
  bool preflight = false;           // --preflight (gpu/): every pod must run it or none
  std::uint32_t generation = 0;     // the generation this pod asks to join (wire.h Hello)
  std::string job_name{};           // JobSet: this pod's Job (wire.h Hello)
  std::optional<std::uint32_t> job_restart_attempt{};  // JobSet's per-Job count (wire.h Hello)
  std::uint32_t spares = 0;         // --spares: every pod must agree (config "spares" when > 0)
  // No pod has an index: the leader numbers the pods as they join (index
  // wire::kNoIndex until then). Config "ranks" = "arrival": every pod of the
  // gang must agree, so a pod with an index and one without never share one.
  bool ranks_by_arrival = false;
  // Elastic sizes: the restarts counted for `generation` (wire.h Hello::restarts).
  std::optional<std::uint32_t> restarts{};
  std::string node_name{};          // NODE_NAME: the pod's node (wire.h Hello); "" unknown
};

// Whether a launch configuration numbers its pods by arrival (ranks_by_arrival).
bool RanksByArrival(const wire::LaunchConfig& config);

// The launch settings every pod must agree on, as the leader compares them:
// {"nnodes" (N, or "MIN:MAX" when elastic), "nproc_per_node", "master_port",
// "max_restarts", "gang"}, in that
// order, then {"preflight", "1"} when on, then {"spares", K} when K > 0. (The generation is not one of them.)
wire::LaunchConfig MakeLaunchConfig(const LaunchSettings& s);

// The Hello for `s` (config, its fingerprint, identity); no nonce: the caller
// adds one when authenticating with a token.
wire::Hello MakeHello(const LaunchSettings& s);

}  // namespace trainlet::rendezvous
