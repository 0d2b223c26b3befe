#include "standin.h"

#include <algorithm>
#include <chrono>

#include "trainlet/agent/pod/formation_policy.h"
#include "trainlet/agent/pod/membership_policy.h"
#include "roster_form.h"
#include "trainlet/exitcodes/exit_code.h"
#include "trainlet/rendezvous/admission.h"
#include "trainlet/rendezvous/auth.h"
#include "trainlet/rendezvous/tunables.h"
#include "core_leader.h"
#include "world.h"

namespace trainlet::sim {

namespace wire = rendezvous::wire;
namespace tun = rendezvous::tunables;
namespace gang = agent::gang;
using invariants::Record;

constexpr const char* kToken = "the-token";
const char* StandInToken() { return kToken; }

int ExitCodeOf(const agent::Conclusion& c) {
  using K = agent::Conclusion::Kind;
  using exitcodes::FailureClass;
  switch (c.kind) {
    case K::kOk: return 0;
    case K::kTerminated: return 143;
    case K::kPeerFailed: return 76;
    case K::kStall: return exitcodes::DefaultExitCode(FailureClass::kInfra);
    case K::kOwn:
      if (c.failure_class == FailureClass::kWorker) return 1;  // the worker's own code
      return exitcodes::DefaultExitCode(c.failure_class);
    case K::kAgent: return exitcodes::DefaultExitCode(c.failure_class);
  }
  return 1;
}

// "rdzv_timeout" for a round that ran out of time (the trace's exit reason), else "".
std::string ExitWhyOf(const agent::Conclusion& c) {
  return c.kind == agent::Conclusion::Kind::kAgent && c.reason.rfind(kRdzvTimeout, 0) == 0 ? kRdzvTimeout : "";
}

wire::Hello GangHello(const World& w, std::uint32_t index, std::uint32_t generation) {
  // Ranks by arrival (launch.h RanksByArrival), read by the core leader (the stand-in numbers
  // pods itself and reads no configuration).
  wire::LaunchConfig config;
  if (w.config().by_arrival && CoreLeads(w.config())) config.emplace_back("ranks", "arrival");
  return wire::Hello{.job_id = w.JobId(),
                     .attempt = 0,
                     .index = index,
                     .nproc_per_node = w.config().workers,
                     .fingerprint = wire::Fingerprint(config),
                     .config = config,
                     .nonce = "",
                     .generation = generation};
}

void TakeAssignment(World& w, InstId id, const wire::Assignment& a, std::uint32_t key,
                    std::uint32_t restarts) {
  w.Record({.kind = Record::Kind::kGen, .inst = id, .pod = key, .generation = a.generation,
            .rank = a.spare ? invariants::kSpareRank : a.node_rank.value_or(key),
            .world = a.nnodes, .restarts = restarts});
  w.Feed(id, gang::Assigned{.generation = a.generation, .spare = a.spare, .nnodes = a.nnodes,
                            .restarts = restarts});
  if (!a.spare && w.inst(id).alive) w.StartWorkers(id);
}

namespace {

std::string InstanceId(InstId i) { return "inst-" + std::to_string(i); }

// The nonces of the stand-ins' hellos and challenges (auth.h's proofs over them).
constexpr const char* kMemberNonce = "member-nonce";
constexpr const char* kLeaderNonce = "leader-nonce";

// ---- The member's end ----

class StandInMemberEnd final : public SimMemberEnd {
 public:
  StandInMemberEnd(World& w, InstId id) : w_(w), id_(id) {}

  void Join() override {
    Inst& me = w_.inst(id_);
    joining_ = true;
    ++me.timer_epoch;
    backoff_ = tun::kRejoinBackoffInitial.count();
    if (ran_) w_.Record({.kind = Record::Kind::kJoin, .inst = id_, .pod = Key()});
    w_.At(w_.config().rdzv_timeout_ms, Ev::kDeadline, id_, me.timer_epoch);
    w_.Connect(id_);
  }

