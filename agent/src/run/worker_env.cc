#include "trainlet/agent/run/worker_env.h"

#include <algorithm>

#include "trainlet/agent/base/address.h"

namespace trainlet::agent {

namespace {

void VirtualLocalRank(const std::map<std::string, std::string>& base, std::uint32_t local_rank,
                      std::map<std::string, std::string>& env) {
  env["LOCAL_RANK"] = "0";
  auto hip = base.find("HIP_VISIBLE_DEVICES");
  const bool use_hip = hip != base.end() && !hip->second.empty();
  auto list = use_hip ? hip : base.find("CUDA_VISIBLE_DEVICES");
  std::string gpu = std::to_string(local_rank);
  if (list != base.end()) {
    std::vector<std::string> ids = SplitDeviceList(list->second);
    if (local_rank < ids.size()) gpu = ids[local_rank];
  }
  env["CUDA_VISIBLE_DEVICES"] = gpu;
  if (use_hip) env["HIP_VISIBLE_DEVICES"] = gpu;
}

}  // namespace

std::vector<std::string> SplitDeviceList(const std::string& list) {
  std::vector<std::string> ids;
  std::size_t start = 0;
  for (;;) {
    auto comma = list.find(',', start);
    std::string id = list.substr(start, comma - start);
    id.erase(0, id.find_first_not_of(" \t"));
    id.erase(id.find_last_not_of(" \t") + 1);
    ids.push_back(id);
    if (comma == std::string::npos) return ids;
    start = comma + 1;
  }
}

std::vector<std::string> WorkerEnvironment(const std::map<std::string, std::string>& base,
                                           const WorkerPlacement& p) {
  std::map<std::string, std::string> env = base;
  const std::uint32_t rank = p.rank_base + p.local_rank;
  auto set = [&env](const std::string& k, const std::string& v) { env[k] = v; };
  set("RANK", std::to_string(rank));
  set("LOCAL_RANK", std::to_string(p.local_rank));
  set("WORLD_SIZE", std::to_string(p.world_size));
  set("LOCAL_WORLD_SIZE", std::to_string(p.nproc_per_node));
  set("GROUP_RANK", std::to_string(p.group_rank));
  set("GROUP_WORLD_SIZE", std::to_string(p.nnodes));
  set("ROLE_NAME", p.role_name);
  set("ROLE_RANK", std::to_string(rank - std::min(rank, p.role_rank_base)));
  set("ROLE_WORLD_SIZE",
      std::to_string(p.role_world_size == 0 ? p.world_size : p.role_world_size));
  set("MASTER_ADDR", p.master_addr);
  set("MASTER_PORT", std::to_string(p.master_port));
  set("TORCHELASTIC_RUN_ID", p.run_id);
  set("TORCHELASTIC_RESTART_COUNT", std::to_string(p.restart_count));
  set("TORCHELASTIC_MAX_RESTARTS", std::to_string(p.max_restarts));
  if (p.virtual_local_rank) VirtualLocalRank(base, p.local_rank, env);
  // The trainers' rank 0 hosts the store itself (init_process_group env://).
  set("TORCHELASTIC_USE_AGENT_STORE", "False");
  if (!p.error_file.empty()) set("TORCHELASTIC_ERROR_FILE", p.error_file);
  // As torch >= 2.2's agent does (torch/distributed/elastic/agent/server/
  // local_elastic_agent.py): TORCH_NCCL_ASYNC_ERROR_HANDLING=1 unless set, so a
  // collective that times out aborts the communicator instead of hanging. Not
  // the old NCCL_ASYNC_ERROR_HANDLING: torch >= 2.2 warns in every rank when it
  // is set (torch < 2.2 reads only it: README). A user's value of either name
  // passes through untouched, and then nothing is added: torch reads the new
  // name first, so adding it would override the user's old one.
  if (!base.contains("TORCH_NCCL_ASYNC_ERROR_HANDLING") &&
      !base.contains("NCCL_ASYNC_ERROR_HANDLING")) {
    env.try_emplace("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  }
  // JAX on the same gang: jax.distributed.initialize()'s arguments.
  if (p.jax_port != 0) {
    set("JAX_COORDINATOR_ADDRESS", JoinHostPort(p.master_addr, p.jax_port));  // [v6]:port
    set("JAX_NUM_PROCESSES", std::to_string(p.world_size));
    set("JAX_PROCESS_ID", std::to_string(rank));
    // The GPUs this worker drives: LOCAL_RANK's share of the pod's GPUs.
    if (p.gpu_count > 0 && p.gpu_count % p.nproc_per_node == 0) {
      const std::uint32_t per = p.gpu_count / p.nproc_per_node;
      std::string ids;
      for (std::uint32_t g = p.local_rank * per; g < (p.local_rank + 1) * per; ++g) {
        ids += (ids.empty() ? "" : ",") + std::to_string(g);
      }
      set("JAX_LOCAL_DEVICE_IDS", ids);
    }
  }
  // torchrun's default: several workers per pod would otherwise oversubscribe.
  if (p.nproc_per_node > 1 && !env.contains("OMP_NUM_THREADS")) set("OMP_NUM_THREADS", "1");
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

}  // namespace trainlet::agent
