// tests/sim/standin.h — the STAND-IN protocol ends (ends.h): the simulator's
// own rendering of the member's and the leader's wiring, to be replaced by
// adapters over the sans-IO cores (leader_core.h, member_core.h) once they
// land. The decisions inside are the real machines': Admit (admission.h),
// DecideFormation and MinReachedAt (formation_policy.h), PlanGeneration
// (membership_policy.h), GangPolicy and its Membership; what is the
// stand-in's own is the bookkeeping between them (the roster across rounds,
// which connection holds which index, when to ask which machine).
#pragma once

#include <memory>

#include "ends.h"

namespace trainlet::sim {

class World;
std::unique_ptr<SimMemberEnd> MakeMemberEnd(World& w, std::uint32_t inst);
std::unique_ptr<SimLeaderEnd> MakeLeaderEnd(World& w, std::uint32_t inst);
// Whether a leader end accepts connections now.
bool StandInListening(const SimLeaderEnd& leader);

}  // namespace trainlet::sim