  void OnRefused() override {
    if (!joining_) return;
    const Ms wait = backoff_ + static_cast<Ms>(w_.Draw(8, w_.Tag(id_), retries_++) %
                                               static_cast<std::uint64_t>(backoff_ + 1));
    backoff_ = std::min<Ms>(backoff_ * 2, 1000);
    w_.At(wait, Ev::kConnect, id_, w_.inst(id_).timer_epoch, 0);
  }

  void OnConnected(ConnId c) override {
    conn_ = c;
    const Inst& me = w_.inst(id_);
    wire::Hello h = GangHello(w_, Key(), ran_ ? me.gang->role().generation() + 1 : 0);
    if (w_.config().token) h.nonce = kMemberNonce;
    h.restarts = me.gang->role().restarts();  // every mode (pod.cc MakeHelloNow)
    h.instance_id = InstanceId(id_);
    // A stranger: a pod of the previous attempt, or (with a token) one without it.
    if (me.stranger && !w_.config().token) h.attempt = 1;
    w_.Send(c, 0, h);
  }

  void OnMessage(ConnId c, const wire::Message& m) override {
    if (c != conn_) return;
    Inst& me = w_.inst(id_);
    if (std::holds_alternative<wire::Challenge>(m)) {
      w_.Send(c, 0, wire::Proof{.proof = rendezvous::MemberProof(me.stranger ? "a-wrong-token" : kToken, w_.JobId(), kLeaderNonce, kMemberNonce)});
    } else if (const auto* a = std::get_if<wire::Assignment>(&m)) {
      OnAssignment(*a);
    } else if (const auto* r = std::get_if<wire::Reject>(&m)) {
      OnReject(*r);
    } else if (const auto* s = std::get_if<wire::Stop>(&m)) {
      w_.Feed(id_, gang::Stop{*s});
    }
  }

  void OnClosed(ConnId c, bool silent) override {
    if (c != conn_) return;
    conn_ = 0;
    if (joining_) {
      OnRefused();
      return;
    }
    w_.Feed(id_, gang::Lost{0, silent ? "no heartbeat" : "connection closed"});
  }

  void OnGang(const agent::GangActions& a) override {
    Inst& me = w_.inst(id_);
    if (a.report) {
      if (a.report->leaving) w_.Record({.kind = Record::Kind::kLeave, .inst = id_, .pod = Key()});
      if (conn_ != 0) w_.Send(conn_, 0, *a.report);
      if (a.report->ok) w_.At(1, Ev::kReportSent, id_);
    }
    if (a.stop_workers) w_.StopWorkers(id_);
    if (a.arm_verdict_timer) w_.At(tun::kVerdictTimeout.count(), Ev::kVerdict, id_, me.timer_epoch);
    if (a.restart) {
      if (conn_ != 0) w_.Close(conn_, 1);
      conn_ = 0;
      Join();
    }
    if (a.conclude) w_.Exit(id_, ExitCodeOf(*a.conclude), ExitWhyOf(*a.conclude));
  }

 private:
  void OnAssignment(const wire::Assignment& a) {
    Inst& me = w_.inst(id_);
    if (!joining_) return;
    joining_ = false;
    ++me.timer_epoch;  // the round's deadline is over
    ran_ = true;
    const std::uint32_t restarts = a.restarts.value_or(a.generation);
    if (a.index) Adopt(*a.index);  // ranks by arrival: the index the leader gave it
    TakeAssignment(w_, id_, a, Key(), restarts);
  }

  // Ranks by arrival (launch.h): this pod's index once the leader gave it one.
  std::uint32_t Key() const {
    const Inst& me = w_.inst(id_);
    if (!w_.config().by_arrival || me.key == 0 || me.stranger) return me.key;
    return index_.value_or(wire::kNoIndex);
  }
  void Adopt(std::uint32_t index) {
    if (index_ == index) return;
    index_ = index;
    w_.inst(id_).gang->AdoptIndex(index);
  }

