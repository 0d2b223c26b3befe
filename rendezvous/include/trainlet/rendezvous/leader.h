// trainlet/rendezvous/leader.h — the leader side of the gang rendezvous.
//
// Runs in the pod with completion index 0. It listens on the rendezvous port,
// admits exactly one member per index whose hello matches its own job, attempt
// and launch configuration, and once every pod is in, sends each member its
// Assignment (global ranks, world size, where the trainers' store listens).
// Pods without an index (ranks by arrival, launch.h) take the lowest free one
// as they are admitted: node ranks in the order they join (admission.h); with
// a membership plan (elastic sizes) the indices of LeaderOptions::expected stay
// kept for the pods of the generation that ended, and the pod learns its
// index from the Assignment (or, admitted for the next round, the Reject).
// The leader's own pod joins in-process through Start(); members join over TCP.
// Admitted connections stay open for the life of the Leader.
//
// Thread rules: all methods and callbacks run on the executor given at creation,
// which must be a single-threaded event loop (the agent's).
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

#include <boost/asio/any_io_executor.hpp>
#include <boost/system/error_code.hpp>

#include "trainlet/exitcodes/status.h"
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
// the agent's roster, agent/src/pod/roster.h, and membership machine,
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
  // Elastic sizes: the latest generation that formed without `index` after
  // the leader declared it lost (admission.h, rule 8); nullopt: none.
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

// Binds `port` (0: the kernel's choice) on every interface and listens, with
// a backlog for `nnodes` pods, before the Leader that will serve it exists:
// pods that connect meanwhile wait in the kernel's backlog with their hellos
// unread, instead of being refused and backing off. An in-place restart
// listens ahead as soon as it is decided, while the leader pod's own workers
// still stop (bench/spares.py: members that rejoined early were refused and
// came back a backoff step late). Pass the fd as LeaderOptions::listening_fd;
// the caller owns it until then (close(2) it if no Leader takes it). Returns
// -1 when the port cannot be bound now (Leader::Listen then binds, retrying,
// as without it). Does not block.
int ListenAhead(std::uint16_t port, std::uint32_t nnodes);

// "1-3,7,9-12": ascending indices as runs, at most `max_runs` of them, then
// " (+N more)" for the indices left out. For log lines about many pods.
std::string CompactIndices(const std::vector<std::uint32_t>& sorted, std::size_t max_runs);

class Leader : public std::enable_shared_from_this<Leader> {
 public:
  using Done = std::function<void(exitcodes::Result<wire::Assignment>)>;

  // Binds `port` on every interface (IPv6 dual-stack "[::]" with IPV6_V6ONLY off,
  // or 0.0.0.0 where IPv6 is unavailable; SO_REUSEADDR) and listens with a backlog
  // sized to the gang. Port 0 picks a free port (see port()). Does not accept yet.
  // A port in use (EADDRINUSE) with options.bind_deadline in the future is not an
  // error yet: the bind is retried from Start() with backoff, and `done` gets
  // class infra naming the port if it is still taken at the deadline.
  // Errors: class infra ("cannot listen on rendezvous port 29400: ...") when
  // binding fails otherwise.
  [[nodiscard]] static exitcodes::Result<std::shared_ptr<Leader>> Listen(
      boost::asio::any_io_executor executor, std::uint16_t port, LeaderOptions options);
  ~Leader();

  // The bound port (useful when Listen was given 0).
  std::uint16_t port() const { return port_; }

  // Starts admitting members. `own` is the leader pod's hello (index 0), checked
  // like any other. `done` runs exactly once, on the executor:
  //  - with the leader pod's own Assignment once every pod has been sent its own.
  //    The generation is the leader's: own.generation. Only a fresh leader
  //    (own.generation 0: a replaced leader pod, which cannot know the gang's
  //    count) takes the highest generation its admitted members ask for, and
  //    no hello may ask beyond options.max_generation;
  //  - with class infra when the port stays in use until options.bind_deadline;
  //  - with class config when another pod of the same job and attempt says
  //    hello with index 0 (it acts as leader too: LeaderProbe), after refusing
  //    it (non-retriable, field "leader"); both messages name both pods;
  //  - never because of a member's hello: a member whose launch configuration
  //    differs is refused (non-retriable Reject naming the field: that member
  //    exits config), as are strangers, stale attempts, pods of a Job older
  //    than one already seen (JobSet's job-restart-attempt) and claims of an
  //    index held by a connection that may be stale (retriable); a claim of an
  //    index whose holder is live (options.holder_liveness) with the same
  //    job-restart-attempt and another instance id is a clash (naming both
  //    pods; non-retriable with a token, retriable without: admission.h); a
  //    claim from a recreated Job (higher job-restart-attempt), of an index
  //    whose holder went silent, by the holder's own instance id, or by the
  //    survivor options.kept_ids keeps the index for, replaces the holder. The
  //    leader keeps serving
  //    the others and waits on.
  // There is no deadline here: the caller bounds the whole rendezvous.
  void Start(wire::Hello own, Done done);

  // Asks LeaderMembership::Plan again now, for a round that waits on time as well
  // as on joins (the caller's timer: torch's last call, formation_policy.h).
  // No effect before Start or once the round formed.
  void Reconsider();

