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
#include <string>

#include "ends.h"

namespace trainlet::sim {

class World;
std::unique_ptr<SimMemberEnd> MakeMemberEnd(World& w, std::uint32_t inst);
std::unique_ptr<SimLeaderEnd> MakeLeaderEnd(World& w, std::uint32_t inst);
// The gang's shared token (auth.h's proofs; a stranger has another).
const char* StandInToken();
// The hello of every simulated pod of the gang (job, attempt 0, the gang's
// workers per pod, the empty launch configuration they all share) for
// `index` asking for `generation`; callers add nonce, restarts, instance id.
rendezvous::wire::Hello GangHello(const World& w, std::uint32_t index, std::uint32_t generation);
// A pod's exit code for its GangPolicy's conclusion, and the trace's exit
// reason ("rdzv_timeout" for a round that ran out of time, else "").
int ExitCodeOf(const agent::Conclusion& c);
std::string ExitWhyOf(const agent::Conclusion& c);
// A member end took assignment `a` as pod `key` (restarts: the generation's
// count): records the generation, feeds the pod's GangPolicy, starts its
// workers unless it is a spare.
void TakeAssignment(World& w, std::uint32_t inst, const rendezvous::wire::Assignment& a,
                    std::uint32_t key, std::uint32_t restarts);

}  // namespace trainlet::sim
