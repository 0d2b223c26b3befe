// Property test of GangPolicy: 2-5 simulated pods (the policy of each, with
// FIFO links between the leader and every member, workers, timers) driven
// through random interleavings of their events and faults (worker failures of
// every class, SIGTERM to one pod or to all, an agent SIGKILL, a frozen pod),
// deterministic per seed. Checked after every run:
//   - every run ends (each pod exits, bounded steps);
//   - a gang that ends in a failure has exactly one pod with a counted exit
//     (not ok, peer_failed or terminated), unless a stop signal was involved
//     (then at most one); policy conclusions are never counted twice;
//   - bug (42) and config (78) only on the pod whose own worker failed so;
//   - 143 for every pod that got SIGTERM before any fault of its generation or
//     while its gang restarted;
//   - no restart after a stop signal, nor for bug, config, hardware, terminated;
//   - the generation never exceeds --max-restarts.
// Elastic gangs (--nnodes MIN:MAX, torchrun's meaning) add Joined events: a
// pod not in the gang starts while a generation runs (the gang grows below
// MAX, the pod waits as a spare at MAX); who is active on which node rank is
// PlanGeneration's (membership_policy.h), and a pod the leader declared lost
// that comes back is refused (admission rule 8: it exits infra). Checked at
// every generation: no two pods on one rank, ranks dense (0..size-1), MIN <=
// size <= MAX with pod 0 on rank 0, no pod the leader declared lost in the
// active set, and a generation that followed only joins keeps the restart
// count (joins never count as restarts); restarts never exceed --max-restarts.
// Graceful leaves (membership.h M7-M11): SIGTERM to a member is a leave the
// leader decides after its settle window (a timer the run fires at random),
// to the leader itself a leave too. Checked at every generation (issue
// "the same numbers on every pod"): every pod that joins it counts the same
// restarts as the leader's assignment before it hears it (a member's own
// count after a restart, a resize or a leave agrees with the leader's), no
// pod the leader was told leaves or declared lost is active, and the
// generation only grows. Where these checks are the contract's (ranks, the
// leader's plan, lost and leaving pods, restarts and generations), they are
// made by the one checker the simulator and the soak use too
// (tests/invariants/invariants.h), fed as the run goes.
#include "invariants.h"
#include "roster_form.h"
#include "trainlet/agent/pod/gang_policy.h"
#include "trainlet/agent/pod/membership_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <csignal>
#include <cstdio>
#include <deque>
#include <functional>
#include <random>

namespace trainlet::agent {
namespace {

using exitcodes::FailureClass;
using Kind = Conclusion::Kind;
namespace wire = rendezvous::wire;

struct Close {};
using Msg = std::variant<wire::Stop, wire::Report, Close>;

enum class Workers { kNone, kRunning, kStopping, kExited };
enum class Plan { kSucceed, kFail, kLive };

struct Pod {
  std::unique_ptr<GangPolicy> policy;
  bool alive = true;       // the agent process exists
  bool exited = false;     // concluded or killed
  int code = -1;           // exit class of the conclusion (or 137 for a kill)
  std::optional<Conclusion> conclusion;
  bool joining = true;
  std::uint32_t join_generation = 0;
  Workers workers = Workers::kNone;
  Plan plan = Plan::kLive;
  FailureClass fail_class = FailureClass::kWorker;
  bool frozen = false;
  bool detected = false;   // a peer noticed the freeze
  bool retired = false;    // elastic: gone from the gang (never started, or left behind)
  bool ran = false;        // this agent process was assigned a generation (not a fresh one)
  std::uint32_t inst = 0;  // this agent process, for the contract checker
  bool spare = false;      // waits as a spare in this generation
  bool verdict_timer = false;
  bool settle_timer = false;  // leader: the leaves' settle window (membership.h M7)
  bool report_sending = false;
  std::deque<GangEvent> resumed;  // what the wiring delivers first after a freeze
  // Facts for the invariants.
  bool got_sigterm = false;
  bool expect_terminated = false;
  std::optional<FailureClass> own_fired;  // class of its own worker failure this generation
  std::set<FailureClass> own_classes;     // every class its own workers failed with
  bool may_restart = false;               // a restart is allowed by what it was told
  bool heard = false;                     // knows of a failure in this generation
};

struct Sim {
  explicit Sim(std::uint64_t seed) : rng(seed) {}
  std::mt19937_64 rng;
  int n = 0;
  std::uint32_t max_restarts = 0;
  std::vector<Pod> pods;
  std::map<std::pair<int, int>, std::deque<Msg>> links;  // (from, to)
  std::uint32_t generation = 0;
  int faults_in_gen = 0;
  bool culprit_in_gen = false;
  int culprit_faults_left = 1;  // at most one kill or freeze per run
  int replacements_left = 8;
  bool any_sigterm = false;
  int steps = 0;
  // Elastic (--nnodes MIN:MAX): slots n = MAX + 1; the last generation's node
  // ranks, the pods the leader declared lost in it, the restarts counted.
  bool elastic = false;
  std::uint32_t min_nodes = 0, max_nodes = 0;
  std::map<int, std::uint32_t> rank_of;
  std::set<int> declared_lost;
  std::set<int> declared_leaving;  // the leader's word: it leaves (a leave, or its hardware)
  std::uint32_t restarts = 0;
  bool joined_in_gen = false;
  // Coverage: joins that grew the gang, joins that waited as a spare, pods
  // refused after they were declared lost, generations that changed size,
  // leaves decided without a restart, leaves that stopped the gang.
  std::array<int, 6> stats{};
  std::vector<std::string> violations;
  std::string trace;
  // The contract's checks (tests/invariants), elastic runs: set by InitElastic.
  std::optional<invariants::Checker> checker;
  std::uint32_t next_inst = 0;
  void Record(invariants::Record r) {
    if (checker) checker->On(r);
  }