  void OnReject(const wire::Reject& r) {
    if (r.index) Adopt(*r.index);  // the next generation's index (field next_generation)
    w_.Close(conn_, 1);
    conn_ = 0;
    w_.Note("inst " + std::to_string(id_) + " refused: " + r.field + ": " + r.reason);
    if (r.retriable) {
      OnRefused();
      return;
    }
    const bool infra = r.field == wire::kReplacedField || r.field == wire::kLeftField ||
                       r.field == "generation";
    w_.Feed(id_, gang::AgentFailed{infra ? exitcodes::Status::Infra("rendezvous: " + r.reason)
                                         : exitcodes::Status::Config("rendezvous: " + r.reason)});
  }

  World& w_;
  InstId id_;
  ConnId conn_ = 0;
  bool joining_ = false;
  bool ran_ = false;
  std::optional<std::uint32_t> index_;  // ranks by arrival
  std::uint64_t retries_ = 0;
  Ms backoff_ = tun::kRejoinBackoffInitial.count();
};

// ---- The leader's end ----

class StandInLeaderEnd final : public SimLeaderEnd {
 public:
  StandInLeaderEnd(World& w, InstId id) : w_(w), id_(id), started_(w.now()) {}
  bool Bound() const override { return listening_ && w_.inst(id_).alive; }

  void Listen() override {
    listening_ = true;
    StartRound();
  }

  void OnAccepted(ConnId c) override { hellos_[c] = std::nullopt; }

  void OnMessage(ConnId c, const wire::Message& m) override {
    if (const auto* h = std::get_if<wire::Hello>(&m)) {
      hellos_[c] = *h;
      if (w_.config().token) {
        w_.Send(c, 1, wire::Challenge{.nonce = kLeaderNonce, .proof = rendezvous::LeaderProof(kToken, w_.JobId(), h->nonce, kLeaderNonce)});
      } else {
        Admit(c, *h);
      }
    } else if (const auto* p = std::get_if<wire::Proof>(&m)) {
      const auto h = hellos_[c];
      if (!h) return;
      if (!rendezvous::ProofsEqual(p->proof, rendezvous::MemberProof(kToken, w_.JobId(), kLeaderNonce, h->nonce))) {
        Refuse(c, wire::Reject{.field = "token", .reason = "the proof does not match the token"});
        return;
      }
      Admit(c, *h);
    } else if (const auto* r = std::get_if<wire::Report>(&m)) {
      OnReport(c, *r);
    }
  }

  void OnClosed(ConnId c, bool silent) override {
    hellos_.erase(c);
    if (EraseConn(round_, c)) Decide();
    EraseConn(next_, c);
    for (auto it = members_.begin(); it != members_.end(); ++it) {
      if (it->second != c) continue;
      const std::uint32_t key = it->first;
      members_.erase(it);
      if (!in_round_) {
        w_.Feed(id_, gang::Lost{key, silent ? "no heartbeat" : "connection closed"});
      }
      return;
    }
  }

  void OnRoundTimer() override { Decide(); }

  void OnGang(const agent::GangActions& a) override {
    Inst& me = w_.inst(id_);
    for (std::uint32_t k : a.lost) {
      // A waiting spare (no node rank) lost: refused if it comes back (admission.h rule 8).
      if (auto it = roster_.find(k); it != roster_.end() && !it->second.node_rank) lost_spare_[k] = generation_;
      roster_[k].key = k;
      roster_[k].lost = true;
      if (auto it = insts_.find(k); it != insts_.end()) {
        w_.Record({.kind = Record::Kind::kLost, .inst = it->second, .pod = k});
      }
    }
    for (std::uint32_t k : a.leaving) {
      if (auto it = insts_.find(k); it != insts_.end()) {
        w_.Record({.kind = Record::Kind::kLost, .inst = it->second, .pod = k, .what = "leaving"});
      }
      roster_[k].key = k;
      roster_[k].must_leave = true;
    }
    if (a.broadcast) {
      for (const auto& [key, c] : members_) w_.Send(c, 1, *a.broadcast);
    }
    if (a.stop_workers) w_.StopWorkers(id_);
    if (a.arm_settle_timer) w_.At(tun::kLeaveSettle.count(), Ev::kSettle, id_, me.timer_epoch);
    if (a.restart) {
      for (const auto& [key, c] : members_) w_.Close(c, 0);
      members_.clear();
      StartRound();
    }
    if (a.conclude) w_.Exit(id_, ExitCodeOf(*a.conclude), ExitWhyOf(*a.conclude));
  }

