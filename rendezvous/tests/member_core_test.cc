// MemberCore (member_core.h) driven alone: encoded frames, resolution
// results and times in, actions out. No sockets, no clock, no threads: the
// way a deterministic simulator drives it.
#include "trainlet/rendezvous/member_core.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "trainlet/rendezvous/auth.h"

namespace trainlet::rendezvous {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using exitcodes::FailureClass;
namespace m = member;

const Clock::time_point kT0 = Clock::time_point{} + 1000s;
constexpr std::uint32_t kWorkers = 2;

wire::Hello HelloFor(std::uint32_t index) {
  wire::Hello h;
  h.job_id = "job";
  h.attempt = 0;
  h.index = index;
  h.nproc_per_node = kWorkers;
  return h;
}

wire::Assignment AssignmentFor(std::uint32_t index, std::uint32_t nnodes = 3) {
  wire::Assignment a;
  a.nnodes = nnodes;
  a.world_size = nnodes * kWorkers;
  a.rank_base = index * kWorkers;
  a.master_addr = "10.0.0.10";
  a.master_port = 29500;
  a.run_id = "job";
  a.job_id = "job";
  return a;
}

// One member core, a simulated clock, and everything it asked for.
class Sim {
 public:
  explicit Sim(MemberCoreOptions o = Options()) : core(std::move(o)) {}

  static MemberCoreOptions Options() {
    MemberCoreOptions o;
    o.leader_host = "leader.svc";
    o.port = 29400;
    o.hello = HelloFor(1);
    o.deadline = kT0 + 60s;
    o.connect_timeout = 3s;
    o.reply_timeout = 2400ms;
    o.backoff.initial = 100ms;
    o.backoff.cap = 2000ms;
    o.backoff.min_delay = 50ms;
    o.seed = 7;
    return o;
  }

  // Feeds an input's actions in; returns them too.
  const MemberCore::Actions& Take(MemberCore::Actions actions) {
    last = std::move(actions);
    for (const auto& a : last) {
      all.push_back(a);
      if (const auto* t = std::get_if<m::ArmTimer>(&a)) armed[t->timer] = t->at;
      if (const auto* t = std::get_if<m::CancelTimer>(&a)) armed.erase(t->timer);
      if (const auto* c = std::get_if<m::Connect>(&a)) {
        EXPECT_TRUE(open.insert(c->conn).second) << "a connection id twice: " << c->conn;
      }
      if (const auto* w = std::get_if<m::Send>(&a)) {
        EXPECT_TRUE(open.contains(w->conn)) << "a Send on a connection given up: " << w->conn;
      }
      if (const auto* d = std::get_if<m::Disconnect>(&a)) {
        EXPECT_EQ(open.erase(d->conn), 1u) << "a Disconnect without its Connect: " << d->conn;
      }
    }
    return last;
  }

  template <class A>
  const A* Last() const {
    for (auto it = last.rbegin(); it != last.rend(); ++it) {
      if (const auto* a = std::get_if<A>(&*it)) return a;
    }
    return nullptr;
  }
  template <class A>
  int Count() const {
    int n = 0;
    for (const auto& a : last) n += std::holds_alternative<A>(a) ? 1 : 0;
    return n;
  }

  // Fires timer `t` at its deadline (the clock jumps there).
  const MemberCore::Actions& Fire(MemberTimer t) {
    EXPECT_TRUE(armed.contains(t)) << "timer " << static_cast<int>(t) << " is not armed";
    now = armed[t];
    armed.erase(t);
    return Take(core.OnTimer(t, now));
  }

  // Start, resolve to `addresses`, connect the first: returns its connection id.
  std::uint64_t Connect(std::vector<std::string> addresses = {"10.0.0.10"}) {
    Take(core.Start(now));
    const auto* r = Last<m::ResolveName>();
    EXPECT_TRUE(r);
    Take(core.OnResolved(r->id, Resolution{std::move(addresses), ResolveError::kNone, ""}, now));
    const auto* c = Last<m::Connect>();
    EXPECT_TRUE(c);
    const std::uint64_t conn = c->conn;
    Take(core.OnConnected(conn, now));
    return conn;
  }

  const MemberCore::Actions& Receive(std::uint64_t conn, const wire::Message& msg) {
    auto bytes = wire::Encode(msg);
    return Take(core.OnReceived(conn, bytes, now));
  }

  // The messages this core sent, decoded, since the last call.
  std::vector<wire::Message> Sent() {
    std::vector<wire::Message> out;
    for (; sent_seen < all.size(); ++sent_seen) {
      const auto* s = std::get_if<m::Send>(&all[sent_seen]);
      if (s == nullptr) continue;
      wire::Decoder d;
      EXPECT_TRUE(d.Feed(s->frame).ok());
      auto msg = d.Next();
      EXPECT_TRUE(msg.ok() && msg->has_value());
      if (msg.ok() && msg->has_value()) out.push_back(**msg);
    }
    return out;
  }

