// trainlet/agent/run/worker_env.h — the environment of a worker process: what
// torchrun sets for each worker it starts. Pure functions, any thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace trainlet::agent {

// The environment torchrun gives a worker, so an unmodified
// init_process_group("env://") trainer works (torch/distributed/run.py,
// torch/distributed/elastic/agent/server/local_elastic_agent.py).
// `base` is the agent's environment; the variables below replace any there:
// RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE,
// ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME, MASTER_ADDR, MASTER_PORT,
// TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS,
// TORCHELASTIC_ERROR_FILE (`error_file`), TORCHELASTIC_USE_AGENT_STORE=False,
// and OMP_NUM_THREADS=1 when unset and the pod runs more than one worker;
// TORCH_NCCL_ASYNC_ERROR_HANDLING and NCCL_ASYNC_ERROR_HANDLING (torch < 2.2)
// as torchrun sets them: the value of whichever `base` has (TORCH_ first),
// else 1; a variable `base` has is never replaced.
// JAX (jax.distributed.initialize, https://jax.readthedocs.io/en/latest/
// multi_process.html), when jax_port is not 0: JAX_COORDINATOR_ADDRESS =
// MASTER_ADDR:jax_port ([v6]:port), JAX_NUM_PROCESSES = WORLD_SIZE,
// JAX_PROCESS_ID = RANK, and with gpu_count GPUs in the pod (a multiple of
// nproc_per_node) JAX_LOCAL_DEVICE_IDS = this local rank's share, e.g. "2,3".
// Roles as torchrun's WorkerSpec.role has them (torch/distributed/elastic/agent/
// server/api.py): ROLE_NAME is the role, ROLE_RANK = RANK - role_rank_base (the
// rank among the role's workers), ROLE_WORLD_SIZE the role's workers; without
// roles one role "default" spans the whole world.
struct WorkerPlacement {
  std::uint32_t local_rank = 0;
  std::uint32_t nproc_per_node = 1;
  std::uint32_t group_rank = 0;  // the pod's index
  std::uint32_t nnodes = 1;
  std::uint32_t rank_base = 0;  // global rank of local rank 0
  std::uint32_t world_size = 1;
  std::string master_addr;
  std::uint16_t master_port = 0;
  std::string run_id;
  std::string error_file;
  std::uint32_t restart_count = 0;  // the rendezvous generation
  std::uint32_t max_restarts = 0;
  std::string role_name = "default";
  std::uint32_t role_rank_base = 0;   // global rank of the role's first worker
  std::uint32_t role_world_size = 0;  // workers in the role; 0 = world_size
  std::uint16_t jax_port = 0;         // the JAX coordinator's port on MASTER_ADDR; 0 = none
  std::uint32_t gpu_count = 0;        // GPUs visible to the pod; 0 = none or unknown
  // torchrun's --virtual-local-rank (torch 2.15 local_elastic_agent.py
  // _set_local_rank_env): LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES the local
  // rank's entry of the pod's list (or the local rank when it has none); with
  // HIP_VISIBLE_DEVICES set, that list, and both variables get the entry.
  // The caller checks the list has an entry for every local rank.
  bool virtual_local_rank = false;
};
std::vector<std::string> WorkerEnvironment(const std::map<std::string, std::string>& base,
                                           const WorkerPlacement& p);

// "0, 1,2" -> {"0", "1", "2"}: a *_VISIBLE_DEVICES list split at commas,
// each entry stripped of spaces, as Python's str.split(",") then strip().
std::vector<std::string> SplitDeviceList(const std::string& list);


}  // namespace trainlet::agent
