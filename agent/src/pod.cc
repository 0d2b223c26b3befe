#include "trainlet/agent/pod.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include "file_util.h"
#include "leader_roster.h"
#include "output.h"
#include "resident.h"
#include "trainlet/agent/evidence.h"
#include "trainlet/agent/gang_policy.h"
#include "trainlet/agent/gpu_setup.h"
#include "trainlet/agent/hang_policy.h"
#include "trainlet/agent/health.h"
#include "trainlet/agent/membership_policy.h"
#include "trainlet/agent/log_format.h"
#include "trainlet/agent/run_dir.h"
#include "trainlet/agent/metrics.h"
#include "trainlet/agent/stragglers.h"
#include "trainlet/agent/signals.h"
#include "trainlet/agent/supervisor.h"
#include "trainlet/exitcodes/exit_code.h"
#include "trainlet/exitcodes/termination.h"
#include "trainlet/rendezvous/launch.h"
#include "trainlet/rendezvous/auth.h"
#include "trainlet/rendezvous/leader.h"
#include "trainlet/rendezvous/leader_probe.h"
#include "trainlet/rendezvous/member.h"
#include "trainlet/rendezvous/name_check.h"
#include "trainlet/rendezvous/tunables.h"

namespace trainlet::agent {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using exitcodes::Result;
using exitcodes::Status;

namespace {

namespace tun = rendezvous::tunables;
// A heartbeat file's mtime until its worker first touches it (seconds since
// the epoch: 1970-01-01T00:00:01Z, a time no touch can produce).
constexpr time_t kNeverTouched = 1;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// One pod's run: the wiring around GangPolicy (gang_policy.h). Sockets, timers,
// the supervisor and signals become gang events; the policy's actions become
// I/O. Lives on the stack of RunPod; every callback runs on `io`. Objects of
// one generation (leader or member, supervisor, timers' waits) check `epoch_`
// so that nothing of an old generation acts on a new one.
class Pod {
 public:
  explicit Pod(const PodOptions& o)
      : options_(o),
        policy_({.index = o.identity.index,
                 .nnodes = o.identity.nnodes,
                 .max_restarts = o.max_restarts,
                 .hang_signal = o.hang_signal}),
        deadline_timer_(io_),
        hang_timer_(io_),
        diag_timer_(io_),
        release_timer_(io_),
        verdict_timer_(io_),
        stall_timer_(io_) {}

  ~Pod() { JoinPreflight(); }