  int Rand(int k) { return static_cast<int>(rng() % static_cast<std::uint64_t>(k)); }
  bool Coin(int percent) { return Rand(100) < percent; }

  void Violation(const std::string& what) { violations.push_back(what); }

  void NewPod(int i) {
    Pod p;
    p.policy = std::make_unique<GangPolicy>(
        GangConfig{.index = static_cast<std::uint32_t>(i),
                   .nnodes = elastic ? max_nodes : static_cast<std::uint32_t>(n),
                   .max_restarts = max_restarts,
                   .hang_signal = SIGUSR1,
                   .min_nodes = elastic ? min_nodes : 0});
    p.inst = next_inst++;
    pods[i] = std::move(p);
    Record({.kind = invariants::Record::Kind::kStart, .inst = pods[i].inst,
            .pod = static_cast<std::uint32_t>(i)});
    declared_lost.erase(i);  // a recreated pod asks for generation 0: admitted
    declared_leaving.erase(i);
  }

  void PlanWorkers(Pod& p) {
    int r = Rand(10);
    p.plan = r < 3 ? Plan::kSucceed : r < 6 ? Plan::kFail : Plan::kLive;
    static const FailureClass classes[] = {FailureClass::kWorker, FailureClass::kWorker,
                                           FailureClass::kBug,    FailureClass::kInfra,
                                           FailureClass::kOom,    FailureClass::kHardware,
                                           FailureClass::kConfig};
    p.fail_class = classes[Rand(7)];
    if (Coin(30)) p.plan = Plan::kSucceed;
  }

  void Init(int pods_n, std::uint32_t restarts) {
    n = pods_n;
    max_restarts = restarts;
    const auto size = static_cast<std::uint32_t>(pods_n);
    if (!elastic) {
      checker.emplace(invariants::Contract{.min_nodes = size, .max_nodes = size, .max_restarts = restarts});
    }
    pods.resize(n);
    for (int i = 0; i < n; ++i) NewPod(i);
  }

  // Elastic MIN:MAX: MAX + 1 slots; pod 0 and `start - 1` others start, the
  // rest are not started yet (they may join while a generation runs).
  void InitElastic(std::uint32_t lo, std::uint32_t hi, std::uint32_t start,
                   std::uint32_t restarts_max) {
    elastic = true;
    min_nodes = lo;
    max_nodes = hi;
    checker.emplace(invariants::Contract{.min_nodes = lo, .max_nodes = hi, .max_restarts = restarts_max});
    Init(static_cast<int>(hi) + 1, restarts_max);
    std::vector<int> others;
    for (int i = 1; i < n; ++i) others.push_back(i);
    std::shuffle(others.begin(), others.end(), rng);
    for (std::size_t k = start - 1; k < others.size(); ++k) Retire(others[k]);
  }

  void Retire(int i) {
    Pod& p = pods[i];
    p.retired = true;
    p.joining = false;
    if (!p.conclusion) p.alive = false;
    p.exited = true;
  }
  // Feeds one event to pod i and carries out the actions, as pod.cc does.
  void Feed(int i, const GangEvent& e) {
    Pod& p = pods[i];
    if (!p.alive || p.exited) return;
    GangActions a = p.policy->On(e);
    Apply(i, a);
  }

