// Class Pod (pod_wiring.h): each generation's rendezvous round, as leader or
// member, and what its assignment starts.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

#include "pod/pod_wiring.h"
#include "trainlet/agent/base/log_format.h"
#include "trainlet/agent/pod/gpu_setup.h"
#include "trainlet/rendezvous/launch.h"

namespace trainlet::agent {

namespace tun = rendezvous::tunables;
using exitcodes::Result;
using exitcodes::Status;

// This pod's Hello for the current generation's round.
rendezvous::wire::Hello Pod::MakeHelloNow() const {
  const PodIdentity& id = options_.identity;
  // (Packed: the launch configuration the peers compare, field by field.)
  rendezvous::wire::Hello hello = rendezvous::MakeHello(
      {.job_id = id.job_id, .attempt = id.attempt, .index = id.index, .nnodes = id.nnodes,
       .min_nodes = id.min_pods(), .nproc_per_node = id.nproc_per_node,
       .master_port = options_.master_port,
       .max_restarts = options_.max_restarts, .gang = id.gang,
       .preflight = options_.gpu.preflight, .generation = gen_->join, .job_name = id.job_name,
       .job_restart_attempt = id.job_restart_attempt, .spares = id.spares,
       .ranks_by_arrival = id.by_arrival,
       // Every mode: a replaced leader continues the count (membership.h M15).
       .restarts = policy_.role().restarts(),
       .node_name = EnvOr("NODE_NAME")});
  // Where the leader's roster places the pods: the node rank this pod held,
  // for a replaced leader's first round (membership.h M16).
  if (id.spares > 0 || id.elastic()) hello.node_rank = held_node_rank_;
  return hello;
}

Status Pod::StartRendezvous() {
  // What does not depend on the assignment is prepared while we wait for it:
  // once the gang forms, every pod's work lands at the same moment.
  MakeErrorDir();
  gen_->StartRound(options_.rdzv_timeout, Guard([this] { OnRendezvousDeadline(); }));
  // From the hello on: the round may form (and the peers start counting this
  // pod's silence) while it is stopped (gang_policy.h G3).
  StartStallWatch();
  rendezvous::wire::Hello hello = MakeHelloNow();
  auto on_assignment = Guard([this](Result<rendezvous::wire::Assignment> a) { OnAssignment(a); });
  if (options_.identity.is_leader()) return StartLeader(hello, on_assignment);
  return StartMember(hello, on_assignment);
}

// The leader's round did not complete within --rdzv-timeout. Members time
// out through their own deadline (same instant) with details.
void Pod::OnRendezvousDeadline() {
  const PodGeneration& g = *gen_;
  if (!g.leader) return;
  const PodIdentity& id = options_.identity;
  // This timer and the round's own (roster.h) end together when torch's last
  // call ends with the deadline: whether the round forms now with the pods
  // joined is the formation policy's ("deadline reached", formation_policy.h),
  // whichever timer fired first.
  if (id.elastic() || id.spares > 0) {
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
FormationConfig Pod::FormationNow() const {
  const PodIdentity& id = options_.identity;
  return {.min_nodes = id.min_pods(), .max_nodes = id.nnodes, .spares = id.spares,
          .last_call = options_.rdzv_last_call, .timeout = options_.rdzv_timeout,
          .survivor_hold = SurvivorHold(options_.grace)};
}

rendezvous::LeaderOptions Pod::LeaderOptionsNow() {
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
  // Restarts are counted, not generations: with elastic sizes or spares a
  // join or a graceful leave starts a generation that is no restart
  // (membership.h M2), so no generation number is out of bounds.
  lo.max_generation = id.elastic() || id.spares > 0 ? std::nullopt
                                                    : std::optional(options_.max_restarts);
  // Busy ports are retried, until a moment before the rendezvous deadline so
  // the error names the port rather than "timed out".
  lo.bind_deadline = round_started + options_.rdzv_timeout - tun::kBindRetryCap;
  lo.check_master_port = true;  // a busy MASTER_PORT is infra, not rank 0's failure
  if (leader_id_.empty()) leader_id_ = rendezvous::NewNonce();
  lo.leader_id = leader_id_;
  if (id.spares > 0 || id.elastic()) MembershipOptions(lo);
  // The survivors' indices are kept for them (by instance id: leader.h)
  // while they may still be stopping their workers.
  lo.kept_ids = std::exchange(kept_ids_, {});
  for (auto it = lo.kept_ids.begin(); it != lo.kept_ids.end();) {
    const bool expected = lo.expected.empty() || lo.expected.contains(it->first);
    it = expected ? std::next(it) : lo.kept_ids.erase(it);
  }
  lo.keep_until = round_started + SurvivorHold(options_.grace);
  // Ranks by arrival (bound at start), or listened ahead at a restart (ListenAhead).
  lo.listening_fd = std::exchange(options_.rdzv_listen_fd, -1);
  return lo;
}

// Hot spares or elastic sizes: the membership policy places the pods (roster.h).
void Pod::MembershipOptions(rendezvous::LeaderOptions& lo) {
  const PodIdentity& id = options_.identity;
  lo.nnodes = id.nnodes + id.spares;
  lo.max_pending_handshakes = std::max<std::size_t>(lo.max_pending_handshakes, lo.nnodes);
  lo.admit_late = true;  // as spares, or for a next generation (OnJoin)
  lo.restarts = policy_.role().restarts();
  Roster* roster = policy_.roster();  // the leader's (index 0: LeaderPolicy)
  if (roster == nullptr) return;
  roster_membership_.StartRound(*roster, gen_->round_started, FormationNow(), [this] {
    if (gen_ && gen_->leader) gen_->leader->Reconsider();
  });
  lo.expected = roster->Expected();
  // The roster answers the leader (LeaderMembership, roster_membership.h); it
  // outlives every generation's Leader (declared before gen_), so the
  // pointer owns nothing.
  lo.membership = std::shared_ptr<rendezvous::LeaderMembership>(std::shared_ptr<void>(),
                                                                &roster_membership_);
}

Status Pod::StartLeader(const rendezvous::wire::Hello& hello, rendezvous::Leader::Done done) {
  const PodIdentity& id = options_.identity;
  if (Status s = gen_->StartLeader(options_.rdzv_port, LeaderOptionsNow(), hello, std::move(done));
      !s.ok()) {
    return s;
  }
  if (id.nnodes > 1 && !gang_formed_) StartLeaderProbe(hello);
  if (id.nnodes > 1 && !name_check_) StartNameCheck();
  return Status::Ok();
}

// Does the name members dial lead here? (name_check.h)
void Pod::StartNameCheck() {
  rendezvous::NameCheckOptions nc;
  nc.name = options_.identity.leader_host;
  nc.on_resolved = [this](const std::vector<boost::asio::ip::address>& addresses) {
    if (leader_probe_) leader_probe_->Probe(addresses);
  };
  auto check = rendezvous::LeaderNameCheck::Start(
      io_.get_executor(), nc, [](const std::string& problem) { spdlog::warn("{}", problem); });
  if (check.ok()) name_check_ = std::move(check).value();
}

Status Pod::StartMember(const rendezvous::wire::Hello& hello, rendezvous::Member::Done done) {
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
  return gen_->StartMember(mo, std::move(done));
}

// Ranks by arrival (rendezvous/arrival.h): the leader numbered this member
// as it joined; it keeps that index for every later generation (its node
// rank follows the generation's size with elastic --nnodes MIN:MAX).
void Pod::AdoptArrivalIndex(std::uint32_t index, std::optional<std::uint32_t> node_rank) {
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

// Another pod acting as this gang's leader (leader_probe.h): both stop, config.
void Pod::StartLeaderProbe(rendezvous::wire::Hello hello) {
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

void Pod::OnAssignment(const Result<rendezvous::wire::Assignment>& result) {
  // A member resumed after a stop finds its assignment waiting: its own stall
  // first (G3), before it starts the workers of a gang that gave it up.
  if (!options_.identity.is_leader() && result.ok() && StalledAcrossFormation()) return;
  PodGeneration& g = *gen_;
  g.last_tick = Clock::now();  // the watch goes on from the assignment
  if (leader_probe_) leader_probe_->Cancel();
  roster_membership_.Cancel();
  meters_.rendezvous_seconds = std::chrono::duration<double>(Clock::now() - g.round_started).count();
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
  g.Assign(a.generation, a.rank_base, a.spare);
  SetLogGeneration(g.number);
  // The roster is the plan, before the membership machine's Formed (EnterAssigned).
  if (Roster* roster = policy_.roster(); g.leader && roster) roster->Adopt(a.generation);
  assigned_nnodes_ = a.nnodes;
  held_node_rank_ = a.spare ? std::nullopt : std::optional(a.node_rank.value_or(id.index));
  const bool was_spare = std::exchange(was_spare_, a.spare);
  if (a.spare) {
    OnSpareAssignment(a);
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

// A hot spare: no workers; the generation waits on the control channel.
void Pod::OnSpareAssignment(const rendezvous::wire::Assignment& a) {
  spdlog::info("rendezvous {:.1f} ms: generation {}: a hot spare, waiting without workers "
               "({} active pod(s), world size {})",
               Ms(Clock::now() - gen_->round_started), a.generation, a.nnodes, a.world_size);
  EnterAssigned(a);
  StartGangChannel();
}

// This generation's directory for the workers' error files (TORCHELASTIC_ERROR_FILE)
// and heartbeat files, in gen_->dir; left empty if it cannot be made. The
// generation removes it (PodGeneration::Close).
void Pod::MakeErrorDir() {
  if (run_dir_.base.empty()) return;  // said at start (JudgeRunDir)
  std::string tmpl = run_dir_.base + "/trainlet-XXXXXX";
  if (::mkdtemp(tmpl.data()) != nullptr) gen_->dir = tmpl;
}

}  // namespace trainlet::agent
