// LeaderCore alone (leader_core.h): encoded frames and times in, actions out,
// no sockets and no clock — the way a deterministic simulator drives it.
#include "trainlet/rendezvous/leader_core.h"

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_hello.h"
#include "trainlet/rendezvous/auth.h"

namespace trainlet::rendezvous {
namespace {

using namespace std::chrono_literals;
using namespace leader_io;

wire::Report ReportOf(std::uint32_t index, bool ok, std::string reason = "",
                      bool leaving = false) {
  wire::Report r;
  r.index = index;
  r.ok = ok;
  r.reason = std::move(reason);
  r.leaving = leaving;
  return r;
}

wire::Heartbeat HeartbeatAt(std::uint64_t sent_us) {
  wire::Heartbeat hb;
  hb.sent_us = sent_us;
  return hb;
}

std::optional<wire::Message> Decode(const std::vector<std::uint8_t>& frame) {
  wire::Decoder d;
  EXPECT_TRUE(d.Feed(frame).ok());
  auto next = d.Next();
  EXPECT_TRUE(next.ok());
  if (!next.ok() || !next->has_value()) return std::nullopt;
  return **next;
}

// One leader core, a simulated clock, and the actions it emitted since the last Take.
class Sim {
 public:
  explicit Sim(std::uint32_t nnodes, LeaderOptions o = {})
      : core_(Options(nnodes, std::move(o)), [this] { return NextNonce(); }) {}

  static LeaderOptions Options(std::uint32_t nnodes, LeaderOptions o) {
    o.nnodes = nnodes;
    o.run_id = "trainer-0";
    o.handshake_timeout = 500ms;
    return o;
  }

  // Start with the leader's own hello, and the listener is bound: what that emitted.
  std::vector<Action> Begin(std::uint32_t nnodes) {
    core_.Start(HelloFor(0, nnodes), now);
    core_.Listening(29500, now);
    return Take();
  }
  ConnId Connect(const std::string& address = "10.0.0.2", std::uint16_t port = 40000) {
    return core_.Accepted({.peer_address = address,
                           .peer_port = port,
                           .local_address = "10.0.0.1",
                           .local_port = 29400,
                           .local_loopback = false},
                          now);
  }
  void Say(ConnId id, const wire::Message& m) { core_.Received(id, wire::Encode(m), now); }
  // Takes the actions queued so far; Written() for each write that asked for it.
  std::vector<Action> Take(bool complete_writes = true) {
    std::vector<Action> all;
    for (;;) {
      auto batch = core_.TakeActions();
      if (batch.empty()) return all;
      for (auto& a : batch) {
        if (auto* s = std::get_if<Send>(&a); s && s->notify && complete_writes) {
          written_.push_back(s->conn);
        }
        all.push_back(std::move(a));
      }
      auto written = std::move(written_);
      written_.clear();
      for (ConnId id : written) core_.Written(id, now);
    }
  }
  void Advance(std::chrono::milliseconds d) { now += d; }

  LeaderCore& core() { return core_; }
  Clock::time_point now = Clock::time_point{} + 1000s;

