#include "core_leader.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <mutex>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core_member.h"
#include "standin.h"
#include "trainlet/rendezvous/auth.h"
#include "trainlet/rendezvous/leader_core.h"
#include "trainlet/rendezvous/tunables.h"
#include "world.h"

namespace trainlet::sim {

namespace wire = rendezvous::wire;
namespace tun = rendezvous::tunables;
namespace gang = agent::gang;
namespace lio = rendezvous::leader_io;
using invariants::Record;
using rendezvous::LeaderCore;

namespace {

LeaderEndKind g_kind = LeaderEndKind::kCore;

constexpr std::uint16_t kMasterPort = 29500;

// The simulated clock as the core's steady clock (as core_member.cc's).
LeaderCore::Clock::time_point T(Ms ms) {
  return LeaderCore::Clock::time_point{} + std::chrono::seconds(1) + std::chrono::milliseconds(ms);
}
// A deadline as the world's milliseconds, rounded up (the core's timers are never early).
Ms MsOf(LeaderCore::Clock::time_point t) {
  const auto d = t - T(0);
  return std::chrono::ceil<std::chrono::milliseconds>(d).count();
}

std::int64_t TimerCode(lio::TimerId id) {
  return static_cast<std::int64_t>(id.conn << 2) | static_cast<std::int64_t>(id.kind);
}
lio::TimerId TimerOf(std::int64_t code) {
  return {.kind = static_cast<lio::TimerId::Kind>(code & 3), .conn = static_cast<std::uint64_t>(code) >> 2};
}

// A connection the listener's kernel accepted while the core did not accept
// (ListenAhead's backlog, pod_channel.cc): what its member sent, kept until
// the next generation's core accepts it.
struct Backlogged {
  ConnId conn = 0;
  std::vector<std::vector<std::uint8_t>> frames{};
  bool closed{false};
};

// The core's log lines (spdlog's "rendezvous" logger, rendezvous/src/logging.h)
// as the trace's lines of the world running now; off unless it traces.
class TraceSink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 public:
  World* world = nullptr;

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (world != nullptr) world->Note(std::string(msg.payload.data(), msg.payload.size()));
  }
  void flush_() override {}
};

void RouteCoreLog(World& w) {
  static const auto sink = std::make_shared<TraceSink>();
  static const auto logger = [] {
    auto l = std::make_shared<spdlog::logger>("rendezvous", sink);
    spdlog::drop("rendezvous");
    spdlog::register_logger(l);
    return l;
  }();
  sink->world = &w;
  logger->set_level(w.tracing() ? spdlog::level::info : spdlog::level::off);
}

class CoreLeaderEnd final : public SimLeaderEnd {
 public:
  CoreLeaderEnd(World& w, InstId id) : w_(w), id_(id), started_(w.now()) { RouteCoreLog(w); }
  ~CoreLeaderEnd() override = default;

  bool Bound() const override { return bound_ && w_.inst(id_).alive; }
  bool Heartbeats() const override { return true; }

  // The first generation's listener is bound (a late listener: bound late):
  // Leader::Listen and Start, then BindAndAccept's Listening (leader.cc).
  void Listen() override {
    bound_ = true;
    if (!core_) StartRound();
  }

  void OnAccepted(ConnId c) override {
    if (!accepting_) {
      backlog_.push_back({.conn = c, .frames = {}, .closed = false});
      return;
    }
    AcceptIntoCore(c);
    Exec();
  }

  void OnMessage(ConnId c, const wire::Message& m) override {
    if (auto id = CoreConn(c)) {
      core_->Received(*id, wire::Encode(m), T(w_.now()));
      Exec();
      return;
    }
    for (auto& b : backlog_) {
      if (b.conn == c) b.frames.push_back(wire::Encode(m));
    }
  }

  void OnClosed(ConnId c, bool silent) override {
    if (auto id = CoreConn(c)) {
      core_->Closed(*id, silent ? "no heartbeat" : "End of file", T(w_.now()));
      Exec();
      return;
    }
    for (auto& b : backlog_) {
      if (b.conn == c) b.closed = true;
    }
  }

  // A posted step (Ev::kRound at this generation's epoch): the next
  // generation, as pod.cc's PostNextGeneration runs it after the current handler.
  void OnRoundTimer() override {
    if (next_pending_) {
      next_pending_ = false;
      StartRound();
    }
  }

  void OnCoreTimer(std::uint32_t epoch, std::int64_t code) override {
    if (!core_ || epoch != core_epoch_) return;
    const lio::TimerId id = TimerOf(code);
    const auto it = timers_.find(id);
    // Cancelled, or moved later (a frozen pod's expiry comes late: World::Postpone).
    if (it == timers_.end() || it->second > w_.now()) return;
    timers_.erase(it);
    core_->TimerFired(id, T(w_.now()));
    Exec();
  }

