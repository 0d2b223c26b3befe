// trainlet/rendezvous/leader_core.h — the leader's end of the rendezvous and
// of the control channel as a sans-IO machine: every rule of leader.h (who is
// admitted or refused, when the round forms, what each pod is assigned, when a
// member counts as lost) without sockets, timers or a clock.
//
// The caller (rendezvous::Leader's Boost.Asio shell, or a deterministic
// simulator) owns the connections, the listener and the timers. It turns what
// happens into calls (a connection accepted, bytes received, a connection
// closed, a write done, a timer fired, the local calls of leader.h), passing
// the time each time (std::chrono::steady_clock: the core never reads a
// clock), and after each call takes the actions the core queued
// (TakeActions) and carries them out in order: bytes to write, connections
// to close, timers to arm or cancel, the listener to start or close, and the
// results the pod gets (the round's Assignment, members lost or reporting).
//
// A simulator's loop: keep the armed timers (ArmTimer/CancelTimer) in a queue
// by deadline; deliver each frame a Send carries to the peer it simulates
// (and Written after it, when asked), each peer's bytes with Received, and
// fire the earliest timer with TimerFired at its deadline; take the actions
// after every call. The same inputs in the same order give the same actions.
//
// Single-threaded: one caller, one thread; nothing blocks. Calls made while
// the caller is carrying out actions (a callback that calls BroadcastStop)
// queue more actions: take them again. Randomness (the token's nonces) comes
// from the injected source, so a simulator can seed it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "trainlet/exitcodes/status.h"
#include "trainlet/rendezvous/leader_io.h"
#include "trainlet/rendezvous/leader_options.h"
#include "trainlet/rendezvous/wire.h"

namespace trainlet::rendezvous {

struct LeaderCoreState;  // private: the state and the rules (src/leader_core_state.h)

class LeaderCore {
 public:
  using Clock = leader_io::Clock;
  using ConnId = leader_io::ConnId;
  using NonceSource = leader_io::NonceSource;

  // `options` as leader.h documents them; their listening_fd, bind_deadline
  // and check_master_port concern the shell and are ignored here. `nonce`:
  // the source of the token challenge's nonces (default: NewNonce, auth.h).
  explicit LeaderCore(LeaderOptions options, NonceSource nonce = {});
  ~LeaderCore();
  LeaderCore(const LeaderCore&) = delete;
  LeaderCore& operator=(const LeaderCore&) = delete;

  // --- Local calls (leader.h) ---
  // Leader::Start: the leader pod's own hello. Emits RoundDone (config) for an
  // index other than 0; otherwise arms the progress and waiting-heartbeat
  // timers (nnodes > 1). Admits nobody before Listening.
  void Start(wire::Hello own, Clock::time_point now);
  // The shell bound the rendezvous port (and found MASTER_PORT free):
  // `master_port` is the port the round hands out (LeaderOptions::master_port,
  // or the one picked for 0). Emits StartAccepting (nnodes > 1), and forms the
  // round at once when nobody else is awaited. No effect once formed.
  void Listening(std::uint16_t master_port, Clock::time_point now);
  // The shell cannot listen (a port taken until the deadline): emits
  // RoundDone with `error`, unless the round formed.
  void Fail(exitcodes::Status error);
  // Leader::Reconsider: asks the membership's plan again (may form the round).
  void Reconsider(Clock::time_point now);
  // Leader::StartChannel; `on_join` decides late pods (ChannelCallbacks::on_join).
  // Emits the member events held back, heartbeats, and arms kHeartbeat.
  void StartChannel(std::function<bool(std::uint32_t)> on_join, std::chrono::milliseconds heartbeat,
                    int misses, Clock::time_point now);
  void BroadcastStop(const wire::Stop& stop);  // a Send to every member
  void StopAdmitting();                        // StopListening; late pods refused by the kernel
  // Leader::Close: forgets every connection and emits nothing more, ever (the
  // caller closes what it holds itself).
  void Close();

  // --- I/O events ---
  // A connection was accepted: returns its id. May emit Close (the round is
  // complete), Close of an older pending connection (all pending slots taken),
  // and ArmTimer for its handshake.
  ConnId Accepted(const leader_io::Endpoints& endpoints, Clock::time_point now);
  // Bytes read from `conn` (any split: frames are reassembled; the bytes are
  // copied). May emit anything: Send (a Challenge, the round's Assignments,
  // a Reject with notify), Close (a bad frame, a replaced holder), CancelTimer,
  // RoundDone, MemberLost, MemberReport. Unknown connections, and refused ones
  // whose Reject is being written, are ignored.
  void Received(ConnId conn, std::span<const std::uint8_t> bytes, Clock::time_point now);
  // `conn` hit end of stream or a read error (`why`: the error, for logs).
  // The caller stops reading it and waits for the core's Close (emitted now,
  // or after a Reject being written). May emit MemberLost (a member of a
  // formed round that had not settled).
  void Closed(ConnId conn, const std::string& why, Clock::time_point now);
  // A Send with `notify` was written, or failed: the last of the round's
  // Assignments emits RoundDone (the leader pod's own); a Reject emits its
  // Close (and RoundDone config after a rival leader's).
  void Written(ConnId conn, Clock::time_point now);
  // A timer armed by ArmTimer reached its deadline (a cancelled or re-armed
  // one must not be reported for its old deadline; a stale one is harmless).
  // kHandshake: Close of a connection still without a valid hello;
  // kWaitingHeartbeat: a Heartbeat Send per waiting member, re-armed;
  // kProgress: the progress line, re-armed; kHeartbeat: heartbeats due,
  // MemberLost + Close for members silent past heartbeat * misses, re-armed
  // for the next send or the next silence bound, whichever is first.
  void TimerFired(leader_io::TimerId id, Clock::time_point now);

  // The actions queued since the last call, in order; the caller carries them out.
  std::vector<leader_io::Action> TakeActions();

  // --- Queries (leader.h documents each) ---
  bool formed() const;   // Leader::formed: the round's assignments are being or were sent
  bool decided() const;  // the round was written (or the core closed): admission is final
  std::uint32_t admitted() const;
  std::vector<std::uint32_t> missing() const;
  bool AllMembersSettled() const;
  Clock::duration heartbeat_silence(Clock::time_point now) const;
  std::map<std::uint32_t, LeaderPeerStats> peer_stats() const;
  std::string node_name(std::uint32_t index) const;
  std::map<std::uint32_t, std::string> instance_ids() const;
  std::size_t pending() const;  // connections mid-handshake

 private:
  std::unique_ptr<LeaderCoreState> s_;  // leader_core_state.h
};

}  // namespace trainlet::rendezvous
