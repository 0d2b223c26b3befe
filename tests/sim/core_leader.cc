#include "core_leader.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <mutex>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core_member.h"
#include "standin.h"
#include "trainlet/rendezvous/auth.h"
#include "trainlet/rendezvous/leader_core.h"
#include "trainlet/rendezvous/tunables.h"
#include "trainlet/agent/pod/roster.h"
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

// The adapter's own timers (negative codes; the core's are TimerCode's).
constexpr std::int64_t kPosted = -1;      // PostNextGeneration: the next round
constexpr std::int64_t kReconsider = -2;  // RosterMembership's timer (Roster::ReconsiderAt)
constexpr std::int64_t kDeadline = -3;    // the round's --rdzv-timeout (PodGeneration::StartRound)

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
  std::vector<wire::Message> messages{};
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
  // The agent's own lines (the roster's, roster.cc) go to the default logger: the trace too.
  // (Again whenever another took its place: the front door's check sets up its own.)
  static const auto agent_logger = std::make_shared<spdlog::logger>("", sink);
  if (spdlog::default_logger_raw() != agent_logger.get()) spdlog::set_default_logger(agent_logger);
  sink->world = &w;
  logger->set_level(w.tracing() ? spdlog::level::info : spdlog::level::off);
  agent_logger->set_level(w.tracing() ? spdlog::level::info : spdlog::level::off);
}

class CoreLeaderEnd;

// agent/src/pod/roster_membership.h's RosterMembership on the simulated clock:
// the core's LeaderMembership answered by the leader pod's Roster (held by its
// GangPolicy's membership machine), its timer the world's (ArmReconsider).
class SimRosterMembership final : public rendezvous::LeaderMembership {
 public:
  explicit SimRosterMembership(CoreLeaderEnd& end) : end_(end) {}
  std::optional<std::map<std::uint32_t, std::uint32_t>> Plan(
      const std::vector<std::uint32_t>& joined) override;
  bool AssignFirst(std::uint32_t index) override { return roster().NewlyActive(index); }
  std::optional<wire::Replaced> ReplacedOf(std::uint32_t index) const override {
    return roster().LastReplacementOf(index);
  }
  std::optional<std::uint32_t> LeftOf(std::uint32_t index) const override {
    return roster().LeftIn(index);
  }
  std::optional<std::uint32_t> LostSpareOf(std::uint32_t index) const override {
    return roster().LostSpareIn(index);
  }
  void OnLeave(std::uint32_t index) override { roster().MarkLeaving(index); }
  void OnAdmitted(std::uint32_t index, const wire::Hello& hello) override {
    roster().OnAdmitted(index, hello);
  }
  // The node ranks of the last Plan that formed the round.
  const std::map<std::uint32_t, std::uint32_t>& formed() const { return formed_; }

 private:
  agent::Roster& roster() const;
  CoreLeaderEnd& end_;
  std::map<std::uint32_t, std::uint32_t> formed_;
};