  int Run() {
    started_ = Clock::now();
    const PodIdentity& id = options_.identity;
    // Several agents may share one terminal (trainlet local) or one log stream:
    // every line says which pod wrote it.
    SetLogPod(id.index);  // log_format.h
    if (::getpid() != 1) {
      // Orphaned grandchildren are re-parented to us instead of to the real
      // init, so we can reap them (prctl(2), PR_SET_CHILD_SUBREAPER).
      ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    }
    spdlog::info("pod index {} of {} ({}), {} worker(s) per pod, job '{}' attempt {}, {}{}",
                 id.index, id.nnodes, id.index_source, id.nproc_per_node, id.job_id, id.attempt,
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
    // Input that retrying cannot fix is a config error now, not after the
    // gang formed (or at the rendezvous deadline, waiting for peers).
    if (Status s = CheckLaunch(options_.command, options_.launch_check, options_.env,
                               options_.logs, WorkingDirectory());
        !s.ok()) {
      return Fail(s);
    }
    // Error and heartbeat files need a writable directory (read-only images).
    run_dir_.choice = ChooseRunDir(RunDirCandidates(options_.logs.run_dir, options_.env,
                                                    options_.logs.log_dir));
    std::string run_dir_warning;
    if (Status s = JudgeRunDir(run_dir_.choice, !options_.logs.run_dir.empty(),
                               options_.hang_timeout.count() > 0, &run_dir_warning);
        !s.ok()) {
      return Fail(s);
    }
    if (!run_dir_warning.empty()) spdlog::warn("{}", run_dir_warning);
    if (std::string w = SmallSharedMemoryWarning(SharedMemoryBytes(), id.nproc_per_node,
                                                 options_.gpu_count > 0);
        !w.empty()) {
      spdlog::warn("{}", w);
    }
    auto signals = SignalSource::Create(io_.get_executor(), [this](int s) { OnSignal(s); });
    if (!signals.ok()) return Fail(signals.status());
    signals_ = std::move(signals).value();
    if (options_.health_port != 0) {
      auto health = HealthServer::Start(io_.get_executor(), options_.health_port, [this] {
        // Ready: the gang formed and our workers run. Live: no hang found.
        return HealthServer::State{.ready = supervisor_ != nullptr && !own_result_,
                                   .live = !hang_reason_,
                                   .spare = spare_ && !in_rendezvous_};
      }, [this] { return RenderMetrics(Metrics()); });
      if (!health.ok()) return Fail(health.status());
      health_ = std::move(health).value();
    }

    if (Status s = StartRendezvous(); !s.ok()) return Fail(s);
    io_.run();
    JoinPreflight();
    return exit_code_;
  }

 private:
  // Reads the memory cgroup once: the workers' oom_score_adj and the output
  // read-ahead follow from it (supervisor.h), and where the kernel would end
  // the whole cgroup at an OOM (memory.oom.group 1) it says so, since the
  // agent then cannot report the OOM (exit 137, `trainlet exit-codes`).
  void PlanMemory() {
    const MemoryCgroup m = ReadMemoryCgroup();
    int agent_adj = 0;
    if (auto adj = ReadSmallFile("/proc/self/oom_score_adj")) agent_adj = std::atoi(adj->c_str());
    worker_oom_score_adj_ = WorkerOomScoreAdj(agent_adj);
    const std::size_t streams = 2 * static_cast<std::size_t>(options_.identity.nproc_per_node);
    read_ahead_bytes_ = ReadAheadBytes(m.limit, streams);
    spdlog::debug("memory limit {}: output read-ahead {} KiB per stream, workers' oom_score_adj {}",
                  m.limit ? std::to_string(*m.limit >> 20) + " MiB" : "none",
                  read_ahead_bytes_ >> 10, worker_oom_score_adj_);
    if (m.oom_group) {
      spdlog::info("memory.oom.group is 1: at an OOM the kernel kills every process of this "
                   "container, trainlet too: exit 137 (OOMKilled), no report of trainlet's");
    }
  }

  // ---- Events in, actions out ----

  // Every gang event goes through here: the pod's own stall is checked first,
  // so a pod resumed after SIGSTOP sees that it was the one frozen before it
  // reads its peers' silence as their failure.
  void Feed(const GangEvent& e) {
    if (concluded_) return;
    CheckStall();
    if (concluded_) return;
    Apply(policy_.On(e));
  }

  void Apply(const GangActions& a) {
    if (!a.log.empty()) spdlog::log(a.log_info ? spdlog::level::info : spdlog::level::warn, "{}", a.log);
    if (a.broadcast && leader_) leader_->BroadcastStop(*a.broadcast);
    if (a.report && member_) {
      if (a.report->ok) {
        member_->SendReport(*a.report, [this, epoch = epoch_] {
          if (epoch == epoch_) Feed(gang::ReportSent{});
        });
      } else {
        member_->SendReport(*a.report);
      }
    }
    // trainlet_last_failure (metrics.h): the class of the failure this pod
    // reports, or of the culprit the leader names.
    if (a.broadcast) last_failure_class_ = exitcodes::FailureClass(a.broadcast->failure_class);
    if (a.broadcast && a.broadcast->restart &&
        !RestartableClass(exitcodes::FailureClass(a.broadcast->failure_class))) {
      // A member whose failure points at its node leaves; a spare takes its place.
      if (roster_) roster_->MarkMustLeave(a.broadcast->failed_index);
    }
    if (a.report && !a.report->ok) {
      last_failure_class_ = exitcodes::FailureClass(a.report->failure_class);
    }
    if ((a.broadcast || a.report || a.stop_workers) && !failure_seen_) {
      failure_seen_ = true;
      failed_at_ = Clock::now();
    }
    if (a.stop_workers) StopWorkers(*a.stop_workers);
    if (a.arm_verdict_timer) {
      verdict_timer_.expires_after(kVerdictTimeout);
      verdict_timer_.async_wait([this, epoch = epoch_](boost::system::error_code ec) {
        if (!ec && epoch == epoch_) Feed(gang::Timer{gang::TimerKind::kVerdict});
      });
    }
    if (a.restart) PostNextGeneration();
    if (a.conclude) ConcludeWith(*a.conclude);
  }

  // A member's view of the leader's Stop, for trainlet_last_failure: the
  // culprit's class for a restart, peer_failed for a stop caused elsewhere.
  void NoteStop(const rendezvous::wire::Stop& stop) {
    if (stop.failed_index == options_.identity.index) return;  // ours: already noted
    last_failure_class_ = stop.restart ? exitcodes::FailureClass(stop.failure_class)
                                       : exitcodes::FailureClass::kPeerFailed;
  }

  // ---- The pod's own stall (SIGSTOP, a frozen node, a starved process) ----

  void StartStallWatch() {
    stall_watch_ = true;
    last_tick_ = Clock::now();
    Tick();
  }

  void Tick() {
    stall_timer_.expires_after(tun::kStallTick);
    stall_timer_.async_wait([this, epoch = epoch_](boost::system::error_code ec) {
      if (ec || epoch != epoch_ || !stall_watch_) return;
      if (concluded_) return;
      CheckStall();
      last_tick_ = Clock::now();
      if (!concluded_) Tick();
    });
  }

  // The peers give a pod up after kStallLimit without a frame from it, counted
  // from its last heartbeat, which may precede the stall by up to a heartbeat
  // interval: so the silence since that heartbeat decides, as they judge it,
  // not the loop's gap alone (a stall of 2.5 s after a heartbeat sent 0.8 s
  // before it was given up by the peers, yet shorter than the limit).
  void CheckStall() {
    if (!stall_watch_) return;
    const auto now = Clock::now();
    const auto gap = now - last_tick_;
    const auto silence = std::max<Clock::duration>(
        gap, leader_ ? leader_->heartbeat_silence()
                     : member_ ? member_->heartbeat_silence() : Clock::duration{});
    if (silence <= tun::kStallLimit) return;
    stall_watch_ = false;  // once per generation
    std::string why = fmt::format(
        "this pod's event loop did not run for {:.1f} s, {:.1f} s without a heartbeat sent "
        "(the process was stopped or starved; its peers give up after {:.1f} s)",
        std::chrono::duration<double>(gap).count(), std::chrono::duration<double>(silence).count(),
        std::chrono::duration<double>(tun::kStallLimit).count());
    spdlog::error("{}", why);
    Apply(policy_.On(gang::OwnStall{why}));
  }

  // ---- Rendezvous ----

  Status StartRendezvous() {
    const PodIdentity& id = options_.identity;
    rendezvous::wire::Hello hello = rendezvous::MakeHello({.job_id = id.job_id,
                                                           .attempt = id.attempt,
                                                           .index = id.index,
                                                           .nnodes = id.nnodes,
                                                           .nproc_per_node = id.nproc_per_node,
                                                           .master_port = options_.master_port,
                                                           .max_restarts = options_.max_restarts,
                                                           .gang = id.gang,
                                                           .preflight = options_.gpu.preflight,
                                                           .generation = join_generation_,
                                                           .job_name = id.job_name,
                                                           .job_restart_attempt =
                                                               id.job_restart_attempt,
                                                           .spares = id.spares});
    auto on_assignment = [this, epoch = epoch_](Result<rendezvous::wire::Assignment> a) {
      if (epoch == epoch_) OnAssignment(a);
    };
    round_started_ = Clock::now();
    in_rendezvous_ = true;
    const auto round_started = round_started_;
    // What does not depend on the assignment is prepared while we wait for it:
    // once the gang forms, every pod's work lands at the same moment.
    MakeErrorDir();

    deadline_timer_.expires_after(options_.rdzv_timeout);
    deadline_timer_.async_wait([this, epoch = epoch_](boost::system::error_code ec) {
      if (ec || epoch != epoch_ || supervisor_ || !leader_) return;
      // Members time out through their own deadline (same instant) with details.
      std::string missing;
      for (auto i : leader_->missing()) missing += (missing.empty() ? "" : ",") + std::to_string(i);
      Feed(gang::AgentFailed{Status::Infra(
          "rendezvous timed out after " + std::to_string(options_.rdzv_timeout.count() / 1000) +
          " s: " + std::to_string(leader_->admitted()) + " of " +
          std::to_string(options_.identity.nnodes) + " pods joined; missing indices " + missing)});
    });

    if (id.is_leader()) {
      rendezvous::LeaderOptions lo;
      lo.nnodes = id.nnodes;
      lo.master_port = options_.master_port;
      lo.run_id = id.job_id;
      lo.token = options_.token;
      lo.master_addr = options_.local_addr;  // --local-addr
      lo.jax_port = options_.jax_port;
      if (options_.rdzv_read_timeout.count() > 0) lo.handshake_timeout = options_.rdzv_read_timeout;
      lo.make_nccl_ids = MakeNcclIdMaker(options_);  // gpu_setup.h
      lo.deadline = round_started + options_.rdzv_timeout;
      // Every pod of the gang may be mid-handshake at once (bench/HISTORY.md: scale).
      lo.max_pending_handshakes = std::max<std::size_t>(lo.max_pending_handshakes, id.nnodes);
      lo.max_generation = options_.max_restarts;
      // Busy ports are retried, until a moment before the rendezvous deadline so
      // the error names the port rather than "timed out".
      lo.bind_deadline =
          round_started + options_.rdzv_timeout - rendezvous::tunables::kBindRetryCap;
      lo.check_master_port = true;  // a busy MASTER_PORT is infra, not rank 0's failure
      if (leader_id_.empty()) leader_id_ = rendezvous::NewNonce();
      lo.leader_id = leader_id_;
      if (id.spares > 0) {  // hot spares: the membership policy places the pods
        lo.nnodes = id.nnodes + id.spares;
        lo.max_pending_handshakes = std::max<std::size_t>(lo.max_pending_handshakes, lo.nnodes);
        UseRoster(&lo, round_started);
      }
      auto leader = rendezvous::Leader::Listen(io_.get_executor(), options_.rdzv_port, lo);
      if (!leader.ok()) return leader.status();
      leader_ = std::move(leader).value();
      leader_->Start(hello, on_assignment);
      if (id.nnodes > 1 && !gang_formed_) StartLeaderProbe(hello);
      if (id.nnodes > 1 && !name_check_) {  // the name members dial leads here? (name_check.h)
        rendezvous::NameCheckOptions nc;
        nc.name = id.leader_host;
        nc.on_resolved = [this](const std::vector<boost::asio::ip::address>& addresses) {
          if (leader_probe_) leader_probe_->Probe(addresses);
        };
        auto check = rendezvous::LeaderNameCheck::Start(
            io_.get_executor(), nc, [](const std::string& problem) { spdlog::warn("{}", problem); });
        if (check.ok()) name_check_ = std::move(check).value();
      }
      return Status::Ok();
    }
    rendezvous::MemberOptions mo;
    mo.leader_host = id.leader_host;
    mo.port = options_.rdzv_port;
    mo.hello = hello;
    mo.deadline = round_started + options_.rdzv_timeout;
    if (join_generation_ > 0) {
      // Rejoining after a restart: the leader re-listens the moment its own
      // workers are gone, so retry sooner than a cold start would.
      mo.backoff.initial = tun::kRejoinBackoffInitial;
      mo.backoff.min_delay = tun::kRejoinBackoffMin;
    }
    mo.token = options_.token;
    mo.seed = static_cast<std::uint64_t>(::getpid()) ^
              static_cast<std::uint64_t>(Clock::now().time_since_epoch().count());
    spdlog::info("joining leader {} port {} ({}){}", id.leader_host, options_.rdzv_port,
                 id.leader_source,
                 join_generation_ > 0 ? " for generation " + std::to_string(join_generation_)
                                      : "");
    auto member = rendezvous::Member::Create(io_.get_executor(), mo);
    if (!member.ok()) return member.status();
    member_ = std::move(member).value();
    member_->Start(on_assignment);
    return Status::Ok();
  }

  // Hot spares: the leader's roster says when the round forms and who takes
  // which node rank (leader_roster.h), asked at every join and on its timer.
  void UseRoster(rendezvous::LeaderOptions* lo, Clock::time_point round_started) {
    const PodIdentity& id = options_.identity;
    if (!roster_) {
      roster_.emplace(io_.get_executor(),
                      FormationConfig{.min_nodes = id.nnodes, .max_nodes = id.nnodes,
                                      .spares = id.spares, .last_call = options_.rdzv_last_call,
                                      .timeout = options_.rdzv_timeout});
    }
    roster_->StartRound(round_started, [this] { if (leader_) leader_->Reconsider(); });
    lo->expected = roster_->Expected();
    lo->plan = [this](const std::vector<std::uint32_t>& joined) { return roster_->Plan(joined); };
  }

  // Another pod acting as this gang's leader (leader_probe.h): both stop, config.
  void StartLeaderProbe(rendezvous::wire::Hello hello) {
    if (leader_probe_) leader_probe_->Cancel();
    hello.leader_id = leader_id_;
    rendezvous::LeaderProbeOptions po;
    po.name = options_.identity.leader_host;
    po.port = options_.rdzv_port;
    po.hello = std::move(hello);
    po.token = options_.token;
    leader_probe_ = rendezvous::LeaderProbe::Start(
        io_.get_executor(), std::move(po), [this, epoch = epoch_](const std::string& clash) {
          if (epoch == epoch_) Feed(gang::AgentFailed{Status::Config(clash)});
        });
  }

  void OnAssignment(const Result<rendezvous::wire::Assignment>& result) {
    if (leader_probe_) leader_probe_->Cancel();
    if (roster_) roster_->Cancel();
    deadline_timer_.cancel();
    in_rendezvous_ = false;
    rendezvous_seconds_ = std::chrono::duration<double>(Clock::now() - round_started_).count();
    if (name_check_ && result.ok()) name_check_->Cancel();  // the members found us
    if (!result.ok()) {
      Feed(gang::AgentFailed{result.status()});
      return;
    }
    const auto& a = *result;
    const PodIdentity& id = options_.identity;
    gang_formed_ = true;
    if (a.generation == 0 && join_generation_ == 0) {
      phase_ms_["rendezvous"] = Ms(Clock::now() - started_);
    }
    rank_base_ = a.rank_base;
    generation_ = a.generation;
    SetLogGeneration(generation_);
    if (roster_) roster_->Adopt(a.generation);
    spare_ = a.spare;
    if (a.spare) {
      spdlog::info("rendezvous {:.1f} ms: generation {}: a hot spare, waiting without workers "
                   "({} active pod(s), world size {})",
                   Ms(Clock::now() - round_started_), a.generation, a.nnodes, a.world_size);
      Feed(gang::Assigned{.generation = a.generation, .spare = true});
      StartGangChannel();
      StartStallWatch();
      return;
    }
    spdlog::info("rendezvous {:.1f} ms: generation {}, world size {}, ranks {}..{}, "
                 "MASTER_ADDR={} MASTER_PORT={}",
                 Ms(Clock::now() - round_started_), a.generation, a.world_size, a.rank_base,
                 a.rank_base + id.nproc_per_node - 1, a.master_addr, a.master_port);
    if (!options_.gpu.preflight) {
      // NCCL ids, socket interface (gpu_setup.h): no blocking call without the preflight.
      OnGpuPrepared(a, PrepareGpuWorkers(options_, a, nullptr));
      return;
    }
    // The preflight blocks (up to --preflight-timeout): on a thread of its own,
    // so a SIGTERM is still read at once; its end is an event like any other.
    // The thread only runs gpu::RunPreflight (no logging: the log sink is the
    // loop's).
    JoinPreflight();
    preflight_cancel_ = std::make_shared<std::atomic<bool>>(false);
    preflight_running_ = true;
    gpu::PreflightOptions po = PreflightOptionsFor(options_, a);
    po.cancel = preflight_cancel_.get();
    preflight_thread_ = std::thread([this, a, po = std::move(po), epoch = epoch_,
                                     keep = preflight_cancel_] {
      auto t0 = Clock::now();
      gpu::PreflightReport r = gpu::RunPreflight(po);
      double ms = Ms(Clock::now() - t0);
      asio::post(io_, [this, a, epoch, ms, r = std::move(r)] {
        if (epoch != epoch_) return;
        preflight_running_ = false;
        OnGpuPrepared(a, PrepareGpuWorkers(options_, a, &r, ms));
      });
    });
  }

  void JoinPreflight() {
    if (preflight_cancel_) preflight_cancel_->store(true);
    if (preflight_thread_.joinable()) preflight_thread_.join();
  }

  void OnGpuPrepared(const rendezvous::wire::Assignment& a,
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

  Result<std::vector<WorkerSpec>> MakeSpecs(const rendezvous::wire::Assignment& a,
                                            const std::map<std::string, std::string>& base_env) {
    const PodIdentity& id = options_.identity;
    const std::string& error_dir = run_dir_.generation;  // made before the rendezvous
    auto streams = log_dirs_.ForAttempt(a.run_id, a.generation, id.nproc_per_node, a.rank_base,
                                        id.role_name);
    if (!streams.ok()) return streams.status();
    if (generation_ == 0 && !log_dirs_.run_dir().empty()) {
      spdlog::info("worker logs in {}", log_dirs_.run_dir());
    }
    std::vector<WorkerSpec> specs;
    error_files_.clear();
    for (std::uint32_t lr = 0; lr < id.nproc_per_node; ++lr) {
      // In the log dir (torchrun's place, kept), else in this generation's folder.
      const std::string& logged = (*streams)[lr].error_file;
      error_files_.push_back(!logged.empty()       ? logged
                             : error_dir.empty() ? ""
                                                 : error_dir + "/error-" + std::to_string(lr) +
                                                       ".json");
      WorkerPlacement p{.local_rank = lr,
                        .nproc_per_node = id.nproc_per_node,
                        .group_rank = a.node_rank.value_or(id.index),
                        .nnodes = a.nnodes,
                        .rank_base = a.rank_base,
                        .world_size = a.world_size,
                        .master_addr = a.master_addr,
                        .master_port = a.master_port,
                        .run_id = a.run_id,
                        .error_file = error_files_.back(),
                        .restart_count = a.generation,
                        .max_restarts = options_.max_restarts,
                        .role_name = id.role_name,
                        .role_rank_base = id.role_rank_base,
                        .role_world_size = id.role_world_size,
                        .jax_port = a.jax_port,
                        .gpu_count = options_.gpu_count,
                        .virtual_local_rank = options_.virtual_local_rank};
      auto env = WorkerEnvironment(base_env, p);
      if (options_.hang_timeout.count() > 0 && !error_dir.empty()) {
        std::string hb = error_dir + "/heartbeat-" + std::to_string(lr);
        if (int fd = ::open(hb.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
            fd >= 0) {
          // Its mtime starts at kNeverTouched: any touch, even one within the
          // file system's coarse clock tick of this creation, moves it.
          const timespec times[2] = {{0, UTIME_OMIT}, {kNeverTouched, 0}};
          ::futimens(fd, times);
          ::close(fd);
          heartbeat_files_.push_back(hb);
          env.push_back("TRAINLET_HEARTBEAT_FILE=" + hb);
        }
      }
      WorkerStreams& ws = (*streams)[lr];
      specs.push_back({options_.command, std::move(env), std::move(ws.prefix),
                       std::move(ws.stdout_file), std::move(ws.stderr_file), ws.stdout_console,
                       ws.stderr_console});
    }
    return specs;
  }

  void StartWorkers(const rendezvous::wire::Assignment& a,
                    const std::map<std::string, std::string>& base_env) {
    const PodIdentity& id = options_.identity;
    auto made = MakeSpecs(a, base_env);
    if (!made.ok()) {
      Feed(gang::AgentFailed{made.status()});
      return;
    }
    std::vector<WorkerSpec> specs = std::move(made).value();
    SupervisorOptions so;
    so.grace = options_.grace;
    so.read_ahead_bytes = read_ahead_bytes_;
    so.worker_oom_score_adj = worker_oom_score_adj_;
    so.signal_scope = options_.signal_scope;
    if (options_.json_worker_lines) so.json_lines_rank_base = a.rank_base;
    so.markers = &options_.markers;
    so.on_first_failure = [this, epoch = epoch_](const FirstFailure& f) {
      if (epoch != epoch_) return;
      first_failure_class_ = ClassOf(f);
      Feed(gang::LocalFailure{*first_failure_class_,
                              "local rank " + std::to_string(f.local_rank) + " (rank " +
                                  std::to_string(rank_base_ + f.local_rank) +
                                  ") failed: " + f.exit.Describe(),
                              false});
    };
    oom_baseline_ = ReadOomKillCount();
    workers_started_ = Clock::now();
    supervisor_ = std::make_unique<Supervisor>(
        io_.get_executor(), so, [this, epoch = epoch_](SupervisorResult r) {
          if (epoch == epoch_) OnWorkersDone(r);
        });
    if (Status s = supervisor_->Start(std::move(specs)); !s.ok()) {
      supervisor_.reset();
      Feed(gang::AgentFailed{s});
      return;
    }
    if (a.generation == 0 && join_generation_ == 0) {
      spdlog::info("started {} worker(s) {:.1f} ms after start", id.nproc_per_node,
                   Ms(Clock::now() - started_));
      // Start-up's code is done; the loop from here on touches little of it.
      // Not at once: the whole gang starts its trainers now, and the refaults
      // would compete with them for the CPU.
      release_timer_.expires_after(kReleaseStartupCodeAfter);
      release_timer_.async_wait([](boost::system::error_code ec) {
        if (!ec) ReleaseStartupCode();
      });
    } else {
      spdlog::info("generation {}: started {} worker(s) {:.1f} ms after the failure",
                   a.generation, id.nproc_per_node, Ms(Clock::now() - failed_at_));
    }
    Feed(gang::Assigned{.generation = a.generation,
                        .spares = roster_ ? roster_->waiting() : std::set<std::uint32_t>{}});
    // Only now: gang events that arrived early (replayed here) can stop workers.
    StartGangChannel();
    StartStallWatch();
    if (!heartbeat_files_.empty()) {
      heartbeat_started_ = std::filesystem::file_time_type::clock::now();
      step_meter_ = StepMeter::Create(io_.get_executor(), heartbeat_files_);
      WatchHeartbeats();
    }
  }

  // ---- Metrics (metrics.h): read on the loop at each scrape ----

  MetricsSnapshot Metrics() const {
    const PodIdentity& id = options_.identity;
    MetricsSnapshot m;
    m.leader = id.is_leader();
    m.generation = generation_;
    m.restarts = restarts_;
    m.rendezvous_seconds =
        in_rendezvous_ ? std::chrono::duration<double>(Clock::now() - round_started_).count()
                       : rendezvous_seconds_;
    m.pods_expected = id.nnodes;
    m.spare = spare_ && !in_rendezvous_;
    if (roster_) m.replacements = roster_->replacements();
    m.pods_joined = in_rendezvous_ ? (leader_ ? leader_->admitted() : 0)
                                   : (gang_formed_ ? id.nnodes : 0);
    for (std::uint32_t lr = 0; supervisor_ && lr < id.nproc_per_node; ++lr) {
      m.workers_running += supervisor_->running(static_cast<int>(lr)) ? 1 : 0;
    }
    m.worker_exits = worker_exits_;
    if (leader_) {
      for (const auto& [pod, p] : leader_->peer_stats()) {
        if (p.rtt_seconds) m.heartbeat_rtt_seconds[pod] = *p.rtt_seconds;
      }
    }
    m.step_rate = step_rates_;
    m.stragglers.assign(stragglers_.begin(), stragglers_.end());
    if (last_failure_class_) m.last_failure_class = exitcodes::ClassName(*last_failure_class_);
    const auto now = std::filesystem::file_time_type::clock::now();
    for (std::size_t lr = 0; lr < heartbeat_files_.size(); ++lr) {
      std::error_code ec;
      auto mtime = std::filesystem::last_write_time(heartbeat_files_[lr], ec);
      if (ec) continue;
      m.heartbeat_age_seconds[static_cast<std::uint32_t>(lr)] =
          std::chrono::duration<double>(now - std::max(mtime, heartbeat_started_)).count();
    }
    FillProcessStats(&m);
    return m;
  }

  // Each worker's exit under its class: the first failure's own, the workers
  // stopped after it (or after a stop request) peer_failed or terminated, ok.
  void CountWorkerExits(const SupervisorResult& r) {
    const std::uint32_t n = options_.identity.nproc_per_node;
    const std::uint32_t failed = (r.first_failure ? 1u : 0u) + static_cast<std::uint32_t>(r.collateral);
    if (r.first_failure) {
      const auto c = first_failure_class_.value_or(exitcodes::FailureClass::kWorker);
      ++worker_exits_[std::string(exitcodes::ClassName(c))];
    }
    if (r.collateral > 0) {
      worker_exits_[r.stop_signal ? "terminated" : "peer_failed"] +=
          static_cast<std::uint64_t>(r.collateral);
    }
    if (n > failed) worker_exits_["ok"] += n - failed;
  }

  // ---- Step rates and stragglers (stragglers.h), with the hang watcher's poll ----

  void UpdateStepRates() {
    if (!step_meter_) return;
    std::vector<bool> running;
    for (std::size_t lr = 0; lr < heartbeat_files_.size(); ++lr) {
      running.push_back(supervisor_->running(static_cast<int>(lr)));
    }
    const auto own = step_meter_->Slowest(running, StepClock::now());
    if (member_) {
      member_->SetStepRate(own ? static_cast<std::uint32_t>(std::min(own->first * 1000, 4e9)) : 0,
                           own ? rank_base_ + own->second : 0);
      return;
    }
    if (!leader_) return;
    std::map<std::uint32_t, double> rates;
    std::map<std::uint32_t, std::uint32_t> ranks;
    if (own) {
      rates[options_.identity.index] = own->first;
      ranks[options_.identity.index] = rank_base_ + own->second;
    }
    for (const auto& [pod, p] : leader_->peer_stats()) {
      if (p.step_rate_milli == 0) continue;
      rates[pod] = p.step_rate_milli / 1000.0;
      ranks[pod] = p.slowest_rank;
    }
    step_rates_ = rates;
    if (options_.straggler_factor <= 0) return;
    auto now = FindStragglers(rates, options_.straggler_factor, stragglers_);
    const double median = MedianRate(rates);
    for (std::uint32_t pod : now) {
      if (stragglers_.contains(pod)) continue;
      LogFields lf;
      lf.pod = pod;
      lf.rank = static_cast<int>(ranks[pod]);
      ScopedLogFields fields(std::move(lf));
      spdlog::warn("straggler: pod {} (rank {}) at {:.2f} steps/s, {:.1f}x behind the gang's "
                   "median of {:.2f} steps/s",
                   pod, ranks[pod], rates[pod], median / rates[pod], median);
    }
    for (std::uint32_t pod : stragglers_) {
      if (now.contains(pod)) continue;
      LogFields lf;
      lf.pod = pod;
      ScopedLogFields fields(std::move(lf));
      if (rates.contains(pod)) {
        spdlog::info("straggler: pod {} caught up ({:.2f} steps/s, median {:.2f})", pod,
                     rates[pod], median);
      } else {
        spdlog::info("straggler: pod {} no longer reports a step rate (its workers finished)",
                     pod);
      }
    }
    stragglers_ = std::move(now);
  }

  // ---- Hang detection: heartbeat files' mtimes, polled on the loop ----

  void WatchHeartbeats() {
    if (!hang_policy_) {
      hang_policy_.emplace(
          HangOptions{.timeout = options_.hang_timeout,
                      .start_timeout = options_.hang_start_timeout.count() > 0
                                           ? std::optional(options_.hang_start_timeout)
                                           : std::nullopt},
          static_cast<int>(heartbeat_files_.size()));
    }
    // With step rates (stragglers.h) at least 4 looks a second: a straggler is
    // named within a step or two of showing.
    hang_timer_.expires_after(step_meter_ ? std::min<std::chrono::milliseconds>(
                                                hang_policy_->PollInterval(),
                                                std::chrono::milliseconds(250))
                                          : hang_policy_->PollInterval());
    hang_timer_.async_wait([this, epoch = epoch_](boost::system::error_code ec) {
      if (ec || epoch != epoch_ || !supervisor_ || own_result_ || hang_reason_ ||
          supervisor_->stopping()) {
        return;
      }
      using std::chrono::duration_cast;
      using std::chrono::milliseconds;
      auto now = std::filesystem::file_time_type::clock::now();
      timespec wall{};
      ::clock_gettime(CLOCK_REALTIME, &wall);  // the clock file times are in
      std::vector<HeartbeatSample> samples;
      for (std::size_t lr = 0; lr < heartbeat_files_.size(); ++lr) {
        HeartbeatSample& s = samples.emplace_back();
        s.running = supervisor_->running(static_cast<int>(lr));
        struct stat st {};
        if (::stat(heartbeat_files_[lr].c_str(), &st) != 0) {
          s.running = false;  // the file is gone: nothing to judge it by
        } else if (st.st_mtim.tv_sec != kNeverTouched) {
          s.since_touch = milliseconds((wall.tv_sec - st.st_mtim.tv_sec) * 1000 +
                                       (wall.tv_nsec - st.st_mtim.tv_nsec) / 1'000'000);
        }
      }
      HangCheck check =
          hang_policy_->Check(duration_cast<milliseconds>(now - heartbeat_started_), samples);
      if (!check.note.empty()) spdlog::info("hang detection: {}", check.note);
      if (check.hung.empty()) {
        UpdateStepRates();
        WatchHeartbeats();
        return;
      }
      hang_reason_ = check.hung;
      spdlog::error("hang: {}; sending {} for diagnostics, stopping in {} s", check.hung,
                    exitcodes::SignalName(options_.hang_signal),
                    std::chrono::duration_cast<std::chrono::seconds>(tun::kDiagnosticsDelay).count());
      // The policy asks for the diagnostics signal, then the stop (StopWorkers).
      Feed(gang::LocalFailure{exitcodes::FailureClass::kInfra, "hang: " + check.hung, true});
    });
  }

  // This generation's directory for the workers' error files (TORCHELASTIC_ERROR_FILE)
  // and heartbeat files, in run_dir_.generation; left empty if it cannot be made.
  void MakeErrorDir() {
    if (run_dir_.choice.base.empty()) return;  // said at start (JudgeRunDir)
    std::string tmpl = run_dir_.choice.base + "/trainlet-XXXXXX";
    if (::mkdtemp(tmpl.data()) != nullptr) run_dir_.generation = tmpl;
  }

  // Removes run_dir_.generation and what the workers left in it. Usually it is empty:
  // one rmdir(2) then, not remove_all's unlink-then-rmdir of the directory
  // (each locks the temp directory, which all pods on a node share under
  // `trainlet local`, and 64 pods ending at once spun on that lock: 11 % of
  // the CPU of a 64-pod rendezvous run, bench/HISTORY.md).
  void RemoveErrorDir() {
    if (run_dir_.generation.empty()) return;
    if (::rmdir(run_dir_.generation.c_str()) == 0 || errno == ENOENT) return;
    std::error_code ec;
    std::filesystem::remove_all(run_dir_.generation, ec);
  }

  // ---- The gang's control channel (see rendezvous/leader.h, member.h) ----

  void StartGangChannel() {
    const std::uint64_t epoch = epoch_;
    const auto heartbeat = tun::kHeartbeatInterval;
    const int misses = tun::kHeartbeatMisses;
    if (leader_) {
      leader_->StartChannel(
          {.on_report =
               [this, epoch](std::uint32_t index, const rendezvous::wire::Report& r) {
                 if (epoch == epoch_) Feed(gang::Report{index, r});
               },
           .on_lost =
               [this, epoch](std::uint32_t index, const std::string& why) {
                 if (epoch != epoch_) return;
                 // While the gang restarts, every pod closes its connection to rejoin.
                 if (roster_ && !policy_.role().gen().restarting) roster_->MarkLost(index);
                 Feed(gang::Lost{index, why});
               }},
          heartbeat, misses);
    } else if (member_) {
      member_->StartChannel(
          {.on_stop =
               [this, epoch](const rendezvous::wire::Stop& stop) {
                 if (epoch != epoch_) return;
                 NoteStop(stop);
                 Feed(gang::Stop{stop});
               },
           .on_lost =
               [this, epoch](const std::string& why) {
                 if (epoch == epoch_) Feed(gang::Lost{0, why});
               }},
          heartbeat, misses);
    }
  }

  // The class a worker's failure will have, from what is known when it fails
  // (exit status, stderr tail, error file, OOM counter): decides the restart.
  exitcodes::FailureClass ClassOf(const FirstFailure& f) {
    exitcodes::Evidence e;
    e.first_failure = WorkerFailureOf(f);
    e.shm_bytes = SharedMemoryBytes();
    oom_kills_at_failure_ = e.oom_kills = OomKillsSinceStart();
    return exitcodes::Classify(e, options_.codes, options_.markers).failure_class;
  }

  exitcodes::WorkerFailure WorkerFailureOf(const FirstFailure& f) const {
    exitcodes::WorkerFailure w;
    w.local_rank = f.local_rank;
    w.rank = static_cast<int>(rank_base_) + f.local_rank;
    w.exit = f.exit;
    w.stderr_tail = supervisor_->StderrTail(f.local_rank);
    w.stream_marker = supervisor_->StreamMarker(f.local_rank);
    if (f.local_rank >= 0 && static_cast<std::size_t>(f.local_rank) < error_files_.size() &&
        !error_files_[f.local_rank].empty()) {
      w.error_file_message = ReadErrorFileMessage(error_files_[f.local_rank]);
    }
    return w;
  }

  // Stops our workers (idempotent); with a diagnostics signal (a hang
  // somewhere in the gang) the workers get it first, for stack dumps.
  void StopWorkers(int diagnostics_signal) {
    if (!supervisor_) return;
    if (diagnostics_signal == 0 || supervisor_->stopping()) {
      supervisor_->StopForPeer();
      return;
    }
    supervisor_->SendDiagnostics(diagnostics_signal);
    diag_timer_.expires_after(tun::kDiagnosticsDelay);
    diag_timer_.async_wait([this, epoch = epoch_](boost::system::error_code ec) {
      if (!ec && epoch == epoch_ && supervisor_) supervisor_->StopForPeer();
    });
  }

  void OnWorkersDone(const SupervisorResult& r) {
    phase_ms_[generation_ == 0 ? "run" : "run_generation_" + std::to_string(generation_)] =
        Ms(Clock::now() - workers_started_);
    CountWorkerExits(r);
    own_result_ = r;
    Feed(gang::WorkersDone{!r.first_failure && !r.stop_signal && !r.peer_stop});
  }

  // ---- In-place restart: a new rendezvous generation, same process ----

  void PostNextGeneration() {
    // Not from inside the supervisor's or the channel's callback: both go now.
    asio::post(io_, [this, epoch = epoch_] {
      if (!concluded_ && epoch == epoch_) BeginNextGeneration();
    });
  }

  void BeginNextGeneration() {
    ++epoch_;  // callbacks of the old generation's objects are ignored from now on
    JoinPreflight();
    preflight_running_ = false;
    join_generation_ = policy_.role().generation() + 1;
    generation_ = join_generation_;
    ++restarts_;
    first_failure_class_.reset();
    SetLogGeneration(join_generation_);
    spdlog::info("restart {} of {}: joining the rendezvous for generation {}", join_generation_,
                 options_.max_restarts, join_generation_);
    supervisor_.reset();
    step_meter_.reset();
    step_rates_.clear();
    stragglers_.clear();
    hang_timer_.cancel();
    diag_timer_.cancel();
    verdict_timer_.cancel();
    stall_timer_.cancel();
    stall_watch_ = false;
    if (member_) member_->Close();
    member_.reset();
    if (leader_) leader_->Close();
    leader_.reset();
    RemoveErrorDir();
    run_dir_.generation.clear();
    heartbeat_files_.clear();
    error_files_.clear();
    hang_policy_.reset();
    oom_kills_at_failure_.reset();
    hang_reason_.reset();
    own_result_.reset();
    failure_seen_ = false;
    if (Status s = StartRendezvous(); !s.ok()) Feed(gang::AgentFailed{s});
  }

  // ---- The end ----

  void ConcludeWith(const Conclusion& c) {
    using Kind = Conclusion::Kind;
    exitcodes::Evidence e;
    if (c.kind == Kind::kAgent || c.kind == Kind::kStall || !own_result_) {
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
    const SupervisorResult& r = *own_result_;
    e.collateral = r.collateral;
    // Up to the first failure (what the processes stopped after it did is not
    // its cause); for a run without one, up to now.
    e.oom_kills = r.first_failure && oom_kills_at_failure_ ? *oom_kills_at_failure_
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
        e.hang = hang_reason_;
        if (r.first_failure) {
          e.first_failure = WorkerFailureOf(*r.first_failure);
          e.shm_bytes = SharedMemoryBytes();
          e.gpu_fault = GpuFaultEvidence(options_.gpu);
        }
        break;
      default:
        break;
    }
    Conclude(e);
  }

  // OOM kills the memory cgroup counted since the workers started (v2
  // memory.events or v1 memory.oom_control; evidence.h).
  std::uint64_t OomKillsSinceStart() const {
    auto now = ReadOomKillCount();
    return now && oom_baseline_ && *now > *oom_baseline_ ? *now - *oom_baseline_ : 0;
  }

  // Classifies, writes the termination message, logs the summary last, stops.
  void Conclude(const exitcodes::Evidence& e) {
    concluded_ = true;
    exitcodes::Verdict v = exitcodes::Classify(e, options_.codes, options_.markers);
    exit_code_ = v.code;
    if (auto w = exitcodes::VerdictWarning(e, v); !w.empty()) spdlog::warn("{}", w);
    if (v.failure_class == exitcodes::FailureClass::kOk) {
      LogFields lf;
      lf.failure_class = "ok";
      lf.code = 0;
      ScopedLogFields fields(std::move(lf));
      spdlog::info("exit 0: every worker finished ({:.1f} s)",
                   Ms(Clock::now() - started_) / 1000);
    } else {
      exitcodes::TerminationInfo info;
      info.verdict = v;
      info.first_failure = e.first_failure;
      info.pod_index = options_.identity.index;
      info.attempt = options_.identity.attempt;
      info.phase_ms = phase_ms_;
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
    Stop();
  }

  void OnSignal(int signo) {
    if (signo == SIGCHLD) {
      if (supervisor_) {
        supervisor_->Reap();
      } else if (!preflight_running_) {
        // (The preflight thread reaps its own children by pid.)
        (void)ReapOrphans();
      }
      return;
    }
    if (signo == SIGTERM || signo == SIGINT) {
      if (!supervisor_ && !own_result_) {
        spdlog::info("received {} {}", exitcodes::SignalName(signo),
                     preflight_running_ ? "during the GPU preflight" : "before the workers ran");
      }
      Feed(gang::StopSignal{signo});
    }
    if (concluded_) return;
    if (supervisor_) {
      supervisor_->OnSignal(signo);
    } else if (signo != SIGTERM && signo != SIGINT) {
      spdlog::debug("ignoring {} before the workers started", exitcodes::SignalName(signo));
    }
  }

  void Stop() {
    if (leader_probe_) leader_probe_->Cancel();
    if (member_) member_->Close();
    if (leader_) leader_->Close();
    if (roster_) roster_->Cancel();
    deadline_timer_.cancel();
    hang_timer_.cancel();
    diag_timer_.cancel();
    release_timer_.cancel();
    verdict_timer_.cancel();
    stall_timer_.cancel();
    stall_watch_ = false;
    step_meter_.reset();
    health_.reset();
    if (signals_) signals_->Close();
    RemoveErrorDir();
    io_.stop();
  }

  int Fail(const Status& s) {
    exitcodes::Evidence e;
    e.agent_failure = s;
    Conclude(e);
    return exit_code_;
  }

  // How long a member whose own worker failed waits for the leader's word
  // (restart, or who failed first) before it concludes with its own failure.
  static constexpr auto kVerdictTimeout = tun::kVerdictTimeout;
  // Start-up's code pages are given back this long after the first workers start.
  static constexpr std::chrono::seconds kReleaseStartupCodeAfter{2};

  const PodOptions& options_;
  GangPolicy policy_;
  asio::io_context io_;
  asio::steady_timer deadline_timer_;
  asio::steady_timer hang_timer_;
  asio::steady_timer diag_timer_;     // diagnostics signal -> stop
  asio::steady_timer release_timer_;  // ReleaseStartupCode, once
  asio::steady_timer verdict_timer_;  // member: bounded wait for the leader's Stop
  asio::steady_timer stall_timer_;    // ticks while the channel runs: the own-stall clock
  std::vector<std::string> heartbeat_files_;  // by local rank
  std::vector<std::string> error_files_;      // TORCHELASTIC_ERROR_FILE by local rank
  WorkerLogDirs log_dirs_{options_.logs};      // --log-dir, --redirects, --tee
  std::filesystem::file_time_type heartbeat_started_;
  std::optional<HangPolicy> hang_policy_;  // this generation's, made at the first watch
  std::optional<std::string> hang_reason_;
  Clock::time_point started_;
  std::unique_ptr<SignalSource> signals_;
  std::unique_ptr<HealthServer> health_;
  std::shared_ptr<rendezvous::Leader> leader_;
  std::shared_ptr<rendezvous::LeaderNameCheck> name_check_;  // until the first gang forms
  std::shared_ptr<rendezvous::LeaderProbe> leader_probe_;    // ... likewise
  std::string leader_id_;  // this pod's leader instance id (LeaderOptions::leader_id)
  // Hot spares (--spares). Leader: its roster across generations
  // (leader_roster.h). Any pod: whether it waits as a spare now.
  std::optional<LeaderRoster> roster_;
  bool spare_ = false;
  std::shared_ptr<rendezvous::Member> member_;
  std::unique_ptr<Supervisor> supervisor_;
  // Where the workers' error and heartbeat files go (run_dir.h): the base
  // chosen at start, and this generation's directory in it ("" if none).
  struct RunDir {
    RunDirChoice choice;
    std::string generation;
  } run_dir_;
  std::uint32_t rank_base_ = 0;
  std::optional<std::uint64_t> oom_baseline_;  // memory cgroup oom_kill before the workers
  std::size_t read_ahead_bytes_ = kReadAheadMax;  // PlanMemory
  int worker_oom_score_adj_ = 0;                   // PlanMemory
  std::optional<std::uint64_t> oom_kills_at_failure_;  // counted up to the first failure
  Clock::time_point workers_started_;
  std::map<std::string, double> phase_ms_;
  std::optional<SupervisorResult> own_result_;  // set when our workers are all gone
  bool concluded_ = false;
  // Generations.
  std::uint32_t generation_ = 0;       // the generation running (for phase names)
  std::uint32_t join_generation_ = 0;  // the generation this pod asks to join
  std::uint64_t epoch_ = 0;            // bumped per generation: stale callbacks check it
  bool failure_seen_ = false;          // this generation's first failure was seen
  Clock::time_point failed_at_;        // ... then
  Clock::time_point round_started_;    // this rendezvous round began
  // The own-stall clock.
  bool stall_watch_ = false;
  Clock::time_point last_tick_;
  // The GPU preflight, off the loop.
  std::thread preflight_thread_;
  std::shared_ptr<std::atomic<bool>> preflight_cancel_;
  bool preflight_running_ = false;
  int exit_code_ = 0;
  // Metrics (metrics.h).
  bool in_rendezvous_ = false;
  bool gang_formed_ = false;  // some generation's rendezvous completed
  double rendezvous_seconds_ = 0;  // the last completed rendezvous
  std::uint64_t restarts_ = 0;
  std::map<std::string, std::uint64_t> worker_exits_;  // by class name
  std::optional<exitcodes::FailureClass> last_failure_class_;
  std::optional<exitcodes::FailureClass> first_failure_class_;  // this generation's
  // Stragglers (stragglers.h): this generation's.
  std::unique_ptr<StepMeter> step_meter_;
  std::map<std::uint32_t, double> step_rates_;  // leader: by pod, steps/s
  std::set<std::uint32_t> stragglers_;          // leader: pods named behind
};

}  // namespace

int RunPod(const PodOptions& options) {
  Pod pod(options);
  return pod.Run();
}

}  // namespace trainlet::agent