  void OnGang(const agent::GangActions& a) override;

 private:
  void StartRound();
  rendezvous::LeaderOptions Options() const;
  wire::Hello OwnHello() const;
  void AcceptIntoCore(ConnId c);
  void Exec();
  void Do(lio::Action& a);
  void OnRoundDone(const exitcodes::Result<wire::Assignment>& r);
  void FlushBacklog();
  void CloseBacklog();
  std::optional<lio::ConnId> CoreConn(ConnId c) const {
    if (!core_) return std::nullopt;
    const auto it = to_core_.find(c);
    if (it == to_core_.end()) return std::nullopt;
    return it->second;
  }

  World& w_;
  InstId id_;
  Ms started_;
  Ms round_started_ = 0;
  std::optional<LeaderCore> core_;
  std::uint32_t core_epoch_ = 0;
  bool ran_ = false;           // a generation formed
  bool bound_ = false;         // a socket listens: the kernel completes connects
  bool accepting_ = false;     // the core accepts them (StartAccepting .. StopListening)
  bool next_pending_ = false;  // a restart posted, its round not started yet
  std::map<ConnId, lio::ConnId> to_core_;
  std::map<lio::ConnId, ConnId> to_world_;
  std::map<lio::TimerId, Ms> timers_;  // armed: each one's deadline
  std::vector<Backlogged> backlog_;
  std::map<std::uint32_t, std::string> kept_ids_;  // pod.cc ApplyBroadcast: the survivors
  std::map<std::uint32_t, InstId> insts_;  // the formed generation's members, by index
  std::string leader_id_;
  std::uint64_t nonces_ = 0;
};

// A new generation's rendezvous (pod.cc StartGeneration, pod_rendezvous.cc
// StartRendezvous and StartLeader): the old Leader closes every connection it
// holds, a new core starts with this pod's hello, its listener (bound at start,
// or ListenAhead's at a restart) is taken over, and BindAndAccept's Listening
// follows. The deadline is the pod's (--rdzv-timeout, from the round's start:
// the first from the agent's start).
void CoreLeaderEnd::StartRound() {
  Inst& me = w_.inst(id_);
  if (core_) {
    core_->Close();
    for (const auto& [c, id] : to_core_) w_.Close(c, 0);
  }
  to_core_.clear();
  to_world_.clear();
  timers_.clear();
  accepting_ = false;
  ++core_epoch_;
  ++me.timer_epoch;
  if (ran_) w_.Record({.kind = Record::Kind::kJoin, .inst = id_, .pod = me.key});
  round_started_ = ran_ ? w_.now() : started_;
  core_.emplace(Options(), [this] {
    std::string s = "leader-nonce-" + std::to_string(w_.Tag(id_)) + "-" + std::to_string(nonces_++);
    s.resize(rendezvous::kNonceBytes, '.');
    return s;
  });
  w_.At(round_started_ + w_.config().rdzv_timeout_ms - w_.now(), Ev::kDeadline, id_, me.timer_epoch);
  core_->Start(OwnHello(), T(w_.now()));
  Exec();
  if (core_ && bound_) {
    core_->Listening(kMasterPort, T(w_.now()));
    Exec();
  }
}

// pod_rendezvous.cc LeaderOptionsNow for a fixed gang (no membership).
rendezvous::LeaderOptions CoreLeaderEnd::Options() const {
  const SimConfig& cfg = w_.config();
  rendezvous::LeaderOptions lo;
  lo.nnodes = cfg.max_nodes;
  lo.master_port = kMasterPort;
  lo.run_id = w_.JobId();
  if (cfg.token) lo.token = StandInToken();
  lo.deadline = T(round_started_ + cfg.rdzv_timeout_ms);
  lo.max_pending_handshakes = std::max<std::size_t>(lo.max_pending_handshakes, cfg.max_nodes);
  lo.max_generation = cfg.max_restarts;
  lo.leader_id = "leader-" + std::to_string(w_.Tag(id_));
  lo.kept_ids = kept_ids_;
  lo.keep_until = T(round_started_ + cfg.grace_ms + tun::kStallLimit.count());
  return lo;
}

// pod_rendezvous.cc MakeHelloNow, as the simulated members make theirs (core_member.cc).
wire::Hello CoreLeaderEnd::OwnHello() const {
  const Inst& me = w_.inst(id_);
  wire::Hello h = GangHello(w_, 0, ran_ ? me.gang->role().generation() + 1 : 0);
  h.restarts = me.gang->role().restarts();
  return h;
}