 private:
  static bool EraseConn(std::map<std::uint32_t, ConnId>& m, ConnId c) {
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (it->second == c) {
        m.erase(it);
        return true;
      }
    }
    return false;
  }

  agent::FormationConfig Formation() const {
    const SimConfig& c = w_.config();
    return {.min_nodes = c.min_nodes,
            .max_nodes = c.max_nodes,
            .spares = c.spares,
            .last_call = std::chrono::milliseconds(c.last_call_ms),
            .timeout = std::chrono::milliseconds(c.rdzv_timeout_ms),
            .survivor_hold = agent::SurvivorHold(std::chrono::milliseconds(c.grace_ms))};
  }

  // A fixed gang without spares waits for every index (no roster: pod.cc uses
  // it only with spares or elastic sizes); else the membership policy places pods.
  bool ByArrival(std::uint32_t key) const { return w_.config().by_arrival && key != 0; }
  bool Planned() const { return w_.config().spares > 0 || w_.config().elastic(); }

  std::uint32_t OwnAsk() const {
    return ran_ ? w_.inst(id_).gang->role().generation() + 1 : 0;
  }

  void StartRound() {
    Inst& me = w_.inst(id_);
    in_round_ = true;
    // The first round's deadline runs from the agent's start, binding included (pod.cc).
    round_start_ = ran_ ? w_.now() : started_;
    min_at_.reset();
    round_ = std::move(next_);
    next_.clear();
    ++me.timer_epoch;
    expected_.clear();
    kept_.clear();
    if (ran_) {
      w_.Record({.kind = Record::Kind::kJoin, .inst = id_, .pod = me.key});
      for (const auto& [key, s] : roster_) {
        if (s.lost || s.must_leave) continue;
        expected_.insert(key);
        if (auto it = ids_.find(key); it != ids_.end()) kept_[key] = it->second;
      }
      expected_.insert(0);
    }
    Decide();
  }

  std::optional<rendezvous::IndexHolder> HolderOf(std::uint32_t key) const {
    for (const auto* m : {&members_, &round_, &next_}) {
      auto it = m->find(key);
      if (it == m->end()) continue;
      const Conn& k = w_.conn(it->second);
      return rendezvous::IndexHolder{.peer = "pod-" + std::to_string(key),
                                     .live = k.open[0] && k.silence == 0,
                                     .job_name = "",
                                     .job_restart_attempt = std::nullopt,
                                     .instance_id = ids_.count(key) ? ids_.at(key) : ""};
    }
    return std::nullopt;
  }

  // Ranks by arrival: the lowest index of 1..MAX-1 nobody holds and not kept for a pod expected
  // back (admission.h LowestFreeIndex).
  std::optional<std::uint32_t> FreeIndex() const {
    std::set<std::uint32_t> reserved = expected_;
    for (const auto& [key, c] : next_) reserved.insert(key);
    return rendezvous::LowestFreeIndex(
        w_.config().max_nodes, [this](std::uint32_t k) { return HolderOf(k).has_value(); }, reserved);
  }

  void Refuse(ConnId c, const wire::Reject& r) {
    w_.Send(c, 1, r);
    w_.Close(c, 0);
    hellos_.erase(c);
  }

