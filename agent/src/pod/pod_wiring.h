// pod/pod_wiring.h — one pod's run (RunPod, pod.h): the wiring around
// GangPolicy (gang_policy.h). Sockets, timers, the supervisor and signals
// become gang events; the policy's actions become I/O. Nothing here decides
// membership or the gang's outcome: the pure machines do (gang_policy.h
// G1-G12, membership.h M1-M16).
//
// One class, its methods by concern in files of their own:
//   pod.cc            the run, events in and actions out, the end, signals
//   pod_rendezvous.cc each generation's rendezvous round and its assignment
//   pod_workers.cc    the preflight, the workers, their heartbeat watch
//   pod_channel.cc    the gang's control channel, joins, spares' handovers
//   pod_stall.cc      the pod's own stall (SIGSTOP, a frozen node)
//   pod_metrics.cc    /metrics, read on the loop at each scrape
// What one generation owns is one PodGeneration (pod_generation.h), replaced
// whole at a restart; its objects' callbacks go through Guard, so that
// nothing of an old or retired generation acts on a new one. Lives on the
// stack of RunPod; every callback runs on the one event loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "base/output.h"
#include "pod/pod_generation.h"
#include "pod/roster_membership.h"
#include "trainlet/agent/base/metrics.h"
#include "trainlet/agent/observe/health.h"
#include "trainlet/agent/pod/formation_policy.h"
#include "trainlet/agent/pod/gang_policy.h"
#include "trainlet/agent/pod/pod_options.h"
#include "trainlet/agent/run/worker_env.h"
#include "trainlet/agent/run/worker_logs.h"
#include "trainlet/agent/run/signals.h"
#include "trainlet/agent/spec/run_dir.h"
#include "trainlet/exitcodes/termination.h"
#include "trainlet/rendezvous/auth.h"
#include "trainlet/rendezvous/leader_probe.h"
#include "trainlet/rendezvous/name_check.h"
#include "trainlet/rendezvous/tunables.h"

namespace trainlet::agent {

class Pod {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Pod(PodOptions o);
  // Runs the pod to its end; returns its exit code (exit-codes).
  int Run();

 private:
  // ---- pod.cc: the run, the generations, events in and actions out ----
  exitcodes::Status Prepare();
  HealthServer::State HealthNow() const;
  void PlanMemory();
  // Wraps a callback of the current generation's objects so that it runs only
  // while that generation is the pod's current one and not retired: the one
  // check that keeps an old generation's late completions (a timer, a socket,
  // the supervisor, the preflight thread) from acting on the next.
  template <typename F>
  auto Guard(F f) {
    return [this, gen = std::weak_ptr<PodGeneration>(gen_), f = std::move(f)](auto&&... args) {
      if (gen.expired() || gen.lock() != gen_ || gen_->retired()) return;
      f(std::forward<decltype(args)>(args)...);
    };
  }
  exitcodes::Status StartGeneration(std::uint32_t join);
  // The generation's phase and the policy's generation move together: the
  // generation enters kRunning or kSpare as the policy hears Assigned.
  void EnterAssigned(const rendezvous::wire::Assignment& a);
  GangActions Feed(const GangEvent& e);
  void Apply(const GangActions& a);
  void ApplyBroadcast(const GangActions& a);
  void ArmTimer(boost::asio::steady_timer& timer, Clock::duration after, gang::TimerKind kind);
  void PostNextGeneration(bool counted);
  void BeginNextGeneration(bool counted);
  void ConcludeWith(const Conclusion& c);
  void ConcludeFromResult(const Conclusion& c, exitcodes::Evidence& e);
  void Conclude(const exitcodes::Evidence& e);
  void LogConclusion(const exitcodes::Verdict& v, const exitcodes::Evidence& e);
  void OnSignal(int signo);
  void Stop();
  int Fail(const exitcodes::Status& s);
  std::string EnvOr(const std::string& key) const;

  // ---- pod_rendezvous.cc ----
  rendezvous::wire::Hello MakeHelloNow() const;
  exitcodes::Status StartRendezvous();
  void OnRendezvousDeadline();
  FormationConfig FormationNow() const;
  rendezvous::LeaderOptions LeaderOptionsNow();
  void MembershipOptions(rendezvous::LeaderOptions& lo);
  exitcodes::Status StartLeader(const rendezvous::wire::Hello& hello, rendezvous::Leader::Done done);
  exitcodes::Status StartMember(const rendezvous::wire::Hello& hello, rendezvous::Member::Done done);
  void AdoptArrivalIndex(std::uint32_t index, std::optional<std::uint32_t> node_rank);
  void StartLeaderProbe(rendezvous::wire::Hello hello);
  void StartNameCheck();
  void OnAssignment(const exitcodes::Result<rendezvous::wire::Assignment>& result);
  void OnSpareAssignment(const rendezvous::wire::Assignment& a);
  void MakeErrorDir();

