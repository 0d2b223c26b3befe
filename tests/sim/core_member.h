// tests/sim/core_member.h — the member's protocol end over the REAL sans-IO
// core (rendezvous/.../member_core.h), implementing ends.h's SimMemberEnd:
// the leader's frames reach MemberCore as encoded bytes (wire::Encode), and
// its actions become the world's events (Connect: the world's link; Send:
// bytes on the link with its latency; ArmTimer: the world's clock queue;
// Done, Stopped, Lost: the pod's GangPolicy). `--member-end` picks it or the
// stand-in (standin.h).
#pragma once

#include <memory>

#include "ends.h"

namespace trainlet::sim {

class World;

enum class MemberEndKind { kCore, kStandIn };
// Process-wide choice for the pods spawned from now on (main.cc's flag; one
// thread). Default: kCore (the seed range 1:20000 keeps the contract with it).
void SetMemberEndKind(MemberEndKind kind);
MemberEndKind GetMemberEndKind();

std::unique_ptr<SimMemberEnd> MakeCoreMemberEnd(World& w, std::uint32_t inst);
// The member end GetMemberEndKind() names.
std::unique_ptr<SimMemberEnd> MakeSimMemberEnd(World& w, std::uint32_t inst);

// An armed MemberCore timer of `inst`'s core number `core_epoch` is due
// (Ev::kCoreTimer; `timer`: rendezvous::MemberTimer's value).
void CoreTimerDue(SimMemberEnd& end, std::uint32_t core_epoch, int timer);

}  // namespace trainlet::sim
