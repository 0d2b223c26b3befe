#include "core_member.h"

#include <chrono>
#include <map>
#include <optional>
#include <string>

#include "standin.h"
#include "trainlet/rendezvous/member_core.h"
#include "trainlet/rendezvous/tunables.h"
#include "world.h"

namespace trainlet::sim {

namespace wire = rendezvous::wire;
namespace tun = rendezvous::tunables;
namespace gang = agent::gang;
namespace mb = rendezvous::member;
using invariants::Record;
using rendezvous::MemberCore;
using rendezvous::MemberTimer;

namespace {

MemberEndKind g_kind = MemberEndKind::kCore;

// The simulated clock as MemberCore's steady clock: it starts after
// Clock::time_point{} (member_core.h: the channel's pacing takes that for "never").
MemberCore::Clock::time_point T(Ms ms) {
  return MemberCore::Clock::time_point{} + std::chrono::seconds(1) + std::chrono::milliseconds(ms);
}
Ms MsOf(MemberCore::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t - T(0)).count();
}

class CoreMemberEnd final : public SimMemberEnd {
 public:
  CoreMemberEnd(World& w, InstId id) : w_(w), id_(id) {}

  void Join() override {
    Inst& me = w_.inst(id_);
    ++me.timer_epoch;
    if (core_) Exec(core_->Close());
    if (ran_) w_.Record({.kind = Record::Kind::kJoin, .inst = id_, .pod = Key()});
    ++core_epoch_;
    round_start_ = w_.now();
    links_.clear();
    pending_ = 0;
    core_.emplace(Options());
    Exec(core_->Start(T(w_.now())));
  }

  // The world refused the connect (nobody listens) or its SYN timed out.
  void OnRefused() override {
    if (!core_ || pending_ == 0) return;
    const std::uint64_t c = pending_;
    pending_ = 0;
    Exec(core_->OnConnectFailed(c, "Connection refused", T(w_.now())));
  }

  void OnConnected(ConnId c) override {
    if (!core_ || pending_ == 0) return;
    const std::uint64_t id = pending_;
    pending_ = 0;
    links_[id] = c;
    Exec(core_->OnConnected(id, T(w_.now())));
  }

  void OnMessage(ConnId c, const wire::Message& m) override {
    const auto id = CoreConn(c);
    if (!id) return;
    const auto bytes = wire::Encode(m);  // the leader end's frame, as bytes again
    Exec(core_->OnReceived(*id, bytes, T(w_.now())));
  }

  void OnClosed(ConnId c, bool silent) override {
    const auto id = CoreConn(c);
    if (!id) return;
    Exec(core_->OnClosed(*id, silent ? "no heartbeat" : "End of file", T(w_.now())));
  }

  void OnGang(const agent::GangActions& a) override {
    Inst& me = w_.inst(id_);
    if (a.report) {
      if (a.report->leaving) w_.Record({.kind = Record::Kind::kLeave, .inst = id_, .pod = Key()});
      if (core_) Exec(core_->Report(*a.report, a.report->ok ? 1 : 0, T(w_.now())));
    }
    if (a.stop_workers) w_.StopWorkers(id_);
    if (a.arm_verdict_timer) w_.At(tun::kVerdictTimeout.count(), Ev::kVerdict, id_, me.timer_epoch);
    if (a.restart) Join();
    if (a.conclude) {
      if (core_) Exec(core_->Close());
      w_.Exit(id_, ExitCodeOf(*a.conclude), ExitWhyOf(*a.conclude));
    }
  }

  void TimerDue(std::uint32_t epoch, int timer) {
    if (!core_ || epoch != core_epoch_ || !w_.inst(id_).alive) return;
    const auto t = static_cast<MemberTimer>(timer);
    if (t == MemberTimer::kStep || t == MemberTimer::kHeartbeat) LeaderHeartbeat();
    if (core_) Exec(core_->OnTimer(t, T(w_.now())));
  }