void CoreLeaderEnd::AcceptIntoCore(ConnId c) {
  const InstId m = w_.conn(c).member;
  lio::Endpoints ep{.peer_address = "10.1." + std::to_string(m >> 8) + "." + std::to_string(m & 255),
                    .peer_port = static_cast<std::uint16_t>(40000 + (c & 0x3FFF)),
                    .local_address = "10.0.0.1",
                    .local_port = tun::kRendezvousPort,
                    .local_loopback = false};
  const lio::ConnId id = core_->Accepted(ep, T(w_.now()));
  to_core_[c] = id;
  to_world_[id] = c;
}

// The connections waiting in the listener's backlog reach the core (its
// StartAccepting), oldest first, as leader.cc accepts and reads them: each
// one's bytes (its member's hello, and what followed) in the read at accept,
// then, for one its member closed meanwhile, the end of stream; the core's
// actions after each.
void CoreLeaderEnd::FlushBacklog() {
  auto waiting = std::move(backlog_);
  backlog_.clear();
  const std::uint32_t epoch = core_epoch_;
  for (auto& b : waiting) {
    if (!core_ || !accepting_ || core_epoch_ != epoch || !w_.inst(id_).alive) {
      backlog_.push_back(std::move(b));
      continue;
    }
    AcceptIntoCore(b.conn);
    Exec();
    std::vector<std::uint8_t> bytes;
    for (const auto& f : b.frames) bytes.insert(bytes.end(), f.begin(), f.end());
    if (auto id = CoreConn(b.conn); id && !bytes.empty()) core_->Received(*id, bytes, T(w_.now()));
    Exec();
    if (auto id = CoreConn(b.conn); id && b.closed) core_->Closed(*id, "End of file", T(w_.now()));
    Exec();
  }
}

// The listener closes: connections not yet accepted are reset.
void CoreLeaderEnd::CloseBacklog() {
  for (const auto& b : backlog_) w_.Close(b.conn, 0);
  backlog_.clear();
}

// leader.cc Apply: the core's actions, in order, until it queues none; a
// RoundDone is the pod's after the batch it came in (leader.cc posts it). A
// generation the policy ended (a restart posted) reaches the pod no more
// (pod_wiring.h Guard): its MemberLost, MemberReport and RoundDone are dropped.
void CoreLeaderEnd::Exec() {
  const std::uint32_t epoch = core_epoch_;
  while (core_ && core_epoch_ == epoch && w_.inst(id_).alive) {
    std::vector<lio::Action> actions = core_->TakeActions();
    if (actions.empty()) return;
    std::vector<lio::ConnId> written;
    std::optional<lio::RoundDone> done;
    for (auto& a : actions) {
      if (!w_.inst(id_).alive || core_epoch_ != epoch) return;
      if (auto* s = std::get_if<lio::Send>(&a); s && s->notify) written.push_back(s->conn);
      if (auto* r = std::get_if<lio::RoundDone>(&a)) {
        done = std::move(*r);
        continue;
      }
      Do(a);
    }
    // The writes asked about are done (the simulated socket takes every frame at once).
    for (lio::ConnId id : written) {
      if (core_ && core_epoch_ == epoch) core_->Written(id, T(w_.now()));
    }
    if (done && done->result) OnRoundDone(*done->result);
  }
}

void CoreLeaderEnd::Do(lio::Action& action) {
  if (auto* s = std::get_if<lio::Send>(&action)) {
    if (auto it = to_world_.find(s->conn); it != to_world_.end()) {
      w_.SendBytes(it->second, 1, std::move(s->frame));
    }
  } else if (auto* c = std::get_if<lio::Close>(&action)) {
    timers_.erase({lio::TimerId::Kind::kHandshake, c->conn});
    if (auto it = to_world_.find(c->conn); it != to_world_.end()) {
      w_.Close(it->second, 0);
      to_core_.erase(it->second);
      to_world_.erase(it);
    }
  } else if (auto* t = std::get_if<lio::ArmTimer>(&action)) {
    const Ms at = std::max(MsOf(t->deadline), w_.now());
    timers_[t->id] = at;
    w_.At(at - w_.now(), Ev::kCoreTimer, id_, core_epoch_, TimerCode(t->id));
  } else if (auto* x = std::get_if<lio::CancelTimer>(&action)) {
    timers_.erase(x->id);
  } else if (std::holds_alternative<lio::StartAccepting>(action)) {
    accepting_ = true;
    FlushBacklog();
  } else if (std::holds_alternative<lio::StopListening>(action)) {
    accepting_ = false;
    bound_ = false;
    CloseBacklog();
  } else if (auto* l = std::get_if<lio::MemberLost>(&action); l && !next_pending_) {
    w_.Feed(id_, gang::Lost{l->index, l->why});  // pod_channel.cc on_lost
  } else if (auto* r = std::get_if<lio::MemberReport>(&action); r && !next_pending_) {
    w_.Feed(id_, gang::Report{r->index, r->report});  // pod_channel.cc on_report
  }
}

