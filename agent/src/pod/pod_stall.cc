// Class Pod (pod_wiring.h): the pod's own stall (SIGSTOP, a frozen node, a
// starved process), found by a tick on the loop and the heartbeats' silence.
#include <algorithm>
#include <string>

#include <spdlog/spdlog.h>

#include "pod/pod_wiring.h"

namespace trainlet::agent {

namespace tun = rendezvous::tunables;

void Pod::StartStallWatch() {
  gen_->stall_watch = true;
  gen_->last_tick = Clock::now();
  Tick();
}

void Pod::Tick() {
  gen_->stall_timer.expires_after(tun::kStallTick);
  gen_->stall_timer.async_wait(Guard([this](boost::system::error_code ec) {
    if (ec || !gen_->stall_watch || concluded_) return;
    CheckStall();
    gen_->last_tick = Clock::now();
    if (!concluded_) Tick();
  }));
}

// The peers give a pod up after kStallLimit without a frame from it, counted
// from its last heartbeat, which may precede the stall by up to a heartbeat
// interval: so the silence since that heartbeat decides, as they judge it,
// not the loop's gap alone (a stall of 2.5 s after a heartbeat sent 0.8 s
// before it was given up by the peers, yet shorter than the limit).
void Pod::CheckStall() {
  PodGeneration& g = *gen_;
  if (!g.stall_watch) return;
  const auto now = Clock::now();
  const auto gap = now - g.last_tick;
  const auto silence = std::max<Clock::duration>(
      gap, g.leader ? g.leader->heartbeat_silence()
                    : g.member ? g.member->heartbeat_silence() : Clock::duration{});
  if (silence <= tun::kStallLimit) return;
  if (g.joining()) {
    NoteJoiningStall(gap);
    return;
  }
  g.stall_watch = false;  // once per generation
  std::string why = fmt::format(
      "this pod's event loop did not run for {:.1f} s, {:.1f} s without a heartbeat sent "
      "(the process was stopped or starved; its peers give up after {:.1f} s)",
      std::chrono::duration<double>(gap).count(), std::chrono::duration<double>(silence).count(),
      std::chrono::duration<double>(tun::kStallLimit).count());
  spdlog::error("{}", why);
  Apply(policy_.On(gang::OwnStall{why}));
}

// A stall while the pod waits in a round harms nobody unless the round
// formed during it: the leader then started counting this pod's silence on a
// control channel it never answered. Until its assignment is read, the stall
// is only noted (a waiting pod frozen for a few seconds keeps its place).
void Pod::NoteJoiningStall(Clock::duration gap) {
  gen_->joining_stall_ended = Clock::now();
  gen_->last_tick = Clock::now();
  spdlog::warn("this pod's event loop did not run for {:.1f} s while it waited in the rendezvous",
               std::chrono::duration<double>(gap).count());
}

// A member's assignment read right after a stall (seen within one tick of
// now) waited for it while it was stopped: the leader has counted its silence
// on the control channel since the round formed, and may have given it up.
// It is the culprit (G3) and starts no workers: true, the stall fed. The
// leader is never in this case: it forms its rounds on its own loop.
bool Pod::StalledAcrossFormation() {
  CheckStall();  // a stall still in progress: noted now
  const auto& ended = gen_->joining_stall_ended;
  if (!ended || Clock::now() - *ended > tun::kStallTick) return false;
  std::string why =
      "this pod's event loop did not run past the heartbeat timeout while its round formed "
      "(the process was stopped or starved; its peers may have given it up)";
  spdlog::error("{}", why);
  gen_->stall_watch = false;
  Apply(policy_.On(gang::OwnStall{why}));
  return true;
}

}  // namespace trainlet::agent
