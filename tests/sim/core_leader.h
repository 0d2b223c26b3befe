// tests/sim/core_leader.h — the leader's protocol end over the REAL sans-IO
// core (rendezvous/.../leader_core.h), implementing ends.h's SimLeaderEnd:
// the members' frames reach LeaderCore as encoded bytes, and its actions
// become the world's events (Send: bytes on the link with its latency;
// Close: a FIN; ArmTimer: the world's clock queue; StartAccepting and
// StopListening: whether the world's connects are accepted; RoundDone: the
// leader pod's own assignment; MemberLost, MemberReport: the pod's
// GangPolicy). What the pod's wiring does around the core (agent/src/pod/
// pod_rendezvous.cc LeaderOptionsNow, pod.cc Apply and ApplyBroadcast,
// pod_channel.cc StartGangChannel and OnJoin, ListenAhead's backlog) is
// rendered here as a thin adapter; every decision is the core's or the pure
// machines'.
//
// Fixed gangs without --spares: no membership (LeaderOptions::membership ==
// nullptr, as production). Hot spares and MIN:MAX: the core asks the leader
// pod's real Roster (trainlet/agent/pod/roster.h, its GangPolicy's) through
// SimRosterMembership, roster_membership.h's adapter on the simulated clock;
// `--leader-end core-roster` runs them so, while the default `core` leaves
// them on the stand-in leader (standin.h) until the open findings the real
// roster shows are decided (README.md). `--leader-end` picks the ends.
#pragma once

#include <memory>

#include "ends.h"
#include "sim.h"

namespace trainlet::sim {

class World;

// kCore: fixed gangs without spares over LeaderCore, the others on the stand-in;
// kCoreRoster: every mode over LeaderCore, --spares and MIN:MAX with the pod's
// real Roster (open findings there: README.md); kStandIn: the stand-in everywhere.
enum class LeaderEndKind { kCore, kCoreRoster, kStandIn };
// Process-wide choice for the leaders spawned from now on (main.cc's flag;
// one thread). Default: kCore. The core leader end needs the core member end
// (it sends and checks real heartbeats; the stand-in member answers none).
void SetLeaderEndKind(LeaderEndKind kind);
LeaderEndKind GetLeaderEndKind();

// Whether a leader of configuration `c` runs over the core: kCore chosen, and
// a fixed gang without spares.
bool CoreLeads(const SimConfig& c);

std::unique_ptr<SimLeaderEnd> MakeCoreLeaderEnd(World& w, std::uint32_t inst);
// The leader end GetLeaderEndKind() and the configuration name.
std::unique_ptr<SimLeaderEnd> MakeSimLeaderEnd(World& w, std::uint32_t inst);

}  // namespace trainlet::sim