  void Admit(ConnId c, const wire::Hello& h) {
    const wire::Hello own = GangHello(w_, 0, in_round_ ? OwnAsk() : generation_ + 1);
    const std::string leader_id = "leader";
    const std::uint32_t claimed = h.index;
    const auto kept = kept_.find(claimed);
    const rendezvous::AdmissionState st{
        .own = own,
        .nnodes = w_.config().max_nodes + w_.config().spares,
        .max_generation = w_.config().elastic() || w_.config().spares > 0 ? std::nullopt  // pod.cc
                                                : std::optional<std::uint32_t>(w_.config().max_restarts),
        .leader_id = leader_id,
        .job_attempts = job_attempts_,
        .holder = HolderOf(claimed),
        .replaced = replaced_.count(claimed) ? std::optional(replaced_.at(claimed)) : std::nullopt,
        .left = left_.count(claimed) ? std::optional(left_.at(claimed)) : std::nullopt,
        .lost_spare = lost_spare_.count(claimed) ? std::optional(lost_spare_.at(claimed)) : std::nullopt,
        .free_index = h.index == wire::kNoIndex ? FreeIndex() : std::nullopt,
        .token = w_.config().token,
        .kept_id = kept != kept_.end() ? kept->second : "",
        .peer = "pod-" + std::to_string(claimed),
        .address = "pod-" + std::to_string(claimed),
        .local = "leader"};
    const rendezvous::Admission ad = rendezvous::Admit(st, h);
    if (ad.verdict != rendezvous::Admission::Verdict::kAdmit) {
      Refuse(c, ad.reject);
      return;
    }
    const std::uint32_t key = ad.index;  // its hello's, or by arrival the lowest free one
    if (h.index == wire::kNoIndex) {
      w_.Record({.kind = Record::Kind::kJoin, .inst = w_.conn(c).member, .pod = key,
                 .what = "index by arrival"});
    }
    if (ad.replace_holder) {
      for (auto* m : {&members_, &round_, &next_}) {
        if (auto it = m->find(key); it != m->end()) {
          const ConnId old = it->second;
          m->erase(it);
          w_.Close(old, 0);
        }
      }
    }
    ids_[key] = h.instance_id;
    insts_[key] = w_.conn(c).member;
    lost_spare_.erase(key);  // roster.h LostSpareIn: none since it was last admitted
    if (h.generation == 0) {  // a recreated pod starts over, with no node rank (roster.h AddJoined)
      if (auto it = roster_.find(key); it != roster_.end() && (it->second.lost || it->second.must_leave)) {
        it->second = agent::MemberState{.key = key};
      }
    }
    kept_.erase(key);
    w_.Note("leader admits pod " + std::to_string(key) + " asking generation " +
            std::to_string(h.generation) + (in_round_ ? " to the round" : " while a generation runs"));
    if (in_round_) {
      round_[key] = c;
      Decide();
      return;
    }
    next_[key] = c;
    if (h.generation > generation_) return;  // a survivor back early for the next generation
    w_.Feed(id_, gang::Joined{key});  // admitted while the generation runs (membership.h M13)
    const agent::Membership* m = w_.inst(id_).gang->membership();
    if (!w_.inst(id_).alive || m == nullptr || !m->spares().contains(key) || in_round_) return;
    next_.erase(key);
    members_[key] = c;
    roster_[key] = agent::MemberState{.key = key};
    const std::uint32_t restarts = w_.inst(id_).gang->role().restarts();
    w_.Send(c, 1, wire::Assignment{.generation = generation_, .nnodes = active_,
                                   .world_size = active_ * w_.config().workers,
                                   .master_addr = "pod-0", .master_port = 29500,
                                   .run_id = "run", .job_id = w_.JobId(),
                                   .spare = true, .restarts = restarts,
                                   .index = ByArrival(key) ? std::optional(key) : std::nullopt});
  }

  void OnReport(ConnId c, const wire::Report& r) {
    const std::uint32_t key = r.index;
    if (r.leaving) {
      if (auto it = round_.find(key); it != round_.end() && it->second == c) {
        round_.erase(it);  // it leaves while it waits in the round: no need to wait for it
        roster_[key].key = key;
        roster_[key].must_leave = true;
        expected_.erase(key);
        Decide();
        return;
      }
      if (auto it = next_.find(key); it != next_.end() && it->second == c) {
        next_.erase(it);
        return;
      }
    }
    if (auto it = members_.find(key); it != members_.end() && it->second == c) {
      w_.Feed(id_, gang::Report{key, r});
    }
  }

