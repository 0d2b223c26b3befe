// LeaderCore: forming the round — when it forms (every pod in, or the
// membership's plan: hot spares, elastic sizes, torch's last call through
// Reconsider), the assignments and the order they are written in, the round's
// result, pods admitted while the generation runs, and the timers of the wait.
#include <algorithm>
#include <utility>

#include "leader_core_state.h"
#include "trainlet/rendezvous/launch.h"

namespace trainlet::rendezvous {

using Clock = leader_io::Clock;
using ConnId = leader_io::ConnId;
using leader_io::TimerId;

// The node rank of every pod joined (LeaderMembership::Plan), or by index
// without a membership; nullopt while the round cannot form yet.
std::optional<std::map<std::uint32_t, std::uint32_t>> LeaderCoreState::NodeRanks() {
  if (!options.membership) {
    if (admitted() < options.nnodes) return std::nullopt;
    std::map<std::uint32_t, std::uint32_t> ranks{{0, 0}};
    for (const auto& [index, id] : members) ranks[index] = index;
    return ranks;
  }
  std::vector<std::uint32_t> joined{0};
  for (const auto& [index, id] : members) joined.push_back(index);
  return options.membership->Plan(joined);
}

// The gang's generation is the leader's own. Only a fresh leader (a replaced
// leader pod, at 0) cannot know the count: it continues the survivors' (they
// ask for their last generation + 1; Admit bounds it by --max-restarts).
std::uint32_t LeaderCoreState::RoundGeneration() const {
  std::uint32_t generation = own->generation;
  if (generation == 0) {
    for (const auto& [index, id] : members) {
      generation = std::max(generation, conns.at(id).generation);
    }
  }
  return generation;
}

// As RoundGeneration, for the restarts counted (elastic sizes, where a join's
// generation is none): a replaced leader continues the members' count.
std::optional<std::uint32_t> LeaderCoreState::RoundRestarts() const {
  std::optional<std::uint32_t> restarts = options.restarts;
  if (!restarts || own->generation != 0) return restarts;
  for (const auto& [index, id] : members) {
    if (const auto& r = conns.at(id).restarts) restarts = std::max(*restarts, *r);
  }
  return restarts;
}

// MASTER_ADDR for a member: the leader address that member itself reached us
// on (proven reachable from there, never loopback in a pod), or --local-addr.
std::string LeaderCoreState::MasterAddrFor(const CoreConn& conn) const {
  if (!options.master_addr.empty()) return options.master_addr;
  return conn.local_address;
}

// The members the round writes to, in the order of the writes
// (LeaderMembership::AssignFirst); sets own_addr, the leader pod's own MASTER_ADDR.
std::vector<ConnId> LeaderCoreState::AssignmentTargets() {
  own_addr = "127.0.0.1";  // single-pod gang: nobody else needs to reach us
  std::vector<ConnId> targets;
  for (const auto& [index, id] : members) {
    const CoreConn& c = conns.at(id);
    if (c.local_address.empty()) continue;
    targets.push_back(id);
    if (own_addr == "127.0.0.1" && !c.local_loopback) own_addr = MasterAddrFor(c);
  }
  if (!options.master_addr.empty()) own_addr = options.master_addr;
  if (LeaderMembership* m = options.membership.get()) {
    std::stable_partition(targets.begin(), targets.end(),
                          [this, m](ConnId id) { return m->AssignFirst(*conns.at(id).index); });
  }
  return targets;
}

// Each pod's Assignment of the round with node ranks `ranks`, by (index, MASTER_ADDR).
AssignmentMaker LeaderCoreState::MakeAssignment(
    const std::map<std::uint32_t, std::uint32_t>& ranks) {
  const std::uint32_t nproc = own->nproc_per_node;
  const auto active = static_cast<std::uint32_t>(ranks.size());
  // The node rank goes in the assignment where it is not the member's own
  // index: a membership plan, or pods numbered by arrival (launch.h).
  const bool by_arrival = RanksByArrival(own->config);
  const bool membership = options.membership != nullptr || by_arrival;
  // Fresh NCCL ids for this round, the same for every pod (gpu/nccl.h; NVIDIA/nccl#1038).
  std::pair<std::uint32_t, std::vector<std::string>> nccl;
  if (options.make_nccl_ids) nccl = options.make_nccl_ids(active * nproc, own_addr);
  return [nproc, generation = RoundGeneration(), active, ranks, membership, by_arrival,
          port = options.master_port, jax_port = options.jax_port, run_id = options.run_id,
          job_id = own->job_id, attempt = own->attempt, nccl = std::move(nccl),
          restarts = RoundRestarts()](std::uint32_t index, std::string master_addr, bool waits) {
    // A node rank of a generation is held once: a pod that waits gets none.
    auto node = waits ? ranks.end() : ranks.find(index);
    const std::uint32_t node_rank = node == ranks.end() ? 0 : node->second;
    return wire::Assignment{.generation = generation,
                            .nnodes = active,
                            .world_size = active * nproc,
                            .rank_base = node_rank * nproc,
                            .master_addr = std::move(master_addr),
                            .master_port = port,
                            .run_id = run_id,
                            .job_id = job_id,
                            .attempt = attempt,
                            .nccl_version = nccl.first,
                            .nccl_ids = nccl.second,
                            .jax_port = jax_port,
                            .node_rank = membership ? std::optional(node_rank) : std::nullopt,
                            .spare = node == ranks.end(),
                            .restarts = restarts,
                            .index = by_arrival ? std::optional(index) : std::nullopt};
  };
}

void LeaderCoreState::MaybeAssign() {
  if (phase != RoundPhase::kAdmitting) return;
  std::optional<std::map<std::uint32_t, std::uint32_t>> ranks = NodeRanks();
  if (!ranks) return;
  phase = RoundPhase::kAssigning;
  const std::vector<ConnId> targets = AssignmentTargets();
  // One maker shared by the round and late spares: a copy per member would
  // hold the whole gang's node ranks each, O(n^2) memory (bench/RESULTS.md: a
  // leader RSS of 7,184 MiB at 12,500 pods).
  assignment = std::make_shared<const AssignmentMaker>(MakeAssignment(*ranks));
  assignment_writes.insert(targets.begin(), targets.end());
  for (ConnId id : targets) {
    const CoreConn& c = conns.at(id);
    Emit(leader_io::Send{id, wire::Encode((*assignment)(*c.index, MasterAddrFor(c), false)),
                         /*notify=*/true});
  }
  if (assignment_writes.empty()) Finish((*assignment)(0, own_addr, false));
}

void LeaderCoreState::Finish(exitcodes::Result<wire::Assignment> result) {
  if (decided()) return;
  phase = RoundPhase::kFormed;
  Emit(leader_io::CancelTimer{{TimerId::Kind::kProgress, 0}});
  Emit(leader_io::CancelTimer{{TimerId::Kind::kWaitingHeartbeat, 0}});
  late = result.ok() && options.admit_late && listener_open;
  // Late and stray connections are refused by the kernel now, unless late pods are admitted.
  if (!late) {
    listener_open = false;
    Emit(leader_io::StopListening{});
  }
  if (result.ok()) log->info("leader: all {} pod(s) joined", admitted());
  Emit(leader_io::RoundDone{
      std::make_shared<const exitcodes::Result<wire::Assignment>>(std::move(result))});
}

// A pod admitted while the generation runs (LeaderOptions::admit_late).
// `by_arrival`: the pod had no index; `index` is the one it was given, which it
// keeps (the Reject or the Assignment tells it).
void LeaderCoreState::AdmitLate(ConnId id, std::uint32_t index, bool by_arrival,
                                  Clock::time_point now) {
  CoreConn& c = conns.at(id);
  const bool told = phase == RoundPhase::kChannel && on_join;  // the next round expects it
  const bool spare = told && on_join(index);
  if (!spare || !assignment) {
    wire::Reject next{wire::kNextGenerationField,
                      "pod " + std::to_string(index) + " (" + c.peer +
                          ") joined while a generation runs: it joins the next generation",
                      /*retriable=*/true};
    if (by_arrival && told) {
      next.index = index;
      given_late.insert(index);  // no other newcomer gets it meanwhile
    }
    Refuse(id, std::move(next), now);
    return;
  }
  c.index = index;
  Emit(leader_io::CancelTimer{{TimerId::Kind::kHandshake, id}});
  NotPending(c);
  members[index] = id;
  c.peer_state.Heard(now);
  log->info("leader: pod {} joined from {} while the generation runs: it waits as a spare", index,
            c.peer);
  // A late pod waits, even where its index had a node rank in the round (a
  // pod that left or succeeded, recreated): that rank stays the generation's.
  Emit(leader_io::Send{id, wire::Encode((*assignment)(index, MasterAddrFor(c), true))});
}

// Admitted members waiting for the assignment get a heartbeat this often
// (LeaderOptions::waiting_heartbeat); TimerFired sends them.
void LeaderCoreState::WaitingHeartbeat(Clock::time_point now) {
  if (decided()) return;
  Emit(leader_io::ArmTimer{{TimerId::Kind::kWaitingHeartbeat, 0}, now + options.waiting_heartbeat});
}

// While the gang is incomplete, a line every progress_interval names the
// missing indices and the time left; `line`: log it now (not at Start). Re-arms.
void LeaderCoreState::LogProgress(Clock::time_point now, bool line) {
  if (decided()) return;
  if (line) {
    std::string left;
    if (options.deadline) {
      auto secs = std::chrono::duration<double>(*options.deadline - now).count();
      left = fmt::format("; {:.0f} s left", std::max(0.0, secs));
    }
    log->info("leader: waiting for the gang: {} of {} pod(s) joined; missing indices {}{}{}",
              admitted(), options.nnodes, CompactIndices(Missing(), 16),
              pending > 0 ? fmt::format("; {} connection(s) mid-handshake", pending)
                          : std::string(),
              left);
  }
  Emit(leader_io::ArmTimer{{TimerId::Kind::kProgress, 0}, now + options.progress_interval});
}

std::string CompactIndices(const std::vector<std::uint32_t>& sorted, std::size_t max_runs) {
  std::string out;
  std::size_t runs = 0;
  for (std::size_t i = 0; i < sorted.size();) {
    std::size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (runs == max_runs) {
      out += fmt::format(" (+{} more)", sorted.size() - i);
      break;
    }
    if (!out.empty()) out += ',';
    out += std::to_string(sorted[i]);
    if (j > i) {
      out += '-';
      out += std::to_string(sorted[j]);
    }
    ++runs;
    i = j + 1;
  }
  return out;
}

}  // namespace trainlet::rendezvous