  void Send(int from, int to, Msg m) {
    if (!pods[from].alive) return;
    links[{from, to}].push_back(std::move(m));
  }

  void Apply(int i, const GangActions& a) {
    Pod& p = pods[i];
    // pod.cc: the membership machine's word goes to the roster.
    for (std::uint32_t k : a.lost) {
      declared_lost.insert(static_cast<int>(k));
      Record({.kind = invariants::Record::Kind::kLost, .inst = pods[k].inst, .pod = k});
    }
    for (std::uint32_t k : a.leaving) {
      declared_leaving.insert(static_cast<int>(k));
      Record({.kind = invariants::Record::Kind::kLost, .inst = pods[k].inst, .pod = k,
              .what = "leaving"});
    }
    if (a.arm_settle_timer) p.settle_timer = true;
    if (a.broadcast) {
      if (i != 0) Violation("a member broadcast");
      const auto c = static_cast<FailureClass>(a.broadcast->failure_class);
      // A next generation without a restart (class ok: a join, a leave, the
      // leader leaving) and, elastic with a spare waiting, a hardware swap restart too.
      const bool may = RestartableClass(c) || c == FailureClass::kOk ||
                       (elastic && c == FailureClass::kHardware);
      if (a.resize && a.broadcast->failure_class != 0) Violation("a resize names a failure");
      if (a.resize && a.broadcast->reason.find("leave") != std::string::npos) ++stats[4];
      if (!a.broadcast->restart && c == FailureClass::kTerminated && elastic &&
          a.broadcast->reason.find("needed") != std::string::npos) {
        ++stats[5];
      }
      if (a.broadcast->restart && (!may || (p.got_sigterm && c != FailureClass::kOk))) {
        Violation("leader restarts after class " + std::to_string(a.broadcast->failure_class) +
                  (p.got_sigterm ? " / after SIGTERM" : ""));
      }
      if (a.broadcast->restart) p.may_restart = true;
      for (int m = 1; m < n; ++m) Send(0, m, *a.broadcast);
    }
    if (a.report) {
      Send(i, 0, *a.report);
      if (a.report->ok) p.report_sending = true;
    }
    if (a.stop_workers && p.workers == Workers::kRunning) p.workers = Workers::kStopping;
    if (a.arm_verdict_timer) p.verdict_timer = true;
    if (a.restart) {
      trace += " restart" + std::to_string(i) + ";";
      if (p.got_sigterm) Violation("pod " + std::to_string(i) + " restarts after SIGTERM");
      if (!p.may_restart) Violation("pod " + std::to_string(i) + " restarts unasked");
      for (FailureClass c : p.own_classes) {
        if (!RestartableClass(c) && i != 0 && !p.may_restart) Violation("restart after own bug");
      }
      p.joining = true;
      p.join_generation = p.policy->role().generation() + 1;
      p.workers = Workers::kNone;
      p.verdict_timer = false;
      p.settle_timer = false;
      p.report_sending = false;
      p.own_fired.reset();
      p.may_restart = false;
      // The old connections go: the wiring closes them.
      CloseLinks(i);
    }
    if (a.conclude) {
      p.conclusion = a.conclude;
      p.exited = true;
      p.code = static_cast<int>(a.conclude->failure_class);
      if (a.conclude->kind == Kind::kTerminated) p.code = static_cast<int>(FailureClass::kTerminated);
      trace += " exit" + std::to_string(i) + "=" + std::string(ClassName(Class(p))) + ";";
      // Workers are killed with the agent's exit (grace elapsed, PID 1 gone).
      p.workers = Workers::kExited;
      CloseLinks(i);
    }
  }

  static FailureClass Class(const Pod& p) {
    if (!p.conclusion) return FailureClass::kInfra;  // killed (137): counted
    return p.conclusion->kind == Kind::kTerminated ? FailureClass::kTerminated
                                                   : p.conclusion->failure_class;
  }
  static bool Counted(FailureClass c) {
    return c != FailureClass::kOk && c != FailureClass::kPeerFailed &&
           c != FailureClass::kTerminated;
  }

  void CloseLinks(int i) {
    if (i == 0) {
      for (int m = 1; m < n; ++m) links[{0, m}].push_back(Close{});
    } else {
      links[{i, 0}].push_back(Close{});
    }
  }

