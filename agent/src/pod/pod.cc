#include "trainlet/agent/pod/pod.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include "base/file_util.h"
#include "base/output.h"
#include "pod/pod_generation.h"
#include "run/resident.h"
#include "pod/roster.h"
#include "trainlet/agent/pod/evidence.h"
#include "trainlet/agent/pod/gang_policy.h"
#include "trainlet/agent/pod/gpu_setup.h"
#include "trainlet/agent/observe/health.h"
#include "trainlet/agent/observe/heartbeat_watch.h"
#include "trainlet/agent/base/log_format.h"
#include "trainlet/agent/base/metrics.h"
#include "trainlet/agent/spec/run_dir.h"
#include "trainlet/agent/run/signals.h"
#include "trainlet/agent/run/supervisor.h"
#include "trainlet/exitcodes/exit_code.h"
#include "trainlet/exitcodes/termination.h"
#include "trainlet/rendezvous/arrival.h"
#include "trainlet/rendezvous/auth.h"
#include "trainlet/rendezvous/launch.h"
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

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// One pod's run: the wiring around GangPolicy (gang_policy.h). Sockets, timers,
// the supervisor and signals become gang events; the policy's actions become
// I/O. Lives on the stack of RunPod; every callback runs on `io`. What one
// generation owns is one PodGeneration (pod_generation.h), replaced whole at a
// restart; its objects' callbacks go through Guard, so that nothing of an old
// generation acts on a new one.
class Pod {
 public:
  explicit Pod(PodOptions o)
      : options_(std::move(o)),
        policy_({.index = options_.identity.index,
                 .nnodes = options_.identity.nnodes,
                 .max_restarts = options_.max_restarts,
                 .hang_signal = options_.hang_signal}),
        release_timer_(io_) {}

  int Run() {
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

 private:
  // Before any traffic: the trainer, the run directory, shared memory, the
  // signals and the health endpoint.
  Status Prepare() {
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
      auto health = HealthServer::Start(io_.get_executor(), options_.health_port, [this] {
        // Ready: the gang formed and our workers run. Live: no hang found.
        const PodGeneration* g = gen_.get();
        if (g == nullptr) return HealthServer::State{};
        return HealthServer::State{
            .ready = g->supervisor != nullptr && !g->own_result,
            .live = !(g->heartbeats && g->heartbeats->hang()),
            .spare = g->spare && !g->in_rendezvous};
      }, [this] { return RenderMetrics(Metrics()); });
      if (!health.ok()) return health.status();
      health_ = std::move(health).value();
    }
    return Status::Ok();
  }