class CoreLeaderEnd final : public SimLeaderEnd {
 public:
  CoreLeaderEnd(World& w, InstId id) : w_(w), id_(id), started_(w.now()) {}
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
      backlog_.push_back({.conn = c, .messages = {}, .closed = false});
      return;
    }
    AcceptIntoCore(c);
    Exec();
  }

  void OnMessage(ConnId c, const wire::Message& m) override {
    if (auto id = CoreConn(c)) {
      core_->Received(*id, wire::Encode(m), T(w_.now()));
      NoteMember(c, m);
      Exec();
      return;
    }
    for (auto& b : backlog_) {
      if (b.conn == c) b.messages.push_back(m);
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

  void OnRoundTimer() override {}  // the stand-in's; this end's are OnCoreTimer's

  void OnCoreTimer(std::uint32_t epoch, std::int64_t code) override {
    if (!core_ || epoch != core_epoch_) return;
    if (code < 0) {
      OwnTimer(code);
      return;
    }
    const lio::TimerId id = TimerOf(code);
    const auto it = timers_.find(id);
    // Cancelled, or moved later (a frozen pod's expiry comes late: World::Postpone).
    if (it == timers_.end() || it->second > w_.now()) return;
    timers_.erase(it);
    core_->TimerFired(id, T(w_.now()));
    Exec();
  }

  void OnGang(const agent::GangActions& a) override;

  World& world() { return w_; }
  agent::Roster& roster() { return *w_.inst(id_).gang->roster(); }
  // RosterMembership::Arm: the round is asked again at `at` (nullopt: never).
  void ArmReconsider(std::optional<Ms> at) {
    reconsider_at_ = at;
    if (at) w_.At(*at - w_.now(), Ev::kCoreTimer, id_, core_epoch_, kReconsider);
  }

 private:
  // Hot spares or elastic sizes: the roster places the pods (pod_rendezvous.cc).
  bool Planned() const { return w_.config().spares > 0 || w_.config().elastic(); }
  void OwnTimer(std::int64_t code);
  void OnDeadline();
  void StartRound();
  rendezvous::LeaderOptions Options();
  void MembershipOptions(rendezvous::LeaderOptions& lo);
  void NoteMember(ConnId c, const wire::Message& m);
  std::vector<std::uint32_t> FormedRanks(std::uint32_t nnodes) const;
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
  std::map<std::uint32_t, InstId> insts_;  // the members admitted, by index (NoteMember)
  std::map<ConnId, std::uint32_t> asked_;  // connections not admitted yet: the index asked
  std::set<InstId> given_;                 // by arrival: the pods whose index the trace names
  std::string leader_id_;
  std::uint64_t nonces_ = 0;
  SimRosterMembership membership_{*this};
  std::optional<Ms> reconsider_at_;  // RosterMembership's timer, armed for then
  bool deadline_armed_ = false;      // the round's deadline, until it formed
};

std::optional<std::map<std::uint32_t, std::uint32_t>> SimRosterMembership::Plan(
    const std::vector<std::uint32_t>& joined) {
  World& w = end_.world();
  auto ranks = roster().Plan(joined, T(w.now()));
  const auto at = roster().ReconsiderAt();
  end_.ArmReconsider(at ? std::optional<Ms>(std::max(MsOf(*at), w.now())) : std::nullopt);
  if (ranks) formed_ = *ranks;
  return ranks;
}

agent::Roster& SimRosterMembership::roster() const { return end_.roster(); }

// The adapter's own timers: the next generation posted, the roster's
// reconsideration, the round's deadline.
void CoreLeaderEnd::OwnTimer(std::int64_t code) {
  if (code == kPosted) {
    if (!next_pending_) return;
    next_pending_ = false;
    StartRound();
  } else if (code == kReconsider) {
    if (!reconsider_at_ || *reconsider_at_ > w_.now()) return;
    reconsider_at_.reset();
    core_->Reconsider(T(w_.now()));
    Exec();
  } else if (code == kDeadline && deadline_armed_) {
    deadline_armed_ = false;
    OnDeadline();
  }
}

// pod_rendezvous.cc OnRendezvousDeadline: with a roster the round is asked
// once more ("deadline reached": formation_policy.h); else the pod fails infra.
void CoreLeaderEnd::OnDeadline() {
  if (Planned()) {
    core_->Reconsider(T(w_.now()));
    Exec();
    if (!core_ || core_->formed() || !w_.inst(id_).alive) return;
  }
  w_.Feed(id_, gang::AgentFailed{exitcodes::Status::Infra(
                   std::string(kRdzvTimeout) + " passed: " + std::to_string(core_->admitted()) +
                   " pod(s) joined")});
}

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
  reconsider_at_.reset();
  core_.emplace(Options(), [this] {
    std::string s = "leader-nonce-" + std::to_string(w_.Tag(id_)) + "-" + std::to_string(nonces_++);
    s.resize(rendezvous::kNonceBytes, '.');
    return s;
  });
  deadline_armed_ = true;
  w_.At(round_started_ + w_.config().rdzv_timeout_ms - w_.now(), Ev::kCoreTimer, id_, core_epoch_,
        kDeadline);
  core_->Start(OwnHello(), T(w_.now()));
  Exec();
  if (core_ && bound_) {
    core_->Listening(kMasterPort, T(w_.now()));
    Exec();
  }
}

