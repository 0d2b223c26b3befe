#include "world.h"

#include <algorithm>
#include <csignal>

#include "core_leader.h"
#include "core_member.h"
#include "standin.h"
#include "trainlet/exitcodes/exit_code.h"
#include "trainlet/rendezvous/tunables.h"

namespace trainlet::sim {

namespace wire = rendezvous::wire;
namespace tun = rendezvous::tunables;
using exitcodes::FailureClass;
using invariants::Record;

namespace {
constexpr Ms kLatency = 1;        // ms, one way, within a cluster
constexpr Ms kJitter = 4;         // ms, added at random to each frame
constexpr Ms kUserTimeout = 15000;  // ms: TCP_USER_TIMEOUT of the rendezvous sockets (util.cc)
constexpr Ms kKubeletExtra = 5000;  // terminationGracePeriodSeconds - --grace-period (README: 25 for 30)
}  // namespace

World::World(const Schedule& s, bool trace)
    : cfg_(s.config),
      faults_(s.faults),
      trace_(trace),
      world_seed_(s.world_seed),
      checker_(invariants::Contract{.min_nodes = s.config.min_nodes,
                                    .max_nodes = s.config.max_nodes,
                                    .spares = s.config.spares,
                                    .max_restarts = s.config.max_restarts,
                                    .rdzv_timeout_ms = s.config.rdzv_timeout_ms,
                                    .grace_ms = s.config.grace_ms,
                                    .slack_ms = 6000}) {
  conns_.emplace_back();  // ConnId 0: none
  result_.fault_hit.assign(faults_.size(), false);
}

std::uint64_t World::Draw(std::uint64_t purpose, std::uint64_t a, std::uint64_t b) const {
  std::uint64_t z = world_seed_ ^ (purpose * 0x9E3779B97F4A7C15ULL) ^ (a * 0xC2B2AE3D27D4EB4FULL) ^
                    (b * 0x165667B19E3779F9ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;  // splitmix64's finalizer
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

void World::At(Ms delay, Ev kind, std::uint32_t a, std::uint32_t b, std::int64_t c) {
  queue_.push(Event{now_ + std::max<Ms>(delay, 0), seq_++, kind, a, b, c});
}

void World::Note(const std::string& line) {
  if (trace_) result_.trace.push_back("t=" + std::to_string(now_) + " " + line);
}

void World::Record(invariants::Record r) {
  r.t_ms = now_;
  if (r.kind == invariants::Record::Kind::kForm) result_.last_restarts = r.restarts;
  if (trace_) result_.trace.push_back(invariants::Describe(r));
  checker_.On(r);
}

std::optional<InstId> World::Current(std::uint32_t key) const {
  const auto it = current_.find(key);
  if (it == current_.end() || !insts_[it->second]->alive) return std::nullopt;
  return it->second;
}

std::optional<InstId> World::Leader() const { return Current(0); }

InstId World::Spawn(std::uint32_t key, bool stranger) {
  const auto id = static_cast<InstId>(insts_.size());
  auto p = std::make_unique<Inst>();
  p->id = id;
  p->key = key;
  p->nth = spawned_[key]++ + (stranger ? 1000 : 0);
  p->stranger = stranger;
  const std::uint64_t tag = (std::uint64_t{key} << 20) | p->nth;
  p->stop_ms = 20 + static_cast<Ms>(Draw(1, tag) % 3000);
  const bool arrival = cfg_.by_arrival && key != 0 && !stranger;  // it learns its index
  p->gang = std::make_unique<agent::GangPolicy>(agent::GangConfig{
      .index = arrival ? rendezvous::wire::kNoIndex : key,
      .nnodes = cfg_.max_nodes,
      .max_restarts = cfg_.max_restarts,
      .hang_signal = SIGUSR1,
      .min_nodes = cfg_.elastic() ? cfg_.min_nodes : 0,
      .spares = cfg_.spares});
  insts_.push_back(std::move(p));
  if (!stranger) current_[key] = id;
  // A pod numbered by arrival has no index until the leader gives it one (a kJoin record).
  Record({.kind = Record::Kind::kStart, .inst = id, .pod = arrival ? rendezvous::wire::kNoIndex : key,
          .stranger = stranger});
  if (key == 0 && !stranger) {
    insts_[id]->leader = MakeSimLeaderEnd(*this, id);
    At(late_listener_ + static_cast<Ms>(Draw(2, tag) % 50), Ev::kListen, id);
    late_listener_ = 0;
  } else {
    insts_[id]->member = MakeSimMemberEnd(*this, id);
    At(static_cast<Ms>(Draw(3, tag) % 2000), Ev::kConnect, id, 0, -1);  // start-up, then Join
  }
  return id;
}

void World::Send(ConnId c, int dir, const wire::Message& m) { SendBytes(c, dir, wire::Encode(m)); }

void World::SendBytes(ConnId c, int dir, std::vector<std::uint8_t> bytes) {
  Conn& k = conns_[c];
  const int from_side = dir == 0 ? 1 : 0;
  if (!k.open[from_side]) return;
  k.queue[dir].push_back(std::move(bytes));
  Ms t = now_ + kLatency + static_cast<Ms>(Draw(4, k.tag, k.sent[dir]++ * 2 + dir) % kJitter);
  const std::uint32_t key = insts_[k.member]->key;
  if (LinkCut(key)) t = std::max(t, cut_until_[key] + kLatency);  // TCP retransmits after the heal
  t = std::max(t, k.last[dir]);
  k.last[dir] = t;
  queue_.push(Event{t, seq_++, Ev::kDeliver, c, static_cast<std::uint32_t>(dir), 0});
}

void World::Close(ConnId c, int side) {
  Conn& k = conns_[c];
  if (!k.open[side]) return;
  k.open[side] = false;
  QueueFin(c, side == 0 ? 1 : 0);  // the FIN travels to the other side
}

void World::QueueFin(ConnId c, int dir) {
  Conn& k = conns_[c];
  k.queue[dir].emplace_back();
  Ms t = now_ + kLatency + static_cast<Ms>(Draw(4, k.tag, k.sent[dir]++ * 2 + dir) % kJitter);
  const std::uint32_t key = insts_[k.member]->key;
  if (LinkCut(key)) t = std::max(t, cut_until_[key] + kLatency);
  t = std::max(t, k.last[dir]);
  k.last[dir] = t;
  queue_.push(Event{t, seq_++, Ev::kDeliver, c, static_cast<std::uint32_t>(dir), 0});
}

void World::Connect(InstId member) {
  Inst& m = *insts_[member];
  const auto leader = Leader();
  const bool listening = leader && insts_[*leader]->leader->Bound();
  if (!listening) {  // connection refused: nobody listens (yet)
    m.member->OnRefused();
    return;
  }
  if (LinkCut(m.key)) {  // the SYN is lost: the connect times out
    At(tun::kConnectTimeout.count(), Ev::kConnect, member, m.timer_epoch, -2);
    return;
  }
  conns_.emplace_back();
  const auto c = static_cast<ConnId>(conns_.size() - 1);
  conns_[c].member = member;
  conns_[c].leader = *leader;
  conns_[c].tag = (Tag(member) << 12) | m.conns++;
  conns_[c].last[0] = conns_[c].last[1] = now_ + 2 * kLatency;
  insts_[*leader]->leader->OnAccepted(c);
  m.member->OnConnected(c);
}

void World::Deliver(ConnId c, int dir) {
  Conn& k = conns_[c];
  auto bytes = std::move(k.queue[dir].front());
  k.queue[dir].pop_front();
  const int to_side = dir == 0 ? 0 : 1;
  const InstId to = dir == 0 ? k.leader : k.member;
  Inst& r = *insts_[to];
  if (!r.alive || !k.open[to_side]) return;
  if (r.frozen) {  // the kernel holds it until the process runs again
    r.deferred.emplace_back(c, dir);
    k.queue[dir].push_front(std::move(bytes));
    return;
  }
  if (bytes.empty()) {  // FIN or RST
    k.open[to_side] = false;
    if (dir == 0) r.leader->OnClosed(c, false);
    else r.member->OnClosed(c, false);
    return;
  }
  if (auto st = k.decoder[dir].Feed(bytes); !st.ok()) {
    result_.violations.push_back("wire: " + st.message());
    return;
  }
  while (true) {
    auto next = k.decoder[dir].Next();
    if (!next.ok()) {
      result_.violations.push_back("wire: " + next.status().message());
      return;
    }
    if (!next.value()) break;
    if (!insts_[to]->alive || !k.open[to_side]) break;
    if (dir == 0) r.leader->OnMessage(c, *next.value());
    else r.member->OnMessage(c, *next.value());
  }
}

agent::GangActions World::Feed(InstId i, const agent::GangEvent& e) {
  Inst& p = *insts_[i];
  if (!p.alive || p.exited) return {};
  const agent::GangActions a = p.gang->On(e);
  if (p.leader) p.leader->OnGang(a);
  else p.member->OnGang(a);
  return a;
}

// ---- Workers: SupervisionPolicy over simulated processes ----

void World::StartWorkers(InstId i) {
  Inst& p = *insts_[i];
  ++p.wepoch;
  p.sup = std::make_unique<agent::SupervisionPolicy>(static_cast<int>(cfg_.workers));
  p.rank_alive.assign(cfg_.workers, true);
  const Ms train = cfg_.train_ms / 2 +
                   static_cast<Ms>(Draw(5, Tag(i), p.wepoch) % static_cast<std::uint64_t>(cfg_.train_ms / 2 + 1));
  for (std::uint32_t r = 0; r < cfg_.workers; ++r) {
    At(train + r, Ev::kWorkerExit, i, p.wepoch, static_cast<std::int64_t>(r) << 16);
  }
}

void World::StopWorkers(InstId i) {
  Inst& p = *insts_[i];
  if (p.sup && p.sup->workers_alive() > 0) ApplySup(i, p.sup->On(agent::event::PeerStop{}));
}

void World::ApplySup(InstId i, const agent::Actions& a) {
  Inst& p = *insts_[i];
  if (a.terminate && !p.hang) {
    for (std::uint32_t r = 0; r < p.rank_alive.size(); ++r) {
      if (p.rank_alive[r]) {
        At(p.stop_ms + r, Ev::kWorkerExit, i, p.wepoch, (static_cast<std::int64_t>(r) << 16) | 143);
      }
    }
  }
  if (a.start_grace_timer) At(cfg_.grace_ms, Ev::kGrace, i, p.wepoch);
  if (a.kill_all) {
    for (std::uint32_t r = 0; r < p.rank_alive.size(); ++r) {
      if (p.rank_alive[r]) At(1, Ev::kWorkerExit, i, p.wepoch, (static_cast<std::int64_t>(r) << 16) | 137);
    }
  }
}

void World::OnWorkerExit(InstId i, std::uint32_t wepoch, int rank, int code, FailureClass cls) {
  Inst& p = *insts_[i];
  if (!p.alive || p.wepoch != wepoch || !p.sup || !p.rank_alive[rank]) return;
  p.rank_alive[rank] = false;
  exitcodes::WorkerExit w;
  if (code >= 128) {
    w.signaled = true;
    w.signal = code - 128;
  } else {
    w.exit_status = code;
  }
  const bool had_failure = p.sup->first_failure().has_value() || p.sup->stop_signal() || p.sup->peer_stop();
  ApplySup(i, p.sup->On(agent::event::WorkerExited{rank, w}));
  if (!had_failure && !w.success()) {  // this pod's first failure: the class the fault drew
    Feed(i, agent::gang::LocalFailure{.failure_class = cls, .reason = "worker failed"});
  }
  if (p.sup->workers_alive() == 0) {
    ApplySup(i, p.sup->On(agent::event::NoChildrenLeft{}));
    const bool success = !p.sup->first_failure() && !p.sup->stop_signal() && !p.sup->peer_stop();
    p.sup.reset();
    Feed(i, agent::gang::WorkersDone{success});
  }
}

// ---- Pods' ends of life ----

void World::Exit(InstId i, int code, const std::string& why) {
  Inst& p = *insts_[i];
  if (!p.alive) return;
  p.alive = false;
  p.exited = true;
  p.sup.reset();
  for (ConnId c = 1; c < conns_.size(); ++c) {
    Conn& k = conns_[c];
    if (k.member == i) Close(c, 1);
    if (k.leader == i) Close(c, 0);
  }
  Record({.kind = Record::Kind::kExit, .inst = i, .pod = p.key, .code = code, .what = why});
  if (!p.stranger) codes_.push_back(code);
  // The Job recreates an index whose pod failed with a counted class while the gang goes on
  // (a hardware leaver, a lost pod refused): it joins as a spare or a new pod.
  if (code == 0 && !p.stranger) completed_.insert(p.key);  // the Job creates no pod for it again
  if (!p.stranger && !ended_ && (code == 76 || (p.key == 0 && code != 137 && code != 0))) {
    // The gang stopped for good: what the Job or JobSet does next (fail, or restart the whole
    // workload) is beyond this simulator; a moment later every pod still running is stopped.
    ended_ = true;
    At(5000, Ev::kEnd, 0);
  }
  const bool counted = code != 0 && code != 76 && code != 143;
  if (counted && !p.stranger && p.key != 0 && Leader() && recreations_left_ > 0 && JobRuns()) {
    --recreations_left_;
    At(5000 + static_cast<Ms>(Draw(6, Tag(i)) % 5000), Ev::kRecreate, p.key);
  }
}

void World::Kill(InstId i, bool fin) {
  Inst& p = *insts_[i];
  if (!p.alive) return;
  if (fin) {
    Exit(i, 137);  // the kernel closes its sockets
    return;
  }
  p.alive = false;  // the node died: nothing closes; the peers hear silence
  p.exited = true;
  p.sup.reset();
  for (ConnId c = 1; c < conns_.size(); ++c) {
    if (conns_[c].member == i || conns_[c].leader == i) Silence(c);
  }
  Record({.kind = Record::Kind::kExit, .inst = i, .pod = p.key, .code = 137});
  if (!p.stranger) codes_.push_back(137);
}

void World::Term(InstId i, const char* why) {
  Inst& p = *insts_[i];
  if (!p.alive) return;
  if (!p.term) {
    p.term = true;
    Record({.kind = Record::Kind::kSignal, .inst = i, .pod = p.key, .what = why});
    At(cfg_.grace_ms + kKubeletExtra, Ev::kKubeletKill, i);
  }
  if (p.frozen) {
    p.deferred_term = true;
    return;
  }
  if (p.sup) ApplySup(i, p.sup->On(agent::event::Signal{SIGTERM}));
  Feed(i, agent::gang::StopSignal{SIGTERM});
}

void World::Freeze(InstId i, Ms ms) {
  Inst& p = *insts_[i];
  if (!p.alive || p.frozen) return;
  p.frozen = true;
  p.frozen_at = now_;
  p.frozen_until = now_ + ms;
  for (ConnId c = 1; c < conns_.size(); ++c) {
    const Conn& k = conns_[c];
    if ((k.member == i || k.leader == i) && k.open[0] && k.open[1]) Silence(c);
  }
  At(ms, Ev::kResume, i);
}

// Whether an assignment is among the frames the kernel holds for frozen `i`
// (peeked with a copy of each connection's decoder; nothing is consumed).
bool World::AssignmentWaits(InstId i) const {
  for (const auto& [c, dir] : insts_[i]->deferred) {
    if (dir != 1) continue;
    const Conn& k = conns_[c];
    rendezvous::wire::Decoder peek = k.decoder[dir];
    for (const auto& bytes : k.queue[dir]) {
      if (bytes.empty() || !peek.Feed(bytes).ok()) break;
      for (auto next = peek.Next(); next.ok() && next->has_value(); next = peek.Next()) {
        if (std::holds_alternative<rendezvous::wire::Assignment>(**next)) return true;
      }
    }
  }
  return false;
}

void World::Resume(InstId i) {
  Inst& p = *insts_[i];
  if (!p.alive || !p.frozen) return;
  p.frozen = false;
  // It speaks again: its connections are silent no more, unless the peer is dead, frozen or cut off.
  for (ConnId c = 1; c < conns_.size(); ++c) {
    Conn& k = conns_[c];
    if (k.member != i && k.leader != i) continue;
    const Inst& peer = *insts_[k.member == i ? k.leader : k.member];
    if (peer.alive && !peer.frozen && !LinkCut(insts_[k.member]->key)) k.silence = 0;
  }
  // The wiring checks its own loop's lag before anything else (gang_policy.h
  // G3); while joining only a member whose assignment waited for it (the
  // round formed meanwhile) counts it (pod_stall.cc).
  const bool joining = !p.gang->role().gen().running();
  if (now_ - p.frozen_at >= tun::kStallLimit.count() &&
      (!joining || (p.leader == nullptr && AssignmentWaits(i)))) {
    Feed(i, agent::gang::OwnStall{"event loop stalled"});
  }
  auto later = std::move(p.deferred);
  p.deferred.clear();
  for (const auto& [c, dir] : later) Deliver(c, dir);
  if (p.deferred_term && p.alive) {
    p.deferred_term = false;
    Term(i, "term");
  }
}

// Heartbeats are not simulated frame by frame: a connection silent (a cut
// link, a frozen or dead peer) for the heartbeat timeout is given up by the
// side that still runs, as the real heartbeat check would (tunables).
void World::Silence(ConnId c) {
  Conn& k = conns_[c];
  if (k.silence != 0) return;
  k.silence = static_cast<std::uint32_t>(seq_ + 1);
  const Ms after = tun::kReplyTimeout.count() +
                   static_cast<Ms>(Draw(7, k.tag, k.silences++) % tun::kHeartbeatInterval.count());
  // With the core leader both ends check heartbeats themselves; what is left is the kernel's.
  At(insts_[k.leader]->leader->Heartbeats() ? kUserTimeout : after, Ev::kDetect, c, k.silence);
}

// The core leader's connections: both ends check the heartbeats themselves, so
// what the world adds is the kernel's TCP_USER_TIMEOUT (rendezvous/src/util.cc
// EnableDeadPeerDetection: 15 s): frames unacknowledged that long, toward a
// dead node or across a cut link, fail the socket at the side still running
// (a frozen peer's kernel still acknowledges: nothing fails).
void World::UserTimeout(Conn& k, ConnId c) {
  const bool cut = LinkCut(insts_[k.member]->key);
  for (int side = 0; side < 2; ++side) {
    Inst& p = *insts_[side == 0 ? k.leader : k.member];
    const Inst& peer = *insts_[side == 0 ? k.member : k.leader];
    if (!k.open[side] || !p.alive || p.frozen || (peer.alive && !cut)) continue;
    Close(c, side);
    if (side == 0) p.leader->OnClosed(c, true);
    else p.member->OnClosed(c, true);
  }
}

void World::Detect(ConnId c, std::uint32_t epoch) {
  Conn& k = conns_[c];
  if (k.silence != epoch) return;  // it spoke again (a blip, a short freeze)
  k.silence = 0;
  if (insts_[k.leader]->leader->Heartbeats()) {
    UserTimeout(k, c);
    return;
  }
  for (int side = 0; side < 2; ++side) {
    const InstId who = side == 0 ? k.leader : k.member;
    Inst& p = *insts_[who];
    if (!k.open[side] || !p.alive || p.frozen) continue;
    Close(c, side);  // it gives the peer up and closes its socket: a FIN, if the peer hears it
    if (side == 0) p.leader->OnClosed(c, true);
    else p.member->OnClosed(c, true);
  }
}

// ---- Faults and the control plane ----

// Pod `pod`'s link drops everything for `ms` (a partition): its connections
// go silent, and the heal is an event.
void World::CutLink(std::uint32_t pod, Ms ms) {
  cut_until_[pod] = std::max(cut_until_[pod], now_ + ms);
  for (ConnId c = 1; c < conns_.size(); ++c) {
    if (insts_[conns_[c].member]->key == pod) Silence(c);
  }
  At(ms, Ev::kResume, 0xFFFFFFFF, pod);  // the heal: silence ends
}

// The connections of member `i` open at both ends, oldest first.
std::vector<ConnId> World::OpenLinksOf(InstId i) const {
  std::vector<ConnId> open;
  for (ConnId c = 1; c < conns_.size(); ++c) {
    const Conn& kc = conns_[c];
    if (kc.member == i && kc.open[0] && kc.open[1]) open.push_back(c);
  }
  return open;
}

// A whole-workload preemption: SIGTERM to every live pod of the Job.
void World::TermWorkload() {
  for (auto& [key, id] : current_) {
    if (insts_[id]->alive) Term(id, "workload");
  }
}

void World::ApplyFault(std::size_t k) {
  const Fault& f = faults_[k];
  const auto target = Current(f.pod);
  auto hit = [&] {
    result_.fault_hit[k] = true;
    Note(std::string("fault ") + FaultName(f.kind) + " pod " + std::to_string(f.pod) + " arg " +
         std::to_string(f.arg));
  };
  auto counted = [&](const char* what) {
    Record({.kind = Record::Kind::kFault, .inst = target.value_or(0), .pod = f.pod, .what = what});
  };
  switch (f.kind) {
    case FaultKind::kWorkerFail: {
      if (!target || !insts_[*target]->sup || insts_[*target]->frozen) return;
      hit();
      counted("fail");
      const auto cls = static_cast<FailureClass>(f.arg);
      OnWorkerExit(*target, insts_[*target]->wepoch, 0, cls == FailureClass::kBug ? 42 : 1, cls);
      return;
    }
    case FaultKind::kHang:
      if (!target) return;
      hit();
      insts_[*target]->hang = true;
      return;
    case FaultKind::kKill:
    case FaultKind::kNodeDeath:
      if (!target) return;
      hit();
      counted("kill");
      Kill(*target, f.kind == FaultKind::kKill);
      if (f.arg > 0) At(f.arg, Ev::kRecreate, f.pod);
      return;
    case FaultKind::kFreeze:
      if (!target || insts_[*target]->frozen) return;
      hit();
      counted("freeze");
      Freeze(*target, f.arg);
      return;
    case FaultKind::kPartition:
      if (!target || f.pod == 0) return;
      hit();
      counted("cut");
      CutLink(f.pod, f.arg);
      return;
    case FaultKind::kReset:
      if (!target || f.pod == 0) return;
      for (ConnId c : OpenLinksOf(*target)) {
        hit();
        counted("reset");
        QueueFin(c, 0);  // an RST reaches both ends
        QueueFin(c, 1);
      }
      return;
    case FaultKind::kEvict:
    case FaultKind::kScaleDown:
      if (!target) return;
      hit();
      Term(*target, "term");
      if (f.arg > 0) At(f.arg, Ev::kRecreate, f.pod);
      return;
    case FaultKind::kPreempt:
      hit();
      TermWorkload();
      return;
    case FaultKind::kScaleUp:
      if (current_.contains(f.pod) || !JobRuns()) return;  // a new index only
      hit();
      Spawn(f.pod, false);
      return;
    case FaultKind::kStranger:
      if (!JobRuns()) return;
      hit();
      Spawn(f.pod, true);
      return;
    case FaultKind::kLateListener:  // applied at the start (Run)
    case FaultKind::kCount:
      return;
  }
}

void World::EndOfRun() {
  // The Job's activeDeadlineSeconds, or the workload deleted: every pod still running gets SIGTERM.
  if (stopped_all_) return;
  stopped_all_ = true;
  ended_ = true;
  Note("the run's time is up: SIGTERM to every pod");
  for (std::size_t i = 0; i < insts_.size(); ++i) {
    if (insts_[i]->alive) Term(static_cast<InstId>(i), "workload");
  }
}

// Whether `e` is for an agent that is frozen: it waits (the kernel keeps its
// children's exits and its timers' expiries) until the agent runs again.
bool World::Postpone(const Event& e) {
  switch (e.kind) {
    case Ev::kWorkerExit: case Ev::kGrace: case Ev::kVerdict: case Ev::kSettle:
    case Ev::kDeadline: case Ev::kReportSent: case Ev::kRound: case Ev::kConnect:
    case Ev::kCoreTimer: break;
    default: return false;
  }
  Inst& p = *insts_[e.a];
  if (!p.alive || !p.frozen) return false;
  queue_.push(Event{p.frozen_until, seq_++, e.kind, e.a, e.b, e.c});
  return true;
}

void World::Dispatch(const Event& e) {
  if (Postpone(e)) return;
  switch (e.kind) {
    case Ev::kFault: ApplyFault(e.a); return;
    case Ev::kDeliver: Deliver(e.a, static_cast<int>(e.b)); return;
    case Ev::kConnect: {
      Inst& p = *insts_[e.a];
      if (!p.alive) return;
      if (e.c == -1) p.member->Join();
      else if (e.c == -2) {
        if (e.b == p.timer_epoch) p.member->OnRefused();
      } else if (e.b == p.timer_epoch) Connect(e.a);
      return;
    }
    case Ev::kWorkerExit: OnWorkerExit(e.a, e.b, static_cast<int>(e.c >> 16), static_cast<int>(e.c & 0xFFFF)); return;
    case Ev::kGrace: {
      Inst& p = *insts_[e.a];
      if (p.alive && p.sup && p.wepoch == e.b) ApplySup(e.a, p.sup->On(agent::event::GraceExpired{}));
      return;
    }
    case Ev::kVerdict:
      if (insts_[e.a]->timer_epoch == e.b) Feed(e.a, agent::gang::Timer{agent::gang::TimerKind::kVerdict});
      return;
    case Ev::kSettle:
      if (insts_[e.a]->timer_epoch == e.b) Feed(e.a, agent::gang::Timer{agent::gang::TimerKind::kSettle});
      return;
    case Ev::kRound:
      if (insts_[e.a]->alive && insts_[e.a]->timer_epoch == e.b) {
        insts_[e.a]->leader->OnRoundTimer();
      }
      return;
    case Ev::kDetect: Detect(e.a, e.b); return;
    case Ev::kRecreate:
      if (!Current(e.a) && JobRuns() && !completed_.contains(e.a)) Spawn(e.a, false);
      return;
    case Ev::kDeadline:
      if (insts_[e.a]->alive && insts_[e.a]->timer_epoch == e.b) {
        Feed(e.a, agent::gang::AgentFailed{exitcodes::Status::Infra(std::string(kRdzvTimeout) + " passed")});
      }
      return;
    case Ev::kListen:
      if (insts_[e.a]->alive) insts_[e.a]->leader->Listen();
      return;
    case Ev::kResume:
      if (e.a == 0xFFFFFFFF) {  // a link healed
        for (ConnId c = 1; c < conns_.size(); ++c) {
          const Conn& k = conns_[c];
          const Inst& m = *insts_[k.member];
          const Inst& l = *insts_[k.leader];
          if (m.key == e.b && !LinkCut(e.b) && m.alive && l.alive && !m.frozen && !l.frozen) {
            conns_[c].silence = 0;
          }
        }
        return;
      }
      Resume(e.a);
      return;
    case Ev::kReportSent: Feed(e.a, agent::gang::ReportSent{}); return;
    case Ev::kCoreTimer:
      if (insts_[e.a]->alive && insts_[e.a]->member) CoreTimerDue(*insts_[e.a]->member, e.b, static_cast<int>(e.c));
      if (insts_[e.a]->alive && insts_[e.a]->leader) insts_[e.a]->leader->OnCoreTimer(e.b, e.c);
      return;
    case Ev::kKubeletKill:
      if (insts_[e.a]->alive) {
        Note("the kubelet SIGKILLs inst " + std::to_string(e.a) + " after its grace period");
        Kill(e.a, true);
      }
      return;
    case Ev::kEnd: EndOfRun(); return;
  }
}

RunResult World::Run() {
  for (std::size_t k = 0; k < faults_.size(); ++k) {
    if (faults_[k].kind == FaultKind::kLateListener) {
      late_listener_ = faults_[k].arg;
      result_.fault_hit[k] = true;
    } else {
      queue_.push(Event{faults_[k].t_ms, seq_++, Ev::kFault, static_cast<std::uint32_t>(k), 0, 0});
    }
  }
  for (std::uint32_t key = 0; key < cfg_.pods; ++key) Spawn(key, false);
  queue_.push(Event{cfg_.limit_ms, seq_++, Ev::kEnd, 0, 0, 0});
  const Ms hard_stop = cfg_.limit_ms + cfg_.grace_ms + 2 * kKubeletExtra;
  while (!queue_.empty()) {
    const Event e = queue_.top();
    queue_.pop();
    if (e.t > hard_stop) break;
    now_ = e.t;
    ++result_.events;
    Dispatch(e);
    bool any = false;
    for (const auto& p : insts_) any = any || p->alive;
    if (!any) break;
  }
  checker_.Finish(now_);
  result_.end_ms = now_;
  std::sort(codes_.begin(), codes_.end());
  for (std::size_t k = 0; k < codes_.size(); ++k) result_.codes += (k ? "," : "") + std::to_string(codes_[k]);
  for (const auto& v : checker_.violations()) result_.violations.push_back(v);
  return std::move(result_);
}

}  // namespace trainlet::sim
