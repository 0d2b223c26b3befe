// trainlet/gpu/preflight.h — check that NCCL works across the gang before training.
//
// `trainlet --preflight` runs, after the rendezvous and before the trainer, one
// short-lived child per local worker (`trainlet preflight`, so PID 1 never holds
// a CUDA context). Each child takes GPU LOCAL_RANK, joins one NCCL communicator
// over every GPU of the gang with a non-blocking init (ncclCommInitRankConfig,
// blocking=0) polled with ncclCommGetAsyncError and aborted (ncclCommAbort) at
// the deadline, all-reduces known values (rank r contributes r+1, so every
// element must equal W(W+1)/2), and times a few all-reduces for the bus
// bandwidth (nccl-tests' busbw = algbw * 2(W-1)/W). It prints one JSON line and
// exits with the class of its outcome:
//   0   ok (or skipped: no GPU)
//   74  hardware: a CUDA call failed (no device at LOCAL_RANK, allocation,
//       ECC...), NCCL reported ncclUnhandledCudaError, or the all-reduce
//       returned a wrong value
//   75  infra: NCCL init or the all-reduce timed out or failed
//       (ncclSystemError, ncclRemoteError...), NCCL is missing while GPUs are
//       present (here, or on the leader: no unique id), or the bus bandwidth is below --preflight-min-busbw (a
//       degraded fabric is retriable elsewhere)
//   78  config: the child's environment is malformed
// No GPU: "no GPU: preflight skipped" (ok) unless --require-gpus, which makes it
// hardware (74): on Kubernetes a pod that asked for GPUs and has none sits on a
// node whose driver or device plugin is broken; another node may do.
// RunPreflight blocks (at most the timeout plus a few seconds) and returns
// early on a pending SIGTERM/SIGINT, which it leaves pending, or when
// `cancel` is set; the agent runs it on a thread of its own, off the event loop.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trainlet/exitcodes/status.h"
#include "trainlet/gpu/nccl.h"

namespace trainlet::gpu {

struct PreflightOptions {
  std::string self_exe;                 // the trainlet binary, run as `<self_exe> preflight`
  std::map<std::string, std::string> env;  // the agent's environment, given to the children
  std::uint32_t rank_base = 0;          // global rank of local rank 0
  std::uint32_t nproc_per_node = 1;     // children (GPUs) on this pod
  std::uint32_t world_size = 1;         // ranks (GPUs) in the gang
  UniqueIds ids;                        // fresh ids for this communicator only
  std::chrono::milliseconds timeout{60'000};  // NCCL init + all-reduces, per child
  double min_busbw_gbps = 0;            // GB/s (1e9 bytes/s); 0 = no bandwidth check
  bool require_gpus = false;
  std::size_t bytes = 64 << 20;         // all-reduce size, bytes
  std::string pod;                      // pod name, for messages
  // Set (by another thread) to end the preflight early: the children are
  // killed and the status is terminated. Checked every 100 ms. Not owned.
  const std::atomic<bool>* cancel = nullptr;
};

// One child's outcome (its JSON line).
struct PreflightRank {
  std::uint32_t rank = 0;
  std::uint32_t local_rank = 0;
  exitcodes::FailureClass failure_class = exitcodes::FailureClass::kOk;
  bool skipped = false;
  std::string gpu;     // UUID, or "GPU <index>"
  std::string reason;  // one line
  double init_ms = 0;
  double busbw_gbps = 0;
  std::string json;    // the line as printed
};

struct PreflightReport {
  exitcodes::Status status;           // OK, or the class and one line naming pod, rank and GPU
  bool skipped = false;               // no GPU (and not required)
  std::vector<PreflightRank> ranks;   // per local rank, in order
  std::string summary;                // one line for the log
};

// Spawns the children and waits for them (see the file comment). The returned
// status is never kOk with a failed rank; with several failures, hardware wins
// over infra (a timeout on the others is usually the consequence), then the
// lowest rank.
PreflightReport RunPreflight(const PreflightOptions& options);

// The `trainlet preflight` child: reads TRAINLET_PREFLIGHT_{RANK,LOCAL_RANK,
// WORLD_SIZE,TIMEOUT_MS,MIN_BUSBW,REQUIRE_GPUS,BYTES} and the ids
// (TRAINLET_NCCL_UNIQUE_ID[S], TRAINLET_NCCL_VERSION), loads TRAINLET_LIBCUDA /
// TRAINLET_LIBNCCL (defaults libcuda.so.1, libnccl.so.2), prints one JSON line
// on stdout and returns the exit status above.
int PreflightChildMain();

// Parses one child's JSON line (the fields above); false when it is not one.
bool ParsePreflightLine(const std::string& line, PreflightRank* out);

}  // namespace trainlet::gpu
