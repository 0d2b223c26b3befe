// Class Pod (pod_wiring.h): a generation's GPU preflight, its workers, and
// what is watched of them (heartbeat files: hangs; step rates: stragglers).
#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

#include "pod/pod_wiring.h"
#include "run/resident.h"
#include "trainlet/agent/pod/evidence.h"
#include "trainlet/agent/pod/gpu_setup.h"
#include "trainlet/exitcodes/exit_code.h"

namespace trainlet::agent {

namespace tun = rendezvous::tunables;
using exitcodes::Result;
using exitcodes::Status;

// The preflight blocks (up to --preflight-timeout): on a thread of its own
// (PodGeneration::StartPreflight), so a SIGTERM is still read at once; its
// end is an event like any other.
void Pod::StartPreflight(const rendezvous::wire::Assignment& a) {
  gpu::PreflightOptions po = PreflightOptionsFor(
      options_.gpu, options_.env, options_.identity.index, options_.identity.nproc_per_node, a);
  gen_->StartPreflight(std::move(po), Guard([this, a](double ms, const gpu::PreflightReport& r) {
                         gen_->preflight_running = false;
                         OnGpuPrepared(a, PrepareGpuWorkers(options_.gpu, options_.env, a, &r, ms));
                       }));
}

void Pod::OnGpuPrepared(const rendezvous::wire::Assignment& a,
                        const Result<std::map<std::string, std::string>>& gpu_env) {
  if (concluded_) return;
  if (!gpu_env.ok()) {
    Feed(gang::AgentFailed{gpu_env.status()});
    return;
  }
  std::map<std::string, std::string> base_env = options_.env;
  for (const auto& [k, v] : *gpu_env) base_env[k] = v;
  StartWorkers(a, base_env);
}

Result<std::vector<WorkerSpec>> Pod::MakeSpecs(const rendezvous::wire::Assignment& a,
                                               const std::map<std::string, std::string>& base_env) {
  const PodIdentity& id = options_.identity;
  PodGeneration& g = *gen_;
  const std::string& error_dir = g.dir;  // made before the rendezvous
  auto streams = log_dirs_.ForAttempt(a.run_id, a.generation, id.nproc_per_node, a.rank_base,
                                      id.role_name);
  if (!streams.ok()) return streams.status();
  if (g.number == 0 && !log_dirs_.run_dir().empty()) {
    spdlog::info("worker logs in {}", log_dirs_.run_dir());
  }
  std::vector<WorkerSpec> specs;
  std::vector<std::string> heartbeat_files;
  g.error_files.clear();
  for (std::uint32_t lr = 0; lr < id.nproc_per_node; ++lr) {
    // In the log dir (torchrun's place, kept), else in this generation's folder.
    const std::string& logged = (*streams)[lr].error_file;
    g.error_files.push_back(!logged.empty()       ? logged
                            : error_dir.empty() ? ""
                                                : error_dir + "/error-" + std::to_string(lr) +
                                                      ".json");
    auto env = WorkerEnvironment(base_env, PlacementOf(a, lr));
    if (options_.hang_timeout.count() > 0 && !error_dir.empty()) {
      if (std::string hb = HeartbeatWatch::CreateFile(error_dir, lr); !hb.empty()) {
        heartbeat_files.push_back(hb);
        env.push_back("TRAINLET_HEARTBEAT_FILE=" + hb);
      }
    }
    WorkerStreams& ws = (*streams)[lr];
    specs.push_back({options_.command, std::move(env), std::move(ws.prefix),
                     std::move(ws.stdout_file), std::move(ws.stderr_file), ws.stdout_console,
                     ws.stderr_console});
  }
  if (!heartbeat_files.empty()) g.heartbeats = MakeHeartbeatWatch(std::move(heartbeat_files));
  return specs;
}

// Worker `lr`'s place in the gang (torchrun's environment, worker_env.h).
WorkerPlacement Pod::PlacementOf(const rendezvous::wire::Assignment& a, std::uint32_t lr) const {
  const PodIdentity& id = options_.identity;
  // One line per concern: the place, the store, the restart, the role, JAX.
  return {.local_rank = lr, .nproc_per_node = id.nproc_per_node,
          .group_rank = a.node_rank.value_or(id.index), .nnodes = a.nnodes,
          .rank_base = a.rank_base, .world_size = a.world_size,
          .master_addr = a.master_addr, .master_port = a.master_port, .run_id = a.run_id,
          .error_file = gen_->error_files[lr],
          .restart_count = a.restarts.value_or(a.generation),
          .max_restarts = options_.max_restarts,
          .role_name = id.role_name, .role_rank_base = id.role_rank_base,
          // Elastic: the one role is the whole gang of this generation.
          .role_world_size = id.elastic() ? a.world_size : id.role_world_size,
          .jax_port = a.jax_port,
          .gpu_count = options_.gpu_count, .virtual_local_rank = options_.virtual_local_rank};
}

SupervisorOptions Pod::SupervisorOptionsFor(const rendezvous::wire::Assignment& a) {
  SupervisorOptions so;
  so.grace = options_.grace;
  so.read_ahead_bytes = memory_.read_ahead_bytes;
  so.worker_oom_score_adj = memory_.worker_oom_score_adj;
  so.signal_scope = options_.signal_scope;
  if (options_.json_worker_lines) so.json_lines_rank_base = a.rank_base;
  so.markers = &options_.markers;
  so.on_first_failure = Guard([this](const FirstFailure& f) {
    PodGeneration& g = *gen_;
    g.first_failure_class = ClassOf(f);
    Feed(gang::LocalFailure{*g.first_failure_class,
                            "local rank " + std::to_string(f.local_rank) + " (rank " +
                                std::to_string(g.rank_base + f.local_rank) +
                                ") failed: " + f.exit.Describe(),
                            false});
  });
  return so;
}

void Pod::StartWorkers(const rendezvous::wire::Assignment& a,
                       const std::map<std::string, std::string>& base_env) {
  auto made = MakeSpecs(a, base_env);
  if (!made.ok()) {
    Feed(gang::AgentFailed{made.status()});
    return;
  }
  if (Status s = gen_->StartWorkers(SupervisorOptionsFor(a), std::move(made).value(),
                                    Guard([this](SupervisorResult r) { OnWorkersDone(r); }));
      !s.ok()) {
    Feed(gang::AgentFailed{s});
    return;
  }
  LogWorkersStarted(a);
  EnterAssigned(a);
  // Only now: gang events that arrived early (replayed here) can stop workers.
  StartGangChannel();  // the stall watch runs since the round started (StartRendezvous)
  gen_->StartWatch();
}

void Pod::LogWorkersStarted(const rendezvous::wire::Assignment& a) {
  const std::uint32_t n = options_.identity.nproc_per_node;
  if (a.generation == 0 && gen_->join == 0) {
    spdlog::info("started {} worker(s) {:.1f} ms after start", n, Ms(Clock::now() - started_));
    // Start-up's code is done; the loop from here on touches little of it.
    // Not at once: the whole gang starts its trainers now, and the refaults
    // would compete with them for the CPU.
    release_timer_.expires_after(kReleaseStartupCodeAfter);
    release_timer_.async_wait([](boost::system::error_code ec) {
      if (!ec) ReleaseStartupCode();
    });
  } else if (failed_at_) {
    spdlog::info("generation {}: started {} worker(s) {:.1f} ms after the failure", a.generation,
                 n, Ms(Clock::now() - *failed_at_));
  } else {  // a spare's first workers: this pod saw no failure of its own
    spdlog::info("generation {}: started {} worker(s) {:.1f} ms after start", a.generation, n,
                 Ms(Clock::now() - started_));
  }
}

// The class a worker's failure will have, from what is known when it fails
// (exit status, stderr tail, error file, OOM counter): decides the restart.
exitcodes::FailureClass Pod::ClassOf(const FirstFailure& f) {
  exitcodes::Evidence e;
  e.first_failure = WorkerFailureOf(f);
  e.shm_bytes = SharedMemoryBytes();
  e.shm_free_bytes = SharedMemoryFree();
  gen_->oom_kills_at_failure = e.oom_kills = OomKillsSinceStart();
  return exitcodes::Classify(e, options_.codes, options_.markers).failure_class;
}

exitcodes::WorkerFailure Pod::WorkerFailureOf(const FirstFailure& f) const {
  const PodGeneration& g = *gen_;
  exitcodes::WorkerFailure w;
  w.local_rank = f.local_rank;
  w.rank = static_cast<int>(g.rank_base) + f.local_rank;
  w.exit = f.exit;
  w.stderr_tail = g.supervisor->StderrTail(f.local_rank);
  w.stream_marker = g.supervisor->StreamMarker(f.local_rank);
  w.last_exception = g.supervisor->LastException(f.local_rank);
  if (f.local_rank >= 0 && static_cast<std::size_t>(f.local_rank) < g.error_files.size() &&
      !g.error_files[f.local_rank].empty()) {
    w.error_file_message = ReadErrorFileMessage(g.error_files[f.local_rank]);
  }
  return w;
}

// Stops our workers (idempotent); with a diagnostics signal (a hang
// somewhere in the gang) the workers get it first, for stack dumps.
void Pod::StopWorkers(int diagnostics_signal) {
  gen_->StopWorkers(diagnostics_signal, tun::kDiagnosticsDelay);
}

void Pod::OnWorkersDone(const SupervisorResult& r) {
  PodGeneration& g = *gen_;
  phase_ms_[g.number == 0 ? "run" : "run_generation_" + std::to_string(g.number)] =
      Ms(Clock::now() - g.workers_started);
  // Each worker's exit under its class: the first failure's own, the workers
  // stopped after it (or after a stop request) peer_failed or terminated, ok.
  std::optional<std::string> first_class;
  if (r.first_failure) {
    first_class = std::string(exitcodes::ClassName(
        g.first_failure_class.value_or(exitcodes::FailureClass::kWorker)));
  }
  meters_.CountWorkerExits(options_.identity.nproc_per_node, first_class, r.collateral,
                           r.stop_signal.has_value());
  g.own_result = r;
  Feed(gang::WorkersDone{!r.first_failure && !r.stop_signal && !r.peer_stop});
}

std::unique_ptr<HeartbeatWatch> Pod::MakeHeartbeatWatch(std::vector<std::string> files) {
  HeartbeatWatch::Callbacks cb;
  cb.watching = [this] {
    const PodGeneration& g = *gen_;
    return g.supervisor && !g.own_result && !g.supervisor->stopping();
  };
  cb.running = [this](int lr) { return gen_->supervisor->running(lr); };
  cb.on_look = Guard([this] { UpdateStepRates(); });
  cb.on_hang = Guard([this](const std::string& hung) {
    spdlog::error("hang: {}; sending {} for diagnostics, stopping in {} s", hung,
                  exitcodes::SignalName(options_.hang_signal),
                  std::chrono::duration_cast<std::chrono::seconds>(tun::kDiagnosticsDelay).count());
    // The policy asks for the diagnostics signal, then the stop (StopWorkers).
    Feed(gang::LocalFailure{exitcodes::FailureClass::kInfra, "hang: " + hung, true});
  });
  HangOptions hang{.timeout = options_.hang_timeout,
                   .start_timeout = options_.hang_start_timeout.count() > 0
                                        ? std::optional(options_.hang_start_timeout)
                                        : std::nullopt};
  return std::make_unique<HeartbeatWatch>(io_.get_executor(), hang, std::move(files),
                                          std::move(cb));
}

// After each look at the heartbeat files: a member sends its slowest
// worker's step rate to the leader; the leader looks for stragglers.
void Pod::UpdateStepRates() {
  PodGeneration& g = *gen_;
  if (!g.heartbeats || !g.heartbeats->measures_steps()) return;
  std::vector<bool> running;
  for (std::size_t lr = 0; lr < g.heartbeats->files().size(); ++lr) {
    running.push_back(g.supervisor->running(static_cast<int>(lr)));
  }
  const auto own = g.heartbeats->Slowest(running);
  if (g.member) {
    g.member->SetStepRate(own ? static_cast<std::uint32_t>(std::min(own->first * 1000, 4e9)) : 0,
                          own ? g.rank_base + own->second : 0);
    return;
  }
  if (!g.leader) return;
  std::map<std::uint32_t, double> rates;
  std::map<std::uint32_t, std::uint32_t> ranks;
  if (own) {
    rates[options_.identity.index] = own->first;
    ranks[options_.identity.index] = g.rank_base + own->second;
  }
  for (const auto& [pod, p] : g.leader->peer_stats()) {
    if (p.step_rate_milli == 0) continue;
    rates[pod] = p.step_rate_milli / 1000.0;
    ranks[pod] = p.slowest_rank;
  }
  g.stragglers.Look(rates, ranks);
}

// OOM kills the memory cgroup counted since the workers started (v2
// memory.events or v1 memory.oom_control; evidence.h).
std::uint64_t Pod::OomKillsSinceStart() const {
  auto now = ReadOomKillCount();
  const auto& baseline = gen_->oom_baseline;
  return now && baseline && *now > *baseline ? *now - *baseline : 0;
}

}  // namespace trainlet::agent
