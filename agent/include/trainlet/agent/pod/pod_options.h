// trainlet/agent/pod/pod_options.h — what one pod is asked to run and how
// (RunPod, pod.h): its identity, the trainer, the rendezvous, the GPU setup,
// the logs and the tunables of its supervision. A plain value; the front end
// (front/) fills it, the pod's wiring (src/pod/pod_wiring.h) keeps its copy.
#pragma once


#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trainlet/agent/pod/gpu_options.h"
#include "trainlet/agent/spec/identity.h"
#include "trainlet/agent/run/launch_check.h"
#include "trainlet/agent/run/supervision_policy.h"
#include "trainlet/agent/base/tunables.h"
#include "trainlet/agent/run/worker_env.h"
#include "trainlet/agent/run/worker_logs.h"
#include "trainlet/exitcodes/classify.h"
#include "trainlet/exitcodes/contract.h"

namespace trainlet::agent {

struct PodOptions {
  PodIdentity identity;
  std::vector<std::string> command;  // the trainer: argv of every worker
  LaunchCheck launch_check;          // checked with `command` before the rendezvous
  std::uint16_t rdzv_port = kDefaultRdzvPort;  // leader's rendezvous port
  // A socket bound to rdzv_port and listening, which the first leader takes
  // over (ranks by arrival: RunPod's ClaimEndpoint, rendezvous/arrival.h); -1: none.
  int rdzv_listen_fd = -1;
  std::uint16_t master_port = 0;  // MASTER_PORT for the trainers' store; 0: the leader picks a free one
  // Resolve + connect + the whole gang in (--rdzv-timeout).
  std::chrono::milliseconds rdzv_timeout{kDefaultRdzvTimeout};
  std::chrono::milliseconds grace{kDefaultGrace};  // SIGTERM -> SIGKILL for workers
  SignalScope signal_scope = SignalScope::kMain;     // --signal-scope (supervision_policy.h)
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
  // is set and has passed (otherwise it does not take part). Then each
  // worker's main process gets `hang_signal` if it catches it (with
  // SignalScope::kGroup, every process of its group that does; stack dumps,
  // e.g. faulthandler on SIGUSR1; never sent where it would kill), and 2 s
  // later the gang is stopped with class infra, reason "hang".
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
  // Stragglers (stragglers.h): with heartbeat files (hang_timeout), the leader
  // names a pod whose slowest worker's step rate is this many times below the
  // gang's median; 0 = off.
  double straggler_factor = 2;
  // --worker-log-format json: each worker line as one JSON object (pump.h).
  bool json_worker_lines = false;
  GpuOptions gpu;
  WorkerLogOptions logs;  // per-rank log files (worker_logs.h)
  // torchrun's --local-addr on the leader: MASTER_ADDR for every pod ("" = the
  // address each member reached the leader on).
  std::string local_addr;
  // --rdzv-conf read_timeout: a connection's time to send its hello (0 = the default).
  std::chrono::milliseconds rdzv_read_timeout{0};
  // torch's last_call_timeout (formation_policy.h): with MIN pods joined, how
  // long a round waits for more (hot spares: N of N + K).
  std::chrono::milliseconds rdzv_last_call{kDefaultLastCall};
  // On the leader: the port handed out for JAX_COORDINATOR_ADDRESS (0 = no JAX_* variables).
  std::uint16_t jax_port = kDefaultJaxPort;
  std::uint32_t gpu_count = 0;  // GPUs found at start (JAX_LOCAL_DEVICE_IDS); 0 = unknown
  // Said at the end of the start line: the workers' interpreter and where it
  // came from (torchrun.h ChooseInterpreter), when they run one; "" = nothing.
  std::string interpreter;
  bool virtual_local_rank = false;  // torchrun's --virtual-local-rank (WorkerPlacement)
};

}  // namespace trainlet::agent
