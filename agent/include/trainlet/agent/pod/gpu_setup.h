// trainlet/agent/pod/gpu_setup.h — the agent's GPU steps, one call each from the pod's wiring.
//
//   leader, assignment round:  MakeNcclIdMaker() -> LeaderOptions::make_nccl_ids
//   every pod, after the assignment: [gpu::RunPreflight(PreflightOptionsFor())], then
//   PrepareGpuWorkers(), before the workers
//   after a worker failure, before classifying: GpuFaultEvidence()
//
// All run on the agent's event-loop thread, except gpu::RunPreflight itself,
// which the pod runs on a thread of its own (it blocks up to
// --preflight-timeout) with PreflightOptionsFor's options; GpuFaultEvidence
// blocks for the NVML check (a few ms, bounded).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainlet/agent/pod/gpu_options.h"
#include "trainlet/exitcodes/status.h"
#include "trainlet/gpu/preflight.h"
#include "trainlet/rendezvous/wire.h"

namespace trainlet::agent {

// The environment of the agent (`env`) is the one PodOptions::env holds: what
// the user set (NCCL_SOCKET_IFNAME, HOSTNAME, NODE_NAME) is read from it.

// The leader's maker of NCCL unique ids: loads `gpu.libnccl` on first use and
// then, every round, makes gpu::RootsFor(world) fresh ids (twice as many with
// --preflight: the trainer's first, then the preflight's). Before the first
// id, when the user set no NCCL_SOCKET_IFNAME, it sets it in this process to
// the interface holding `leader_addr` (the address members reached), because
// ncclGetUniqueId's bootstrap root listens on the interface NCCL picks (NVIDIA/nccl#913).
// Without NCCL it logs once and returns {0, {}}. Empty function when both
// gpu.nccl_ids and gpu.preflight are off (--preflight needs ids even when the
// workers get none).
std::function<std::pair<std::uint32_t, std::vector<std::string>>(std::uint32_t,
                                                                 const std::string&)>
MakeNcclIdMaker(const GpuOptions& gpu, const std::map<std::string, std::string>& env);

// The options of this pod's GPU preflight (gpu::RunPreflight) for an
// assignment: its half of the NCCL ids, GPUs, timeout, the pod's name (pod
// `index`, with `nproc_per_node` workers). Pure.
gpu::PreflightOptions PreflightOptionsFor(const GpuOptions& gpu,
                                          const std::map<std::string, std::string>& env,
                                          std::uint32_t index, std::uint32_t nproc_per_node,
                                          const rendezvous::wire::Assignment& assignment);

// What the workers get beyond torchrun's environment, after the optional
// preflight (`preflight`: its report, or nullptr when none ran; it took
// `preflight_ms`): the trainer's NCCL ids (gpu::WorkerNcclEnv), and, when the
// user set none, NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME for the interface that
// routes to the leader (gpu::SocketIfnameEnv). Errors: the preflight's
// (hardware, infra, terminated), naming pod, rank and GPU. Does not block.
[[nodiscard]] exitcodes::Result<std::map<std::string, std::string>> PrepareGpuWorkers(
    const GpuOptions& gpu, const std::map<std::string, std::string>& env,
    const rendezvous::wire::Assignment& assignment,
    const gpu::PreflightReport* preflight, double preflight_ms = 0);

// NVML's hardware evidence (gpu::HardwareEvidence), or nullopt when the GPUs
// look healthy, NVML is missing, or gpu.health is off.
std::optional<std::string> GpuFaultEvidence(const GpuOptions& gpu);

}  // namespace trainlet::agent