  void Deliver(int from, int to) {
    auto& q = links[{from, to}];
    Msg m = std::move(q.front());
    q.pop_front();
    Pod& r = pods[to];
    if (!r.alive || r.exited || r.joining) return;  // no channel to deliver on
    if (!std::holds_alternative<wire::Report>(m) || !std::get<wire::Report>(m).ok) r.heard = true;
    if (std::holds_alternative<Close>(m)) {
      // The receiver sees the connection end; the leader's Close for a member
      // that later rejoins belongs to the old generation: dropped by the wiring.
      trace += " lost" + std::to_string(from) + "->" + std::to_string(to) + ";";
      if (to != 0) r.may_restart = true;  // a member that lost the leader may rejoin
      Feed(to, gang::Lost{static_cast<std::uint32_t>(to == 0 ? from : 0), "closed"});
      return;
    }
    if (const auto* s = std::get_if<wire::Stop>(&m)) {
      trace += " stop" + std::to_string(s->failed_index) + (s->restart ? "R" : "") + "->" +
               std::to_string(to) + ";";
      if (s->restart) r.may_restart = true;
      Feed(to, gang::Stop{*s});
    } else if (const auto* rep = std::get_if<wire::Report>(&m)) {
      Feed(to, gang::Report{rep->index, *rep});
    }
  }

  bool GangAlive() const {
    for (const Pod& p : pods) {
      if (p.alive && !p.exited) return true;
    }
    return false;
  }

  // Everyone alive is joining: the rendezvous forms (dead slots are replaced
  // first, as the Job controller does; when it cannot, the join times out).
  bool TryRendezvous() {
    if (elastic) return TryRendezvousElastic();
    bool any_joining = false;
    for (const Pod& p : pods) {
      if (p.alive && !p.exited) {
        if (!p.joining) return false;
        any_joining = true;
      }
    }
    if (!any_joining) return false;
    for (const Pod& p : pods) {
      // A pod that succeeded is not replaced: the Job controller stops the rest.
      if (p.conclusion && p.conclusion->kind == Kind::kOk) return false;
    }
    for (int i = 0; i < n; ++i) {
      if (pods[i].alive && !pods[i].exited) continue;
      if (replacements_left-- <= 0) return false;  // the Job is deleted: SIGTERM (Stuck)
      NewPod(i);
      trace += " replace" + std::to_string(i) + ";";
    }
    std::uint32_t g = 0;
    for (const Pod& p : pods) g = std::max(g, p.join_generation);
    // Beyond --max-restarts (a fixed gang counts generations), ranks: the checker (I1-I4).
    std::vector<std::uint32_t> ranks;
    for (int i = 0; i < n; ++i) ranks.push_back(static_cast<std::uint32_t>(i));
    Record({.kind = invariants::Record::Kind::kForm, .pod = 0, .generation = g,
            .world = static_cast<std::uint32_t>(n), .restarts = g, .ranks = ranks});
    generation = g;
    faults_in_gen = 0;
    culprit_in_gen = false;
    links.clear();
    trace += " gen" + std::to_string(g) + ";";
    for (int i = 0; i < n; ++i) {
      Pod& p = pods[i];
      p.joining = false;
      p.workers = Workers::kRunning;
      p.own_fired.reset();
      p.heard = false;
      PlanWorkers(p);
      Record({.kind = invariants::Record::Kind::kGen, .inst = p.inst,
              .pod = static_cast<std::uint32_t>(i), .generation = g,
              .rank = static_cast<std::uint32_t>(i), .world = static_cast<std::uint32_t>(n),
              .restarts = g});
      Feed(i, gang::Assigned{g});
    }
    return true;
  }

  // Elastic: every pod alive is back; a pod the leader declared lost is
  // refused (admission rule 8: it exits infra); PlanGeneration says who is
  // active where, and the properties are checked before the pods start.
  bool TryRendezvousElastic() {
    std::vector<int> in;
    for (int i = 0; i < n; ++i) {
      const Pod& p = pods[i];
      if (p.conclusion && p.conclusion->kind == Kind::kOk) return false;
      if (!p.alive || p.exited) continue;
      if (!p.joining) return false;
      in.push_back(i);
    }
    if (in.empty()) return false;
    // As Roster::Plan: every pod back, and the last generation's pods that are
    // not (lost) or that the leader declared lost, with lost set.
    std::vector<MemberState> states;
    for (int i = 0; i < n; ++i) {
      auto r = rank_of.find(i);
      const bool back = std::find(in.begin(), in.end(), i) != in.end();
      if (!back && r == rank_of.end()) continue;
      states.push_back({.key = static_cast<std::uint32_t>(i),
                        .node_rank = r == rank_of.end() ? std::nullopt
                                                        : std::optional<std::uint32_t>(r->second),
                        .lost = !back || declared_lost.contains(i),
                        .must_leave = declared_leaving.contains(i)});
    }
    const GenerationPlan plan = PlanGeneration(states, {.min_nodes = min_nodes,
                                                        .max_nodes = max_nodes});
    if (!plan.ready) return ReplaceBelowMin();
    CheckPlan(plan);
    for (int i : in) {
      if (!declared_lost.contains(i)) continue;
      ++stats[2];
      trace += " refused" + std::to_string(i) + ";";
      Feed(i, gang::AgentFailed{exitcodes::Status::Infra("the gang went on without it")});
    }
    std::uint32_t g = 0;
    for (int i : in) g = std::max(g, pods[i].join_generation);
    StartGeneration(g, plan);
    return true;
  }