 private:
  rendezvous::MemberCoreOptions Options() const {
    const Inst& me = w_.inst(id_);
    const SimConfig& cfg = w_.config();
    rendezvous::MemberCoreOptions o;
    o.leader_host = "pod-0";
    o.hello = GangHello(w_, Key(), ran_ ? me.gang->role().generation() + 1 : 0);
    o.hello.restarts = me.gang->role().restarts();
    // pod_rendezvous.cc MakeHelloNow: the node rank this pod held (membership.h M16).
    if (cfg.spares > 0 || cfg.elastic()) o.hello.node_rank = held_node_rank_;
    o.hello.instance_id = "inst-" + std::to_string(id_);
    if (me.stranger && !cfg.token) o.hello.attempt = 1;
    // The round's deadline (pod_rendezvous.cc: from the round's start).
    o.deadline = T(w_.now() + cfg.rdzv_timeout_ms);
    if (ran_) {  // rejoining after a restart (pod_rendezvous.cc)
      o.backoff.initial = tun::kRejoinBackoffInitial;
      o.backoff.min_delay = tun::kRejoinBackoffMin;
    }
    o.seed = w_.Draw(8, w_.Tag(id_), core_epoch_);
    if (cfg.token) o.token = me.stranger ? "a-wrong-token" : StandInToken();
    const std::uint64_t tag = w_.Tag(id_);
    o.nonce_source = [tag, n = std::uint64_t{0}]() mutable {
      std::string s = "nonce-" + std::to_string(tag) + "-" + std::to_string(n++);
      s.resize(32, '.');
      return s;
    };
    return o;
  }

  // The real leader sends heartbeats (kWaitingHeartbeatInterval while a member
  // waits, kHeartbeatInterval on the channel); the stand-in leader sends none,
  // so a link the world keeps healthy delivers one whenever the core checks.
  void LeaderHeartbeat() {
    for (const auto& [id, c] : links_) {
      const Conn& k = w_.conn(c);
      const Inst& l = w_.inst(k.leader);
      if (l.leader->Heartbeats()) return;  // the real leader core sends its own
      if (!k.open[0] || !k.open[1] || k.silence != 0 || !l.alive || l.frozen) continue;
      if (w_.LinkCut(w_.inst(id_).key)) continue;
      Exec(core_->OnReceived(id, wire::Encode(wire::Heartbeat{}), T(w_.now())));
      return;
    }
  }

  std::optional<std::uint64_t> CoreConn(ConnId c) const {
    if (!core_) return std::nullopt;
    for (const auto& [id, k] : links_) {
      if (k == c) return id;
    }
    return std::nullopt;
  }

  void Exec(MemberCore::Actions actions) {
    for (auto& a : actions) {
      if (!core_) return;
      std::visit([&](auto& x) { Do(x); }, a);
    }
  }