  // Joins with `assignment` (no token): returns the connection id.
  std::uint64_t Join(const wire::Assignment& assignment = AssignmentFor(1)) {
    const std::uint64_t conn = Connect();
    Receive(conn, assignment);
    EXPECT_TRUE(Last<m::Done>() && Last<m::Done>()->result.ok());
    return conn;
  }

  MemberCore core;
  Clock::time_point now = kT0;
  MemberCore::Actions last;
  std::vector<m::Action> all;
  std::map<MemberTimer, Clock::time_point> armed;
  std::set<std::uint64_t> open;  // connections asked for and not yet given up
  std::size_t sent_seen = 0;
};

// ---- resolution and connection ----

TEST(MemberCoreTest, StartArmsTheDeadlineAndResolvesTheLeadersName) {
  Sim sim;
  sim.Take(sim.core.Start(kT0));
  ASSERT_TRUE(sim.Last<m::ResolveName>());
  EXPECT_EQ(sim.Last<m::ResolveName>()->name, "leader.svc");
  EXPECT_EQ(sim.armed.at(MemberTimer::kDeadline), kT0 + 60s);
  EXPECT_EQ(sim.armed.at(MemberTimer::kProgress), kT0 + tunables::kProgressInterval);
  EXPECT_TRUE(sim.core.Start(kT0).empty()) << "Start is once";
}

TEST(MemberCoreTest, AFailedResolutionBacksOffWithTheSeededJitterThenResolvesAgain) {
  Sim sim;
  Backoff expected(Sim::Options().backoff, Sim::Options().seed);  // the same seed, the same delays
  sim.Take(sim.core.Start(kT0));
  for (int i = 0; i < 4; ++i) {
    const std::uint64_t id = sim.Last<m::ResolveName>()->id;
    sim.Take(sim.core.OnResolved(id, {{}, ResolveError::kNotFound, "ARES_ENOTFOUND"}, sim.now));
    EXPECT_FALSE(sim.Last<m::Done>());
    EXPECT_EQ(sim.armed.at(MemberTimer::kStep), sim.now + expected.Next()) << "retry " << i;
    EXPECT_TRUE(sim.core.OnTimer(MemberTimer::kStep, sim.now + 1ms).empty())
        << "not before its deadline (min_delay 50 ms)";
    sim.Fire(MemberTimer::kStep);
    ASSERT_TRUE(sim.Last<m::ResolveName>()) << "resolves again";
    EXPECT_GT(sim.Last<m::ResolveName>()->id, id);
  }
  // Said once, then only at debug level.
  int info = 0;
  for (const auto& a : sim.all) {
    if (const auto* l = std::get_if<m::LogLine>(&a)) {
      info += l->level == m::LogLine::Level::kInfo ? 1 : 0;
      if (l->level == m::LogLine::Level::kInfo) {
        EXPECT_EQ(l->text, "dns: leader.svc: not_found (ARES_ENOTFOUND); retrying with backoff");
      }
    }
  }
  EXPECT_EQ(info, 1);
  const std::uint64_t id = sim.Last<m::ResolveName>()->id;
  sim.Take(sim.core.OnResolved(id, {{"10.0.0.10"}, ResolveError::kNone, ""}, sim.now));
  ASSERT_TRUE(sim.Last<m::Connect>());
  EXPECT_EQ(sim.Last<m::Connect>()->address, "10.0.0.10");
  EXPECT_EQ(sim.Last<m::Connect>()->port, 29400);
  EXPECT_EQ(sim.armed.at(MemberTimer::kStep), sim.now + 3s) << "the connect timeout";
}

TEST(MemberCoreTest, AStaleResolutionOrConnectionIsIgnored) {
  Sim sim;
  sim.Take(sim.core.Start(kT0));
  const std::uint64_t first = sim.Last<m::ResolveName>()->id;
  sim.Take(sim.core.OnResolved(first, {{}, ResolveError::kTimeout, ""}, sim.now));
  EXPECT_TRUE(sim.core.OnResolved(first, {{"10.0.0.10"}, {}, ""}, sim.now).empty());
  sim.Fire(MemberTimer::kStep);
  const std::uint64_t second = sim.Last<m::ResolveName>()->id;
  sim.Take(sim.core.OnResolved(second, {{"10.0.0.10", "10.0.0.11"}, {}, ""}, sim.now));
  const std::uint64_t conn = sim.Last<m::Connect>()->conn;
  sim.Take(sim.core.OnConnectFailed(conn, "Connection refused", sim.now));
  EXPECT_TRUE(sim.core.OnConnected(conn, sim.now).empty()) << "given up already";
  EXPECT_TRUE(sim.core.OnClosed(conn, "End of file", sim.now).empty());
  EXPECT_TRUE(sim.core.OnConnected(0, sim.now).empty());
}

TEST(MemberCoreTest, ARefusedConnectTriesTheNextAddressThenBacksOffAndResolvesAgain) {
  Sim sim;
  sim.Take(sim.core.Start(kT0));
  sim.Take(sim.core.OnResolved(sim.Last<m::ResolveName>()->id,
                               {{"10.0.0.10", "fd00::10"}, ResolveError::kNone, ""}, sim.now));
  const std::uint64_t a = sim.Last<m::Connect>()->conn;
  sim.Take(sim.core.OnConnectFailed(a, "Connection refused", sim.now));
  ASSERT_TRUE(sim.Last<m::Disconnect>());
  EXPECT_EQ(sim.Last<m::Disconnect>()->conn, a);
  ASSERT_TRUE(sim.Last<m::Connect>());
  EXPECT_EQ(sim.Last<m::Connect>()->address, "fd00::10");
  const std::uint64_t b = sim.Last<m::Connect>()->conn;
  // The second one times out.
  sim.Fire(MemberTimer::kStep);
  EXPECT_EQ(sim.now, kT0 + 3s);
  ASSERT_TRUE(sim.Last<m::Disconnect>());
  EXPECT_EQ(sim.Last<m::Disconnect>()->conn, b);
  EXPECT_FALSE(sim.Last<m::Connect>()) << "every address failed: back off";
  ASSERT_TRUE(sim.Last<m::LogLine>());
  EXPECT_EQ(sim.Last<m::LogLine>()->text,
            "connect: leader.svc port 29400 not reachable (fd00::10: connect timed out); "
            "retrying with backoff");
  sim.Fire(MemberTimer::kStep);
  ASSERT_TRUE(sim.Last<m::ResolveName>()) << "re-resolves before every retry (a new leader IP)";
  sim.Take(sim.core.OnResolved(sim.Last<m::ResolveName>()->id, {{"10.0.0.12"}, {}, ""}, sim.now));
  const std::uint64_t c = sim.Last<m::Connect>()->conn;
  sim.Take(sim.core.OnConnected(c, sim.now));
  auto sent = sim.Sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(std::get<wire::Hello>(sent[0]), HelloFor(1));
  EXPECT_EQ(sim.core.phase(), MemberCore::Phase::kAwaitingReply);
  EXPECT_EQ(sim.armed.at(MemberTimer::kStep), sim.now + 2400ms) << "the reply timeout";
}

// ---- before the assignment ----

TEST(MemberCoreTest, TheLeadersHeartbeatIsAnsweredAndKeepsTheReplyTimeoutAway) {
  Sim sim;
  const std::uint64_t conn = sim.Connect({"10.0.0.10", "10.0.0.11"});
  sim.Sent();
  for (int i = 0; i < 10; ++i) {
    sim.now += 800ms;
    sim.Receive(conn, wire::Heartbeat{});
    EXPECT_EQ(sim.armed.at(MemberTimer::kStep), sim.now + 2400ms);
  }
  auto sent = sim.Sent();
  ASSERT_EQ(sent.size(), 10u);
  EXPECT_TRUE(std::holds_alternative<wire::Heartbeat>(sent[0]));
  // Then silence: the next address.
  sim.Fire(MemberTimer::kStep);
  ASSERT_TRUE(sim.Last<m::Connect>());
  EXPECT_EQ(sim.Last<m::Connect>()->address, "10.0.0.11");
  ASSERT_TRUE(sim.Last<m::LogLine>());
  EXPECT_EQ(sim.Last<m::LogLine>()->text,
            "rendezvous: leader 10.0.0.10: accepted the connection but sent nothing for 2400 ms "
            "(leader.svc); trying the next address");
}

TEST(MemberCoreTest, FramesSplitAnywhereAreReassembled) {
  Sim sim;
  const std::uint64_t conn = sim.Connect();
  auto bytes = wire::Encode(wire::Heartbeat{});
  auto more = wire::Encode(AssignmentFor(1));
  bytes.insert(bytes.end(), more.begin(), more.end());
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    sim.Take(sim.core.OnReceived(conn, std::span(&bytes[i], 1), sim.now));
  }
  ASSERT_TRUE(sim.Last<m::Done>());
  EXPECT_EQ(*sim.Last<m::Done>()->result, AssignmentFor(1));
}