  // Below MIN (or no pod 0): the Job controller recreates the slots of the
  // last generation's pods that exited, bounded as in a fixed gang.
  bool ReplaceBelowMin() {
    bool any = false;
    for (int i = 0; i < n; ++i) {
      if ((pods[i].alive && !pods[i].exited) || (pods[i].retired && i != 0)) continue;
      if (replacements_left-- <= 0) return false;
      NewPod(i);
      pods[i].join_generation = generation + 1;
      trace += " replace" + std::to_string(i) + ";";
      any = true;
    }
    return any;
  }

  void CheckPlan(const GenerationPlan& plan) {
    // Two ranks, density, lost and leaving pods active: the checker (I1, I2, I6) at the form.
    std::set<std::uint32_t> keys(plan.active.begin(), plan.active.end());
    for (std::uint32_t k : plan.waiting) {
      if (keys.contains(k)) Violation("pod " + std::to_string(k) + " active and waiting");
    }
    if (plan.active.size() < min_nodes || plan.active.size() > max_nodes ||
        plan.active.empty() || plan.active[0] != 0) {
      Violation("active set of " + std::to_string(plan.active.size()) + " without pod 0 on rank 0"
                " or outside MIN:MAX");
    }
  }

  // The restart count the leader's Assigned carries, checked: a generation
  // that only joins ended keeps it; never beyond --max-restarts.
  std::uint32_t NextRestarts(std::uint32_t g) {
    if (g == 0 && rank_of.empty()) return 0;
    const Pod& leader = pods[0];
    std::uint32_t next = 0;
    bool carried = leader.ran;  // some pod of the round knows the count
    if (leader.ran) {
      next = leader.policy->role().restarts();
    } else {  // a replaced leader: the highest count its members' hellos bring (M15)
      for (const Pod& p : pods) {
        if (p.alive && !p.exited && p.joining && p.ran) {
          next = std::max(next, p.policy->role().restarts());
          carried = true;
        }
      }
    }
    // Every pod of the round is new (the Job recreated them all): nobody knows the count.
    if (faults_in_gen == 0 && next != restarts && carried) {
      Violation("generation " + std::to_string(g) + " followed only joins (" +
                (joined_in_gen ? "some" : "none") + ") yet counts restart " +
                std::to_string(next));
    }
    return next;  // beyond --max-restarts, falling: the checker (I4) at the form
  }

  void StartGeneration(std::uint32_t g, const GenerationPlan& plan) {
    if (!rank_of.empty() && rank_of.size() != plan.active.size()) ++stats[3];
    restarts = NextRestarts(g);
    Record({.kind = invariants::Record::Kind::kForm, .pod = 0, .generation = g,
            .world = static_cast<std::uint32_t>(plan.active.size()), .restarts = restarts,
            .ranks = plan.active});
    // The same numbers on every pod: a pod that ran the last generation and
    // rejoins counts what the leader's assignment will say (membership.h M2).
    for (int i = 0; i < n; ++i) {
      const Pod& p = pods[i];
      if (!p.alive || p.exited || !p.joining || !p.ran) continue;  // new to the gang
      if (p.policy->role().restarts() != restarts) {
        Violation("pod " + std::to_string(i) + " counts " +
                  std::to_string(p.policy->role().restarts()) + " restarts, the leader " +
                  std::to_string(restarts) + " (generation " + std::to_string(g) + ")");
      }
    }
    generation = g;
    rank_of.clear();
    for (std::uint32_t r = 0; r < plan.active.size(); ++r) rank_of[plan.active[r]] = r;
    declared_lost.clear();
    declared_leaving.clear();
    faults_in_gen = 0;
    joined_in_gen = false;
    culprit_in_gen = false;
    links.clear();
    trace += " gen" + std::to_string(g) + "x" + std::to_string(plan.active.size()) + ";";
    const std::set<std::uint32_t> waiting(plan.waiting.begin(), plan.waiting.end());
    for (int i = 0; i < n; ++i) {
      Pod& p = pods[i];
      if (!p.alive || p.exited) {
        Retire(i);  // left behind: its exit belonged to the generation that ended
        continue;
      }
      p.joining = false;
      p.ran = true;
      p.spare = !rank_of.contains(i);
      p.workers = p.spare ? Workers::kNone : Workers::kRunning;
      p.own_fired.reset();
      p.heard = false;
      PlanWorkers(p);
      Record({.kind = invariants::Record::Kind::kGen, .inst = p.inst,
              .pod = static_cast<std::uint32_t>(i), .generation = g,
              .rank = p.spare ? invariants::kSpareRank : rank_of[i],
              .world = static_cast<std::uint32_t>(plan.active.size()), .restarts = restarts});
      // The leader's waiting spares are its roster's: the plan, adopted.
      if (i == 0) roster_testing::FormRoster(*p.policy->roster(), plan.active, waiting, g);
      Feed(i, gang::Assigned{.generation = g, .spare = p.spare,
                             .nnodes = static_cast<std::uint32_t>(plan.active.size()),
                             .restarts = restarts});
    }
  }

