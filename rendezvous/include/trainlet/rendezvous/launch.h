// trainlet/rendezvous/launch.h — the Hello a pod sends, built in one place.
//
// The agent (agent/src/pod.cc) and the benchmarks' load generator (bench/) both
// build their Hello here, so a simulated pod presents exactly the launch
// configuration a real one does and stays admissible when that set changes.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "trainlet/rendezvous/wire.h"

namespace trainlet::rendezvous {

struct LaunchSettings {
  std::string job_id;               // --job-id (or the downward-API identity)
  std::uint32_t attempt = 0;        // --attempt
  std::uint32_t index = 0;          // completion index of this pod
  std::uint32_t nnodes = 1;         // pods in the gang (--nnodes)
  std::uint32_t nproc_per_node = 1; // workers per pod (--nproc-per-node)
  std::uint16_t master_port = 29500;  // trainers' store port (--master-port)
};

// The launch settings every pod must agree on, as the leader compares them:
// {"nnodes", "nproc_per_node", "master_port"}, in that order.
wire::LaunchConfig MakeLaunchConfig(const LaunchSettings& s);

// The Hello for `s` (config, its fingerprint, identity); no nonce: the caller
// adds one when authenticating with a token.
wire::Hello MakeHello(const LaunchSettings& s);

}  // namespace trainlet::rendezvous