  void Decide() {
    if (!in_round_ || !w_.inst(id_).alive) return;
    const agent::FormationConfig fc = Formation();
    agent::RoundState rs;
    rs.first = !ran_;
    rs.joined = 1;
    for (const auto& [key, c] : round_) {
      const auto it = roster_.find(key);
      if (!Planned() || it == roster_.end() || (!it->second.lost && !it->second.must_leave)) ++rs.joined;
    }
    rs.alive = static_cast<std::uint32_t>(expected_.size());
    for (std::uint32_t key : expected_) rs.alive_back += key == 0 || round_.contains(key) ? 1 : 0;
    using Clock = std::chrono::steady_clock;
    const Clock::time_point now{std::chrono::milliseconds(w_.now())};
    min_at_ = agent::MinReachedAt(min_at_, rs.joined, fc, now);
    if (min_at_) rs.since_min = std::chrono::duration_cast<std::chrono::milliseconds>(now - *min_at_);
    rs.since_start = std::chrono::milliseconds(w_.now() - round_start_);
    const agent::FormationDecision d = agent::DecideFormation(rs, fc);
    w_.Note("leader's round: " + std::to_string(rs.joined) + " joined, " + std::to_string(rs.alive_back) +
            " of " + std::to_string(rs.alive) + " alive back: " + d.why);
    if (d.kind == agent::FormationDecision::Kind::kForm && Form()) return;
    if (d.kind == agent::FormationDecision::Kind::kGiveUp) {
      in_round_ = false;
      w_.Feed(id_, gang::AgentFailed{exitcodes::Status::Infra(std::string(kRdzvTimeout) + ": " + d.why)});
      return;
    }
    w_.At(std::max<Ms>(d.recheck_after.count(), 10), Ev::kRound, id_, w_.inst(id_).timer_epoch);
  }

  // The plan's input: the leader, the round's pods with the ranks they held (and
  // whether the roster lost them or told them to leave), and the roster's pods
  // missing from the round, as lost.
  std::vector<agent::MemberState> PlanStates() const {
    std::vector<agent::MemberState> states;
    auto last_rank = [&](std::uint32_t key) -> std::optional<std::uint32_t> {
      auto it = roster_.find(key);
      return it != roster_.end() ? it->second.node_rank : std::nullopt;
    };
    states.push_back({.key = 0, .node_rank = last_rank(0)});
    for (const auto& [key, c] : round_) {
      const auto it = roster_.find(key);
      const bool out = Planned() && it != roster_.end() && (it->second.lost || it->second.must_leave);
      states.push_back({.key = key, .node_rank = last_rank(key), .lost = out && it->second.lost,
                        .must_leave = out && it->second.must_leave});
    }
    for (const auto& [key, s] : roster_) {
      if (Planned() && key != 0 && !round_.contains(key)) {
        states.push_back({.key = key, .node_rank = s.node_rank, .lost = true});
      }
    }
    return states;
  }