TEST(MemberCoreTest, GarbageFromTheLeaderBeforeTheAssignmentIsRetried) {
  Sim sim;
  const std::uint64_t conn = sim.Connect();
  std::vector<std::uint8_t> junk(64, 0xAB);
  sim.Take(sim.core.OnReceived(conn, junk, sim.now));
  EXPECT_EQ(sim.core.phase(), MemberCore::Phase::kBackingOff);
  ASSERT_TRUE(sim.Last<m::Disconnect>());
  EXPECT_FALSE(sim.Last<m::Done>());
}

TEST(MemberCoreTest, TheLeaderClosingBeforeAssigningIsRetried) {
  Sim sim;
  const std::uint64_t conn = sim.Connect();
  sim.Take(sim.core.OnClosed(conn, "End of file", sim.now));
  EXPECT_EQ(sim.core.phase(), MemberCore::Phase::kBackingOff);
  ASSERT_TRUE(sim.Last<m::LogLine>());
  EXPECT_EQ(sim.Last<m::LogLine>()->text,
            "rendezvous: leader connection lost (leader closed the connection before assigning: "
            "End of file); retrying with backoff");
}

// ---- the token ----

TEST(MemberCoreTest, ChallengeAndProofWithAToken) {
  const std::string token(40, 't');
  MemberCoreOptions o = Sim::Options();
  o.token = token;
  int drawn = 0;
  o.nonce_source = [&] { return std::string(kNonceBytes, static_cast<char>('a' + drawn++)); };
  Sim sim(o);
  const std::uint64_t conn = sim.Connect();
  auto sent = sim.Sent();
  ASSERT_EQ(sent.size(), 1u);
  const std::string member_nonce = std::get<wire::Hello>(sent[0]).nonce;
  EXPECT_EQ(member_nonce, std::string(kNonceBytes, 'a')) << "from the injected source";
  const std::string leader_nonce(kNonceBytes, 'L');
  sim.Receive(conn, wire::Challenge{leader_nonce,
                                    LeaderProof(token, "job", member_nonce, leader_nonce)});
  sent = sim.Sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(std::get<wire::Proof>(sent[0]).proof,
            MemberProof(token, "job", leader_nonce, member_nonce));
  sim.Receive(conn, AssignmentFor(1));
  ASSERT_TRUE(sim.Last<m::Done>());
  EXPECT_TRUE(sim.Last<m::Done>()->result.ok());

  // A second connection draws a fresh nonce.
  Sim again(o);
  again.Connect();
  EXPECT_EQ(std::get<wire::Hello>(again.Sent()[0]).nonce, std::string(kNonceBytes, 'b'));
}