// pod_rendezvous.cc LeaderOptionsNow (what concerns the shell left out).
rendezvous::LeaderOptions CoreLeaderEnd::Options() {
  const SimConfig& cfg = w_.config();
  rendezvous::LeaderOptions lo;
  lo.nnodes = cfg.max_nodes;
  lo.master_port = kMasterPort;
  lo.run_id = w_.JobId();
  if (cfg.token) lo.token = StandInToken();
  lo.deadline = T(round_started_ + cfg.rdzv_timeout_ms);
  lo.max_pending_handshakes = std::max<std::size_t>(lo.max_pending_handshakes, cfg.max_nodes);
  lo.max_generation = Planned() ? std::nullopt : std::optional(cfg.max_restarts);
  lo.leader_id = "leader-" + std::to_string(w_.Tag(id_));
  if (Planned()) MembershipOptions(lo);
  lo.kept_ids = std::exchange(kept_ids_, {});
  for (auto it = lo.kept_ids.begin(); it != lo.kept_ids.end();) {
    const bool expected = lo.expected.empty() || lo.expected.contains(it->first);
    it = expected ? std::next(it) : lo.kept_ids.erase(it);
  }
  lo.keep_until = T(round_started_ + cfg.grace_ms + tun::kStallLimit.count());
  return lo;
}

// pod_rendezvous.cc MembershipOptions: hot spares or elastic sizes, the roster
// (its round started now, on the simulated clock) answers the core.
void CoreLeaderEnd::MembershipOptions(rendezvous::LeaderOptions& lo) {
  const SimConfig& cfg = w_.config();
  lo.nnodes = cfg.max_nodes + cfg.spares;
  lo.max_pending_handshakes = std::max<std::size_t>(lo.max_pending_handshakes, lo.nnodes);
  lo.admit_late = true;
  lo.restarts = w_.inst(id_).gang->role().restarts();
  agent::Roster* r = w_.inst(id_).gang->roster();
  if (r == nullptr) return;
  r->StartRound(T(round_started_), {.min_nodes = cfg.min_nodes,
                                    .max_nodes = cfg.max_nodes,
                                    .spares = cfg.spares,
                                    .last_call = std::chrono::milliseconds(cfg.last_call_ms),
                                    .timeout = std::chrono::milliseconds(cfg.rdzv_timeout_ms),
                                    .survivor_hold = agent::SurvivorHold(std::chrono::milliseconds(cfg.grace_ms))});
  lo.expected = r->Expected();
  // Owns nothing: the end outlives every core it makes.
  lo.membership = std::shared_ptr<rendezvous::LeaderMembership>(std::shared_ptr<void>(), &membership_);
}

