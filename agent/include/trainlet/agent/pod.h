// trainlet/agent/pod.h — the life of one pod: rendezvous, run workers, exit.
//
//   identify -> resolve leader -> join gang -> run workers -> stop -> exit
//
// RunPod drives all of it on one Asio event loop in the calling thread and
// returns the process exit code (see exitcodes/exit_code.h). Blocking: it
// returns when the pod is done. Call once, from main, with the handled signals
// already blocked (BlockHandledSignals).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trainlet/agent/identity.h"
#include "trainlet/exitcodes/classify.h"
#include "trainlet/exitcodes/contract.h"

namespace trainlet::agent {

// GPU settings of a pod (gpu/ module; README "GPUs and NCCL").
struct GpuOptions {
  // The leader makes fresh NCCL unique ids for every generation and the workers
  // get them (TRAINLET_NCCL_UNIQUE_ID[S], TRAINLET_NCCL_VERSION). Off: none
  // for the workers (the preflight still gets its own).
  bool nccl_ids = true;
  // --preflight: one NCCL communicator over all GPUs of the gang before the
  // trainer starts (gpu/preflight.h). Needs the same setting on every pod (it
  // is part of the launch configuration the rendezvous compares).
  bool preflight = false;
  std::chrono::milliseconds preflight_timeout{60'000};
  double preflight_min_busbw_gbps = 0;  // GB/s; 0 = no bandwidth floor
  bool require_gpus = false;            // no GPU: HARDWARE instead of "skipped"
  // NVML checks (gpu/health.h) at start and after a worker failure.
  bool health = true;
  std::string self_exe;  // this binary, for `trainlet preflight` children
  std::string libcuda = "libcuda.so.1", libnccl = "libnccl.so.2", libnvml = "libnvml.so.1";
};

struct PodOptions {
  PodIdentity identity;
  std::vector<std::string> command;  // the trainer: argv of every worker
  std::uint16_t rdzv_port = 29400;   // leader's rendezvous port
  std::uint16_t master_port = 29500;  // MASTER_PORT for the trainers' own store
  std::chrono::milliseconds rdzv_timeout{600'000};  // resolve + connect + whole gang in
  std::chrono::milliseconds grace{25'000};          // SIGTERM -> SIGKILL for workers
  // In-place restarts (torchrun's --max-restarts): after a failure of class
  // worker, infra, oom or peer-lost, while fewer than this many restarts were
  // made, every agent stops its workers and joins the rendezvous again for a
  // new generation, without its pod exiting; the trainers see
  // TORCHELASTIC_RESTART_COUNT = the generation. Never for bug, config or
  // hardware (a bad GPU must leave the node), nor after a stop signal, nor once
  // any pod's workers have all succeeded. The new rendezvous is bounded by
  // rdzv_timeout again; a replaced pod (same index, new IP) joins it, and
  // members re-resolve the leader's name (a replaced leader has a new IP).
  std::uint32_t max_restarts = 0;
  // Hang detection (off when zero; rules in hang_policy.h). Each worker gets
  // TRAINLET_HEARTBEAT_FILE and shows progress by touching it (updating its
  // mtime). A worker that touched it and then not again within `hang_timeout`
  // is hung; one that never touched it is hung only when `hang_start_timeout`
  // is set and has passed (otherwise it does not take part). Then the workers'
  // processes that catch `hang_signal` get it (stack dumps, e.g. faulthandler
  // on SIGUSR1; never sent where it would kill), and 2 s later the gang is
  // stopped with class infra, reason "hang".
  std::uint16_t health_port = 0;  // /readyz and /livez (health.h); 0 = off
  std::string token;  // shared token for the rendezvous (rendezvous/auth.h); empty = off
  std::chrono::milliseconds hang_timeout{0};
  std::chrono::milliseconds hang_start_timeout{0};  // zero: no first touch required
  int hang_signal = 10;  // SIGUSR1
  std::map<std::string, std::string> env;  // the agent's environment, passed on to workers
  exitcodes::ExitCodeTable codes;             // --exit-code, --fatal-exit-codes
  exitcodes::MarkerTable markers = exitcodes::MarkerTable::Defaults();  // --marker
  // Where the JSON summary of a non-zero exit goes (Kubernetes'
  // terminationMessagePath). Empty: /dev/termination-log when it exists and is
  // writable, else nowhere.
  std::string termination_log;
  GpuOptions gpu;
};

// The environment torchrun gives a worker, so an unmodified
// init_process_group("env://") trainer works (torch/distributed/run.py,
// torch/distributed/elastic/agent/server/local_elastic_agent.py).
// `base` is the agent's environment; the variables below replace any there:
// RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE,
// ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME, MASTER_ADDR, MASTER_PORT,
// TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS,
// TORCHELASTIC_ERROR_FILE (`error_file`), TORCHELASTIC_USE_AGENT_STORE=False,
// and OMP_NUM_THREADS=1 when unset and the pod runs more than one worker.
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
};
std::vector<std::string> WorkerEnvironment(const std::map<std::string, std::string>& base,
                                           const WorkerPlacement& p);

int RunPod(const PodOptions& options);

}  // namespace trainlet::agent