 private:
  std::string NextNonce() { return std::string(kNonceBytes, static_cast<char>('a' + nonces_++)); }
  int nonces_ = 0;
  std::vector<ConnId> written_;
  LeaderCore core_;
};

std::vector<wire::Message> SentTo(const std::vector<Action>& actions, ConnId id) {
  std::vector<wire::Message> out;
  for (const auto& a : actions) {
    if (const auto* s = std::get_if<Send>(&a); s && s->conn == id) {
      if (auto m = Decode(s->frame)) out.push_back(*m);
    }
  }
  return out;
}

template <class T>
std::optional<T> Last(const std::vector<Action>& actions) {
  std::optional<T> out;
  for (const auto& a : actions) {
    if (const auto* t = std::get_if<T>(&a)) out = *t;
  }
  return out;
}

template <class T>
std::optional<T> LastSentTo(const std::vector<Action>& actions, ConnId id) {
  std::optional<T> out;
  for (const auto& m : SentTo(actions, id)) {
    if (const auto* t = std::get_if<T>(&m)) out = *t;
  }
  return out;
}

bool Closes(const std::vector<Action>& actions, ConnId id) {
  for (const auto& a : actions) {
    if (const auto* c = std::get_if<Close>(&a); c && c->conn == id) return true;
  }
  return false;
}

std::optional<Clock::time_point> ArmedAt(const std::vector<Action>& actions, TimerId::Kind kind) {
  std::optional<Clock::time_point> out;
  for (const auto& a : actions) {
    if (const auto* t = std::get_if<ArmTimer>(&a); t && t->id.kind == kind) out = t->deadline;
  }
  return out;
}

// A gang of 3 forms once pods 1 and 2 said hello; each gets its own
// assignment, and the leader's own comes once both were written.
TEST(LeaderCoreTest, RoundFormsWhenEveryPodIsIn) {
  Sim sim(3);
  auto started = sim.Begin(3);
  EXPECT_TRUE(Last<StartAccepting>(started));
  EXPECT_EQ(ArmedAt(started, TimerId::Kind::kProgress), sim.now + tunables::kProgressInterval);
  const ConnId a = sim.Connect("10.0.0.2");
  const ConnId b = sim.Connect("10.0.0.3");
  EXPECT_LT(a, b);
  sim.Say(b, HelloFor(2, 3));
  EXPECT_FALSE(sim.core().formed());
  EXPECT_EQ(sim.core().missing(), std::vector<std::uint32_t>{1});
  EXPECT_TRUE(SentTo(sim.Take(), b).empty());
  sim.Say(a, HelloFor(1, 3));
  EXPECT_TRUE(sim.core().formed());
  auto actions = sim.Take(/*complete_writes=*/false);
  auto to_a = LastSentTo<wire::Assignment>(actions, a);
  auto to_b = LastSentTo<wire::Assignment>(actions, b);
  ASSERT_TRUE(to_a && to_b);
  EXPECT_EQ(to_a->rank_base, 2u);
  EXPECT_EQ(to_b->rank_base, 4u);
  EXPECT_EQ(to_a->world_size, 6u);
  EXPECT_EQ(to_a->master_addr, "10.0.0.1");  // the address pod 1 reached the leader on
  EXPECT_EQ(to_a->master_port, 29500);
  EXPECT_FALSE(Last<RoundDone>(actions));  // not before both writes are done
  sim.core().Written(a, sim.now);
  EXPECT_FALSE(Last<RoundDone>(sim.Take()));
  sim.core().Written(b, sim.now);
  auto done = Last<RoundDone>(sim.Take());
  ASSERT_TRUE(done);
  ASSERT_TRUE(done->result->ok());
  EXPECT_EQ((*done->result)->rank_base, 0u);
  EXPECT_EQ((*done->result)->master_addr, "10.0.0.1");
  EXPECT_TRUE(sim.core().decided());
  EXPECT_EQ(sim.core().admitted(), 3u);
}

// A pod whose launch configuration differs gets a Reject naming why, and its
// connection closes once the Reject is written; the others still form.
TEST(LeaderCoreTest, RefusesAMismatchedPodAndClosesAfterTheReject) {
  Sim sim(2);
  sim.Begin(2);
  const ConnId bad = sim.Connect("10.0.0.2");
  sim.Say(bad, HelloFor(1, 2, /*nproc=*/4));
  auto actions = sim.Take(/*complete_writes=*/false);
  auto reject = LastSentTo<wire::Reject>(actions, bad);
  ASSERT_TRUE(reject);
  EXPECT_FALSE(reject->retriable);
  EXPECT_FALSE(Closes(actions, bad));  // the Reject is written first
  sim.Say(bad, HelloFor(1, 2));  // nothing more is read from it
  EXPECT_TRUE(sim.Take().empty());
  sim.core().Written(bad, sim.now);
  EXPECT_TRUE(Closes(sim.Take(), bad));
  EXPECT_EQ(sim.core().pending(), 0u);

  wire::Hello stranger = HelloFor(1, 2);
  stranger.job_id = "someone-else";
  const ConnId s = sim.Connect("10.0.0.9");
  sim.Say(s, stranger);
  auto refused = sim.Take();
  ASSERT_TRUE(LastSentTo<wire::Reject>(refused, s));
  EXPECT_TRUE(Closes(refused, s));
  EXPECT_FALSE(sim.core().formed());

  const ConnId good = sim.Connect("10.0.0.3");
  sim.Say(good, HelloFor(1, 2));
  auto done = Last<RoundDone>(sim.Take());
  ASSERT_TRUE(done);
  EXPECT_TRUE(done->result->ok());
}

// Another pod saying hello with index 0 is a rival leader: it is refused, and
// this round fails config once that refusal is written.
TEST(LeaderCoreTest, ARivalLeaderFailsTheRoundAfterItsRefusal) {
  Sim sim(2);
  sim.Begin(2);
  const ConnId rival = sim.Connect("10.0.0.7");
  sim.Say(rival, HelloFor(0, 2));
  auto actions = sim.Take();
  auto reject = LastSentTo<wire::Reject>(actions, rival);
  ASSERT_TRUE(reject);
  EXPECT_EQ(reject->field, "leader");
  auto done = Last<RoundDone>(actions);
  ASSERT_TRUE(done);
  EXPECT_EQ(done->result->status().failure_class(), exitcodes::FailureClass::kConfig);
  EXPECT_TRUE(Last<StopListening>(actions));
}

// With a token the leader answers a hello with a challenge (its nonce from
// the injected source) and admits the pod only on the right proof.
TEST(LeaderCoreTest, TokenChallengeAndProof) {
  LeaderOptions o;
  o.token = "sesame";
  Sim sim(3, o);
  sim.Begin(3);
  const std::string member_nonce(kNonceBytes, 'm');
  auto hello = [&](std::uint32_t index) {
    wire::Hello h = HelloFor(index, 3);
    h.nonce = member_nonce;
    return h;
  };
  const ConnId good = sim.Connect("10.0.0.2");
  sim.Say(good, hello(1));
  auto challenge = LastSentTo<wire::Challenge>(sim.Take(), good);
  ASSERT_TRUE(challenge);
  EXPECT_EQ(challenge->nonce, std::string(kNonceBytes, 'a'));
  EXPECT_EQ(challenge->proof, LeaderProof("sesame", "trainer-0", member_nonce, challenge->nonce));
  sim.Say(good, wire::Proof{MemberProof("sesame", "trainer-0", challenge->nonce, member_nonce)});
  EXPECT_EQ(sim.core().admitted(), 2u);

  const ConnId liar = sim.Connect("10.0.0.3");
  sim.Say(liar, hello(2));
  auto second = LastSentTo<wire::Challenge>(sim.Take(), liar);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->nonce, std::string(kNonceBytes, 'b'));
  sim.Say(liar, wire::Proof{MemberProof("other", "trainer-0", second->nonce, member_nonce)});
  auto refused = sim.Take();
  auto reject = LastSentTo<wire::Reject>(refused, liar);
  ASSERT_TRUE(reject);
  EXPECT_EQ(reject->field, "token");
  EXPECT_TRUE(Closes(refused, liar));
  EXPECT_EQ(sim.core().admitted(), 2u);