TEST(MemberCoreTest, ALeaderWithAnotherTokenIsRefusedAsConfig) {
  MemberCoreOptions o = Sim::Options();
  o.token = "ours";
  o.nonce_source = [] { return std::string(kNonceBytes, 'n'); };
  Sim sim(o);
  const std::uint64_t conn = sim.Connect();
  sim.Receive(conn, wire::Challenge{std::string(kNonceBytes, 'L'),
                                    LeaderProof("theirs", "job", std::string(kNonceBytes, 'n'),
                                                std::string(kNonceBytes, 'L'))});
  ASSERT_TRUE(sim.Last<m::Done>());
  EXPECT_EQ(sim.Last<m::Done>()->result.status().failure_class(), FailureClass::kConfig);
  EXPECT_NE(sim.Last<m::Done>()->result.status().message().find("failed authentication"),
            std::string::npos);
  EXPECT_TRUE(sim.open.empty()) << "the connection is given up";
  EXPECT_TRUE(sim.core.closed());
}

TEST(MemberCoreTest, WithoutATokenAChallengeIsConfigAndWithOneAnUnprovenAssignmentToo) {
  Sim plain;
  std::uint64_t conn = plain.Connect();
  plain.Receive(conn, wire::Challenge{std::string(kNonceBytes, 'L'), "x"});
  ASSERT_TRUE(plain.Last<m::Done>());
  EXPECT_NE(plain.Last<m::Done>()->result.status().message().find("requires authentication"),
            std::string::npos);

  MemberCoreOptions o = Sim::Options();
  o.token = "ours";
  o.nonce_source = [] { return std::string(kNonceBytes, 'n'); };
  Sim sim(o);
  conn = sim.Connect();
  sim.Receive(conn, AssignmentFor(1));
  ASSERT_TRUE(sim.Last<m::Done>());
  EXPECT_EQ(sim.Last<m::Done>()->result.status().failure_class(), FailureClass::kConfig);
  EXPECT_NE(sim.Last<m::Done>()->result.status().message().find("did not authenticate"),
            std::string::npos);
}

// ---- the leader's refusals ----

TEST(MemberCoreTest, ARetriableRejectBacksOffAndKeepsTheReasonForTheTimeout) {
  Sim sim;
  const std::uint64_t conn = sim.Connect();
  sim.Receive(conn, wire::Reject{"index", "index 1 is held by a live connection", true});
  EXPECT_FALSE(sim.Last<m::Done>());
  EXPECT_EQ(sim.core.phase(), MemberCore::Phase::kBackingOff);
  ASSERT_TRUE(sim.Last<m::Disconnect>());
  sim.Fire(MemberTimer::kStep);
  sim.Take(sim.core.OnResolved(sim.Last<m::ResolveName>()->id,
                               {{}, ResolveError::kServerFailure, "ARES_ESERVFAIL"}, sim.now));
  sim.Fire(MemberTimer::kDeadline);
  ASSERT_TRUE(sim.Last<m::Done>());
  const std::string msg = sim.Last<m::Done>()->result.status().message();
  EXPECT_NE(msg.find("; the leader refused: index 1 is held by a live connection"),
            std::string::npos)
      << msg;
}