// pod_rendezvous.cc MakeHelloNow, as the simulated members make theirs (core_member.cc).
wire::Hello CoreLeaderEnd::OwnHello() const {
  const Inst& me = w_.inst(id_);
  wire::Hello h = GangHello(w_, 0, ran_ ? me.gang->role().generation() + 1 : 0);
  h.restarts = me.gang->role().restarts();
  if (Planned() && ran_) h.node_rank = 0;  // the node rank it held (membership.h M16): the leader's
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
    for (const auto& m : b.messages) {
      const auto f = wire::Encode(m);
      bytes.insert(bytes.end(), f.begin(), f.end());
    }
    if (auto id = CoreConn(b.conn); id && !bytes.empty()) core_->Received(*id, bytes, T(w_.now()));
    for (const auto& m : b.messages) NoteMember(b.conn, m);
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
// own assignment (the roster adopts the plan first), its workers, then the
// control channel (StartGangChannel; pod_channel.cc OnJoin decides late pods).
void CoreLeaderEnd::OnRoundDone(const exitcodes::Result<wire::Assignment>& r) {
  Inst& me = w_.inst(id_);
  if (next_pending_) return;  // retired (Guard)
  deadline_armed_ = false;    // PodGeneration::Assign
  reconsider_at_.reset();     // RosterMembership::Cancel
  agent::Roster* roster = Planned() ? me.gang->roster() : nullptr;
  if (roster) roster->EndRound();
  if (!r.ok()) {
    w_.Feed(id_, gang::AgentFailed{r.status()});
    return;
  }
  const wire::Assignment& a = r.value();
  if (roster) roster->Adopt(a.generation);
  const std::uint32_t restarts = a.restarts.value_or(a.generation);
  w_.Record({.kind = Record::Kind::kForm, .inst = id_, .pod = 0, .generation = a.generation,
             .world = a.nnodes, .restarts = restarts, .ranks = FormedRanks(a.nnodes)});
  ran_ = true;
  const std::uint32_t epoch = core_epoch_;
  TakeAssignment(w_, id_, a, 0, restarts);
  if (!me.alive || !core_ || core_epoch_ != epoch || next_pending_) return;
  core_->StartChannel(
      [this, epoch](std::uint32_t index) {
        if (next_pending_ || core_epoch_ != epoch || !w_.inst(id_).alive) return false;
        return w_.Feed(id_, gang::Joined{.index = index}).joins_as_spare;
      },
      tun::kHeartbeatInterval, tun::kHeartbeatMisses, T(w_.now()));
  Exec();
}

// The round's pods by node rank: the roster's plan, or every index.
std::vector<std::uint32_t> CoreLeaderEnd::FormedRanks(std::uint32_t nnodes) const {
  std::vector<std::uint32_t> ranks(nnodes);
  for (std::uint32_t k = 0; k < nnodes; ++k) ranks[k] = k;
  if (!Planned()) return ranks;
  for (const auto& [key, rank] : membership_.formed()) {
    if (rank < nnodes) ranks[rank] = key;
  }
  return ranks;
}

// Which instance holds which index, for the trace's lost records: the core's
// members (their instance ids, "inst-N") once a hello (and, with a token, its
// proof) went in. Ranks by arrival: the index the core gave a pod without one
// (a kJoin record).
void CoreLeaderEnd::NoteMember(ConnId c, const wire::Message& m) {
  if (const auto* h = std::get_if<wire::Hello>(&m)) asked_[c] = h->index;
  const auto asked = asked_.find(c);
  if (asked == asked_.end() || !core_) return;
  const InstId member = w_.conn(c).member;
  const std::string want = "inst-" + std::to_string(member);
  for (const auto& [index, instance] : core_->instance_ids()) {
    if (instance != want) continue;
    insts_[index] = member;
    // Ranks by arrival: the index it asked for (none, or one a Reject gave it) is its own now.
    const Inst& pod = w_.inst(member);
    const bool arrival = w_.config().by_arrival && pod.key != 0 && !pod.stranger;
    if (arrival && (asked->second == wire::kNoIndex || !given_.contains(member))) {
      w_.Record({.kind = Record::Kind::kJoin, .inst = member, .pod = index, .what = "index by arrival"});
    }
    given_.insert(member);
    asked_.erase(asked);
    return;
  }
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
    wire::Stop stop = *a.broadcast;
    if (stop.restart) kept_ids_ = core_->instance_ids();
    // pod_channel.cc WithReplacement: the spare the roster gives the failed pod's node rank.
    if (stop.restart && Planned()) stop.replacement = roster().PlannedReplacement(stop.failed_index);
    core_->BroadcastStop(stop);
    core_->StopAdmitting();
    Exec();
    if (a.broadcast->restart) bound_ = true;  // ListenAhead: the next round's listener
  }
  if (a.stop_workers) w_.StopWorkers(id_);
  if (a.arm_settle_timer) w_.At(tun::kLeaveSettle.count(), Ev::kSettle, id_, me.timer_epoch);
  if (a.restart) {  // PostNextGeneration: after this handler, the next round
    ++me.timer_epoch;
    next_pending_ = true;
    w_.At(0, Ev::kCoreTimer, id_, core_epoch_, kPosted);
  }
  // The pod exits (its sockets close with it; this may run inside a core call: on_join).
  if (a.conclude) w_.Exit(id_, ExitCodeOf(*a.conclude), ExitWhyOf(*a.conclude));
}

}  // namespace

void SetLeaderEndKind(LeaderEndKind kind) { g_kind = kind; }
LeaderEndKind GetLeaderEndKind() { return g_kind; }

bool CoreLeads(const SimConfig& c) {
  if (g_kind == LeaderEndKind::kCoreRoster) return true;
  return g_kind == LeaderEndKind::kCore && c.spares == 0 && !c.elastic();
}

std::unique_ptr<SimLeaderEnd> MakeCoreLeaderEnd(World& w, std::uint32_t inst) {
  return std::make_unique<CoreLeaderEnd>(w, inst);
}

std::unique_ptr<SimLeaderEnd> MakeSimLeaderEnd(World& w, std::uint32_t inst) {
  RouteCoreLog(w);
  return CoreLeads(w.config()) ? MakeCoreLeaderEnd(w, inst) : MakeLeaderEnd(w, inst);
}

}  // namespace trainlet::sim
