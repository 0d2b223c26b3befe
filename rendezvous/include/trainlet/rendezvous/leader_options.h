// trainlet/rendezvous/leader_options.h — what configures the leader of the
// gang rendezvous (leader.h: the Boost.Asio Leader; leader_core.h: its rules,
// sans-IO) and what it asks of the caller's membership. Split from leader.h so
// that the core needs no Asio.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "trainlet/rendezvous/tunables.h"
#include "trainlet/rendezvous/wire.h"

namespace trainlet::rendezvous {

class LeaderMembership;  // below

struct LeaderOptions {
  std::uint32_t nnodes = 1;         // pods in the gang, the leader's own included
  // MASTER_PORT handed to every trainer; 0: a port found free on this pod when
  // the leader starts accepting (bound on every interface, then closed, as
  // check_master_port does), the same for every pod of the round.
  std::uint16_t master_port = tunables::kMasterPort;
  std::string run_id;               // TORCHELASTIC_RUN_ID
  // MASTER_ADDR for every pod (torchrun's --local-addr on the leader); empty:
  // each member gets the leader address it connected to.
  std::string master_addr;
  std::uint16_t jax_port = 0;  // handed to every pod (Assignment::jax_port); 0 = none
  // A connection that has not sent a valid hello within this time is dropped.
  std::chrono::milliseconds handshake_timeout = tunables::kHandshakeTimeout;
  // Connections allowed to be mid-handshake at once. A new connection beyond it
  // evicts the oldest pending one of the peer address holding the most pending
  // slots, so connections that send nothing (however many, however often
  // reopened) cannot keep a member out: a member's hello follows its connect
  // within a round trip, and a member from an address of its own keeps its slot
  // until every address holds at most one.
  std::size_t max_pending_handshakes = tunables::kMaxPendingHandshakes;
  // The highest generation a member may ask for (--max-restarts: no real pod
  // ever runs a later one). A hello asking more is refused (field
  // "generation"); see Start for who decides the generation. nullopt: no bound
  // (elastic sizes: a generation that takes in a joining pod is no restart).
  std::optional<std::uint32_t> max_generation = 0;
  // While the rendezvous port is in use (a leftover process still holds it),
  // Listen's bind is retried with backoff (tunables kBindRetry*) until this
  // time; the default (epoch) tries once.
  std::chrono::steady_clock::time_point bind_deadline{};
  // Check that master_port can be bound on this pod before any member is
  // admitted (retried like a busy rendezvous port): a port held by another
  // process fails the rendezvous as infra naming MASTER_PORT, instead of rank
  // 0's trainer failing to bind it (a worker failure).
  bool check_master_port = false;
  // Admitted members waiting for the assignment get a heartbeat this often, so
  // a member can tell a waiting leader from a frozen one (MemberOptions::reply_timeout).
  std::chrono::milliseconds waiting_heartbeat = tunables::kWaitingHeartbeatInterval;
  // Shared token (auth.h); empty: no authentication. Then a member presenting
  // one is refused, as is a member without one when the leader has it.
  std::string token;
  // While the gang is incomplete, a line every `progress_interval` names the
  // missing indices, and the time left until `deadline` (the caller's
  // rendezvous deadline; for that line only, unset: not shown).
  std::chrono::milliseconds progress_interval = tunables::kProgressInterval;
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // Makes the NCCL unique ids of one assignment round (gpu/nccl.h): called once
  // per round in MaybeAssign, on the executor, with the gang's world size and the
  // leader's address as the members reached it. Returns {ncclGetVersion(), ids};
  // {0, {}} when there is no NCCL. Unset: no ids.
  // A member holding an index counts as live while it sent a frame within this
  // time (members answer the waiting heartbeats): a second pod claiming a live
  // pod's index, with the same job, attempt and per-Job attempt, and another
  // instance id, is a clash (admission.h rule 11: with a token a non-retriable
  // Reject, it exits config; without one retriable); a silent holder is replaced.
  std::chrono::milliseconds holder_liveness = tunables::kReplyTimeout;
  // Hot spares and elastic sizes: the caller's membership, the one interface
  // the leader asks (LeaderMembership below); nullptr: a fixed gang, every
  // index 0..nnodes-1 on its own node rank. `expected`: the indices the
  // progress line and missing() name (empty: every index 0..nnodes-1).
  std::shared_ptr<LeaderMembership> membership;
  std::set<std::uint32_t> expected;
  // Admit pods while the generation runs (hot spares, elastic sizes): after the
  // round formed the listener stays open, a hello goes through Admit as before
  // (a live holder's index is a clash; a silent holder's claimant replaces it,
  // the holder reported lost), and ChannelCallbacks::on_join decides: the pod
  // waits as a spare (an Assignment with `spare` set, then the control
  // channel) or is refused for now (Reject field wire::kNextGenerationField,
  // retriable: it joins the next round). Before StartChannel, and without
  // on_join, a late pod is refused for now. false: the listener closes when
  // the round forms (late pods find the port closed).
  bool admit_late = false;
  // Identity beyond the index (wire::Hello::instance_id, admission.h rules 10
  // and 11): the instance ids of the pods of the generation that ended that
  // this round expects back (a restart's survivors), by index. Until
  // `keep_until` (and while the round has not formed) such an index is kept
  // for that pod: another pod's claim is refused for now, and the survivor
  // coming back replaces another pod holding it. Empty: none (the first
  // round, a replaced leader's first round).
  std::map<std::uint32_t, std::string> kept_ids;
  std::chrono::steady_clock::time_point keep_until{};
  // Assignment::restarts of this round (the restarts counted so far, when
  // they may differ from the generation: elastic sizes); nullopt: not sent.
  std::optional<std::uint32_t> restarts;
  // This leader's random instance id (LeaderProbe's hello carries its own):
  // a hello with index 0 and this id is this leader reaching itself.
  std::string leader_id;
  std::function<std::pair<std::uint32_t, std::vector<std::string>>(std::uint32_t world_size,
                                                                   const std::string& leader_addr)>
      make_nccl_ids;
  // A socket already bound to the rendezvous port and listening (ClaimEndpoint,
  // arrival.h: its bind decided that this pod leads); Listen takes it over and
  // owns it (closes it on failure too), and its `port` is then ignored. -1: none.
  int listening_fd = -1;
};

// What the leader asks of the caller's membership (hot spares, elastic sizes:
// the agent's roster, agent/include/trainlet/agent/pod/roster.h (answering
// through agent/src/pod/roster_membership.h), and membership machine,
// agent/include/trainlet/agent/pod/membership.h). Every method runs on the
// leader's executor and must not block.
class LeaderMembership {
 public:
  virtual ~LeaderMembership() = default;
  // Asked at every join (and at Leader::Reconsider) with the indices joined
  // (ascending, 0 first): each active pod's node rank once the round forms; a
  // joined index it leaves out waits as a spare (Assignment::spare).
  // nullopt: not yet, wait on (the caller bounds the round).
  virtual std::optional<std::map<std::uint32_t, std::uint32_t>> Plan(
      const std::vector<std::uint32_t>& joined) = 0;
  // The order of the assignment writes, once Plan formed the round: the pods
  // this says true for first, then the others, each part by index. Hot
  // spares: the pods that start workers from nothing (a spare taking a lost
  // pod's node rank): on a busy node each member woken by its assignment may
  // run before the leader writes the next one (bench/RESULTS.md, hot spares).
  virtual bool AssignFirst(std::uint32_t index) = 0;
  // Hot spares: the latest replacement of `index` by a spare (admission.h,
  // rule 8: the replaced pod coming back is refused for good); nullopt: none.
  virtual std::optional<wire::Replaced> ReplacedOf(std::uint32_t index) const = 0;
  // The generation that goes on without `index` after the leader declared
  // it lost while active: the next one while it is still to form, else (elastic
  // sizes) the latest that formed without it (admission.h, rule 8); nullopt: none.
  virtual std::optional<std::uint32_t> LeftOf(std::uint32_t index) const = 0;
  // Hot spares: the generation that ran when the leader declared a waiting
  // spare of `index` lost (admission.h, rule 8: that spare coming back is
  // refused for good); nullopt: none.
  virtual std::optional<std::uint32_t> LostSpareOf(std::uint32_t index) const = 0;
  // A member admitted to this round said it leaves (wire::Report::leaving:
  // its own stop signal) before the round was decided: its index is freed
  // (the round does not wait for it). After the round was decided the report
  // reaches ChannelCallbacks::on_report instead.
  virtual void OnLeave(std::uint32_t index) = 0;
  // Pod `index` was admitted with `hello` (to this round, or late while the
  // generation runs), before Plan is asked with it: what the hello says of
  // the pod beyond its index (wire::Hello::node_rank, the node rank a
  // survivor held). Does nothing unless overridden.
  virtual void OnAdmitted(std::uint32_t index, const wire::Hello& hello) {
    (void)index;
    (void)hello;
  }
};

// What the control channel's heartbeats tell about a connected member (for
// metrics, Leader::peer_stats): the last heartbeat round trip, in seconds
// (unset before the first echo), and the step rate the member reported
// (wire::Heartbeat::step_rate_milli; 0: unknown).
struct LeaderPeerStats {
  std::optional<double> rtt_seconds;
  std::uint32_t step_rate_milli = 0;
  std::uint32_t slowest_rank = 0;
};

// "1-3,7,9-12": ascending indices as runs, at most `max_runs` of them, then
// " (+N more)" for the indices left out. For log lines about many pods.
std::string CompactIndices(const std::vector<std::uint32_t>& sorted, std::size_t max_runs);

}  // namespace trainlet::rendezvous