TEST(MemberCoreTest, ANextGenerationRejectRetriesSoonWithTheIndexTheLeaderGave) {
  MemberCoreOptions o = Sim::Options();
  o.hello.index = wire::kNoIndex;
  Sim sim(o);
  const std::uint64_t conn = sim.Connect();
  sim.Sent();
  wire::Reject r{wire::kNextGenerationField, "joins the next generation", true};
  r.index = 4;
  sim.Receive(conn, r);
  EXPECT_LE(sim.armed.at(MemberTimer::kStep), sim.now + tunables::kRejoinBackoffInitial)
      << "a rejoining pod's backoff, not a cold start's";
  EXPECT_EQ(sim.core.hello().index, 4u);
  sim.Fire(MemberTimer::kStep);
  sim.Take(sim.core.OnResolved(sim.Last<m::ResolveName>()->id, {{"10.0.0.10"}, {}, ""}, sim.now));
  sim.Take(sim.core.OnConnected(sim.Last<m::Connect>()->conn, sim.now));
  auto sent = sim.Sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(std::get<wire::Hello>(sent[0]).index, 4u) << "says hello with its new index";
}

TEST(MemberCoreTest, ReplacedAndLeftRefusalsAreInfraAndSayWhoTookThePlace) {
  for (const char* field : {wire::kReplacedField, wire::kLeftField}) {
    Sim sim;
    const std::uint64_t conn = sim.Connect();
    wire::Reject r{field, "pod 1 was declared lost", false};
    if (std::string(field) == wire::kReplacedField) r.replaced = wire::Replaced{3, 1, 2};
    sim.Receive(conn, r);
    ASSERT_TRUE(sim.Last<m::Done>()) << field;
    EXPECT_EQ(sim.Last<m::Done>()->result.status().failure_class(), FailureClass::kInfra);
    EXPECT_EQ(sim.Last<m::Done>()->result.status().message(),
              "the leader refused this pod: pod 1 was declared lost");
    EXPECT_EQ(sim.core.replaced(), r.replaced);
    EXPECT_TRUE(sim.open.empty());
  }
}

TEST(MemberCoreTest, AnyOtherFinalRefusalIsConfig) {
  Sim sim;
  const std::uint64_t conn = sim.Connect();
  sim.Receive(conn, wire::Reject{"nnodes", "nnodes 3 here, 4 at the leader", false});
  ASSERT_TRUE(sim.Last<m::Done>());
  EXPECT_EQ(sim.Last<m::Done>()->result.status().failure_class(), FailureClass::kConfig);
  EXPECT_FALSE(sim.core.replaced());
}

// ---- the assignment ----

TEST(MemberCoreTest, TheAssignmentEndsTheJoinAndKeepsTheConnection) {
  Sim sim;
  const std::uint64_t conn = sim.Connect();
  sim.Receive(conn, AssignmentFor(1));
  ASSERT_TRUE(sim.Last<m::Done>());
  EXPECT_EQ(*sim.Last<m::Done>()->result, AssignmentFor(1));
  EXPECT_EQ(sim.core.phase(), MemberCore::Phase::kJoined);
  EXPECT_TRUE(sim.open.contains(conn)) << "it is the control channel now";
  EXPECT_TRUE(sim.armed.empty()) << "no timeout, deadline or progress line runs any more";
  EXPECT_TRUE(sim.core.OnTimer(MemberTimer::kDeadline, kT0 + 61s).empty());
}

TEST(MemberCoreTest, AStaleLeadersAssignmentIsRetriedAndAContradictoryOneIsConfig) {
  Sim sim;
  std::uint64_t conn = sim.Connect();
  wire::Assignment other = AssignmentFor(1);
  other.attempt = 5;
  sim.Receive(conn, other);
  EXPECT_FALSE(sim.Last<m::Done>());
  EXPECT_EQ(sim.core.phase(), MemberCore::Phase::kBackingOff);

  Sim bad;
  conn = bad.Connect();
  bad.Receive(conn, AssignmentFor(2));  // rank_base of index 2 for index 1
  ASSERT_TRUE(bad.Last<m::Done>());
  EXPECT_EQ(bad.Last<m::Done>()->result.status().failure_class(), FailureClass::kConfig);
}

// ---- the control channel ----