  const ConnId plain = sim.Connect("10.0.0.4");
  sim.Say(plain, HelloFor(2, 3));  // no nonce: no token
  ASSERT_TRUE(LastSentTo<wire::Reject>(sim.Take(), plain));
}

// A connection that sends no hello is dropped at its handshake deadline; one
// that sends garbage is dropped at once.
TEST(LeaderCoreTest, HandshakeDeadlineAndGarbage) {
  Sim sim(3);
  sim.Begin(3);
  const ConnId idle = sim.Connect("10.0.0.2");
  auto armed = sim.Take();
  EXPECT_EQ(ArmedAt(armed, TimerId::Kind::kHandshake), sim.now + 500ms);
  EXPECT_EQ(sim.core().pending(), 1u);
  sim.Advance(500ms);
  sim.core().TimerFired({TimerId::Kind::kHandshake, idle}, sim.now);
  EXPECT_TRUE(Closes(sim.Take(), idle));
  EXPECT_EQ(sim.core().pending(), 0u);

  const ConnId junk = sim.Connect("10.0.0.3");
  const std::vector<std::uint8_t> garbage(64, 0xff);
  sim.core().Received(junk, garbage, sim.now);
  EXPECT_TRUE(Closes(sim.Take(), junk));
}

// All pending slots taken: the oldest pending connection of the address
// holding the most slots goes, so a pod from its own address gets in.
TEST(LeaderCoreTest, AFloodEvictsItsOwnOldestPendingConnection) {
  LeaderOptions o;
  o.max_pending_handshakes = 3;
  Sim sim(2, o);
  sim.Begin(2);
  const ConnId pod = sim.Connect("10.0.0.2");
  const ConnId f1 = sim.Connect("10.0.0.66", 1);
  const ConnId f2 = sim.Connect("10.0.0.66", 2);
  sim.Take();
  const ConnId f3 = sim.Connect("10.0.0.66", 3);
  auto actions = sim.Take();
  EXPECT_TRUE(Closes(actions, f1));
  EXPECT_FALSE(Closes(actions, pod));
  EXPECT_FALSE(Closes(actions, f2));
  EXPECT_FALSE(Closes(actions, f3));
  sim.Say(pod, HelloFor(1, 2));
  EXPECT_TRUE(Last<RoundDone>(sim.Take()));
}

// Every pending slot held by a refused connection whose Reject is still being
// written: a new connection is the only one that can go. It is closed at once
// and gets no handshake timer (found by fuzz_leader_core: the core used the
// dropped connection after closing it), and the slots stay bounded.
TEST(LeaderCoreTest, ANewConnectionBeyondRefusedPendingSlotsIsClosed) {
  LeaderOptions o;
  o.max_pending_handshakes = 2;
  Sim sim(3, o);
  sim.Begin(3);
  wire::Hello stranger = HelloFor(1, 3);
  stranger.job_id = "someone-else";
  const ConnId r1 = sim.Connect("10.0.0.2");
  const ConnId r2 = sim.Connect("10.0.0.3");
  sim.Say(r1, stranger);
  sim.Say(r2, stranger);
  sim.Take(/*complete_writes=*/false);
  const ConnId late = sim.Connect("10.0.0.4");
  auto actions = sim.Take(/*complete_writes=*/false);
  EXPECT_TRUE(Closes(actions, late));
  for (const auto& a : actions) {
    if (const auto* t = std::get_if<ArmTimer>(&a)) {
      EXPECT_NE(t->id.conn, late);
    }
  }
  EXPECT_LE(sim.core().pending(), 2u);
  sim.core().Written(r1, sim.now);
  EXPECT_TRUE(Closes(sim.Take(), r1));
  const ConnId pod = sim.Connect("10.0.0.4");  // a slot is free again
  EXPECT_FALSE(Closes(sim.Take(), pod));
  sim.Say(pod, HelloFor(1, 3));
  EXPECT_FALSE(Closes(sim.Take(), pod));
}

// Hot spares / elastic sizes: the membership's plan decides when the round
// forms; Reconsider (torch's last call, on the caller's timer) asks it again.
class PlanMembership : public LeaderMembership {
 public:
  std::optional<std::map<std::uint32_t, std::uint32_t>> Plan(
      const std::vector<std::uint32_t>& joined) override {
    if (!ready) return std::nullopt;
    std::map<std::uint32_t, std::uint32_t> ranks;
    for (std::uint32_t i = 0; i < joined.size() && i < active; ++i) ranks[joined[i]] = i;
    return ranks;
  }
  bool AssignFirst(std::uint32_t) override { return false; }
  std::optional<wire::Replaced> ReplacedOf(std::uint32_t) const override { return std::nullopt; }
  std::optional<std::uint32_t> LeftOf(std::uint32_t) const override { return std::nullopt; }
  std::optional<std::uint32_t> LostSpareOf(std::uint32_t) const override { return std::nullopt; }
  void OnLeave(std::uint32_t index) override { left.push_back(index); }
  bool ready = false;
  std::uint32_t active = 2;
  std::vector<std::uint32_t> left;
};

LeaderOptions WithPlan(std::shared_ptr<PlanMembership> plan) {
  LeaderOptions o;
  o.membership = std::move(plan);
  return o;
}

TEST(LeaderCoreTest, LastCallFormsTheRoundWithWhoJoined) {
  auto plan = std::make_shared<PlanMembership>();
  Sim sim(4, WithPlan(plan));
  sim.Begin(4);
  const ConnId one = sim.Connect("10.0.0.2");
  const ConnId two = sim.Connect("10.0.0.3");
  sim.Say(one, HelloFor(1, 4));
  sim.Say(two, HelloFor(2, 4));
  EXPECT_FALSE(sim.core().formed());
  sim.Take();
  sim.core().Reconsider(sim.now);  // the plan still says wait
  EXPECT_FALSE(sim.core().formed());
  plan->ready = true;  // last call: 2 active pods, the rest wait as spares
  sim.core().Reconsider(sim.now);
  auto actions = sim.Take();
  auto to_one = LastSentTo<wire::Assignment>(actions, one);
  auto to_two = LastSentTo<wire::Assignment>(actions, two);
  ASSERT_TRUE(to_one && to_two);
  EXPECT_EQ(to_one->node_rank, 1u);
  EXPECT_FALSE(to_one->spare);
  EXPECT_TRUE(to_two->spare);
  EXPECT_EQ(to_one->nnodes, 2u);
  auto done = Last<RoundDone>(actions);
  ASSERT_TRUE(done && done->result->ok());
  EXPECT_EQ((*done->result)->node_rank, 0u);
}

// A member that says it leaves before the round formed frees its index: the
// membership hears of it, and the round does not wait for it.
TEST(LeaderCoreTest, AMemberLeavingBeforeTheRoundFreesItsIndex) {
  auto plan = std::make_shared<PlanMembership>();
  Sim sim(3, WithPlan(plan));
  sim.Begin(3);
  const ConnId one = sim.Connect("10.0.0.2");
  sim.Say(one, HelloFor(1, 3));
  EXPECT_EQ(sim.core().admitted(), 2u);
  sim.Say(one, ReportOf(1, false, "SIGTERM", /*leaving=*/true));
  EXPECT_TRUE(Closes(sim.Take(), one));
  EXPECT_EQ(plan->left, std::vector<std::uint32_t>{1});
  EXPECT_EQ(sim.core().admitted(), 1u);
  EXPECT_EQ(sim.core().missing(), (std::vector<std::uint32_t>{1, 2}));
}

// Forms a 3-pod gang (members on connections a and b) and starts the channel.
struct Channel {
  explicit Channel(Sim& sim, std::function<bool(std::uint32_t)> on_join = {}) {
    sim.Begin(3);
    a = sim.Connect("10.0.0.2");
    b = sim.Connect("10.0.0.3");
    sim.Say(a, HelloFor(1, 3));
    sim.Say(b, HelloFor(2, 3));
    sim.Take();
    sim.core().StartChannel(std::move(on_join), 100ms, 3, sim.now);
    started = sim.Take();
  }
  ConnId a = 0;
  ConnId b = 0;
  std::vector<Action> started;
};

// A member silent for heartbeat * misses is lost at that moment (the timer is
// armed for it); one that keeps sending heartbeats is not.
TEST(LeaderCoreTest, HeartbeatsTimeOutToALoss) {
  Sim sim(3);
  Channel ch(sim);
  EXPECT_TRUE(LastSentTo<wire::Heartbeat>(ch.started, ch.a));
  EXPECT_EQ(ArmedAt(ch.started, TimerId::Kind::kHeartbeat), sim.now + 25ms);
  std::optional<MemberLost> lost;
  for (int i = 0; i < 20 && !lost; ++i) {
    sim.Advance(25ms);
    sim.Say(ch.b, HeartbeatAt(1));
    sim.core().TimerFired({TimerId::Kind::kHeartbeat, 0}, sim.now);
    auto actions = sim.Take();
    lost = Last<MemberLost>(actions);
    if (lost) {
      EXPECT_TRUE(Closes(actions, ch.a));
    }
  }
  ASSERT_TRUE(lost);
  EXPECT_EQ(lost->index, 1u);
  EXPECT_EQ(lost->why, "no heartbeat for 300 ms");
  EXPECT_GT(sim.now, Clock::time_point{} + 1000s + 300ms);
  EXPECT_LE(sim.now, Clock::time_point{} + 1000s + 325ms);
  EXPECT_EQ(sim.core().peer_stats().count(2), 1u);
  EXPECT_EQ(sim.core().peer_stats().count(1), 0u);
  EXPECT_GT(sim.core().heartbeat_silence(sim.now), Clock::duration{});
}

// A member's report reaches the pod once; a closed connection of an
// unsettled member is a loss; a report before StartChannel waits for it.
TEST(LeaderCoreTest, ReportsAndClosedConnections) {
  Sim sim(3);
  Channel ch(sim);
  sim.Say(ch.a, ReportOf(1, true, "done"));
  auto report = Last<MemberReport>(sim.Take());
  ASSERT_TRUE(report);
  EXPECT_EQ(report->index, 1u);
  EXPECT_TRUE(report->report.ok);
  sim.Say(ch.a, ReportOf(1, false));  // the first one stands
  EXPECT_FALSE(Last<MemberReport>(sim.Take()));
  EXPECT_FALSE(sim.core().AllMembersSettled());
  sim.core().Closed(ch.b, "Connection reset by peer", sim.now);
  auto actions = sim.Take();
  auto lost = Last<MemberLost>(actions);
  ASSERT_TRUE(lost);
  EXPECT_EQ(lost->index, 2u);
  EXPECT_EQ(lost->why, "its connection closed (Connection reset by peer)");
  EXPECT_TRUE(Closes(actions, ch.b));
  EXPECT_TRUE(sim.core().AllMembersSettled());
  wire::Stop stop;
  stop.failed_index = 1;
  sim.core().BroadcastStop(stop);
  auto stops = sim.Take();
  EXPECT_TRUE(LastSentTo<wire::Stop>(stops, ch.a));
  EXPECT_TRUE(SentTo(stops, ch.b).empty());
}

TEST(LeaderCoreTest, EventsBeforeStartChannelAreHeldBack) {
  Sim sim(2);
  sim.Begin(2);
  const ConnId a = sim.Connect();
  sim.Say(a, HelloFor(1, 2));
  ASSERT_TRUE(Last<RoundDone>(sim.Take()));
  sim.Say(a, ReportOf(1, false, "boom"));
  sim.Say(a, ReportOf(7, true));  // a report for another index: a protocol error
  auto before = sim.Take();
  EXPECT_FALSE(Last<MemberReport>(before));
  EXPECT_TRUE(Closes(before, a));
  sim.core().StartChannel({}, 100ms, 3, sim.now);
  auto after = sim.Take();
  auto report = Last<MemberReport>(after);
  ASSERT_TRUE(report);
  EXPECT_EQ(report->report.reason, "boom");
  EXPECT_FALSE(Last<MemberLost>(after));  // it had settled with its report
}

// LeaderOptions::admit_late: a pod joining while the generation runs waits as
// a spare (its assignment says so) when on_join says so, else it is told to
// join the next generation.
TEST(LeaderCoreTest, LateJoins) {
  LeaderOptions o;
  o.admit_late = true;
  auto plan = std::make_shared<PlanMembership>();
  plan->active = 3;
  // nnodes 4: pods 0 and 1 form the round, pods 2 and 3 come late.
  o.membership = plan;
  Sim late(4, o);
  late.Begin(4);
  const ConnId a = late.Connect("10.0.0.2");
  plan->ready = true;
  late.Say(a, HelloFor(1, 4));
  EXPECT_TRUE(late.core().formed());  // the plan forms with whoever joined
  auto formed = late.Take();
  ASSERT_TRUE(LastSentTo<wire::Assignment>(formed, a));
  ASSERT_TRUE(Last<RoundDone>(formed));
  EXPECT_FALSE(Last<StopListening>(formed));  // late pods are admitted
  std::vector<std::uint32_t> asked;
  bool spare = true;
  late.core().StartChannel(
      [&](std::uint32_t index) {
        asked.push_back(index);
        return spare;
      },
      100ms, 3, late.now);
  late.Take();
  const ConnId s = late.Connect("10.0.0.4");
  late.Say(s, HelloFor(3, 4));
  auto assignment = LastSentTo<wire::Assignment>(late.Take(), s);
  ASSERT_TRUE(assignment);
  EXPECT_TRUE(assignment->spare);
  EXPECT_EQ(asked, std::vector<std::uint32_t>{3});
  EXPECT_EQ(late.core().peer_stats().count(3), 1u);

  spare = false;
  const ConnId n = late.Connect("10.0.0.5");
  late.Say(n, HelloFor(2, 4));
  auto next = LastSentTo<wire::Reject>(late.Take(), n);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->field, wire::kNextGenerationField);
  EXPECT_TRUE(next->retriable);

