// pod/pod_generation.h — one generation of a pod, as one object: everything an
// in-place restart replaces (the rendezvous round and its leader or member
// handle, the supervisor and its workers' files, the heartbeat watch, the
// step rates, the generation's timers and the GPU preflight thread), and what
// it does with them: it starts its round, its preflight, its workers and
// their heartbeat watch, and stops its workers.
//
// Its phase is kept in step with the gang policy's generation (gang_policy.h
// G10): the pod feeds the policy Assigned exactly when the generation enters
// kRunning or kSpare, and retires it exactly when the policy's actions end it
// (a next generation decided, or the pod's conclusion); a retired generation's
// callbacks reach nothing (Pod::Guard drops them), so the pod's clock and the
// policy's cannot drift apart.
//
// The pod (pod_wiring.h) holds the current generation; a restart destroys it
// whole and makes the next one, so no field can carry over by mistake. What
// outlives a generation (the pod's counters, the roster of a leader with
// spares, the first gang's name checks) is the pod's own. One event-loop
// thread; the preflight thread touches only what it was given.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "trainlet/agent/observe/heartbeat_watch.h"
#include "trainlet/agent/pod/evidence.h"
#include "trainlet/agent/observe/stragglers.h"
#include "trainlet/agent/run/supervisor.h"
#include "trainlet/exitcodes/status.h"
#include "trainlet/gpu/preflight.h"
#include "trainlet/rendezvous/leader.h"
#include "trainlet/rendezvous/member.h"

namespace trainlet::agent {

class PodGeneration : public std::enable_shared_from_this<PodGeneration> {
 public:
  using Clock = std::chrono::steady_clock;

  // Where the generation is. Only forward: kJoining -> kPreparing -> kRunning,
  // kJoining -> kSpare; any phase -> kRetired.
  enum class Phase {
    kJoining,    // its rendezvous round runs
    kPreparing,  // assigned with workers: GPU setup, the preflight (the policy still joins)
    kRunning,    // its workers started; the policy's generation is this one (Assigned fed)
    kSpare,      // assigned as a hot spare, no workers; the policy's generation is this one
    kRetired,    // the policy ended it (a next generation, or the pod's end): inert
  };

  // Generation `join` of a pod whose leader names stragglers by
  // `straggler_factor`; its timers and objects run on `executor`. Make it
  // with std::make_shared (its timers' handlers hold it weakly).
  PodGeneration(boost::asio::any_io_executor executor, std::uint32_t join,
                double straggler_factor);
  // Close(), then the preflight thread is cancelled and joined.
  ~PodGeneration();
  PodGeneration(const PodGeneration&) = delete;
  PodGeneration& operator=(const PodGeneration&) = delete;

  Phase phase() const { return phase_; }
  bool joining() const { return phase_ == Phase::kJoining; }
  bool spare() const { return phase_ == Phase::kSpare; }
  bool retired() const { return phase_ == Phase::kRetired; }

  // ---- Its rendezvous round (kJoining) ----
  // The round starts now (round_started); `on_deadline` runs `timeout`
  // (--rdzv-timeout) later unless the round was assigned first (or the
  // generation was closed or retired).
  void StartRound(Clock::duration timeout, std::function<void()> on_deadline);
  // Index 0: listens on `port` (errors: Leader::Listen's) and starts the
  // round with this pod's hello `own`; `done` gets the assignment.
  exitcodes::Status StartLeader(std::uint16_t port, rendezvous::LeaderOptions options,
                                const rendezvous::wire::Hello& own, rendezvous::Leader::Done done);
  // Every other index: joins the leader (errors: Member::Create's).
  exitcodes::Status StartMember(const rendezvous::MemberOptions& options,
                                rendezvous::Member::Done done);
  // The round ended with this pod's place in generation `generation`: its
  // workers are to start (kPreparing), or, `spare`, it waits as a hot spare
  // (kSpare: the caller feeds the policy Assigned now).
  void Assign(std::uint32_t generation, std::uint32_t first_rank, bool spare);

  // ---- Before the workers (kPreparing) ----
  // Runs gpu::RunPreflight(po) on a thread of its own (it blocks up to its
  // timeout); `done` is posted to the executor with the milliseconds it took
  // and its report. The thread logs nothing (the log sink is the loop's).
  void StartPreflight(gpu::PreflightOptions po,
                      std::function<void(double ms, const gpu::PreflightReport&)> done);
  // Cancels the preflight (if it runs) and joins its thread.
  void JoinPreflight();

  // ---- The workers (kPreparing -> kRunning) ----
  // Starts `specs` under a supervisor (errors: Supervisor::Start's; then no
  // supervisor is kept); `done` runs once every worker is gone. kRunning on
  // success: the caller feeds the policy Assigned now.
  exitcodes::Status StartWorkers(SupervisorOptions options, std::vector<WorkerSpec> specs,
                                 Supervisor::Done done);
  // Starts the heartbeat watch (--hang-timeout), if there is one.
  void StartWatch();
  // Stops the workers (idempotent); with `diagnostics_signal` (a hang in the
  // gang: stack dumps) it is sent first and the stop follows `delay` later.
  void StopWorkers(int diagnostics_signal, Clock::duration delay);

  // The policy ended this generation (kRetired): nothing of it acts any more.
  void Retire() { phase_ = Phase::kRetired; }
  // Ends what is live (idempotent): closes the leader's or member's sockets,
  // cancels the timers, stops the heartbeat watch and removes the files'
  // directory. The supervisor stays (its callbacks may be on the stack).
  void Close();

  // Which generation.
  std::uint32_t join = 0;    // the generation this pod asks to join
  std::uint32_t number = 0;  // the generation it runs (the assignment's): phase names, logs

  // The rendezvous round.
  Clock::time_point round_started{};
  std::shared_ptr<rendezvous::Leader> leader;  // index 0
  std::shared_ptr<rendezvous::Member> member;  // every other index
  std::uint32_t rank_base = 0;                 // the global rank of local rank 0

  // The workers' error and heartbeat files (run_dir.h): this generation's
  // directory ("" if none) and TORCHELASTIC_ERROR_FILE by local rank.
  std::string dir;
  std::vector<std::string> error_files;

  // The GPU preflight, off the loop.
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
  boost::asio::steady_timer verdict_timer;     // member: bounded wait for the leader's Stop
  boost::asio::steady_timer settle_timer;      // leader: the leaves' settle window (membership.h M7)

  // The own-stall clock: ticks from the hello on (pod_stall.cc).
  bool stall_watch = false;
  Clock::time_point last_tick{};
  // A stall past the limit seen while joining, and when it ended: it makes
  // the pod the culprit only if its assignment was waiting when it resumed.
  std::optional<Clock::time_point> joining_stall_ended;
  boost::asio::steady_timer stall_timer;

 private:
  boost::asio::any_io_executor executor_;
  Phase phase_ = Phase::kJoining;
  boost::asio::steady_timer deadline_timer_;  // --rdzv-timeout
  boost::asio::steady_timer diag_timer_;      // diagnostics signal -> stop
  std::thread preflight_thread_;
  std::shared_ptr<std::atomic<bool>> preflight_cancel_;
};

}  // namespace trainlet::agent