TEST(MemberCoreTest, TheChannelHeartbeatsAndEchoesTheStepRate) {
  Sim sim;
  const std::uint64_t conn = sim.Join();
  sim.Sent();
  sim.core.SetStepRate(2500, 3);
  sim.Take(sim.core.StartChannel(400ms, 6, sim.now));
  EXPECT_TRUE(sim.core.in_channel());
  auto sent = sim.Sent();
  ASSERT_EQ(sent.size(), 1u) << "the first heartbeat at once";
  EXPECT_EQ(std::get<wire::Heartbeat>(sent[0]).step_rate_milli, 2500u);
  EXPECT_EQ(std::get<wire::Heartbeat>(sent[0]).slowest_rank, 3u);
  EXPECT_EQ(sim.armed.at(MemberTimer::kHeartbeat), sim.now + 100ms);
  // The leader heard every 400 ms: never lost, a heartbeat every 400 ms.
  const auto start = sim.now;
  while (sim.now < start + 10s) {
    if ((sim.now - start) % 400ms == 0ms) sim.Receive(conn, wire::Heartbeat{});
    sim.Fire(MemberTimer::kHeartbeat);
    EXPECT_FALSE(sim.Last<m::Lost>());
  }
  EXPECT_EQ(sim.Sent().size(), 25u);
  EXPECT_EQ(sim.core.HeartbeatSilence(sim.now), 400ms);
}

TEST(MemberCoreTest, TheLeadersSilenceIsALoss) {
  Sim sim;
  const std::uint64_t conn = sim.Join();
  sim.Take(sim.core.StartChannel(400ms, 6, sim.now));
  const auto heard = sim.now;
  while (!sim.Last<m::Lost>()) sim.Fire(MemberTimer::kHeartbeat);
  EXPECT_GT(sim.now - heard, 2400ms);
  EXPECT_LE(sim.now - heard, 2400ms + 100ms) << "noticed within a check interval";
  EXPECT_EQ(sim.Last<m::Lost>()->why, "no heartbeat from the leader for 2400 ms");
  EXPECT_FALSE(sim.open.contains(conn));
  EXPECT_FALSE(sim.core.in_channel());
  EXPECT_FALSE(sim.armed.contains(MemberTimer::kHeartbeat));
  sim.Take(sim.core.OnClosed(conn, "End of file", sim.now));
  EXPECT_TRUE(sim.last.empty()) << "lost once";
}

TEST(MemberCoreTest, AStopIsPassedOnAndOneThatCameWithTheAssignmentAtStartChannel) {
  Sim sim;
  const std::uint64_t conn = sim.Connect();
  wire::Stop stop{.failed_index = 2, .reason = "worker 0 exited 1", .restart = true,
                  .next_generation = 1};
  auto bytes = wire::Encode(AssignmentFor(1));
  auto more = wire::Encode(stop);
  bytes.insert(bytes.end(), more.begin(), more.end());
  sim.Take(sim.core.OnReceived(conn, bytes, sim.now));
  ASSERT_TRUE(sim.Last<m::Done>());
  EXPECT_FALSE(sim.Last<m::Stopped>()) << "not before StartChannel";
  sim.now += 5s;  // a slow preflight
  sim.Take(sim.core.StartChannel(400ms, 6, sim.now));
  ASSERT_TRUE(sim.Last<m::Stopped>());
  EXPECT_EQ(sim.Last<m::Stopped>()->stop, stop);
  EXPECT_FALSE(sim.Last<m::Lost>()) << "heard at StartChannel, not 5 s ago";
  wire::Stop second = stop;
  second.restart = false;
  sim.Receive(conn, second);
  ASSERT_TRUE(sim.Last<m::Stopped>());
  EXPECT_EQ(sim.Last<m::Stopped>()->stop, second);
}

TEST(MemberCoreTest, AConnectionClosedBeforeStartChannelIsALossThere) {
  Sim sim;
  const std::uint64_t conn = sim.Join();
  sim.Take(sim.core.OnClosed(conn, "Connection reset by peer", sim.now));
  EXPECT_FALSE(sim.Last<m::Lost>());
  EXPECT_FALSE(sim.open.contains(conn));
  sim.Take(sim.core.StartChannel(400ms, 6, sim.now));
  ASSERT_TRUE(sim.Last<m::Lost>());
  EXPECT_EQ(sim.Last<m::Lost>()->why, "the leader's connection closed (Connection reset by peer)");
  EXPECT_EQ(sim.Count<m::Send>(), 0);
}

TEST(MemberCoreTest, AfterAnOkReportTheLeaderClosingIsNoLoss) {
  Sim sim;
  const std::uint64_t conn = sim.Join();
  sim.Take(sim.core.StartChannel(400ms, 6, sim.now));
  sim.Sent();
  wire::Report done{.index = 1, .ok = true, .reason = "every worker finished"};
  sim.Take(sim.core.Report(done, 9, sim.now));
  ASSERT_TRUE(sim.Last<m::Send>());
  EXPECT_EQ(sim.Last<m::Send>()->ticket, 9u);
  EXPECT_EQ(std::get<wire::Report>(sim.Sent().at(0)), done);
  sim.Take(sim.core.OnClosed(conn, "End of file", sim.now));
  EXPECT_FALSE(sim.Last<m::Lost>());
  ASSERT_TRUE(sim.Last<m::Disconnect>());
  sim.Take(sim.core.Report(done, 10, sim.now));
  ASSERT_TRUE(sim.Last<m::Unsent>()) << "no connection: the ticket is done at once";
  EXPECT_EQ(sim.Last<m::Unsent>()->ticket, 10u);
}