  late.core().StopAdmitting();
  EXPECT_TRUE(Last<StopListening>(late.Take()));
}

// A node rank of a generation is held once: a pod admitted while the
// generation runs at an index that had a node rank in the round (its pod
// left, or succeeded; the Job recreated it) waits as a spare, with none.
TEST(LeaderCoreTest, ALateSpareAtAnIndexThatHadANodeRankGetsASparesAssignment) {
  LeaderOptions o;
  o.admit_late = true;
  auto plan = std::make_shared<PlanMembership>();
  plan->active = 3;
  o.membership = plan;
  Sim sim(3, o);
  sim.Begin(3);
  const ConnId a = sim.Connect("10.0.0.2");
  const ConnId b = sim.Connect("10.0.0.3");
  sim.Say(a, HelloFor(1, 3));
  sim.Say(b, HelloFor(2, 3));
  plan->ready = true;
  sim.core().Reconsider(sim.now);
  ASSERT_TRUE(sim.core().formed());
  auto formed = sim.Take();
  auto to_b = LastSentTo<wire::Assignment>(formed, b);
  ASSERT_TRUE(to_b);
  ASSERT_EQ(to_b->node_rank, 2u);
  sim.core().StartChannel([](std::uint32_t) { return true; }, 100ms, 3, sim.now);
  sim.Say(b, ReportOf(2, false, "SIGTERM", /*leaving=*/true));
  sim.core().Closed(b, "end of stream", sim.now);  // pod 2 exits 143
  sim.Take();
  const ConnId again = sim.Connect("10.0.0.4");
  sim.Say(again, HelloFor(2, 3));
  auto late = LastSentTo<wire::Assignment>(sim.Take(), again);
  ASSERT_TRUE(late);
  EXPECT_TRUE(late->spare);
  EXPECT_EQ(late->rank_base, 0u);
  EXPECT_NE(late->node_rank, std::optional<std::uint32_t>(2u)) << "pod 2's node rank held twice";
}

// Members waiting for the assignment get heartbeats on the waiting timer.
TEST(LeaderCoreTest, WaitingMembersGetHeartbeats) {
  Sim sim(3);
  auto started = sim.Begin(3);
  EXPECT_EQ(ArmedAt(started, TimerId::Kind::kWaitingHeartbeat),
            sim.now + tunables::kWaitingHeartbeatInterval);
  const ConnId a = sim.Connect();
  sim.Say(a, HelloFor(1, 3));
  sim.Take();
  sim.Advance(tunables::kWaitingHeartbeatInterval);
  sim.core().TimerFired({TimerId::Kind::kWaitingHeartbeat, 0}, sim.now);
  auto actions = sim.Take();
  EXPECT_TRUE(LastSentTo<wire::Heartbeat>(actions, a));
  EXPECT_EQ(ArmedAt(actions, TimerId::Kind::kWaitingHeartbeat),
            sim.now + tunables::kWaitingHeartbeatInterval);
}

}  // namespace
}  // namespace trainlet::rendezvous