  // Elastic: pod `i` (never started, or left behind) starts while the
  // generation runs: Joined to the leader; it waits as a spare or joins the
  // next generation, as the leader says.
  void Join(int i) {
    NewPod(i);
    joined_in_gen = true;
    Pod& leader = pods[0];
    const bool grows = rank_of.size() < max_nodes;
    trace += " join" + std::to_string(i) + (grows ? "+" : "") + ";";
    pods[i].join_generation = leader.policy->role().generation() + 1;
    Feed(0, gang::Joined{static_cast<std::uint32_t>(i)});
    ++stats[grows ? 0 : 1];
    if (leader.policy->membership()->spares().contains(static_cast<std::uint32_t>(i))) {
      pods[i].joining = false;
      pods[i].spare = true;
      pods[i].ran = true;
      Feed(i, gang::Assigned{.generation = leader.policy->role().generation(), .spare = true,
                             .nnodes = static_cast<std::uint32_t>(rank_of.size()),
                             .restarts = restarts});
    }
  }

  // One random enabled step; false when nothing is left to do.
  bool Step() {
    std::vector<std::function<void()>> moves;
    for (auto& [key, q] : links) {
      if (!q.empty() && !pods[key.second].frozen) {
        auto k = key;
        moves.push_back([this, k] { Deliver(k.first, k.second); });
      }
    }
    for (int i = 0; i < n; ++i) {
      Pod& p = pods[i];
      if (!p.alive || p.exited) continue;
      if (p.frozen) {
        // Peers notice the silence; the pod resumes later.
        bool sent_all = true;  // the kernel delivers what it sent before the silence shows
        for (auto& [key, q] : links) sent_all = sent_all && (key.first != i || q.empty());
        if (!p.detected && sent_all) moves.push_back([this, i] { DetectFreeze(i); });
        if (pods[i].detected || Coin(20)) moves.push_back([this, i] { Resume(i); });
        continue;
      }
      // One root cause per generation besides worker failures: after a kill or
      // a freeze no worker fails on its own (two culprits would both count).
      if (p.workers == Workers::kRunning && p.plan != Plan::kLive &&
          (p.plan == Plan::kSucceed || !culprit_in_gen)) {
        moves.push_back([this, i] { WorkerOutcome(i); });
      }
      if (p.workers == Workers::kStopping) {
        moves.push_back([this, i] {
          pods[i].workers = Workers::kExited;
          Feed(i, gang::WorkersDone{false});
        });
      }
      if (p.report_sending) {
        moves.push_back([this, i] {
          pods[i].report_sending = false;
          Feed(i, gang::ReportSent{});
        });
      }
      if (!p.got_sigterm && Coin(5)) moves.push_back([this, i] { Sigterm(i); });
      const bool may_lose =
          !elastic || (i != 0 && !p.spare && rank_of.size() > min_nodes);
      if (culprit_faults_left > 0 && faults_in_gen == 0 && !p.joining && !p.heard && may_lose &&
          Coin(5)) {
        moves.push_back([this, i] { CulpritFault(i); });
      }
    }
    const Pod& leader = pods[0];
    if (leader.settle_timer && leader.alive && !leader.exited && !leader.frozen && Coin(30)) {
      moves.push_back([this] { FireSettle(); });
    }
    if (elastic && leader.alive && !leader.exited && !leader.joining && !leader.frozen) {
      for (int i = 1; i < n; ++i) {
        if (pods[i].retired && Coin(3)) moves.push_back([this, i] { Join(i); });
      }
    }
    if (moves.empty()) return Stuck();
    moves[Rand(static_cast<int>(moves.size()))]();
    return true;
  }