TEST(MemberCoreTest, GarbageOnTheChannelIsALoss) {
  Sim sim;
  const std::uint64_t conn = sim.Join();
  sim.Take(sim.core.StartChannel(400ms, 6, sim.now));
  std::vector<std::uint8_t> junk(16, 0);
  sim.Take(sim.core.OnReceived(conn, junk, sim.now));
  ASSERT_TRUE(sim.Last<m::Lost>());
  EXPECT_EQ(sim.Last<m::Lost>()->why.rfind("the leader sent garbage: ", 0), 0u);
}

// ---- leaves and reports before the assignment ----

TEST(MemberCoreTest, ALeaveWhileWaitingForTheGangGoesOnTheHandshakesConnection) {
  Sim sim;
  sim.Connect();
  sim.Sent();
  wire::Report leave{.index = 1, .ok = false, .reason = "SIGTERM", .leaving = true};
  sim.Take(sim.core.Report(leave, 1, sim.now));
  auto sent = sim.Sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(std::get<wire::Report>(sent[0]), leave);

  Sim resolving;
  resolving.Take(resolving.core.Start(kT0));
  resolving.Take(resolving.core.Report(leave, 1, kT0));
  EXPECT_TRUE(resolving.Last<m::Unsent>()) << "no connection yet";
  EXPECT_EQ(resolving.Count<m::Send>(), 0);
}

// ---- the deadline, and Close ----

TEST(MemberCoreTest, TheDeadlineEndsTheJoinNamingWhatWasTriedAndTheDnsHint) {
  Sim sim;
  sim.Take(sim.core.Start(kT0));
  sim.Take(sim.core.OnResolved(sim.Last<m::ResolveName>()->id,
                               {{}, ResolveError::kNotFound, "ARES_ENOTFOUND"}, sim.now));
  sim.Fire(MemberTimer::kDeadline);
  EXPECT_EQ(sim.now, kT0 + 60s);
  ASSERT_TRUE(sim.Last<m::Done>());
  EXPECT_EQ(sim.Last<m::Done>()->result.status().failure_class(), FailureClass::kInfra);
  EXPECT_EQ(sim.Last<m::Done>()->result.status().message(),
            "could not join the leader leader.svc port 29400 within 60.0 s (1 attempts; "
            "addresses tried: none; last error: ARES_ENOTFOUND; the leader's name leader.svc "
            "never resolved (not_found): check that the headless Service selects the leader "
            "pod, that the pod's subdomain names that Service, and that the Service sets "
            "publishNotReadyAddresses: true)");
  EXPECT_TRUE(sim.armed.empty());
  EXPECT_TRUE(sim.core.closed());
}

TEST(MemberCoreTest, TheDeadlineWhileConnectingSaysWhatWasUnderWay) {
  MemberCoreOptions o = Sim::Options();
  o.leader_host = "10.0.0.10";
  o.deadline = kT0 + 2s;
  Sim sim(o);
  sim.Take(sim.core.Start(kT0));
  sim.Take(sim.core.OnResolved(sim.Last<m::ResolveName>()->id, {{"10.0.0.10"}, {}, ""}, kT0));
  const std::uint64_t conn = sim.Last<m::Connect>()->conn;
  sim.Fire(MemberTimer::kDeadline);
  ASSERT_TRUE(sim.Last<m::Done>());
  EXPECT_EQ(sim.Last<m::Done>()->result.status().message(),
            "could not join the leader 10.0.0.10 port 29400 within 2.0 s (1 attempts; addresses "
            "tried: 10.0.0.10; last error: none yet (connecting to 10.0.0.10 port 29400))");
  EXPECT_FALSE(sim.open.contains(conn));
  EXPECT_TRUE(sim.core.OnConnected(conn, sim.now).empty());
}

TEST(MemberCoreTest, CloseEndsEverythingAndNothingComesAfter) {
  Sim sim;
  const std::uint64_t conn = sim.Join();
  sim.Take(sim.core.StartChannel(400ms, 6, sim.now));
  sim.Take(sim.core.Close());
  EXPECT_TRUE(sim.open.empty());
  EXPECT_TRUE(sim.armed.empty());
  EXPECT_TRUE(sim.core.closed());
  EXPECT_TRUE(sim.core.Close().empty()) << "idempotent";
  EXPECT_TRUE(sim.Receive(conn, wire::Stop{}).empty());
  EXPECT_TRUE(sim.core.OnTimer(MemberTimer::kHeartbeat, sim.now + 1h).empty());
  EXPECT_EQ(sim.core.HeartbeatSilence(sim.now), Clock::duration{});

  Sim resolving;
  resolving.Take(resolving.core.Start(kT0));
  resolving.Take(resolving.core.Close());
  EXPECT_EQ(resolving.Count<m::CancelResolve>(), 1);
  EXPECT_TRUE(resolving.armed.empty());
}