  void Do(mb::ResolveName& r) {
    rendezvous::Resolution res;
    res.addresses = {"10.0.0.1"};
    Exec(core_->OnResolved(r.id, std::move(res), T(w_.now())));
  }
  void Do(mb::CancelResolve&) {}
  void Do(mb::Connect& c) {
    pending_ = c.conn;
    w_.Connect(id_);  // answers OnConnected or OnRefused, now or at the connect timeout
  }
  void Do(mb::Send& s) {
    if (auto it = links_.find(s.conn); it != links_.end()) w_.SendBytes(it->second, 0, std::move(s.frame));
    if (s.ticket != 0) w_.At(1, Ev::kReportSent, id_);
  }
  void Do(mb::Unsent& u) {
    if (u.ticket != 0) w_.At(1, Ev::kReportSent, id_);
  }
  void Do(mb::Disconnect& d) {
    if (pending_ == d.conn) pending_ = 0;
    if (auto it = links_.find(d.conn); it != links_.end()) {
      w_.Close(it->second, 1);
      links_.erase(it);
    }
  }
  void Do(mb::ArmTimer& t) {
    const Ms delay = std::max<Ms>(0, MsOf(t.at) - w_.now());
    w_.At(delay, Ev::kCoreTimer, id_, core_epoch_, static_cast<std::int64_t>(t.timer));
  }
  void Do(mb::CancelTimer&) {}  // the core ignores an expiry it no longer waits for
  void Do(mb::LogLine& l) {
    if (l.level == mb::LogLine::Level::kInfo) w_.Note("inst " + std::to_string(id_) + " " + l.text);
  }
  void Do(mb::Done& d) {
    if (!d.result.ok()) {
      const exitcodes::Status& st = d.result.status();
      Adopt(core_->hello().index);
      // The round ran out of time: the trace's exit reason (standin.cc's deadline).
      const bool timeout = w_.now() >= deadline_ms();
      w_.Feed(id_, gang::AgentFailed{timeout ? exitcodes::Status::Infra(std::string(kRdzvTimeout) + " passed: " + st.message()) : st});
      return;
    }
    OnAssignment(d.result.value());
  }
  void Do(mb::Stopped& s) { w_.Feed(id_, gang::Stop{s.stop}); }
  void Do(mb::Lost& l) { w_.Feed(id_, gang::Lost{0, l.why}); }

  Ms deadline_ms() const { return round_start_ + w_.config().rdzv_timeout_ms; }

  void OnAssignment(const wire::Assignment& a) {
    Inst& me = w_.inst(id_);
    ++me.timer_epoch;
    ran_ = true;
    const std::uint32_t restarts = a.restarts.value_or(a.generation);
    if (a.index) Adopt(*a.index);
    held_node_rank_ = a.spare ? std::nullopt : std::optional(a.node_rank.value_or(Key()));
    TakeAssignment(w_, id_, a, Key(), restarts);
    if (core_ && me.alive) {
      Exec(core_->StartChannel(tun::kHeartbeatInterval, tun::kHeartbeatMisses, T(w_.now())));
    }
  }

  std::uint32_t Key() const {
    const Inst& me = w_.inst(id_);
    if (!w_.config().by_arrival || me.key == 0 || me.stranger) return me.key;
    return index_.value_or(wire::kNoIndex);
  }
  void Adopt(std::uint32_t index) {
    if (index == wire::kNoIndex || index_ == index) return;
    const Inst& me = w_.inst(id_);
    if (!w_.config().by_arrival || me.key == 0 || me.stranger) return;
    index_ = index;
    w_.inst(id_).gang->AdoptIndex(index);
  }

  World& w_;
  InstId id_;
  std::optional<MemberCore> core_;
  std::uint32_t core_epoch_ = 0;
  std::map<std::uint64_t, ConnId> links_;  // the core's connection id -> the world's
  std::uint64_t pending_ = 0;              // the Connect under way
  bool ran_ = false;
  Ms round_start_ = 0;
  std::optional<std::uint32_t> index_;
  std::optional<std::uint32_t> held_node_rank_;  // the last generation's, with workers
};

}  // namespace

void SetMemberEndKind(MemberEndKind kind) { g_kind = kind; }
MemberEndKind GetMemberEndKind() { return g_kind; }

std::unique_ptr<SimMemberEnd> MakeCoreMemberEnd(World& w, std::uint32_t inst) {
  return std::make_unique<CoreMemberEnd>(w, inst);
}

std::unique_ptr<SimMemberEnd> MakeSimMemberEnd(World& w, std::uint32_t inst) {
  return g_kind == MemberEndKind::kCore ? MakeCoreMemberEnd(w, inst) : MakeMemberEnd(w, inst);
}

void CoreTimerDue(SimMemberEnd& end, std::uint32_t core_epoch, int timer) {
  if (auto* c = dynamic_cast<CoreMemberEnd*>(&end)) c->TimerDue(core_epoch, timer);
}

}  // namespace trainlet::sim
