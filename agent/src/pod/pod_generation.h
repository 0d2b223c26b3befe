// pod/pod_generation.h — one generation of a pod, as one value: everything an
// in-place restart replaces (the rendezvous round and its leader or member
// handle, the supervisor and its workers' files, the heartbeat watch, the
// step rates, the generation's timers and the GPU preflight thread).
//
// The pod (pod.cc) holds the current generation; a restart destroys it whole
// and makes the next one, so no field can carry over by mistake. What outlives
// a generation (the pod's counters, the roster of a leader with spares, the
// first gang's name checks) is the pod's own. Callbacks of a generation's
// objects are wrapped by Pod::Guard, which runs them only while their
// generation is the current one. One event-loop thread; the preflight thread
// touches only what it was given.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "trainlet/agent/observe/heartbeat_watch.h"
#include "trainlet/agent/observe/stragglers.h"
#include "trainlet/agent/run/supervisor.h"
#include "trainlet/exitcodes/status.h"
#include "trainlet/rendezvous/leader.h"
#include "trainlet/rendezvous/member.h"

namespace trainlet::agent {

struct PodGeneration {
  using Clock = std::chrono::steady_clock;

  // Generation `join` of a pod whose leader names stragglers by `straggler_factor`.
  PodGeneration(boost::asio::any_io_executor executor, std::uint32_t join,
                double straggler_factor);
  // Close(), then the preflight thread is cancelled and joined.
  ~PodGeneration();
  PodGeneration(const PodGeneration&) = delete;
  PodGeneration& operator=(const PodGeneration&) = delete;

  // Ends what is live (idempotent): closes the leader's or member's sockets,
  // cancels the timers, stops the heartbeat watch and removes the files'
  // directory. The supervisor stays (its callbacks may be on the stack).
  void Close();
  // Cancels the preflight (if it runs) and joins its thread.
  void JoinPreflight();

  // Which generation.
  std::uint32_t join = 0;    // the generation this pod asks to join
  std::uint32_t number = 0;  // the generation it runs (the assignment's): phase names, logs

  // The rendezvous round.
  Clock::time_point round_started{};
  bool in_rendezvous = false;
  std::shared_ptr<rendezvous::Leader> leader;  // index 0
  std::shared_ptr<rendezvous::Member> member;  // every other index
  boost::asio::steady_timer deadline_timer;    // --rdzv-timeout
  bool spare = false;                          // assigned as a hot spare: no workers
  std::uint32_t rank_base = 0;                 // the global rank of local rank 0

  // The workers' error and heartbeat files (run_dir.h): this generation's
  // directory ("" if none) and TORCHELASTIC_ERROR_FILE by local rank.
  std::string dir;
  std::vector<std::string> error_files;

  // The GPU preflight, off the loop.
  std::thread preflight_thread;
  std::shared_ptr<std::atomic<bool>> preflight_cancel;
  bool preflight_running = false;

  // The workers, and what is watched of them.
  std::unique_ptr<Supervisor> supervisor;
  std::unique_ptr<HeartbeatWatch> heartbeats;  // with --hang-timeout
  StragglerBoard stragglers;                   // leader: the gang's step rates
  Clock::time_point workers_started{};
  std::optional<std::uint64_t> oom_baseline;          // memory cgroup oom_kill before the workers
  std::optional<std::uint64_t> oom_kills_at_failure;  // counted up to the first failure
  std::optional<exitcodes::FailureClass> first_failure_class;
  std::optional<SupervisorResult> own_result;  // set when the workers are all gone
  bool failure_seen = false;                   // the generation's first failure was seen
  boost::asio::steady_timer diag_timer;        // diagnostics signal -> stop
  boost::asio::steady_timer verdict_timer;     // member: bounded wait for the leader's Stop
  boost::asio::steady_timer settle_timer;      // leader: the leaves' settle window (membership.h M7)

  // The own-stall clock: ticks while the control channel runs.
  bool stall_watch = false;
  Clock::time_point last_tick{};
  boost::asio::steady_timer stall_timer;
};

}  // namespace trainlet::agent