  // The control channel, after `done` reported success: the members'
  // connections stay open, heartbeats go both ways every `heartbeat`, and a
  // member silent for `misses` heartbeats counts as lost.
  struct ChannelCallbacks {
    // A member reported that its workers finished (ok) or failed.
    std::function<void(std::uint32_t index, const wire::Report&)> on_report;
    // A member's connection closed, or went silent, before it reported success.
    std::function<void(std::uint32_t index, const std::string& why)> on_lost;
    // LeaderOptions::admit_late: pod `index` was admitted while the generation
    // runs. true: it waits as a spare; false: it joins the next round.
    std::function<bool(std::uint32_t index)> on_join;
  };
  void StartChannel(ChannelCallbacks callbacks,
                    std::chrono::milliseconds heartbeat = tunables::kHeartbeatInterval,
                    int misses = tunables::kHeartbeatMisses);
  // Sends `stop` to every member still connected.
  void BroadcastStop(const wire::Stop& stop);
  // Closes the listener (LeaderOptions::admit_late): the generation ends, and
  // pods rejoining for the next one must reach the next round's leader, not
  // be taken for late joins of this one. Idempotent.
  void StopAdmitting();
  // True once every member has reported success or is gone.
  bool AllMembersSettled() const;
  // The longest this side of the control channel went without sending its
  // heartbeats, so far (between two rounds, or since the last one until now);
  // zero before StartChannel and after Close. The members give this leader up
  // after `heartbeat * misses` without a frame from it: the pod compares this
  // with that bound to know whether its own stall made it the culprit.
  std::chrono::steady_clock::duration heartbeat_silence() const;

  // Closes the listener and every connection; `done` is not called after this.
  void Close();

  // What the control channel's heartbeats tell about each connected member,
  // by index (for metrics): the last heartbeat round trip, in seconds (unset
  // before the first echo), and the step rate the member reported
  // (wire::Heartbeat::step_rate_milli; 0: unknown).
  struct PeerStats {
    std::optional<double> rtt_seconds;
    std::uint32_t step_rate_milli = 0;
    std::uint32_t slowest_rank = 0;
  };
  std::map<std::uint32_t, PeerStats> peer_stats() const;
  // The node its hello named (wire::Hello::node_name) of each pod admitted to
  // this generation, kept after its connection closed (a lost pod's too); ""
  // when it named none or `index` was never admitted.
  std::string node_name(std::uint32_t index) const;

  // The instance ids of the members admitted and connected (wire::Hello::
  // instance_id), by index; members without one (older peers) are left out.
  // The next round's LeaderOptions::kept_ids. Never to be logged.
  std::map<std::uint32_t, std::string> instance_ids() const;

  // Members admitted so far (the leader's own pod included), for logs and tests.
  std::uint32_t admitted() const;
  // Indices (1..nnodes-1) not admitted yet, for the timeout message.
  std::vector<std::uint32_t> missing() const;
  // The round formed: its assignments are being sent or were sent.
  bool formed() const;

 private:
  struct Conn;
  struct Impl;
  Leader() = default;
  static exitcodes::Result<std::shared_ptr<Leader>> Adopt(std::shared_ptr<Leader> leader);
  void AcceptNext();
  void BindAndAccept();
  void WaitingHeartbeat();
  void Warn(const std::shared_ptr<Conn>& conn, const std::string& line);
  void OnAccept(std::shared_ptr<Conn> conn);
  void ReadFrom(std::shared_ptr<Conn> conn);
  void OnReadable(const std::shared_ptr<Conn>& conn, boost::system::error_code ec);
  void OnReadError(const std::shared_ptr<Conn>& conn, boost::system::error_code ec);
  void Dispatch(const std::shared_ptr<Conn>& conn, wire::Message message);
  void OnHello(const std::shared_ptr<Conn>& conn, wire::Hello hello);
  void OnProof(const std::shared_ptr<Conn>& conn, const wire::Proof& proof);
  void Admit(const std::shared_ptr<Conn>& conn, wire::Hello hello);
  void AdmitLate(const std::shared_ptr<Conn>& conn, std::uint32_t index, bool by_arrival);
  void ReplaceHolder(const std::shared_ptr<Conn>& conn, std::uint32_t index);
  std::string KeptId(std::uint32_t index) const;
  std::string MasterAddrFor(const std::shared_ptr<Conn>& conn) const;
  void Refuse(const std::shared_ptr<Conn>& conn, wire::Reject reject,
              std::function<void()> then = {});
  void DropOlderOfJob(const wire::Hello& hello);
  void Drop(const std::shared_ptr<Conn>& conn);
  void NotPending(const std::shared_ptr<Conn>& conn);  // it left the handshake (admitted or closed)
  void EvictPending();  // all pending slots taken: make room (see leader.cc)
  void MaybeAssign();
  // The generation the round that forms runs (the leader's, or a fresh leader's survivors').
  std::uint32_t RoundGeneration() const;
  std::optional<std::uint32_t> RoundRestarts() const;
  // The members an assignment round writes to, with the MASTER_ADDR each is
  // given, in the order of the writes (LeaderMembership::AssignFirst); sets
  // *own_addr to the leader pod's own MASTER_ADDR.
  std::vector<std::pair<std::shared_ptr<Conn>, std::string>> AssignmentTargets(
      std::string* own_addr);
  std::optional<std::map<std::uint32_t, std::uint32_t>> NodeRanks();
  void Send(const std::shared_ptr<Conn>& conn, std::vector<std::uint8_t> frame,
            std::function<void()> then = {});
  void OnChannelMessage(const std::shared_ptr<Conn>& conn, const wire::Message& m);
  void ProtocolError(const std::shared_ptr<Conn>& conn, std::string why);
  void Heartbeat();
  void Deliver(std::function<void()> event);
  void Finish(exitcodes::Result<wire::Assignment> result);
  void LogProgress();
  std::unique_ptr<Impl> impl_;
  std::uint16_t port_ = 0;
};

}  // namespace trainlet::rendezvous
