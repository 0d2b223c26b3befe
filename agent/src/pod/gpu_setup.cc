#include "trainlet/agent/pod/gpu_setup.h"

#include <cstdlib>
#include <memory>

#include <spdlog/spdlog.h>

#include "trainlet/gpu/health.h"
#include "trainlet/gpu/nccl.h"
#include "trainlet/gpu/netif.h"
#include "trainlet/gpu/preflight.h"

namespace trainlet::agent {

using exitcodes::Result;
using exitcodes::Status;

std::function<std::pair<std::uint32_t, std::vector<std::string>>(std::uint32_t,
                                                                 const std::string&)>
MakeNcclIdMaker(const GpuOptions& gpu_options, const std::map<std::string, std::string>& env) {
  if (!gpu_options.nccl_ids && !gpu_options.preflight) return {};
  struct State {
    bool tried = false;
    std::shared_ptr<const gpu::Nccl> nccl;
  };
  auto state = std::make_shared<State>();
  return [state, gpu = gpu_options, env](std::uint32_t world,
                                                      const std::string& leader_addr)
             -> std::pair<std::uint32_t, std::vector<std::string>> {
    if (!state->tried) {
      state->tried = true;
      if (!env.contains("NCCL_SOCKET_IFNAME") && leader_addr != "127.0.0.1") {
        if (auto ifs = gpu::ListInterfaces(); ifs.ok()) {
          std::string name = gpu::InterfaceWithAddress(leader_addr, *ifs);
          if (!name.empty()) {
            // Before NCCL reads it (once, at its first call).
            ::setenv("NCCL_SOCKET_IFNAME", name.c_str(), 1);
            spdlog::info("NCCL bootstrap root on {} ({})", name, leader_addr);
          }
        }
      }
      auto nccl = gpu::Nccl::Load(gpu.libnccl);
      if (!nccl.ok()) {
        spdlog::info("{}; the workers get no NCCL unique id", nccl.status().message());
        return {};
      }
      state->nccl = std::move(nccl).value();
    }
    if (!state->nccl) return {};
    std::uint32_t roots = gpu::RootsFor(world);
    auto ids = state->nccl->MakeUniqueIds(gpu.preflight ? 2 * roots : roots);
    if (!ids.ok()) {
      spdlog::warn("{}; the workers get no NCCL unique id", ids.status().message());
      return {};
    }
    return {ids->nccl_version, std::move(ids->ids)};
  };
}

namespace {

// The trainer's and the preflight's halves of the assignment's NCCL ids.
std::pair<gpu::UniqueIds, gpu::UniqueIds> SplitIds(const GpuOptions& g,
                                                   const rendezvous::wire::Assignment& a) {
  gpu::UniqueIds trainer{a.nccl_version, a.nccl_ids}, preflight{a.nccl_version, {}};
  if (g.preflight && !a.nccl_ids.empty()) {
    // The leader made the trainer's ids, then as many for the preflight.
    std::size_t half = a.nccl_ids.size() / 2;
    trainer.ids.assign(a.nccl_ids.begin(), a.nccl_ids.begin() + static_cast<std::ptrdiff_t>(half));
    preflight.ids.assign(a.nccl_ids.begin() + static_cast<std::ptrdiff_t>(half), a.nccl_ids.end());
  }
  return {trainer, preflight};
}

}  // namespace

gpu::PreflightOptions PreflightOptionsFor(const GpuOptions& g,
                                          const std::map<std::string, std::string>& env,
                                          std::uint32_t index, std::uint32_t nproc_per_node,
                                          const rendezvous::wire::Assignment& a) {
  gpu::PreflightOptions po;
  po.self_exe = g.self_exe;
  po.env = env;
  po.env["TRAINLET_LIBCUDA"] = g.libcuda;
  po.env["TRAINLET_LIBNCCL"] = g.libnccl;
  po.rank_base = a.rank_base;
  po.nproc_per_node = nproc_per_node;
  po.world_size = a.world_size;
  po.ids = SplitIds(g, a).second;
  po.timeout = g.preflight_timeout;
  po.min_busbw_gbps = g.preflight_min_busbw_gbps;
  po.require_gpus = g.require_gpus;
  // HOSTNAME is the pod's name on Kubernetes.
  auto host = env.find("HOSTNAME");
  po.pod = (host != env.end() ? host->second + " " : std::string()) + "(index " +
           std::to_string(index) + ")";
  if (auto it = env.find("NODE_NAME"); it != env.end()) {
    po.pod += " on node " + it->second;
  }
  return po;
}

Result<std::map<std::string, std::string>> PrepareGpuWorkers(
    const GpuOptions& g, const std::map<std::string, std::string>& env,
    const rendezvous::wire::Assignment& a, const gpu::PreflightReport* preflight,
    double preflight_ms) {
  std::map<std::string, std::string> out;
  if (preflight != nullptr) {
    const gpu::PreflightReport& r = *preflight;
    for (const auto& rank : r.ranks) spdlog::debug("preflight rank {}: {}", rank.rank, rank.json);
    if (!r.status.ok()) return r.status;
    spdlog::info("preflight {:.0f} ms: {}", preflight_ms, r.summary);
  }
  if (g.nccl_ids) {
    for (const auto& [k, v] : gpu::WorkerNcclEnv(SplitIds(g, a).first)) out[k] = v;
  }
  // The interface toward the leader (SocketIfnameEnv lists the interfaces only
  // where it needs them: not for one pod or a loopback leader).
  {
    auto socket_env =
        gpu::SocketIfnameEnv(env, a.master_addr, a.nnodes, gpu::ListInterfaces);
    if (socket_env.ok()) {
      for (const auto& [k, v] : *socket_env) {
        spdlog::info("{}={} (the interface that routes to the leader {})", k, v, a.master_addr);
        out[k] = v;
      }
    } else {
      spdlog::warn("no interface toward the leader: {}", socket_env.status().message());
    }
  }
  return out;
}

std::optional<std::string> GpuFaultEvidence(const GpuOptions& g) {
  if (!g.health) return std::nullopt;
  gpu::HealthReport r = gpu::CheckHealthInChild(g.libnvml, std::chrono::milliseconds(0),
                                                std::chrono::seconds(10));
  if (!r.available) {
    spdlog::debug("GPU health: {}", r.detail);
    return std::nullopt;
  }
  return gpu::HardwareEvidence(r);
}

}  // namespace trainlet::agent
