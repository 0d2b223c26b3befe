// tests/sim/ends.h — the protocol ends as the simulator drives them. Today a
// STAND-IN (sim.cc, StandInLeaderEnd / StandInMemberEnd): the simulator's own
// version of what rendezvous/src/leader.cc, member.cc and agent/src/pod/pod.cc
// do between the wire and the pure machines (connect and retry, hello,
// challenge/proof, rounds and last call, assignments, reports, stops, loss by
// silence). When the sans-IO cores (rendezvous/.../leader_core.h,
// member_core.h) land, an adapter implementing these two interfaces over them
// replaces the stand-in, and the world (sim.cc's network, clock, workers and
// control plane) stays as it is.
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
  virtual void OnAccepted(ConnId c) = 0;
  virtual void OnMessage(ConnId c, const rendezvous::wire::Message& m) = 0;
  virtual void OnClosed(ConnId c, bool silent) = 0;
  virtual void OnRoundTimer() = 0;                              // reconsider the round
  virtual void OnGang(const agent::GangActions& a) = 0;
};

}  // namespace trainlet::sim
