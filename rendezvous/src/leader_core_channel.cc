// LeaderCore: the control channel — heartbeats both ways (channel_core.h),
// members lost to silence, a closed connection or a protocol error, their
// reports, and members leaving before the round formed.
#include <algorithm>
#include <utility>

#include "leader_core_state.h"
#include "trainlet/rendezvous/leader_core.h"

namespace trainlet::rendezvous {

using Clock = leader_io::Clock;
using ConnId = leader_io::ConnId;
using leader_io::TimerId;

void LeaderCore::StartChannel(std::function<bool(std::uint32_t)> on_join,
                              std::chrono::milliseconds heartbeat, int misses,
                              Clock::time_point now) {
  LeaderCoreState& s = *s_;
  s.on_join = std::move(on_join);
  s.heartbeat = heartbeat;
  s.misses = misses;
  if (s.phase == RoundPhase::kClosed) return;
  s.phase = RoundPhase::kChannel;
  for (const auto& [index, id] : s.members) s.conns.at(id).peer_state.Heard(now);
  s.Heartbeat(now);
  auto early = std::move(s.early_events);
  s.early_events.clear();
  for (auto& event : early) s.Emit(std::move(event));
}

// A member event for the pod: now in the channel, held back until StartChannel
// before (the leader's own pod learns of the assignment a moment after the
// members do).
void LeaderCoreState::Deliver(leader_io::Action event) {
  if (phase == RoundPhase::kClosed) return;
  if (phase == RoundPhase::kChannel) {
    Emit(std::move(event));
  } else {
    early_events.push_back(std::move(event));
  }
}

void LeaderCoreState::Lost(std::uint32_t index, std::string why) {
  Deliver(leader_io::MemberLost{index, std::move(why)});
}

// Sends the heartbeats that are due, declares lost the members silent for
// `heartbeat * misses`, and arms the next check.
void LeaderCoreState::Heartbeat(Clock::time_point now) {
  if (phase != RoundPhase::kChannel) return;
  const bool send = pacer.Due(now, heartbeat);
  auto snapshot = members;
  for (const auto& [index, id] : snapshot) {
    CoreConn* c = Find(id);
    if (c == nullptr) continue;
    if (!c->settled && c->peer_state.Silent(now, heartbeat, misses)) {
      c->settled = true;
      Drop(id);
      Lost(index, "no heartbeat for " + std::to_string(heartbeat.count() * misses) + " ms");
      continue;
    }
    if (send) Emit(leader_io::Send{id, wire::Encode(c->peer_state.Make(now))});
  }
  // Wake for the next send, and at the moment the first member's silence
  // reaches the bound: a silent peer is declared lost on time, not up to a
  // check interval late (a hot spare's start waits on it: bench/spares.py).
  auto wake = Clock::duration(heartbeat / kChecksPerInterval);
  for (const auto& [index, id] : members) {
    const CoreConn& c = conns.at(id);
    if (c.settled) continue;
    const auto bound = c.peer_state.last_rx() + heartbeat * misses - now;
    wake = std::min(wake, bound + std::chrono::milliseconds(1));
  }
  wake = std::max(wake, Clock::duration(std::chrono::milliseconds(1)));
  Emit(leader_io::ArmTimer{{TimerId::Kind::kHeartbeat, 0}, now + wake});
}

void LeaderCoreState::OnChannelMessage(ConnId id, const wire::Message& m,
                                         Clock::time_point now) {
  CoreConn& c = conns.at(id);
  if (const auto* hb = std::get_if<wire::Heartbeat>(&m)) {
    c.peer_state.OnHeartbeat(*hb, now);
    return;
  }
  if (const auto* r = std::get_if<wire::Report>(&m)) {
    OnReport(id, *r, now);
    return;
  }
  Warn(c, fmt::format("leader: pod {} sent an unexpected message; closing", *c.index), now);
  ProtocolError(id, "protocol error");
}

void LeaderCoreState::OnReport(ConnId id, const wire::Report& r, Clock::time_point now) {
  CoreConn& c = conns.at(id);
  const std::uint32_t index = *c.index;
  if (r.index != index) {
    Warn(c, fmt::format("leader: pod {} sent a report for index {}; closing", index, r.index),
         now);
    ProtocolError(id, "protocol error (a report for another index)");
    return;
  }
  if (c.settled) return;  // one report per pod: the first one stands
  if (r.leaving && phase == RoundPhase::kAdmitting) {
    // Stopped while it waits in the round: the round goes on without it.
    log->info("leader: pod {} ({}) leaves before the round formed ({})", index, c.peer, r.reason);
    Drop(id);
    if (options.membership) options.membership->OnLeave(index);
    MaybeAssign();
    return;
  }
  c.settled = true;
  Deliver(leader_io::MemberReport{index, r});
}

// An admitted member broke the protocol: dropped, and lost unless it had
// settled already. Through Deliver: this may come before StartChannel (the
// member spoke in the moment between its assignment and the leader's own).
void LeaderCoreState::ProtocolError(ConnId id, std::string why) {
  CoreConn& c = conns.at(id);
  const std::uint32_t index = *c.index;
  const bool was_settled = c.settled;
  Drop(id);
  if (!was_settled) Lost(index, std::move(why));
}

// The connection closed or failed: an admitted member is lost (once the
// round was decided: it has a node rank, so the generation must not run with
// it, agent membership.h M14) or frees its index (before).
void LeaderCoreState::OnClosed(ConnId id, const std::string& why, Clock::time_point now) {
  CoreConn* c = Find(id);
  if (c == nullptr || c->closing) return;
  if (c->index && phase != RoundPhase::kAdmitting && !c->settled) {
    const std::uint32_t index = *c->index;
    Drop(id);
    Lost(index, "its connection closed (" + why + ")");
    return;
  }
  if (c->auth) {
    Warn(*c, fmt::format("leader: pod {} ({}) hung up during authentication (its token "
                         "differs?)", c->auth->hello.index, c->peer), now);
  }
  if (c->index) {
    // Before the assignment this frees the index for a restarted pod; after
    // it, the pod's agent has exited.
    auto line = fmt::format("leader: pod {} ({}) disconnected: {}", *c->index, c->peer, why);
    if (decided()) {
      log->debug("{}", line);
    } else {
      Warn(*c, line, now);  // rate-limited
    }
  }
  Drop(id);
}

}  // namespace trainlet::rendezvous