  // Reads the memory cgroup once: the workers' oom_score_adj and the output
  // read-ahead follow from it (supervisor.h), and where the kernel would end
  // the whole cgroup at an OOM (memory.oom.group 1) it says so, since the
  // agent then cannot report the OOM (exit 137, `trainlet exit-codes`).
  void PlanMemory() {
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

  // Wraps a callback of the current generation's objects so that it runs only
  // while that generation is still the pod's current one: the one check that
  // keeps an old generation's late completions (a timer, a socket, the
  // supervisor, the preflight thread) from acting on the next.
  template <typename F>
  auto Guard(F f) {
    return [this, gen = std::weak_ptr<PodGeneration>(gen_), f = std::move(f)](auto&&... args) {
      if (gen.expired() || gen.lock() != gen_) return;
      f(std::forward<decltype(args)>(args)...);
    };
  }

  // Makes generation `join` the current one (the old one, if any, is gone
  // by then) and joins its rendezvous.
  Status StartGeneration(std::uint32_t join) {
    gen_.reset();  // closes its sockets and timers, joins its preflight
    gen_ = std::make_shared<PodGeneration>(io_.get_executor(), join, options_.straggler_factor);
    return StartRendezvous();
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
    PodGeneration& g = *gen_;
    const auto broadcast_class =
        exitcodes::FailureClass(a.broadcast ? a.broadcast->failure_class : 0);
    if (a.broadcast && a.broadcast->restart && broadcast_class != exitcodes::FailureClass::kOk &&
        !RestartableClass(broadcast_class)) {
      // A member whose failure points at its node leaves; a spare takes its place.
      roster_.MarkLeaving(a.broadcast->failed_index);
    }
    if (a.broadcast && g.leader) {
      // A restart's survivors are known by identity in the next round.
      if (a.broadcast->restart) kept_ids_ = g.leader->instance_ids();
      g.leader->BroadcastStop(WithReplacement(*a.broadcast));
      // The generation ends: pods rejoining go to the next round's leader,
      // whose listener is bound at once on a restart.
      g.leader->StopAdmitting();
      if (a.broadcast->restart) ListenAhead();
    }
    if (a.report && g.member) {
      if (a.report->ok) {
        g.member->SendReport(*a.report, Guard([this] { Feed(gang::ReportSent{}); }));
      } else {
        g.member->SendReport(*a.report);
      }
    }
    // trainlet_last_failure (metrics.h): the class of the failure this pod
    // reports, or of the culprit the leader names (a growing gang's is none).
    if (a.broadcast && !(a.broadcast->restart && a.broadcast->failure_class == 0)) {
      NoteFailureClass(a.broadcast->failure_class);
      NoteCulprit(*a.broadcast, g);
    }
    if (a.report && !a.report->ok) NoteFailureClass(a.report->failure_class);
    if ((a.broadcast || a.report || a.stop_workers) && !g.failure_seen) {
      g.failure_seen = true;
      failed_at_ = Clock::now();
    }
    if (a.stop_workers) StopWorkers(*a.stop_workers);
    if (a.arm_verdict_timer) {
      g.verdict_timer.expires_after(kVerdictTimeout);
      g.verdict_timer.async_wait(Guard([this](boost::system::error_code ec) {
        if (!ec) Feed(gang::Timer{gang::TimerKind::kVerdict});
      }));
    }
    if (a.restart) {
      g.next_decided = true;
      PostNextGeneration();
    }
    if (a.conclude) ConcludeWith(*a.conclude);
  }

  // Leader: the Stop of a restart names the spare the roster gives the
  // failed pod's node rank when that pod is lost or leaves (roster.h), so the
  // pod that leaves, the spare and the survivors can say who replaces whom.
  rendezvous::wire::Stop WithReplacement(rendezvous::wire::Stop stop) {
    if (!stop.restart) return stop;
    stop.replacement = roster_.PlannedReplacement(stop.failed_index);
    if (stop.replacement) {
      spdlog::info("generation {}: spare pod {} is to take the node rank of pod {}",
                   stop.next_generation, *stop.replacement, stop.failed_index);
    }
    return stop;
  }

  // Leader: the next generation's rendezvous port listens from the moment the
  // restart is decided (leader.h, ListenAhead): members whose workers stop
  // sooner than ours wait in its backlog instead of backing off; the next
  // generation's Leader takes it over (Stop() closes it if none does).
  void ListenAhead() {
    if (options_.rdzv_listen_fd >= 0 || options_.rdzv_port == 0) return;
    options_.rdzv_listen_fd = rendezvous::ListenAhead(
        options_.rdzv_port, options_.identity.nnodes + options_.identity.spares);
  }

  // Member: what a restart's Stop says about a spare taking a pod's node
  // rank; this pod, when it is the one leaving, names the spare when it exits.
  void NoteReplacement(const rendezvous::wire::Stop& stop) {
    if (!stop.restart || !stop.replacement) return;
    const std::uint32_t own = options_.identity.index;
    if (stop.failed_index == own) {
      const std::uint32_t nproc = std::max(1u, options_.identity.nproc_per_node);
      const std::uint32_t node_rank = gen_->rank_base / nproc;
      replaced_by_ = exitcodes::Handover{.spare = *stop.replacement, .node_rank = node_rank,
                                         .generation = stop.next_generation};
      spdlog::warn("this pod leaves the gang; spare pod {} is to take its node rank {} in "
                   "generation {}", *stop.replacement, node_rank, stop.next_generation);
    } else {
      spdlog::info("generation {}: spare pod {}{} is to take the node rank of pod {}",
                   stop.next_generation, *stop.replacement,
                   *stop.replacement == own ? " (this pod)" : "", stop.failed_index);
    }
  }

  void NoteFailureClass(std::uint16_t failure_class) {
    meters_.last_failure_class =
        std::string(exitcodes::ClassName(exitcodes::FailureClass(failure_class)));
  }

  // Leader: trainlet_gang_last_culprit (metrics.h): the pod its Stop names,
  // with the node that pod's hello named (its own NODE_NAME for this pod).
  void NoteCulprit(const rendezvous::wire::Stop& stop, const PodGeneration& g) {
    const bool own = stop.failed_index == options_.identity.index;
    meters_.last_culprit = Culprit{
        .index = stop.failed_index,
        .node_name = own ? EnvOr("NODE_NAME")
                  : g.leader ? g.leader->node_name(stop.failed_index) : std::string(),
        .failure_class = std::string(
            exitcodes::ClassName(exitcodes::FailureClass(stop.failure_class)))};
  }

  std::string EnvOr(const std::string& key) const {
    auto it = options_.env.find(key);
    return it == options_.env.end() ? std::string() : it->second;
  }

  // A member's view of the leader's Stop, for trainlet_last_failure: the
  // culprit's class for a restart, peer_failed for a stop caused elsewhere.
  void NoteStop(const rendezvous::wire::Stop& stop) {
    if (stop.failed_index == options_.identity.index) return;  // ours: already noted
    if (stop.restart && stop.failure_class == 0) return;       // the gang grows: no failure
    NoteFailureClass(stop.restart ? stop.failure_class
                                  : static_cast<std::uint16_t>(exitcodes::FailureClass::kPeerFailed));
  }

  // ---- The pod's own stall (SIGSTOP, a frozen node, a starved process) ----

  void StartStallWatch() {
    gen_->stall_watch = true;
    gen_->last_tick = Clock::now();
    Tick();
  }

  void Tick() {
    gen_->stall_timer.expires_after(tun::kStallTick);
    gen_->stall_timer.async_wait(Guard([this](boost::system::error_code ec) {
      if (ec || !gen_->stall_watch || concluded_) return;
      CheckStall();
      gen_->last_tick = Clock::now();
      if (!concluded_) Tick();
    }));
  }

  // The peers give a pod up after kStallLimit without a frame from it, counted
  // from its last heartbeat, which may precede the stall by up to a heartbeat
  // interval: so the silence since that heartbeat decides, as they judge it,
  // not the loop's gap alone (a stall of 2.5 s after a heartbeat sent 0.8 s
  // before it was given up by the peers, yet shorter than the limit).
  void CheckStall() {
    PodGeneration& g = *gen_;
    if (!g.stall_watch) return;
    const auto now = Clock::now();
    const auto gap = now - g.last_tick;
    const auto silence = std::max<Clock::duration>(
        gap, g.leader ? g.leader->heartbeat_silence()
                      : g.member ? g.member->heartbeat_silence() : Clock::duration{});
    if (silence <= tun::kStallLimit) return;
    g.stall_watch = false;  // once per generation
    std::string why = fmt::format(
        "this pod's event loop did not run for {:.1f} s, {:.1f} s without a heartbeat sent "
        "(the process was stopped or starved; its peers give up after {:.1f} s)",
        std::chrono::duration<double>(gap).count(), std::chrono::duration<double>(silence).count(),
        std::chrono::duration<double>(tun::kStallLimit).count());
    spdlog::error("{}", why);
    Apply(policy_.On(gang::OwnStall{why}));
  }

  // ---- Rendezvous ----

  // This pod's Hello for the current generation's round.
  rendezvous::wire::Hello MakeHelloNow() const {
    const PodIdentity& id = options_.identity;
    // (Packed: the launch configuration the peers compare, field by field.)
    return rendezvous::MakeHello(
        {.job_id = id.job_id, .attempt = id.attempt, .index = id.index, .nnodes = id.nnodes,
         .min_nodes = id.min_pods(), .nproc_per_node = id.nproc_per_node,
         .master_port = options_.master_port,
         .max_restarts = options_.max_restarts, .gang = id.gang,
         .preflight = options_.gpu.preflight, .generation = gen_->join, .job_name = id.job_name,
         .job_restart_attempt = id.job_restart_attempt, .spares = id.spares,
         .ranks_by_arrival = id.by_arrival,
         .restarts = id.elastic() ? std::optional(policy_.role().restarts()) : std::nullopt,
         .node_name = EnvOr("NODE_NAME")});
  }

  Status StartRendezvous() {
    PodGeneration& g = *gen_;
    g.round_started = Clock::now();
    g.in_rendezvous = true;
    // What does not depend on the assignment is prepared while we wait for it:
    // once the gang forms, every pod's work lands at the same moment.
    MakeErrorDir();
    g.deadline_timer.expires_after(options_.rdzv_timeout);
    g.deadline_timer.async_wait(Guard([this](boost::system::error_code ec) {
      if (!ec) OnRendezvousDeadline();
    }));
    rendezvous::wire::Hello hello = MakeHelloNow();
    auto on_assignment = Guard(
        [this](Result<rendezvous::wire::Assignment> a) { OnAssignment(a); });
    if (options_.identity.is_leader()) return StartLeader(hello, on_assignment);
    return StartMember(hello, on_assignment);
  }

  // The leader's round did not complete within --rdzv-timeout. Members time
  // out through their own deadline (same instant) with details.
  void OnRendezvousDeadline() {
    const PodGeneration& g = *gen_;
    if (g.supervisor || !g.leader) return;
    const PodIdentity& id = options_.identity;
    // This timer and the round's own (roster.h) end together when torch's last
    // call ends with the deadline: with MIN joined the round forms now
    // (formation_policy.h: "deadline reached"), whichever fired first.
    if (g.leader->admitted() >= id.min_pods() && (id.elastic() || id.spares > 0)) {
      g.leader->Reconsider();
      if (g.leader->formed()) return;
    }
    std::string missing;
    for (auto i : g.leader->missing()) missing += (missing.empty() ? "" : ",") + std::to_string(i);
    const std::uint32_t admitted = g.leader->admitted();
    const std::string range = " (--nnodes " + std::to_string(id.min_pods()) + ":" +
                              std::to_string(id.nnodes) + ")";
    const std::string joined =
        !id.elastic() ? std::to_string(admitted) + " of " + std::to_string(id.nnodes) +
                            " pods joined"
        : admitted < id.min_pods()
            ? std::to_string(admitted) + " pod(s) joined, at least " +
                  std::to_string(id.min_pods()) + " needed" + range
            : std::to_string(admitted) + " pod(s) joined" + range +
                  ", but no generation could be planned from them (see the leader's log)";
    Feed(gang::AgentFailed{Status::Infra(
        "rendezvous timed out after " + std::to_string(options_.rdzv_timeout.count() / 1000) +
        " s: " + joined + "; missing indices " + (missing.empty() ? "none" : missing))});
  }

  // When the leader's round forms (formation_policy.h): MIN:MAX, the spares,
  // torch's last call, the round's deadline.
  FormationConfig FormationNow() const {
    const PodIdentity& id = options_.identity;
    return {.min_nodes = id.min_pods(), .max_nodes = id.nnodes, .spares = id.spares,
            .last_call = options_.rdzv_last_call, .timeout = options_.rdzv_timeout};
  }

  rendezvous::LeaderOptions LeaderOptionsNow() {
    const PodIdentity& id = options_.identity;
    const auto round_started = gen_->round_started;
    rendezvous::LeaderOptions lo;
    lo.nnodes = id.nnodes;
    lo.master_port = options_.master_port;
    lo.run_id = id.job_id;
    lo.token = options_.token;
    lo.master_addr = options_.local_addr;  // --local-addr
    lo.jax_port = options_.jax_port;
    if (options_.rdzv_read_timeout.count() > 0) lo.handshake_timeout = options_.rdzv_read_timeout;
    lo.make_nccl_ids = MakeNcclIdMaker(options_.gpu, options_.env);  // gpu_setup.h
    lo.deadline = round_started + options_.rdzv_timeout;
    // Every pod of the gang may be mid-handshake at once (bench/HISTORY.md: scale).
    lo.max_pending_handshakes = std::max<std::size_t>(lo.max_pending_handshakes, id.nnodes);
    // Restarts are counted, not generations: with elastic sizes a join starts a
    // generation that is no restart, so no generation number is out of bounds.
    lo.max_generation = id.elastic() ? std::nullopt : std::optional(options_.max_restarts);
    // Busy ports are retried, until a moment before the rendezvous deadline so
    // the error names the port rather than "timed out".
    lo.bind_deadline = round_started + options_.rdzv_timeout - tun::kBindRetryCap;
    lo.check_master_port = true;  // a busy MASTER_PORT is infra, not rank 0's failure
    if (leader_id_.empty()) leader_id_ = rendezvous::NewNonce();
    lo.leader_id = leader_id_;
    if (id.spares > 0 || id.elastic()) {  // the membership policy places the pods (roster.h)
      lo.nnodes = id.nnodes + id.spares;
      lo.max_pending_handshakes = std::max<std::size_t>(lo.max_pending_handshakes, lo.nnodes);
      lo.admit_late = true;  // as spares, or for a next generation (OnJoin)
      lo.restarts = policy_.role().restarts();
      roster_.StartRound(io_.get_executor(), round_started, FormationNow(),
                         [this] { if (gen_ && gen_->leader) gen_->leader->Reconsider(); });
      lo.expected = roster_.Expected();
      lo.plan = [this](const std::vector<std::uint32_t>& joined) { return roster_.Plan(joined); };
      lo.replaced_of = [this](std::uint32_t index) { return roster_.LastReplacementOf(index); };
      lo.left_of = [this](std::uint32_t index) { return roster_.LeftIn(index); };
      lo.lost_spare_of = [this](std::uint32_t index) { return roster_.LostSpareIn(index); };
      lo.assign_first = [this](std::uint32_t index) { return roster_.NewlyActive(index); };
    }
    // The survivors' indices are kept for them (by instance id: leader.h)
    // while they may still be stopping their workers.
    lo.kept_ids = std::exchange(kept_ids_, {});
    for (auto it = lo.kept_ids.begin(); it != lo.kept_ids.end();) {
      const bool expected = lo.expected.empty() || lo.expected.contains(it->first);
      it = expected ? std::next(it) : lo.kept_ids.erase(it);
    }
    lo.keep_until = round_started + options_.grace + tun::kStallLimit;
    // Ranks by arrival (bound at start), or listened ahead at a restart (ListenAhead).
    lo.listening_fd = std::exchange(options_.rdzv_listen_fd, -1);
    return lo;
  }

  template <typename OnAssignment>
  Status StartLeader(const rendezvous::wire::Hello& hello, OnAssignment on_assignment) {
    const PodIdentity& id = options_.identity;
    auto leader =
        rendezvous::Leader::Listen(io_.get_executor(), options_.rdzv_port, LeaderOptionsNow());
    if (!leader.ok()) return leader.status();
    gen_->leader = std::move(leader).value();
    gen_->leader->Start(hello, std::move(on_assignment));
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

  template <typename OnAssignment>
  Status StartMember(const rendezvous::wire::Hello& hello, OnAssignment on_assignment) {
    const PodIdentity& id = options_.identity;
    const std::uint32_t join = gen_->join;
    rendezvous::MemberOptions mo;
    mo.leader_host = id.leader_host;
    mo.port = options_.rdzv_port;
    mo.hello = hello;
    mo.hello.instance_id = instance_id_;  // to the leader alone (wire.h), never logged
    mo.deadline = gen_->round_started + options_.rdzv_timeout;
    if (join > 0) {
      // Rejoining after a restart: the leader re-listens the moment its own
      // workers are gone, so retry sooner than a cold start would.
      mo.backoff.initial = tun::kRejoinBackoffInitial;
      mo.backoff.min_delay = tun::kRejoinBackoffMin;
    }
    mo.token = options_.token;
    mo.seed = static_cast<std::uint64_t>(::getpid()) ^
              static_cast<std::uint64_t>(Clock::now().time_since_epoch().count());
    spdlog::info("joining leader {} port {} ({}){}", id.leader_host, options_.rdzv_port,
                 id.leader_source, join > 0 ? " for generation " + std::to_string(join) : "");
    auto member = rendezvous::Member::Create(io_.get_executor(), mo);
    if (!member.ok()) return member.status();
    gen_->member = std::move(member).value();
    gen_->member->Start(std::move(on_assignment));
    return Status::Ok();
  }

  // Another pod acting as this gang's leader (leader_probe.h): both stop, config.
  // Ranks by arrival (rendezvous/arrival.h): the leader numbered this member
  // as it joined; it keeps that index for every later generation (its node
  // rank follows the generation's size with elastic --nnodes MIN:MAX).
  void AdoptArrivalIndex(std::uint32_t index, std::optional<std::uint32_t> node_rank) {
    options_.identity.index = index;
    options_.identity.index_source = "arrival (the leader's order of joining)";
    policy_.AdoptIndex(index);
    SetLogPod(index);
    if (node_rank && *node_rank != index) {
      spdlog::info("index {} by arrival (node rank {} in this generation): the leader numbers "
                   "the pods as they join", index, *node_rank);
      return;
    }
    spdlog::info("node rank {} by arrival: the leader numbers the pods as they join", index);
  }

  void StartLeaderProbe(rendezvous::wire::Hello hello) {
    if (leader_probe_) leader_probe_->Cancel();
    hello.leader_id = leader_id_;
    rendezvous::LeaderProbeOptions po;
    po.name = options_.identity.leader_host;
    po.port = options_.rdzv_port;
    po.hello = std::move(hello);
    po.token = options_.token;
    leader_probe_ = rendezvous::LeaderProbe::Start(
        io_.get_executor(), std::move(po), Guard([this](const std::string& clash) {
          Feed(gang::AgentFailed{Status::Config(clash)});
        }));
  }

  void OnAssignment(const Result<rendezvous::wire::Assignment>& result) {
    PodGeneration& g = *gen_;
    if (leader_probe_) leader_probe_->Cancel();
    roster_.Cancel();
    g.deadline_timer.cancel();
    g.in_rendezvous = false;
    meters_.rendezvous_seconds =
        std::chrono::duration<double>(Clock::now() - g.round_started).count();
    if (name_check_ && result.ok()) name_check_->Cancel();  // the members found us
    if (!result.ok()) {
      if (auto by = g.member ? g.member->replaced() : std::nullopt) {
        replaced_by_ = exitcodes::Handover{
            .spare = by->spare, .node_rank = by->node_rank, .generation = by->generation};
      }
      Feed(gang::AgentFailed{result.status()});
      return;
    }
    const auto& a = *result;
    const PodIdentity& id = options_.identity;
    if (id.index == rendezvous::wire::kNoIndex && (a.index || a.node_rank)) {
      AdoptArrivalIndex(a.index.value_or(a.node_rank.value_or(0)), a.node_rank);
    }
    gang_formed_ = true;
    if (a.generation == 0 && g.join == 0) phase_ms_["rendezvous"] = Ms(Clock::now() - started_);
    g.rank_base = a.rank_base;
    g.number = a.generation;
    SetLogGeneration(g.number);
    if (g.leader) roster_.Adopt(a.generation);
    g.spare = a.spare;
    assigned_restarts_ = a.restarts.value_or(a.generation);
    const bool was_spare = std::exchange(was_spare_, a.spare);
    if (a.spare) {
      spdlog::info("rendezvous {:.1f} ms: generation {}: a hot spare, waiting without workers "
                   "({} active pod(s), world size {})",
                   Ms(Clock::now() - g.round_started), a.generation, a.nnodes, a.world_size);
      Feed(gang::Assigned{.generation = a.generation, .spare = true, .nnodes = a.nnodes,
                          .restarts = a.restarts});
      StartGangChannel();
      StartStallWatch();
      return;
    }
    spdlog::info("rendezvous {:.1f} ms: generation {}, world size {}, ranks {}..{}, "
                 "MASTER_ADDR={} MASTER_PORT={}{}",
                 Ms(Clock::now() - g.round_started), a.generation, a.world_size, a.rank_base,
                 a.rank_base + id.nproc_per_node - 1, a.master_addr, a.master_port,
                 was_spare ? fmt::format(" (a spare until now: node rank {})",
                                         a.node_rank.value_or(id.index))
                           : "");
    if (!options_.gpu.preflight) {
      // NCCL ids, socket interface (gpu_setup.h): no blocking call without the preflight.
      OnGpuPrepared(a, PrepareGpuWorkers(options_.gpu, options_.env, a, nullptr));
      return;
    }
    StartPreflight(a);
  }

  // The preflight blocks (up to --preflight-timeout): on a thread of its own,
  // so a SIGTERM is still read at once; its end is an event like any other.
  // The thread only runs gpu::RunPreflight (no logging: the log sink is the
  // loop's).
  void StartPreflight(const rendezvous::wire::Assignment& a) {
    PodGeneration& g = *gen_;
    g.JoinPreflight();
    g.preflight_cancel = std::make_shared<std::atomic<bool>>(false);
    g.preflight_running = true;
    gpu::PreflightOptions po = PreflightOptionsFor(
        options_.gpu, options_.env, options_.identity.index, options_.identity.nproc_per_node, a);
    po.cancel = g.preflight_cancel.get();
    auto done = Guard([this, a](double ms, const gpu::PreflightReport& r) {
      gen_->preflight_running = false;
      OnGpuPrepared(a, PrepareGpuWorkers(options_.gpu, options_.env, a, &r, ms));
    });
    g.preflight_thread = std::thread([this, po = std::move(po), done = std::move(done),
                                      keep = g.preflight_cancel]() mutable {
      auto t0 = Clock::now();
      gpu::PreflightReport r = gpu::RunPreflight(po);
      double ms = Ms(Clock::now() - t0);
      asio::post(io_, [done = std::move(done), ms, r = std::move(r)]() mutable { done(ms, r); });
    });
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

  // ---- The workers ----

  Result<std::vector<WorkerSpec>> MakeSpecs(const rendezvous::wire::Assignment& a,
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
  WorkerPlacement PlacementOf(const rendezvous::wire::Assignment& a, std::uint32_t lr) const {
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

  SupervisorOptions SupervisorOptionsFor(const rendezvous::wire::Assignment& a) {
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

  void StartWorkers(const rendezvous::wire::Assignment& a,
                    const std::map<std::string, std::string>& base_env) {
    const PodIdentity& id = options_.identity;
    PodGeneration& g = *gen_;
    auto made = MakeSpecs(a, base_env);
    if (!made.ok()) {
      Feed(gang::AgentFailed{made.status()});
      return;
    }
    g.oom_baseline = ReadOomKillCount();
    g.workers_started = Clock::now();
    g.supervisor = std::make_unique<Supervisor>(
        io_.get_executor(), SupervisorOptionsFor(a),
        Guard([this](SupervisorResult r) { OnWorkersDone(r); }));
    if (Status s = g.supervisor->Start(std::move(made).value()); !s.ok()) {
      g.supervisor.reset();
      Feed(gang::AgentFailed{s});
      return;
    }
    if (a.generation == 0 && g.join == 0) {
      spdlog::info("started {} worker(s) {:.1f} ms after start", id.nproc_per_node,
                   Ms(Clock::now() - started_));
      // Start-up's code is done; the loop from here on touches little of it.
      // Not at once: the whole gang starts its trainers now, and the refaults
      // would compete with them for the CPU.
      release_timer_.expires_after(kReleaseStartupCodeAfter);
      release_timer_.async_wait([](boost::system::error_code ec) {
        if (!ec) ReleaseStartupCode();
      });
    } else if (failed_at_) {
      spdlog::info("generation {}: started {} worker(s) {:.1f} ms after the failure",
                   a.generation, id.nproc_per_node, Ms(Clock::now() - *failed_at_));
    } else {  // a spare's first workers: this pod saw no failure of its own
      spdlog::info("generation {}: started {} worker(s) {:.1f} ms after start", a.generation,
                   id.nproc_per_node, Ms(Clock::now() - started_));
    }
    Feed(gang::Assigned{.generation = a.generation, .spares = roster_.spares_waiting(),
                        .nnodes = a.nnodes, .restarts = a.restarts});
    // Only now: gang events that arrived early (replayed here) can stop workers.
    StartGangChannel();
    StartStallWatch();
    if (g.heartbeats) g.heartbeats->Start();
  }

  // ---- Watching the workers: heartbeat files (hangs) and step rates (stragglers) ----

  std::unique_ptr<HeartbeatWatch> MakeHeartbeatWatch(std::vector<std::string> files) {
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
  void UpdateStepRates() {
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

  // ---- Metrics (metrics.h): read on the loop at each scrape ----

  MetricsSnapshot Metrics() const {
    const PodIdentity& id = options_.identity;
    MetricsSnapshot m;
    meters_.Fill(&m);
    m.leader = id.is_leader();
    m.pods_expected = id.nnodes;
    m.pods_min = id.min_pods();
    m.max_restarts = options_.max_restarts;
    m.restart_count = policy_.role().restarts();
    m.spares_configured = id.spares;
    m.replacements = roster_.replacements();
    if (const PodGeneration* g = gen_.get()) {
      m.generation = g->number;
      m.rendezvous_seconds =
          g->in_rendezvous ? std::chrono::duration<double>(Clock::now() - g->round_started).count()
                           : meters_.rendezvous_seconds;
      m.spare = g->spare && !g->in_rendezvous;
      m.formed = gang_formed_ && !g->in_rendezvous;
      m.pods_joined = g->in_rendezvous ? (g->leader ? g->leader->admitted() : 0)
                                       : (gang_formed_ ? ActivePods() : 0);
      for (std::uint32_t lr = 0; g->supervisor && lr < id.nproc_per_node; ++lr) {
        m.workers_running += g->supervisor->running(static_cast<int>(lr)) ? 1 : 0;
      }
      if (g->leader) {
        for (const auto& [pod, p] : g->leader->peer_stats()) {
          if (p.rtt_seconds) m.heartbeat_rtt_seconds[pod] = *p.rtt_seconds;
        }
      }
      m.step_rate = g->stragglers.rates();
      m.stragglers.assign(g->stragglers.stragglers().begin(), g->stragglers.stragglers().end());
      if (g->heartbeats) m.heartbeat_age_seconds = g->heartbeats->Ages();
    }
    FillProcessStats(&m);
    return m;
  }

  // The active pods of the generation that runs (elastic: its own size).
  std::uint32_t ActivePods() const {
    const std::uint32_t active = policy_.role().gen().active;
    return active != 0 ? active : options_.identity.nnodes;
  }

  // This generation's directory for the workers' error files (TORCHELASTIC_ERROR_FILE)
  // and heartbeat files, in gen_->dir; left empty if it cannot be made. The
  // generation removes it (PodGeneration::Close).
  void MakeErrorDir() {
    if (run_dir_.base.empty()) return;  // said at start (JudgeRunDir)
    std::string tmpl = run_dir_.base + "/trainlet-XXXXXX";
    if (::mkdtemp(tmpl.data()) != nullptr) gen_->dir = tmpl;
  }

  // ---- The gang's control channel (see rendezvous/leader.h, member.h) ----

  void StartGangChannel() {
    PodGeneration& g = *gen_;
    const auto heartbeat = tun::kHeartbeatInterval;
    const int misses = tun::kHeartbeatMisses;
    if (g.leader) {
      g.leader->StartChannel(
          {.on_report = Guard([this](std::uint32_t index, const rendezvous::wire::Report& r) {
             Feed(gang::Report{index, r});
           }),
           .on_lost = Guard([this](std::uint32_t index, const std::string& why) {
             // While the gang restarts, every pod closes its connection to rejoin
             // (also after the policy moved on to the next generation, which
             // restarting() no longer says: that survivor would be planned out).
             if (!policy_.role().gen().restarting() && !gen_->next_decided) {
               roster_.MarkLost(index);
             }
             Feed(gang::Lost{index, why});
           }),
           .on_join = [this](std::uint32_t index) { return OnJoin(index); }},
          heartbeat, misses);
    } else if (g.member) {
      g.member->StartChannel(
          {.on_stop = Guard([this](const rendezvous::wire::Stop& stop) {
             NoteStop(stop);
             NoteReplacement(stop);
             Feed(gang::Stop{stop});
           }),
           .on_lost = Guard([this](const std::string& why) { Feed(gang::Lost{0, why}); })},
          heartbeat, misses);
    }
  }

  // Leader: pod `index` was admitted while this generation runs. Whether the
  // gang grows for it (OnLateJoin, formation_policy.h) the policy decides with
  // what it knows (a failure may have come first); the roster counts it for
  // the next round either way. True: it waits as a spare now.
  bool OnJoin(std::uint32_t index) {
    if (concluded_) return false;
    const LateJoin j = OnLateJoin(policy_.role().gen().active, FormationNow());
    spdlog::info("pod {} joined while generation {} runs: {}", index, gen_->number, j.why);
    Feed(gang::Joined{.index = index, .grows = j.kind == LateJoin::Kind::kNextGeneration});
    const bool spare = !concluded_ && !policy_.role().gen().restarting();
    roster_.AddJoined(index, spare);
    return spare;
  }

  // The class a worker's failure will have, from what is known when it fails
  // (exit status, stderr tail, error file, OOM counter): decides the restart.
  exitcodes::FailureClass ClassOf(const FirstFailure& f) {
    exitcodes::Evidence e;
    e.first_failure = WorkerFailureOf(f);
    e.shm_bytes = SharedMemoryBytes();
    e.shm_free_bytes = SharedMemoryFree();
    gen_->oom_kills_at_failure = e.oom_kills = OomKillsSinceStart();
    return exitcodes::Classify(e, options_.codes, options_.markers).failure_class;
  }

  exitcodes::WorkerFailure WorkerFailureOf(const FirstFailure& f) const {
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
  void StopWorkers(int diagnostics_signal) {
    PodGeneration& g = *gen_;
    if (!g.supervisor) return;
    if (diagnostics_signal == 0 || g.supervisor->stopping()) {
      g.supervisor->StopForPeer();
      return;
    }
    g.supervisor->SendDiagnostics(diagnostics_signal);
    g.diag_timer.expires_after(tun::kDiagnosticsDelay);
    g.diag_timer.async_wait(Guard([this](boost::system::error_code ec) {
      if (!ec && gen_->supervisor) gen_->supervisor->StopForPeer();
    }));
  }

  void OnWorkersDone(const SupervisorResult& r) {
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

  // ---- In-place restart: a new rendezvous generation, same process ----

  void PostNextGeneration() {
    // Not from inside the supervisor's or the channel's callback: both go now.
    asio::post(io_, Guard([this] {
      if (!concluded_) BeginNextGeneration();
    }));
  }

  void BeginNextGeneration() {
    const std::uint32_t next = policy_.role().generation() + 1;
    const std::uint32_t restarts = policy_.role().restarts();
    SetLogGeneration(next);
    if (restarts > assigned_restarts_) {  // a failure or a loss ended the generation
      spdlog::info("restart {} of {}: joining the rendezvous for generation {}", restarts,
                   options_.max_restarts, next);
      ++meters_.restarts;
    } else {  // a pod joined: the gang grows (formation_policy.h)
      spdlog::info("generation {}: joining the rendezvous (the gang grows; {} restart(s) so far)",
                   next, restarts);
    }
    // The old generation goes whole: its workers are gone, its sockets and
    // timers close, its files' directory is removed.
    if (Status s = StartGeneration(next); !s.ok()) Feed(gang::AgentFailed{s});
  }

  // ---- The end ----

  void ConcludeWith(const Conclusion& c) {
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
    const SupervisorResult& r = *g->own_result;
    e.collateral = r.collateral;
    // Up to the first failure (what the processes stopped after it did is not
    // its cause); for a run without one, up to now.
    e.oom_kills = r.first_failure && g->oom_kills_at_failure ? *g->oom_kills_at_failure
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
        if (g->heartbeats) e.hang = g->heartbeats->hang();
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
    Conclude(e);
  }

  // OOM kills the memory cgroup counted since the workers started (v2
  // memory.events or v1 memory.oom_control; evidence.h).
  std::uint64_t OomKillsSinceStart() const {
    auto now = ReadOomKillCount();
    const auto& baseline = gen_->oom_baseline;
    return now && baseline && *now > *baseline ? *now - *baseline : 0;
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
    Stop();
  }

  void OnSignal(int signo) {
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

  void Stop() {
    if (options_.rdzv_listen_fd >= 0) ::close(std::exchange(options_.rdzv_listen_fd, -1));
    if (leader_probe_) leader_probe_->Cancel();
    roster_.Cancel();
    if (gen_) gen_->Close();
    release_timer_.cancel();
    health_.reset();
    if (signals_) signals_->Close();
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

  // What the pod keeps for its whole life (the options, the gang's rules, the
  // loop, the endpoints, the counters); what one generation owns is gen_.
  PodOptions options_;  // a copy: by arrival, the index comes with the assignment
  GangPolicy policy_;
  asio::io_context io_;
  asio::steady_timer release_timer_;      // ReleaseStartupCode, once
  WorkerLogDirs log_dirs_{options_.logs};  // --log-dir, --redirects, --tee
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
  Roster roster_;          // leader with --spares: the pods across generations (roster.h)
  RunDirChoice run_dir_;   // where each generation's error and heartbeat files go
  struct MemoryPlan {      // PlanMemory
    std::size_t read_ahead_bytes = kReadAheadMax;
    int worker_oom_score_adj = 0;
  } memory_;
  std::map<std::string, double> phase_ms_;
  PodMeters meters_;             // metrics.h: restarts, exits, the last failure
  bool gang_formed_ = false;     // some generation's rendezvous completed
  std::uint32_t assigned_restarts_ = 0;  // the restarts counted at the last assignment
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

}  // namespace

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
