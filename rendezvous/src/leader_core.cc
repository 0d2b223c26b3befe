// LeaderCore: the events in, the actions out, the queries (leader_core.h).
// The rules live in leader_core_accept.cc, leader_core_round.cc and
// leader_core_channel.cc.
#include "trainlet/rendezvous/leader_core.h"

#include <utility>

#include "leader_core_state.h"
#include "trainlet/rendezvous/auth.h"

namespace trainlet::rendezvous {

using leader_io::Action;
using leader_io::TimerId;

LeaderCore::LeaderCore(LeaderOptions options, NonceSource nonce)
    : s_(std::make_unique<LeaderCoreState>()) {
  s_->options = std::move(options);
  s_->nonce = nonce ? std::move(nonce) : NonceSource(NewNonce);
}

LeaderCore::~LeaderCore() = default;

std::vector<Action> LeaderCore::TakeActions() {
  std::vector<Action> out;
  out.swap(s_->actions);
  return out;
}

void LeaderCore::Start(wire::Hello own, Clock::time_point now) {
  LeaderCoreState& s = *s_;
  if (own.index != 0) {
    s.Finish(exitcodes::Status::Config("the leader must be the pod with index 0, not " +
                                       std::to_string(own.index)));
    return;
  }
  if (own.job_restart_attempt) s.job_attempts[own.job_name] = *own.job_restart_attempt;
  s.own = std::move(own);
  if (s.options.nnodes > 1) {
    s.WaitingHeartbeat(now);
    s.LogProgress(now, /*line=*/false);
  }
}

void LeaderCore::Listening(std::uint16_t master_port, Clock::time_point /*now*/) {
  LeaderCoreState& s = *s_;
  if (s.decided() || !s.own) return;
  s.options.master_port = master_port;
  s.listener_open = true;
  if (s.options.nnodes > 1) s.Emit(leader_io::StartAccepting{});
  s.MaybeAssign();  // alone, or every pod expected (LeaderOptions::expected) is here already
}

void LeaderCore::Fail(exitcodes::Status error) { s_->Finish(std::move(error)); }

void LeaderCore::Reconsider(Clock::time_point /*now*/) {
  if (s_->own) s_->MaybeAssign();
}

void LeaderCore::BroadcastStop(const wire::Stop& stop) {
  auto frame = wire::Encode(stop);
  for (const auto& [index, id] : s_->members) s_->Emit(leader_io::Send{id, frame});
}

void LeaderCore::StopAdmitting() {
  LeaderCoreState& s = *s_;
  s.late = false;
  if (s.listener_open) s.Emit(leader_io::StopListening{});
  s.listener_open = false;
}

void LeaderCore::Close() {
  LeaderCoreState& s = *s_;
  s.phase = RoundPhase::kClosed;
  s.listener_open = false;
  s.conns.clear();
  s.members.clear();
  s.assignment_writes.clear();
  s.rivals.clear();
  s.early_events.clear();
  s.actions.clear();
}

LeaderCore::ConnId LeaderCore::Accepted(const leader_io::Endpoints& ep, Clock::time_point now) {
  LeaderCoreState& s = *s_;
  const ConnId id = s.next_id++;
  CoreConn& c = s.conns[id];
  c.address = ep.peer_address;
  c.peer = ep.peer_address == "?" ? "?" : ep.peer_address + ":" + std::to_string(ep.peer_port);
  c.local_address = ep.local_address;
  c.local_port = ep.local_port;
  c.local_loopback = ep.local_loopback;
  c.peer_state.Heard(now);
  s.OnAccepted(id, now);
  return id;
}

void LeaderCore::Received(ConnId id, std::span<const std::uint8_t> bytes, Clock::time_point now) {
  LeaderCoreState& s = *s_;
  CoreConn* c = s.Find(id);
  if (c == nullptr || c->closing) return;
  exitcodes::Status fed = c->decoder.Feed(bytes);
  for (;;) {
    auto next = c->decoder.Next();
    if (!fed.ok() || !next.ok()) {
      const exitcodes::Status& st = fed.ok() ? next.status() : fed;
      s.Warn(*c, "leader: closing " + c->peer + ": " + st.message(), now);
      if (c->decoder.peer_version() != 0 && c->decoder.peer_version() != wire::kVersion) {
        s.Refuse(id, {"protocol_version", st.message()}, now);
      } else {
        s.Drop(id);
      }
      return;
    }
    if (!next->has_value()) return;
    c->peer_state.Heard(now);
    s.Dispatch(id, std::move(**next), now);
    c = s.Find(id);
    if (c == nullptr || c->closing) return;
  }
}

void LeaderCore::Closed(ConnId id, const std::string& why, Clock::time_point now) {
  s_->OnClosed(id, why, now);
}

void LeaderCore::Written(ConnId id, Clock::time_point /*now*/) {
  LeaderCoreState& s = *s_;
  if (s.phase == RoundPhase::kClosed) return;
  if (s.assignment_writes.erase(id) > 0) {
    if (s.assignment_writes.empty() && s.phase == RoundPhase::kAssigning) {
      s.Finish((*s.assignment)(0, s.own_addr, false));
    }
    return;
  }
  CoreConn* c = s.Find(id);
  if (c == nullptr || !c->closing) return;
  s.Drop(id);  // its Reject is written: now it closes
  if (auto rival = s.rivals.find(id); rival != s.rivals.end()) {
    std::string reason = std::move(rival->second);
    s.rivals.erase(rival);
    s.Finish(exitcodes::Status::Config(reason));
  }
}

void LeaderCore::TimerFired(TimerId id, Clock::time_point now) {
  LeaderCoreState& s = *s_;
  if (s.phase == RoundPhase::kClosed) return;
  switch (id.kind) {
    case TimerId::Kind::kHandshake:
      s.HandshakeExpired(id.conn, now);
      return;
    case TimerId::Kind::kWaitingHeartbeat:
      if (s.decided()) return;
      for (const auto& [index, conn] : s.members) {
        s.Emit(leader_io::Send{conn, wire::Encode(wire::Heartbeat{})});
      }
      s.WaitingHeartbeat(now);
      return;
    case TimerId::Kind::kProgress:
      s.LogProgress(now, /*line=*/true);
      return;
    case TimerId::Kind::kHeartbeat:
      s.Heartbeat(now);
      return;
  }
}

bool LeaderCore::formed() const { return s_->phase != RoundPhase::kAdmitting; }
bool LeaderCore::decided() const { return s_->decided(); }
std::uint32_t LeaderCore::admitted() const { return s_->admitted(); }
std::size_t LeaderCore::pending() const { return s_->pending; }

std::uint32_t LeaderCoreState::admitted() const {
  return static_cast<std::uint32_t>(members.size()) + (own ? 1 : 0);
}

std::vector<std::uint32_t> LeaderCore::missing() const { return s_->Missing(); }

std::vector<std::uint32_t> LeaderCoreState::Missing() const {
  std::vector<std::uint32_t> out;
  for (std::uint32_t i = 1; i < options.nnodes; ++i) {
    if (!members.contains(i) && (options.expected.empty() || options.expected.contains(i))) {
      out.push_back(i);
    }
  }
  return out;
}

bool LeaderCore::AllMembersSettled() const {
  for (const auto& [index, id] : s_->members) {
    if (!s_->conns.at(id).settled) return false;
  }
  return true;
}

LeaderCore::Clock::duration LeaderCore::heartbeat_silence(Clock::time_point now) const {
  if (s_->phase != RoundPhase::kChannel) return {};
  return s_->pacer.Silence(now);
}

std::map<std::uint32_t, LeaderPeerStats> LeaderCore::peer_stats() const {
  std::map<std::uint32_t, LeaderPeerStats> out;
  for (const auto& [index, id] : s_->members) {
    const ChannelPeer& p = s_->conns.at(id).peer_state;
    out[index] = {p.rtt_seconds(), p.step_rate_milli(), p.slowest_rank()};
  }
  return out;
}

std::string LeaderCore::node_name(std::uint32_t index) const {
  auto it = s_->node_names.find(index);
  return it == s_->node_names.end() ? std::string() : it->second;
}

std::map<std::uint32_t, std::string> LeaderCore::instance_ids() const {
  std::map<std::uint32_t, std::string> out;
  for (const auto& [index, id] : s_->members) {
    const std::string& instance = s_->conns.at(id).instance_id;
    if (!instance.empty()) out[index] = instance;
  }
  return out;
}

CoreConn* LeaderCoreState::Find(ConnId id) {
  auto it = conns.find(id);
  return it == conns.end() ? nullptr : &it->second;
}

void LeaderCoreState::Warn(const CoreConn& conn, const std::string& line, Clock::time_point now) {
  auto suppressed = log_limit.Admit(conn.address, now);
  if (!suppressed) return;
  if (*suppressed == 0) {
    log->warn("{}", line);
  } else {
    log->warn("{} (and {} more from {} since its last line, not logged: at most {} per {} s)",
              line, *suppressed, conn.address, tunables::kMaxBadConnectionLogsPerPeer,
              std::chrono::duration_cast<std::chrono::seconds>(tunables::kBadConnectionLogWindow)
                  .count());
  }
}

// One message from `id`, by where its handshake stands.
void LeaderCoreState::Dispatch(ConnId id, wire::Message message, Clock::time_point now) {
  CoreConn& c = conns.at(id);
  if (c.index) {  // admitted: from now on only channel messages
    OnChannelMessage(id, message, now);
    return;
  }
  if (const auto* proof = std::get_if<wire::Proof>(&message); proof && c.auth) {
    OnProof(id, *proof, now);
    return;
  }
  auto* hello = std::get_if<wire::Hello>(&message);
  if (hello == nullptr || c.auth) {
    Warn(c, "leader: closing " + c.peer + ": unexpected message", now);
    Drop(id);
    return;
  }
  OnHello(id, std::move(*hello), now);
}

// Forgets `id` and has it closed: an admitted member leaves `members`, a
// pending one frees its slot.
void LeaderCoreState::Drop(ConnId id) {
  auto it = conns.find(id);
  if (it == conns.end()) return;
  CoreConn& c = it->second;
  if (c.index) {
    auto m = members.find(*c.index);
    if (m != members.end() && m->second == id) members.erase(m);
  } else {
    NotPending(c);
  }
  Emit(leader_io::Close{id});
  conns.erase(it);
}

void LeaderCoreState::NotPending(const CoreConn& conn) {
  if (pending > 0) --pending;
  auto it = pending_by_address.find(conn.address);
  if (it != pending_by_address.end() && --it->second == 0) pending_by_address.erase(it);
}

}  // namespace trainlet::rendezvous
