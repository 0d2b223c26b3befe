// Private: LeaderCore's state and its rules, split by concern over
// leader_core.cc (events, queries), leader_core_accept.cc (hello, token,
// admission, refusals, pending slots), leader_core_round.cc (forming the round,
// assignments, late joins) and leader_core_channel.cc (heartbeats, losses,
// reports, leaves).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "channel_core.h"
#include "logging.h"
#include "trainlet/rendezvous/admission.h"
#include "trainlet/rendezvous/leader_io.h"
#include "trainlet/rendezvous/leader_options.h"
#include "trainlet/rendezvous/peer_log_limiter.h"

namespace trainlet::rendezvous {

// One connection as the core knows it.
struct CoreConn {
  wire::Decoder decoder;
  std::string peer;     // "10.0.0.12:41234", for messages
  std::string address;  // "10.0.0.12": the key of the log rate limit and of pending slots
  std::string local_address;  // this side's address; "" when unknown
  std::uint16_t local_port = 0;
  bool local_loopback = false;
  std::optional<std::uint32_t> index;  // set once admitted
  std::uint32_t generation = 0;        // the generation its hello asked for
  std::optional<std::uint32_t> restarts;
  std::string job_name;
  std::optional<std::uint32_t> job_restart_attempt;
  std::string instance_id;  // never logged
  bool closing = false;     // refused: its Reject is being written, nothing more is read
  bool settled = false;     // reported success, or reported as lost
  ChannelPeer peer_state{ChannelPeer::Clock::time_point{}};  // Heard at accept
  // The token's handshake in progress: the hello waits for the member's proof
  // of the leader's nonce. Boxed: most connections never hold one, and a
  // Hello inline would cost every connection its size (bench/RESULTS.md: memory at scale).
  struct Auth {
    wire::Hello hello;
    std::string leader_nonce;
  };
  std::unique_ptr<Auth> auth;
};

// Where the leader's round is: one value, so that no impossible mix of flags can be written.
enum class RoundPhase {
  kAdmitting,  // hellos are admitted; the round is not decided
  kAssigning,  // the plan formed the round: its assignments are being written
  kFormed,     // every assignment written, RoundDone emitted; no channel yet
  kChannel,    // the control channel runs (StartChannel)
  kClosed,     // Close(): nothing more happens
};

// (index, MASTER_ADDR for it, whether it waits as a spare whatever its index
// held in the round: a late pod, LeaderCoreState::AdmitLate).
using AssignmentMaker = std::function<wire::Assignment(std::uint32_t, std::string, bool)>;

struct LeaderCoreState {
  using Clock = leader_io::Clock;
  using ConnId = leader_io::ConnId;
  using TimerId = leader_io::TimerId;

  LeaderOptions options;
  leader_io::NonceSource nonce;
  std::shared_ptr<spdlog::logger> log = Logger("rendezvous");
  PeerLogLimiter log_limit{tunables::kBadConnectionLogWindow,
                           tunables::kMaxBadConnectionLogsPerPeer};
  std::optional<wire::Hello> own;
  RoundPhase phase = RoundPhase::kAdmitting;
  bool listener_open = false;  // Listening, until StopListening
  std::map<ConnId, CoreConn> conns;  // every open connection, oldest first
  ConnId next_id = 1;
  std::size_t pending = 0;                                // connections mid-handshake
  std::map<std::string, std::size_t> pending_by_address;  // ... per peer address (eviction)
  std::map<std::uint32_t, ConnId> members;                // index -> admitted connection
  // JobSet's job-restart-attempt: the highest seen per Job (the leader's own included).
  std::map<std::string, std::uint32_t> job_attempts;
  // Refused rival leaders (index 0): the round fails config with this reason
  // once their Reject is written.
  std::map<ConnId, std::string> rivals;
  std::set<ConnId> assignment_writes;  // the round's assignments not written yet
  std::string own_addr;  // the leader pod's own MASTER_ADDR, once the round formed
  // The round formed and LeaderOptions::admit_late: late pods are admitted,
  // `assignment` makes a spare's (index, MASTER_ADDR). Shared: one copy for
  // the whole gang (bench/RESULTS.md: O(n^2) memory when copied per member).
  bool late = false;
  std::shared_ptr<const AssignmentMaker> assignment;
  // Ranks by arrival: indices given to pods admitted while the generation runs.
  std::set<std::uint32_t> given_late;
  std::map<std::uint32_t, std::string> node_names;  // node_name(): kept after the pod is gone
  // Control channel.
  std::function<bool(std::uint32_t)> on_join;
  std::chrono::milliseconds heartbeat = tunables::kHeartbeatInterval;
  int misses = tunables::kHeartbeatMisses;
  ChannelPacer pacer;
  std::vector<leader_io::Action> early_events;  // member events before StartChannel
  std::vector<leader_io::Action> actions;       // queued for TakeActions