TEST(MemberCoreTest, AStaleTimerExpiryIsIgnored) {
  Sim sim;
  sim.Connect();
  const auto reply_deadline = sim.armed.at(MemberTimer::kStep);
  EXPECT_TRUE(sim.core.OnTimer(MemberTimer::kStep, reply_deadline - 1ms).empty());
  EXPECT_TRUE(sim.core.OnTimer(MemberTimer::kHeartbeat, reply_deadline).empty()) << "not armed";
  EXPECT_FALSE(sim.Fire(MemberTimer::kStep).empty());
}

// Seeded schedules of every input the driver can give: whatever happens, the
// core never asks for a connection twice nor gives one up twice nor sends on
// one it gave up (Sim::Take), Done comes at most once, and the deadline stays
// armed until the join ends.
TEST(MemberCoreTest, RandomSchedulesKeepTheDriversContract) {
  std::map<std::string, int> ends;  // how the runs ended: each way is reached
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    std::mt19937_64 rng(seed);
    MemberCoreOptions o = Sim::Options();
    o.seed = seed;
    o.deadline = kT0 + 20s;
    Sim sim(o);
    sim.Take(sim.core.Start(kT0));
    int done = 0;
    std::size_t seen = 0;  // sim.all's actions looked at
    std::uint64_t resolve = 0, conn = 0;
    while ((!sim.armed.empty() || (sim.core.phase() == MemberCore::Phase::kJoined &&
                                   !sim.core.in_channel() && !sim.core.closed())) &&
           sim.now < kT0 + 60s) {
      for (; seen < sim.all.size(); ++seen) {
        const auto& a = sim.all[seen];
        if (const auto* r = std::get_if<m::ResolveName>(&a)) resolve = r->id;
        if (const auto* c = std::get_if<m::Connect>(&a)) conn = c->conn;
        done += std::holds_alternative<m::Done>(a) ? 1 : 0;
      }
      sim.now += std::chrono::milliseconds(rng() % 500);
      switch (rng() % 8) {
        case 0: sim.Take(sim.core.OnResolved(resolve, {{"10.0.0.10", "10.0.0.11"}, {}, ""}, sim.now)); break;
        case 1: sim.Take(sim.core.OnResolved(resolve, {{}, ResolveError::kTimeout, ""}, sim.now)); break;
        case 2: sim.Take(sim.core.OnConnected(conn, sim.now)); break;
        case 3: sim.Take(sim.core.OnConnectFailed(conn, "Connection refused", sim.now)); break;
        case 4: sim.Take(sim.core.OnClosed(conn, "End of file", sim.now)); break;
        case 5: sim.Receive(conn, wire::Heartbeat{}); break;
        case 6: sim.Receive(conn, rng() % 4 == 0 ? wire::Message(AssignmentFor(1))
                                                 : wire::Message(wire::Stop{})); break;
        default: {
          if (sim.armed.empty()) break;
          auto next = std::min_element(sim.armed.begin(), sim.armed.end(),
                                       [](auto& a, auto& b) { return a.second < b.second; });
          if (next->second > sim.now) sim.now = next->second;
          sim.Fire(next->first);
        }
      }
      if (sim.core.phase() == MemberCore::Phase::kJoined && !sim.core.in_channel() &&
          rng() % 2 == 0) {
        sim.Take(sim.core.StartChannel(400ms, 6, sim.now));
      }
      ASSERT_LE(done, 1) << "seed " << seed;
      if (!sim.core.closed() && sim.core.phase() != MemberCore::Phase::kJoined) {
        ASSERT_TRUE(sim.armed.contains(MemberTimer::kDeadline)) << "seed " << seed;
        ASSERT_EQ(sim.armed.at(MemberTimer::kDeadline), o.deadline) << "seed " << seed;
      }
      if (::testing::Test::HasFailure()) return;
    }
    EXPECT_TRUE(sim.core.closed() || sim.core.in_channel()) << "seed " << seed;
    for (const auto& a : sim.all) {
      if (const auto* d = std::get_if<m::Done>(&a)) {
        ++ends[d->result.ok() ? "joined" : "failed"];
      }
      if (std::holds_alternative<m::Lost>(a)) ++ends["lost"];
      if (std::holds_alternative<m::Stopped>(a)) ++ends["stopped"];
    }
  }
  for (const char* end : {"joined", "failed", "lost", "stopped"}) {
    EXPECT_GT(ends[end], 0) << end;
  }
}

}  // namespace
}  // namespace trainlet::rendezvous