  // Nothing else can happen: timers fire (verdict), or the rendezvous forms.
  void FireSettle() {
    pods[0].settle_timer = false;
    trace += " settle;";
    Feed(0, gang::Timer{gang::TimerKind::kSettle});
  }

  bool Stuck() {
    if (pods[0].settle_timer && pods[0].alive && !pods[0].exited && !pods[0].frozen) {
      FireSettle();
      return true;
    }
    if (TryRendezvous()) return true;
    for (int i = 0; i < n; ++i) {
      if (pods[i].verdict_timer && !pods[i].exited && pods[i].alive) {
        pods[i].verdict_timer = false;
        Feed(i, gang::Timer{});
        return true;
      }
    }
    // Live workers with no stop coming: the Job's activeDeadline; end the run
    // with SIGTERM everywhere (a stop, not a failure).
    for (int i = 0; i < n; ++i) {
      if (pods[i].alive && !pods[i].exited) {
        Sigterm(i);
        return true;
      }
    }
    return false;
  }

  void WorkerOutcome(int i) {
    Pod& p = pods[i];
    if (p.plan == Plan::kSucceed) {
      p.workers = Workers::kExited;
      Feed(i, gang::WorkersDone{true});
      return;
    }
    ++faults_in_gen;
    Record({.kind = invariants::Record::Kind::kFault, .inst = p.inst,
            .pod = static_cast<std::uint32_t>(i), .what = "fail"});
    p.own_fired = p.fail_class;
    p.heard = true;
    p.own_classes.insert(p.fail_class);
    p.workers = Workers::kStopping;  // the supervisor stops the others
    trace += " fail" + std::to_string(i) + "=" + std::string(ClassName(p.fail_class)) + ";";
    Feed(i, gang::LocalFailure{p.fail_class, "worker failed", false});
  }

  void Sigterm(int i) {
    Pod& p = pods[i];
    any_sigterm = true;
    p.got_sigterm = true;
    trace += " term" + std::to_string(i) + ";";
    const Generation& g = p.policy->role().gen();
    if (!p.heard || g.restarting() || p.joining) p.expect_terminated = true;
    if (p.frozen) {
      p.resumed.push_back(gang::StopSignal{SIGTERM});
      return;
    }
    // The supervisor stops the workers for the signal itself.
    if (p.workers == Workers::kRunning) p.workers = Workers::kStopping;
    Feed(i, gang::StopSignal{SIGTERM});
  }

  void CulpritFault(int i) {
    --culprit_faults_left;
    ++faults_in_gen;
    culprit_in_gen = true;
    Pod& p = pods[i];
    Record({.kind = invariants::Record::Kind::kFault, .inst = p.inst,
            .pod = static_cast<std::uint32_t>(i), .what = "culprit"});
    if (Coin(50)) {
      trace += " kill" + std::to_string(i) + ";";
      p.alive = false;
      p.exited = true;
      p.code = 137;
      // The kernel closes its sockets.
      if (i == 0) {
        for (int m = 1; m < n; ++m) links[{0, m}].push_back(Close{});
      } else {
        links[{i, 0}].push_back(Close{});
      }
      return;
    }
    trace += " freeze" + std::to_string(i) + ";";
    p.heard = true;
    p.frozen = true;
  }

  void DetectFreeze(int i) {
    Pod& p = pods[i];
    p.detected = true;
    trace += " detect" + std::to_string(i) + ";";
    // The peers' heartbeat timeout: they drop the connection to the silent pod.
    if (i == 0) {
      for (int m = 1; m < n; ++m) {
        if (!pods[m].exited && !pods[m].joining && !pods[m].frozen) {
          pods[m].may_restart = true;
          pods[m].heard = true;
          Feed(m, gang::Lost{0, "no heartbeat"});
          links[{m, 0}].push_back(Close{});
        }
      }
    } else if (!pods[0].exited && !pods[0].joining) {
      pods[0].heard = true;
      Feed(0, gang::Lost{static_cast<std::uint32_t>(i), "no heartbeat"});
      links[{0, i}].push_back(Close{});
    }
  }

  void Resume(int i) {
    Pod& p = pods[i];
    p.frozen = false;
    trace += " resume" + std::to_string(i) + ";";
    // The wiring checks its own loop's lag before any other event.
    if (p.detected && !p.joining) Feed(i, gang::OwnStall{"event loop stalled"});
    auto later = std::move(p.resumed);
    p.resumed.clear();
    for (auto& e : later) {
      if (std::holds_alternative<gang::StopSignal>(e) && p.workers == Workers::kRunning) {
        p.workers = Workers::kStopping;
      }
      Feed(i, e);
    }
  }