  bool decided() const { return phase >= RoundPhase::kFormed; }
  CoreConn* Find(ConnId id);
  template <class T>
  void Emit(T action) {
    if constexpr (std::is_same_v<T, leader_io::Action>) {
      actions.push_back(std::move(action));
    } else {
      actions.emplace_back(std::in_place_type<T>, std::move(action));
    }
  }
  void Warn(const CoreConn& conn, const std::string& line, Clock::time_point now);
  std::uint32_t admitted() const;
  std::vector<std::uint32_t> Missing() const;  // LeaderCore::missing

  // leader_core.cc
  void Dispatch(ConnId id, wire::Message message, Clock::time_point now);
  void Drop(ConnId id);
  void NotPending(const CoreConn& conn);
  // leader_core_accept.cc
  void OnAccepted(ConnId id, Clock::time_point now);
  bool EvictPending(ConnId newest, Clock::time_point now);  // false: `newest` dropped
  void OnHello(ConnId id, wire::Hello hello, Clock::time_point now);
  void OnProof(ConnId id, const wire::Proof& proof, Clock::time_point now);
  void Admit(ConnId id, wire::Hello hello, Clock::time_point now);
  std::optional<IndexHolder> HolderOf(std::uint32_t index, Clock::time_point now);
  std::string KeptId(std::uint32_t index, Clock::time_point now) const;
  void ReplaceHolder(ConnId id, std::uint32_t index, Clock::time_point now);
  void DropOlderOfJob(const wire::Hello& hello);
  void Refuse(ConnId id, wire::Reject reject, Clock::time_point now, bool rival = false);
  void HandshakeExpired(ConnId id, Clock::time_point now);
  // leader_core_round.cc
  std::optional<std::map<std::uint32_t, std::uint32_t>> NodeRanks();
  std::uint32_t RoundGeneration() const;
  std::optional<std::uint32_t> RoundRestarts() const;
  std::vector<ConnId> AssignmentTargets();
  std::string MasterAddrFor(const CoreConn& conn) const;
  AssignmentMaker MakeAssignment(const std::map<std::uint32_t, std::uint32_t>& ranks);
  void MaybeAssign();
  void Finish(exitcodes::Result<wire::Assignment> result);
  void AdmitLate(ConnId id, std::uint32_t index, bool by_arrival, Clock::time_point now);
  void WaitingHeartbeat(Clock::time_point now);
  void LogProgress(Clock::time_point now, bool line);
  // leader_core_channel.cc
  void Deliver(leader_io::Action event);
  void Lost(std::uint32_t index, std::string why);
  void Heartbeat(Clock::time_point now);
  void OnChannelMessage(ConnId id, const wire::Message& m, Clock::time_point now);
  void OnReport(ConnId id, const wire::Report& r, Clock::time_point now);
  void ProtocolError(ConnId id, std::string why);
  void OnClosed(ConnId id, const std::string& why, Clock::time_point now);
};

}  // namespace trainlet::rendezvous
