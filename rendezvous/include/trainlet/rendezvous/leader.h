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
#include "trainlet/rendezvous/leader_options.h"
#include "trainlet/rendezvous/tunables.h"
#include "trainlet/rendezvous/wire.h"

namespace trainlet::rendezvous {


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
  // by index (for metrics): LeaderPeerStats (leader_options.h).
  using PeerStats = LeaderPeerStats;
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
  // The rules are LeaderCore's (leader_core.h); this class moves bytes and
  // runs timers for it, and carries out its actions (leader.cc).
  struct Conn;
  struct Impl;
  struct Runner;  // carries out one LeaderCore action
  Leader() = default;
  static exitcodes::Result<std::shared_ptr<Leader>> Adopt(std::shared_ptr<Leader> leader, int fd);
  void AcceptNext();
  void BindAndAccept();
  void OnAccept(std::shared_ptr<Conn> conn);
  void ReadFrom(std::shared_ptr<Conn> conn);
  void OnReadable(const std::shared_ptr<Conn>& conn, boost::system::error_code ec);
  // Carries out what the core asked, until it asks nothing more.
  void Apply();
  std::unique_ptr<Impl> impl_;
  std::uint16_t port_ = 0;
};

}  // namespace trainlet::rendezvous
