// tests/sim/ends.h — the protocol ends as the simulator drives them. The
// member's end runs the real sans-IO MemberCore (core_member.h, CoreMemberEnd;
// `--member-end standin` picks standin.cc's StandInMemberEnd instead); the
// leader's end runs the real sans-IO LeaderCore for fixed gangs without spares
// (core_leader.h, CoreLeaderEnd; `--leader-end standin` picks the stand-in;
// `--leader-end core-roster` every mode, with the pod's real Roster) and is
// by default still a STAND-IN with --spares or MIN:MAX (standin.cc,
// StandInLeaderEnd: the simulator's own version of what
// rendezvous/src/leader.cc and agent/src/pod/pod.cc do between the wire and
// the pure machines, with its own roster) until the real roster's open
// findings are decided. The world (world.cc's network, clock, workers and
// control plane) is the same under every end.
#pragma once

#include <cstdint>

#include "trainlet/agent/pod/gang_policy.h"
#include "trainlet/rendezvous/wire.h"

namespace trainlet::sim {

using ConnId = std::uint32_t;

// What a pod's end hears from the world. Every call is at the world's current
// time; the end answers through the world's services (send, close, arm a
// timer, feed the pod's GangPolicy, exit).
class SimMemberEnd {
 public:
  virtual ~SimMemberEnd() = default;
  virtual void Join() = 0;                                      // start (or restart) a round
  virtual void OnConnected(ConnId c) = 0;                       // the connect succeeded
  virtual void OnRefused() = 0;                                 // refused or timed out
  virtual void OnMessage(ConnId c, const rendezvous::wire::Message& m) = 0;
  virtual void OnClosed(ConnId c, bool silent) = 0;             // FIN/RST, or silence
  virtual void OnGang(const agent::GangActions& a) = 0;         // the policy's actions
};

class SimLeaderEnd {
 public:
  virtual ~SimLeaderEnd() = default;
  virtual void Listen() = 0;                                    // the listener is bound
  // Whether a socket listens now: the world's connects complete (else refused).
  virtual bool Bound() const = 0;
  // Whether the end sends and checks heartbeats itself (the core): the
  // world's silence model (world.cc Detect) and the member end's stand-in
  // heartbeats are off for its connections.
  virtual bool Heartbeats() const { return false; }
  virtual void OnAccepted(ConnId c) = 0;
  virtual void OnMessage(ConnId c, const rendezvous::wire::Message& m) = 0;
  virtual void OnClosed(ConnId c, bool silent) = 0;
  virtual void OnRoundTimer() = 0;                              // reconsider the round
  virtual void OnGang(const agent::GangActions& a) = 0;
  // A timer the end armed (Ev::kCoreTimer: `epoch`, the end's own numbering;
  // `timer`, its code) is due.
  virtual void OnCoreTimer(std::uint32_t epoch, std::int64_t timer) {
    (void)epoch;
    (void)timer;
  }
};

}  // namespace trainlet::sim
