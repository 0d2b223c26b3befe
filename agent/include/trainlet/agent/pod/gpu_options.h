// trainlet/agent/pod/gpu_options.h — a pod's GPU settings (--preflight, NVML,
// NCCL ids): plain values, set by the front end, read by the pod (pod.h) and
// its GPU steps (gpu_setup.h). No behaviour.
#pragma once

#include <chrono>
#include <string>

#include "trainlet/agent/base/tunables.h"

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
  std::chrono::milliseconds preflight_timeout{kDefaultPreflightTimeout};
  double preflight_min_busbw_gbps = 0;  // GB/s; 0 = no bandwidth floor
  bool require_gpus = false;            // no GPU: HARDWARE instead of "skipped"
  // NVML checks (gpu/health.h) at start and after a worker failure.
  bool health = true;
  std::string self_exe;  // this binary, for `trainlet preflight` children
  std::string libcuda = "libcuda.so.1", libnccl = "libnccl.so.2", libnvml = "libnvml.so.1";
};

}  // namespace trainlet::agent