  // ---- pod_workers.cc ----
  void StartPreflight(const rendezvous::wire::Assignment& a);
  void OnGpuPrepared(const rendezvous::wire::Assignment& a,
                     const exitcodes::Result<std::map<std::string, std::string>>& gpu_env);
  exitcodes::Result<std::vector<WorkerSpec>> MakeSpecs(
      const rendezvous::wire::Assignment& a, const std::map<std::string, std::string>& base_env);
  WorkerPlacement PlacementOf(const rendezvous::wire::Assignment& a, std::uint32_t lr) const;
  SupervisorOptions SupervisorOptionsFor(const rendezvous::wire::Assignment& a);
  void StartWorkers(const rendezvous::wire::Assignment& a,
                    const std::map<std::string, std::string>& base_env);
  void LogWorkersStarted(const rendezvous::wire::Assignment& a);
  exitcodes::FailureClass ClassOf(const FirstFailure& f);
  exitcodes::WorkerFailure WorkerFailureOf(const FirstFailure& f) const;
  void StopWorkers(int diagnostics_signal);
  void OnWorkersDone(const SupervisorResult& r);
  std::unique_ptr<HeartbeatWatch> MakeHeartbeatWatch(std::vector<std::string> files);
  void UpdateStepRates();
  std::uint64_t OomKillsSinceStart() const;

  // ---- pod_channel.cc ----
  void StartGangChannel();
  bool OnJoin(std::uint32_t index);
  rendezvous::wire::Stop WithReplacement(rendezvous::wire::Stop stop);
  void ListenAhead();
  void NoteReplacement(const rendezvous::wire::Stop& stop);
  void NoteFailureClass(std::uint16_t failure_class);
  void NoteCulprit(const rendezvous::wire::Stop& stop, const PodGeneration& g);

  // ---- pod_stall.cc ----
  void StartStallWatch();
  void Tick();
  void CheckStall();
  void NoteJoiningStall(Clock::duration gap);
  bool StalledAcrossFormation();

  // ---- pod_metrics.cc ----
  MetricsSnapshot Metrics() const;
  std::uint32_t ActivePods() const;

  // How long a member whose own worker failed waits for the leader's word
  // (restart, or who failed first) before it concludes with its own failure.
  static constexpr auto kVerdictTimeout = rendezvous::tunables::kVerdictTimeout;
  // Start-up's code pages are given back this long after the first workers start.
  static constexpr std::chrono::seconds kReleaseStartupCodeAfter{2};

  // What the pod keeps for its whole life (the options, the gang's rules, the
  // loop, the endpoints, the counters); what one generation owns is gen_.
  PodOptions options_;  // a copy: by arrival, the index comes with the assignment
  GangPolicy policy_;
  boost::asio::io_context io_;
  boost::asio::steady_timer release_timer_;  // ReleaseStartupCode, once
  WorkerLogDirs log_dirs_{options_.logs};    // --log-dir, --redirects, --tee
  Clock::time_point started_;
  std::unique_ptr<SignalSource> signals_;
  std::unique_ptr<HealthServer> health_;
  // Until the first gang forms (leader): the name members dial, and a probe
  // for another pod acting as this gang's leader.
  std::shared_ptr<rendezvous::LeaderNameCheck> name_check_;
  std::shared_ptr<rendezvous::LeaderProbe> leader_probe_;
  std::string leader_id_;  // this pod's leader instance id (LeaderOptions::leader_id)
  // Who this pod is beyond its index (wire::Hello::instance_id): drawn once,
  // the same in every generation; sent to the leader alone, never logged.
  const std::string instance_id_ = rendezvous::RandomBytes(rendezvous::wire::kInstanceIdBytes);
  // Leader: the instance ids of the generation that ended by a restart, kept
  // for its survivors in the next round (LeaderOptions::kept_ids).
  std::map<std::uint32_t, std::string> kept_ids_;
  // Leader with --spares or elastic sizes: its roster (the pods across
  // generations, held by policy_'s membership machine: GangPolicy::roster())
  // as the rendezvous leader asks it, and its round's timer.
  RosterMembership roster_membership_{io_.get_executor()};
  RunDirChoice run_dir_;  // where each generation's error and heartbeat files go
  struct MemoryPlan {     // PlanMemory
    std::size_t read_ahead_bytes = kReadAheadMax;
    int worker_oom_score_adj = 0;
  } memory_;
  std::map<std::string, double> phase_ms_;
  PodMeters meters_;                      // metrics.h: restarts, exits, the last failure
  bool gang_formed_ = false;              // some generation's rendezvous completed
  std::uint32_t assigned_nnodes_ = 0;     // the active pods of the last assignment
  // The node rank of the last generation this pod ran workers in (nullopt:
  // none, or a waiting spare then): its hello says it (membership.h M16).
  std::optional<std::uint32_t> held_node_rank_;
  // The last generation's first failure (restart timing); nullopt until one is seen.
  std::optional<Clock::time_point> failed_at_;
  // Hot spares: the spare that takes this pod's node rank as it leaves (the
  // leader's Stop), for the termination message.
  std::optional<exitcodes::Handover> replaced_by_;
  bool was_spare_ = false;  // the last generation assigned this pod as a waiting spare
  bool concluded_ = false;
  int exit_code_ = 0;
  // The current generation (declared after io_: destroyed before it, so its
  // objects' destructors still find the loop alive).
  std::shared_ptr<PodGeneration> gen_;
};

// Milliseconds in `d`, for the log and phase_ms.
inline double Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

}  // namespace trainlet::agent