  void Run() {
    while (steps < 20000 && GangAlive()) {
      ++steps;
      if (!Step()) break;
      // A gang with dead slots and joiners: replacement or timeout on the next stuck step.
    }
    if (GangAlive()) Violation("run did not end");
    if (checker) {
      for (const auto& v : checker->violations()) Violation(v);
    }
    Check();
  }

  void Check() {
    int counted = 0, killed = 0;
    bool peer_failed = false;
    for (int i = 0; i < n; ++i) {
      const Pod& p = pods[i];
      if (p.retired) continue;  // elastic: not in the last generation
      FailureClass c = Class(p);
      if (!p.conclusion) {
        ++killed;
        continue;
      }
      if (Counted(c)) ++counted;
      if (c == FailureClass::kPeerFailed) peer_failed = true;
      if ((c == FailureClass::kBug || c == FailureClass::kConfig) &&
          p.conclusion->kind == Kind::kOwn && !p.own_classes.contains(c)) {
        Violation("pod " + std::to_string(i) + " exits " + std::string(ClassName(c)) +
                  " without such a failure of its own");
      }
      if (p.expect_terminated && c != FailureClass::kTerminated) {
        Violation("pod " + std::to_string(i) + " got SIGTERM first but exits " +
                  std::string(ClassName(c)));
      }
    }
    // Only the final generation's pods are in `pods` (earlier ones restarted
    // or were replaced); a kill's 137 counts for the culprit.
    int culprits = counted + killed;
    if (counted > 1) Violation("more than one counted exit: " + std::to_string(counted));
    if (peer_failed && !any_sigterm && (killed == 0 ? culprits != 1 : culprits < 1)) {
      Violation("a failed gang with " + std::to_string(culprits) + " counted exits");
    }
  }
};

TEST(GangPropertyTest, RandomInterleavingsKeepTheContract) {
  int failures = 0;
  for (std::uint64_t seed = 1; seed <= 20000; ++seed) {
    Sim sim(seed);
    std::mt19937_64 cfg(seed * 7919);
    sim.Init(2 + static_cast<int>(cfg() % 4), static_cast<std::uint32_t>(cfg() % 3));
    sim.Run();
    if (!sim.violations.empty()) {
      ADD_FAILURE() << "seed " << seed << " (" << sim.n << " pods, max restarts "
                    << sim.max_restarts << "): " << sim.violations.front() << "\n  trace:"
                    << sim.trace;
      if (++failures >= 5) break;
    }
  }
}

TEST(GangPropertyTest, ElasticJoinsAndLossesKeepTheContract) {
  int failures = 0;
  std::array<int, 6> seen{};
  for (std::uint64_t seed = 1; seed <= 10000; ++seed) {
    Sim sim(seed);
    std::mt19937_64 cfg(seed * 104729);
    const auto lo = static_cast<std::uint32_t>(2 + cfg() % 2);
    const auto hi = static_cast<std::uint32_t>(lo + 1 + cfg() % 2);
    const auto start = static_cast<std::uint32_t>(lo + cfg() % (hi - lo + 1));
    sim.InitElastic(lo, hi, start, static_cast<std::uint32_t>(cfg() % 3));
    sim.Run();
    for (std::size_t k = 0; k < seen.size(); ++k) seen[k] += sim.stats[k];
    if (!sim.violations.empty()) {
      ADD_FAILURE() << "seed " << seed << " (--nnodes " << lo << ":" << hi << ", " << start
                    << " started, max restarts " << sim.max_restarts
                    << "): " << sim.violations.front() << "\n  trace:" << sim.trace;
      if (++failures >= 5) break;
    }
  }
  // The runs exercise what they claim to: growth, spares at MAX, refusals of
  // pods left behind, generations that changed size.
  EXPECT_GT(seen[0], 500);
  EXPECT_GT(seen[1], 100);
  EXPECT_GT(seen[2], 10);
  EXPECT_GT(seen[3], 200);
  EXPECT_GT(seen[4], 100) << "leaves decided without a restart";
  std::printf("elastic: %d grew, %d spares at MAX, %d refused, %d resized, %d leaves went on, "
              "%d leaves stopped the gang\n",
              seen[0], seen[1], seen[2], seen[3], seen[4], seen[5]);
}

}  // namespace
}  // namespace trainlet::agent