  bool Form() {
    Inst& me = w_.inst(id_);
    const agent::GenerationPlan plan =
        agent::PlanGeneration(PlanStates(), {.min_nodes = w_.config().min_nodes, .max_nodes = w_.config().max_nodes});
    if (!plan.ready) return false;
    // As the real leader (leader.cc RoundGeneration, RoundRestarts): the highest generation
    // asked; with spares or elastic sizes the restarts counted, which a replaced leader (its
    // own generation 0) takes from its members' hellos (membership.h M15); else the generation.
    const std::uint32_t own = OwnAsk();
    std::uint32_t g = own;
    std::optional<std::uint32_t> counted;
    if (w_.config().spares > 0 || w_.config().elastic()) counted = me.gang->role().restarts();
    for (const auto& [key, c] : round_) {
      const auto& h = hellos_[c];
      if (!h) continue;
      g = std::max(g, h->generation);
      if (counted && own == 0 && h->restarts) counted = std::max(*counted, *h->restarts);
    }
    const std::uint32_t restarts = counted.value_or(g);
    const auto nnodes = static_cast<std::uint32_t>(plan.active.size());
    w_.Record({.kind = Record::Kind::kForm, .inst = id_, .pod = 0, .generation = g,
               .world = nnodes, .restarts = restarts, .ranks = plan.active});
    const std::set<std::uint32_t> waiting(plan.waiting.begin(), plan.waiting.end());
    std::map<std::uint32_t, agent::MemberState> roster;
    for (std::uint32_t r = 0; r < nnodes; ++r) roster[plan.active[r]] = {.key = plan.active[r], .node_rank = r};
    for (std::uint32_t k : waiting) roster[k] = {.key = k};
    for (const auto& [old, spare] : plan.replaced) {
      replaced_[old] = wire::Replaced{.spare = spare, .node_rank = *plan.NodeRankOf(spare), .generation = g};
    }
    for (const auto& [key, s] : roster_) {
      if (s.lost && s.node_rank && !roster.contains(key) && w_.config().elastic()) left_[key] = g;
    }
    roster_ = std::move(roster);
    members_.clear();
    for (const auto& [key, c] : round_) {
      const auto rank = plan.NodeRankOf(key);
      if (!rank && !waiting.contains(key)) {
        Refuse(c, wire::Reject{.field = wire::kLeftField, .reason = "not in the generation's plan"});
        continue;
      }
      members_[key] = c;
      w_.Send(c, 1, wire::Assignment{.generation = g, .nnodes = nnodes,
                                     .world_size = nnodes * w_.config().workers,
                                     .rank_base = rank.value_or(0) * w_.config().workers,
                                     .master_addr = "pod-0", .master_port = 29500,
                                     .run_id = "run", .job_id = w_.JobId(),
                                     .node_rank = rank, .spare = !rank.has_value(),
                                     .restarts = counted,
                                     .index = ByArrival(key) ? std::optional(key) : std::nullopt});
    }
    round_.clear();
    kept_.clear();  // the round's (leader.h kept_ids): it formed
    in_round_ = false;
    ran_ = true;
    generation_ = g;
    active_ = nnodes;
    ++me.timer_epoch;
    w_.Record({.kind = Record::Kind::kGen, .inst = id_, .pod = 0, .generation = g, .rank = 0,
               .world = nnodes, .restarts = restarts});
    // The real leader adopts the plan on the roster its membership machine
    // holds, before Formed takes the waiting spares from there (membership.h);
    // the stand-in plans on its own roster_ and gives the machine's the same state.
    if (agent::Roster* r = me.gang->roster()) agent::roster_testing::FormRoster(*r, plan.active, waiting, g);
    w_.Feed(id_, gang::Assigned{.generation = g, .spare = false, .nnodes = nnodes, .restarts = restarts});
    if (me.alive && !me.gang->role().concluded()) w_.StartWorkers(id_);
    return true;
  }

  World& w_;
  InstId id_;
  Ms started_;
  bool listening_ = false;
  bool in_round_ = false;
  bool ran_ = false;
  Ms round_start_ = 0;
  std::optional<std::chrono::steady_clock::time_point> min_at_;
  std::map<ConnId, std::optional<wire::Hello>> hellos_;
  std::map<std::uint32_t, ConnId> round_;    // admitted to the round being formed
  std::map<std::uint32_t, ConnId> members_;  // the running generation's members (and spares)
  std::map<std::uint32_t, ConnId> next_;     // admitted while a generation runs, for the next
  std::map<std::uint32_t, InstId> insts_;    // key -> the instance admitted last
  std::set<std::uint32_t> expected_;
  std::map<std::uint32_t, agent::MemberState> roster_;
  std::map<std::uint32_t, std::uint32_t> left_, lost_spare_;
  std::map<std::uint32_t, wire::Replaced> replaced_;
  std::map<std::uint32_t, std::string> ids_, kept_;
  std::map<std::string, std::uint32_t> job_attempts_;
  std::uint32_t generation_ = 0;
  std::uint32_t active_ = 0;
};

}  // namespace

std::unique_ptr<SimMemberEnd> MakeMemberEnd(World& w, std::uint32_t inst) {
  return std::make_unique<StandInMemberEnd>(w, inst);
}
std::unique_ptr<SimLeaderEnd> MakeLeaderEnd(World& w, std::uint32_t inst) {
  return std::make_unique<StandInLeaderEnd>(w, inst);
}

}  // namespace trainlet::sim
