// The pod's run, its generations, events in and actions out, the end and the
// signals (pod_wiring.h says which file holds the rest of class Pod).
#include "trainlet/agent/pod/pod.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <optional>
#include <utility>

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "base/file_util.h"
#include "pod/pod_wiring.h"
#include "run/resident.h"
#include "trainlet/agent/base/log_format.h"
#include "trainlet/agent/pod/evidence.h"
#include "trainlet/agent/pod/gpu_setup.h"
#include "trainlet/agent/run/supervisor.h"
#include "trainlet/exitcodes/exit_code.h"
#include "trainlet/rendezvous/arrival.h"
#include "trainlet/rendezvous/launch.h"

namespace trainlet::agent {

namespace asio = boost::asio;
namespace tun = rendezvous::tunables;
using exitcodes::Status;

Pod::Pod(PodOptions o)
    : options_(std::move(o)),
      policy_({.index = options_.identity.index,
               .nnodes = options_.identity.nnodes,
               .max_restarts = options_.max_restarts,
               .hang_signal = options_.hang_signal,
               .min_nodes = options_.identity.min_pods(),
               .spares = options_.identity.spares}),
      release_timer_(io_) {}

int Pod::Run() {
  started_ = Clock::now();
  const PodIdentity& id = options_.identity;
  // Several agents may share one terminal (trainlet local) or one log stream:
  // every line says which pod wrote it.
  if (id.index != rendezvous::wire::kNoIndex) SetLogPod(id.index);  // log_format.h
  if (::getpid() != 1) {
    // Orphaned grandchildren are re-parented to us instead of to the real
    // init, so we can reap them (prctl(2), PR_SET_CHILD_SUBREAPER).
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  }
  spdlog::info("pod index {} of {} ({}), {} worker(s) per pod, job '{}' attempt {}, {}{}",
               id.index == rendezvous::wire::kNoIndex ? "?" : std::to_string(id.index),
               id.nnodes, id.index_source, id.nproc_per_node, id.job_id, id.attempt,
               ::getpid() == 1 ? "PID 1" : "child subreaper",
               options_.interpreter.empty() ? "" : ", python " + options_.interpreter);
  PlanMemory();
  if (auto notice = UnauthenticatedGangNotice(id, !options_.token.empty(), options_.env)) {
    spdlog::warn("{}", *notice);
  }
  // Output never blocks the loop; what is still queued for a slow reader at
  // exit gets a bounded chance (exiting before the kubelet's SIGKILL matters
  // more).
  ScopedOutputSinks sinks(io_);
  if (Status s = Prepare(); !s.ok()) return Fail(s);
  if (Status s = StartGeneration(0); !s.ok()) return Fail(s);
  io_.run();
  if (gen_) gen_->JoinPreflight();
  return exit_code_;
}

// Before any traffic: the trainer, the run directory, shared memory, the
// signals and the health endpoint.
Status Pod::Prepare() {
  const PodIdentity& id = options_.identity;
  // Input that retrying cannot fix is a config error now, not after the
  // gang formed (or at the rendezvous deadline, waiting for peers).
  if (Status s = CheckLaunch(options_.command, options_.launch_check, options_.env,
                             options_.logs, WorkingDirectory());
      !s.ok()) {
    return s;
  }
  // Error and heartbeat files need a writable directory (read-only images).
  run_dir_ = ChooseRunDir(RunDirCandidates(options_.logs.run_dir, options_.env,
                                           options_.logs.log_dir));
  std::string run_dir_warning;
  if (Status s = JudgeRunDir(run_dir_, !options_.logs.run_dir.empty(),
                             options_.hang_timeout.count() > 0, &run_dir_warning);
      !s.ok()) {
    return s;
  }
  if (!run_dir_warning.empty()) spdlog::warn("{}", run_dir_warning);
  if (std::string w = SmallSharedMemoryWarning(SharedMemoryBytes(), id.nproc_per_node,
                                               options_.gpu_count > 0);
      !w.empty()) {
    spdlog::warn("{}", w);
  }
  auto signals = SignalSource::Create(io_.get_executor(), [this](int s) { OnSignal(s); });
  if (!signals.ok()) return signals.status();
  signals_ = std::move(signals).value();
  if (options_.health_port != 0) {
    auto health = HealthServer::Start(
        io_.get_executor(), options_.health_port, [this] { return HealthNow(); },
        [this] { return RenderMetrics(Metrics()); });
    if (!health.ok()) return health.status();
    health_ = std::move(health).value();
  }
  return Status::Ok();
}

// Ready: the gang formed and our workers run. Live: no hang found.
HealthServer::State Pod::HealthNow() const {
  const PodGeneration* g = gen_.get();
  if (g == nullptr) return HealthServer::State{};
  return HealthServer::State{.ready = g->supervisor != nullptr && !g->own_result,
                             .live = !(g->heartbeats && g->heartbeats->hang()),
                             .spare = g->spare()};
}

// Reads the memory cgroup once: the workers' oom_score_adj and the output
// read-ahead follow from it (supervisor.h), and where the kernel would end
// the whole cgroup at an OOM (memory.oom.group 1) it says so, since the
// agent then cannot report the OOM (exit 137, `trainlet exit-codes`).
void Pod::PlanMemory() {
  const MemoryCgroup m = ReadMemoryCgroup();
  int agent_adj = 0;
  if (auto adj = ReadSmallFile("/proc/self/oom_score_adj")) agent_adj = std::atoi(adj->c_str());
  memory_.worker_oom_score_adj = WorkerOomScoreAdj(agent_adj);
  const std::size_t streams = 2 * static_cast<std::size_t>(options_.identity.nproc_per_node);
  memory_.read_ahead_bytes = ReadAheadBytes(m.limit, streams);
  spdlog::debug("memory limit {}: output read-ahead {} KiB per stream, workers' oom_score_adj {}",
                m.limit ? std::to_string(*m.limit >> 20) + " MiB" : "none",
                memory_.read_ahead_bytes >> 10, memory_.worker_oom_score_adj);
  if (m.oom_group) {
    spdlog::info("memory.oom.group is 1: at an OOM the kernel kills every process of this "
                 "container, trainlet too: exit 137 (OOMKilled), no report of trainlet's");
  }
}

// ---- Generations ----

// Makes generation `join` the current one (the old one, if any, is gone
// by then) and joins its rendezvous.
Status Pod::StartGeneration(std::uint32_t join) {
  gen_.reset();  // closes its sockets and timers, joins its preflight
  gen_ = std::make_shared<PodGeneration>(io_.get_executor(), join, options_.straggler_factor);
  return StartRendezvous();
}

void Pod::EnterAssigned(const rendezvous::wire::Assignment& a) {
  // The leader's waiting spares are its roster's, adopted already (OnAssignment).
  Feed(gang::Assigned{.generation = a.generation,
                      .spare = a.spare,
                      .nnodes = a.nnodes,
                      .restarts = a.restarts});
}

// The next generation was decided and this one's workers are gone: a new
// rendezvous generation, same process.
void Pod::PostNextGeneration(bool counted) {
  // Not from inside the supervisor's or the channel's callback: both go now.
  asio::post(io_, [this, old = std::weak_ptr<PodGeneration>(gen_), counted] {
    if (!concluded_ && !old.expired() && old.lock() == gen_) BeginNextGeneration(counted);
  });
}

void Pod::BeginNextGeneration(bool counted) {
  const std::uint32_t next = policy_.role().generation() + 1;
  const std::uint32_t restarts = policy_.role().restarts();
  SetLogGeneration(next);
  if (counted) {  // a failure or a loss ended the generation (gang_policy.h G12)
    spdlog::info("restart {} of {}: joining the rendezvous for generation {}", restarts,
                 options_.max_restarts, next);
    ++meters_.restarts;
  } else {  // a join, a leave, a swap: the gang goes on without a restart
    spdlog::info("generation {}: joining the rendezvous (the gang changes; {} restart(s) so far)",
                 next, restarts);
  }
  // The old generation goes whole: its workers are gone, its sockets and
  // timers close, its files' directory is removed.
  if (Status s = StartGeneration(next); !s.ok()) Feed(gang::AgentFailed{s});
}

// ---- Events in, actions out ----

// Every gang event goes through here: the pod's own stall is checked first,
// so a pod resumed after SIGSTOP sees that it was the one frozen before it
// reads its peers' silence as their failure. Returns the actions carried out.
GangActions Pod::Feed(const GangEvent& e) {
  if (concluded_) return {};
  CheckStall();
  if (concluded_) return {};
  GangActions a = policy_.On(e);
  Apply(a);
  return a;
}

void Pod::Apply(const GangActions& a) {
  if (!a.log.empty()) spdlog::log(a.log_info ? spdlog::level::info : spdlog::level::warn, "{}", a.log);
  PodGeneration& g = *gen_;
  // The membership machine marked its roster (lost, leaving) already: the
  // Stop names the spare the roster then gives a leaving or lost pod's node rank.
  ApplyBroadcast(a);
  if (a.report && g.member) {
    if (a.report->ok) {
      g.member->SendReport(*a.report, Guard([this] { Feed(gang::ReportSent{}); }));
    } else {
      g.member->SendReport(*a.report);
    }
  }
  // trainlet_last_failure (metrics.h): the class the policy names.
  if (a.note_failure) NoteFailureClass(*a.note_failure);
  // Leader: trainlet_gang_last_culprit, the pod its failure Stop names.
  if (a.broadcast && a.note_failure && !a.resize) NoteCulprit(*a.broadcast, g);
  if ((a.broadcast || a.report || a.stop_workers) && !g.failure_seen) {
    g.failure_seen = true;
    failed_at_ = Clock::now();
  }
  if (a.stop_workers) StopWorkers(*a.stop_workers);
  if (a.arm_verdict_timer) ArmTimer(g.verdict_timer, kVerdictTimeout, gang::TimerKind::kVerdict);
  if (a.arm_settle_timer) ArmTimer(g.settle_timer, tun::kLeaveSettle, gang::TimerKind::kSettle);
  // The policy ended this generation: it retires with the decision (G10).
  if (a.restart || a.conclude) g.Retire();
  if (a.restart) PostNextGeneration(a.counted);
  if (a.conclude) ConcludeWith(*a.conclude);
}

// Leader: the Stop goes to every member; the generation stops admitting.
void Pod::ApplyBroadcast(const GangActions& a) {
  PodGeneration& g = *gen_;
  if (!a.broadcast || !g.leader) return;
  // A restart's survivors are known by identity in the next round.
  if (a.broadcast->restart) kept_ids_ = g.leader->instance_ids();
  g.leader->BroadcastStop(WithReplacement(*a.broadcast));
  // The generation ends: pods rejoining go to the next round's leader,
  // whose listener is bound at once on a restart.
  g.leader->StopAdmitting();
  if (a.broadcast->restart) ListenAhead();
}

void Pod::ArmTimer(asio::steady_timer& timer, Clock::duration after, gang::TimerKind kind) {
  timer.expires_after(after);
  timer.async_wait(Guard([this, kind](boost::system::error_code ec) {
    if (!ec) Feed(gang::Timer{kind});
  }));
}

std::string Pod::EnvOr(const std::string& key) const {
  auto it = options_.env.find(key);
  return it == options_.env.end() ? std::string() : it->second;
}

// ---- The end ----

void Pod::ConcludeWith(const Conclusion& c) {
  using Kind = Conclusion::Kind;
  exitcodes::Evidence e;
  const PodGeneration* g = gen_.get();
  if (c.kind == Kind::kAgent || c.kind == Kind::kStall || g == nullptr || !g->own_result) {
    // Before the workers ran (or while rejoining), or this pod's own stall.
    exitcodes::FailureClass cls = c.kind == Kind::kTerminated
                                      ? exitcodes::FailureClass::kTerminated
                                      : c.failure_class;
    std::string reason = c.reason;
    if (reason.empty() && c.kind == Kind::kTerminated) {
      reason = "received " + exitcodes::SignalName(c.stop_signal);
    }
    e.agent_failure = Status(cls, reason);
    Conclude(e);
    return;
  }
  ConcludeFromResult(c, e);
  Conclude(e);
}

// The evidence of a pod whose workers ran: what they did, and what ended them.
void Pod::ConcludeFromResult(const Conclusion& c, exitcodes::Evidence& e) {
  using Kind = Conclusion::Kind;
  const PodGeneration& g = *gen_;
  const SupervisorResult& r = *g.own_result;
  e.collateral = r.collateral;
  // Up to the first failure (what the processes stopped after it did is not
  // its cause); for a run without one, up to now.
  e.oom_kills = r.first_failure && g.oom_kills_at_failure ? *g.oom_kills_at_failure
                                                           : OomKillsSinceStart();
  switch (c.kind) {
    case Kind::kTerminated:
      e.stop_signal = c.stop_signal;
      break;
    case Kind::kPeerFailed:
      // The gang failed elsewhere first: collateral, even if our own workers
      // had finished (a leader must not report success for a gang that failed).
      e.peer_failure = c.reason;
      break;
    case Kind::kOwn:
      // Found before any failure (the watcher stops once the workers are
      // being stopped), so a worker that then died of the diagnostics signal
      // or the SIGTERM is collateral of the hang.
      if (g.heartbeats) e.hang = g.heartbeats->hang();
      if (r.first_failure) {
        e.first_failure = WorkerFailureOf(*r.first_failure);
        e.shm_bytes = SharedMemoryBytes();
        e.shm_free_bytes = SharedMemoryFree();
        e.gpu_fault = GpuFaultEvidence(options_.gpu);
      }
      break;
    default:
      break;
  }
}

// Classifies, writes the termination message, logs the summary last, stops.
void Pod::Conclude(const exitcodes::Evidence& e) {
  concluded_ = true;
  if (gen_) gen_->Retire();
  exitcodes::Verdict v = exitcodes::Classify(e, options_.codes, options_.markers);
  exit_code_ = v.code;
  if (auto w = exitcodes::VerdictWarning(e, v); !w.empty()) spdlog::warn("{}", w);
  LogConclusion(v, e);
  Stop();
}

void Pod::LogConclusion(const exitcodes::Verdict& v, const exitcodes::Evidence& e) {
  if (v.failure_class == exitcodes::FailureClass::kOk) {
    LogFields lf;
    lf.failure_class = "ok";
    lf.code = 0;
    ScopedLogFields fields(std::move(lf));
    spdlog::info("exit 0: every worker finished ({:.1f} s)", Ms(Clock::now() - started_) / 1000);
    return;
  }
  exitcodes::TerminationInfo info;
  info.verdict = v;
  info.first_failure = e.first_failure;
  info.pod_index = options_.identity.index;
  info.attempt = options_.identity.attempt;
  info.phase_ms = phase_ms_;
  info.replaced_by = replaced_by_;
  if (auto it = options_.env.find("NODE_NAME"); it != options_.env.end()) {
    info.node_name = it->second;
  }
  std::string summary = exitcodes::TerminationMessage(info);
  WriteTerminationLog(options_.termination_log, summary);
  // A stop request (preemption, deletion, successPolicy) is no error.
  const auto level = v.failure_class == exitcodes::FailureClass::kTerminated
                         ? spdlog::level::info
                         : spdlog::level::err;
  if (CurrentLogFormat() == LogFormat::kJson) {
    // The termination message's object itself, as "summary" (log_format.h).
    LogFields lf;
    lf.failure_class = std::string(exitcodes::ClassName(v.failure_class));
    lf.code = v.code;
    lf.summary = summary;
    ScopedLogFields fields(std::move(lf));
    spdlog::log(level, "exit {} ({}): {}", v.code, exitcodes::ClassName(v.failure_class),
                v.reason);
  } else {
    spdlog::log(level, "exit {} ({}): {}", v.code, exitcodes::ClassName(v.failure_class),
                summary);
  }
}

void Pod::OnSignal(int signo) {
  PodGeneration* g = gen_.get();
  Supervisor* supervisor = g != nullptr ? g->supervisor.get() : nullptr;
  if (signo == SIGCHLD) {
    if (supervisor) {
      supervisor->Reap();
    } else if (g == nullptr || !g->preflight_running) {
      // (The preflight thread reaps its own children by pid.)
      (void)ReapOrphans();
    }
    return;
  }
  if (signo == SIGTERM || signo == SIGINT) {
    if (!supervisor && !(g && g->own_result)) {
      spdlog::info("received {} {}", exitcodes::SignalName(signo),
                   g && g->preflight_running ? "during the GPU preflight"
                                             : "before the workers ran");
    }
    Feed(gang::StopSignal{signo});
  }
  if (concluded_) return;
  if (supervisor) {
    supervisor->OnSignal(signo);
  } else if (signo != SIGTERM && signo != SIGINT) {
    spdlog::debug("ignoring {} before the workers started", exitcodes::SignalName(signo));
  }
}

void Pod::Stop() {
  if (options_.rdzv_listen_fd >= 0) ::close(std::exchange(options_.rdzv_listen_fd, -1));
  if (leader_probe_) leader_probe_->Cancel();
  roster_membership_.Cancel();
  if (gen_) gen_->Close();
  release_timer_.cancel();
  health_.reset();
  if (signals_) signals_->Close();
  io_.stop();
}

int Pod::Fail(const Status& s) {
  exitcodes::Evidence e;
  e.agent_failure = s;
  Conclude(e);
  return exit_code_;
}

int RunPod(PodOptions o) {
  if (o.identity.by_arrival) {
    // No index anywhere: the agent on the endpoint's host that binds the
    // rendezvous port first leads; the others join (rendezvous/arrival.h).
    rendezvous::EndpointClaim claim =
        rendezvous::ClaimEndpoint(o.identity.leader_host, o.rdzv_port, o.identity.nnodes);
    spdlog::info("ranks by arrival: this agent {}: {}", claim.lead ? "leads" : "joins", claim.how);
    if (claim.lead) {
      o.identity.index = 0;
      o.identity.index_source = "arrival (" + claim.how + ")";
      o.rdzv_listen_fd = claim.fd;
    }
  }
  Pod pod(std::move(o));  // the one copy a run keeps (its maps and tables)
  return pod.Run();
}

}  // namespace trainlet::agent