// pod_rendezvous.cc OnAssignment, pod_workers.cc StartWorkers: the leader's
// own assignment (a fixed gang: node rank = index), its workers, then the
// control channel (StartGangChannel; no late joins without a membership).
void CoreLeaderEnd::OnRoundDone(const exitcodes::Result<wire::Assignment>& r) {
  Inst& me = w_.inst(id_);
  if (next_pending_) return;  // retired (Guard)
  ++me.timer_epoch;  // PodGeneration::Assign: the deadline is cancelled
  if (!r.ok()) {
    w_.Feed(id_, gang::AgentFailed{r.status()});
    return;
  }
  const wire::Assignment& a = r.value();
  const std::uint32_t restarts = a.restarts.value_or(a.generation);
  std::vector<std::uint32_t> ranks(a.nnodes);
  for (std::uint32_t k = 0; k < a.nnodes; ++k) ranks[k] = k;
  w_.Record({.kind = Record::Kind::kForm, .inst = id_, .pod = 0, .generation = a.generation,
             .world = a.nnodes, .restarts = restarts, .ranks = ranks});
  insts_.clear();
  for (const auto& [index, instance] : core_->instance_ids()) {
    if (instance.rfind("inst-", 0) == 0) insts_[index] = static_cast<InstId>(std::stoul(instance.substr(5)));
  }
  ran_ = true;
  const std::uint32_t epoch = core_epoch_;
  TakeAssignment(w_, id_, a, 0, restarts);
  if (!me.alive || !core_ || core_epoch_ != epoch || next_pending_) return;
  core_->StartChannel([](std::uint32_t) { return false; }, tun::kHeartbeatInterval,
                      tun::kHeartbeatMisses, T(w_.now()));
  Exec();
}

// pod.cc Apply and ApplyBroadcast for a leader without a roster.
void CoreLeaderEnd::OnGang(const agent::GangActions& a) {
  Inst& me = w_.inst(id_);
  for (std::uint32_t k : a.lost) {
    if (auto it = insts_.find(k); it != insts_.end()) {
      w_.Record({.kind = Record::Kind::kLost, .inst = it->second, .pod = k});
    }
  }
  for (std::uint32_t k : a.leaving) {
    if (auto it = insts_.find(k); it != insts_.end()) {
      w_.Record({.kind = Record::Kind::kLost, .inst = it->second, .pod = k, .what = "leaving"});
    }
  }
  if (a.broadcast && core_) {
    if (a.broadcast->restart) kept_ids_ = core_->instance_ids();
    core_->BroadcastStop(*a.broadcast);
    core_->StopAdmitting();
    Exec();
    if (a.broadcast->restart) bound_ = true;  // ListenAhead: the next round's listener
  }
  if (a.stop_workers) w_.StopWorkers(id_);
  if (a.arm_settle_timer) w_.At(tun::kLeaveSettle.count(), Ev::kSettle, id_, me.timer_epoch);
  if (a.restart) {  // PostNextGeneration: after this handler, the next round
    ++me.timer_epoch;
    next_pending_ = true;
    w_.At(0, Ev::kRound, id_, me.timer_epoch);
  }
  if (a.conclude) {
    if (core_) core_->Close();
    w_.Exit(id_, ExitCodeOf(*a.conclude), ExitWhyOf(*a.conclude));
  }
}

}  // namespace

void SetLeaderEndKind(LeaderEndKind kind) { g_kind = kind; }
LeaderEndKind GetLeaderEndKind() { return g_kind; }

bool CoreLeads(const SimConfig& c) {
  return g_kind == LeaderEndKind::kCore && c.spares == 0 && !c.elastic();
}

std::unique_ptr<SimLeaderEnd> MakeCoreLeaderEnd(World& w, std::uint32_t inst) {
  return std::make_unique<CoreLeaderEnd>(w, inst);
}

std::unique_ptr<SimLeaderEnd> MakeSimLeaderEnd(World& w, std::uint32_t inst) {
  return CoreLeads(w.config()) ? MakeCoreLeaderEnd(w, inst) : MakeLeaderEnd(w, inst);
}

}  // namespace trainlet::sim
