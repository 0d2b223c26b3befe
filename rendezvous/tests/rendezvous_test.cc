// Leader and members over real loopback sockets, in one event loop.
#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <map>
#include <optional>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <gtest/gtest.h>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>

#include "../src/frame_queue.h"
#include "trainlet/rendezvous/peer_log_limiter.h"
#include "trainlet/rendezvous/arrival.h"
#include "trainlet/rendezvous/auth.h"
#include "trainlet/rendezvous/leader.h"
#include "trainlet/rendezvous/member.h"
#include "test_hello.h"

namespace trainlet::rendezvous {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using exitcodes::FailureClass;
using exitcodes::Result;

class RendezvousTest : public ::testing::Test {
 public:  // for the shared scenarios below
  std::shared_ptr<Leader> MakeLeader(std::uint32_t nnodes, std::uint16_t port = 0,
                                     std::string token = "", LeaderOptions o = {}) {
    o.token = std::move(token);
    o.nnodes = nnodes;
    o.run_id = "trainer-0";
    if (o.handshake_timeout == LeaderOptions{}.handshake_timeout) o.handshake_timeout = 500ms;
    auto l = Leader::Listen(io_.get_executor(), port, o);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    return std::move(l).value();
  }

  std::shared_ptr<Member> MakeMember(wire::Hello hello, std::uint16_t port,
                                     std::chrono::milliseconds budget = 10s,
                                     std::string token = "") {
    MemberOptions o;
    o.leader_host = "127.0.0.1";
    o.port = port;
    o.hello = std::move(hello);
    o.deadline = Clock::now() + budget;
    o.connect_timeout = 500ms;
    o.backoff.initial = 20ms;
    o.backoff.cap = 100ms;
    o.backoff.min_delay = 10ms;
    o.seed = 7;
    o.token = std::move(token);
    auto m = Member::Create(io_.get_executor(), o);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return std::move(m).value();
  }

  // Starts `leader` with its own `hello` and expects its rendezvous to fail
  // within 5 s as infra, the message containing `text`.
  void ExpectLeaderFailsAsInfraNaming(const std::shared_ptr<Leader>& leader, wire::Hello hello,
                                      const std::string& text) {
    std::optional<Result<wire::Assignment>> own;
    leader->Start(std::move(hello), [&](auto r) { own = r; });
    RunUntil([&] { return own.has_value(); }, 5s);
    ASSERT_TRUE(own && !own->ok());
    EXPECT_EQ(own->status().failure_class(), FailureClass::kInfra);
    EXPECT_NE(own->status().message().find(text), std::string::npos) << own->status().message();
  }

  // Runs the loop until `pred` holds or `limit` passes.
  void RunUntil(std::function<bool()> pred, std::chrono::milliseconds limit = 10s) {
    auto end = Clock::now() + limit;
    while (!pred() && Clock::now() < end) {
      io_.run_for(10ms);
      if (io_.stopped()) io_.restart();
    }
  }

  static std::uint16_t FreePort() {
    asio::io_context io;
    asio::ip::tcp::acceptor a(io, {asio::ip::address_v4::loopback(), 0});
    return a.local_endpoint().port();
  }

  asio::io_context io_;
};

using Outcome = std::optional<Result<wire::Assignment>>;

// A LeaderMembership whose answers the test sets: `plan` (required) and
// `first` (unset: false); no replacements, no leaves.
struct TestMembership final : LeaderMembership {
  std::function<std::optional<std::map<std::uint32_t, std::uint32_t>>(
      const std::vector<std::uint32_t>&)>
      plan;
  std::function<bool(std::uint32_t)> first;
  std::optional<std::map<std::uint32_t, std::uint32_t>> Plan(
      const std::vector<std::uint32_t>& joined) override {
    return plan(joined);
  }
  bool AssignFirst(std::uint32_t index) override { return first && first(index); }
  std::optional<wire::Replaced> ReplacedOf(std::uint32_t) const override { return std::nullopt; }
  std::optional<std::uint32_t> LeftOf(std::uint32_t) const override { return std::nullopt; }
  std::optional<std::uint32_t> LostSpareOf(std::uint32_t) const override { return std::nullopt; }
  void OnLeave(std::uint32_t) override {}
};

// Starts members 1..nnodes-1 of a gang of `nnodes` at `port`; each one's
// outcome lands in (*got)[index].
std::vector<std::shared_ptr<Member>> StartMembers(RendezvousTest& t, std::uint32_t nnodes,
                                                  std::uint16_t port, std::map<int, Outcome>* got) {
  std::vector<std::shared_ptr<Member>> members;
  for (std::uint32_t i = 1; i < nnodes; ++i) {
    members.push_back(t.MakeMember(HelloFor(i, nnodes), port));
    members.back()->Start([got, i](auto r) { (*got)[i] = r; });
  }
  return members;
}

TEST_F(RendezvousTest, GangOfFourFormsWithRanksFromTheIndex) {
  auto leader = MakeLeader(4);
  Outcome own;
  leader->Start(HelloFor(0, 4), [&](auto r) { own = r; });
  std::map<int, Outcome> got;
  std::vector<std::shared_ptr<Member>> members;
  for (std::uint32_t i : {3u, 1u, 2u}) {
    members.push_back(MakeMember(HelloFor(i, 4), leader->port()));
    members.back()->Start([&got, i](auto r) { got[i] = r; });
  }
  RunUntil([&] { return own && got.size() == 3; });
  ASSERT_TRUE(own && own->ok()) << (own ? own->status().ToString() : "no result");
  EXPECT_EQ((*own)->rank_base, 0u);
  EXPECT_EQ((*own)->world_size, 8u);
  EXPECT_EQ((*own)->master_addr, "127.0.0.1");
  for (std::uint32_t i : {1u, 2u, 3u}) {
    ASSERT_TRUE(got[i] && got[i]->ok()) << i;
    const auto& a = **got[i];
    EXPECT_EQ(a.rank_base, i * 2);
    EXPECT_EQ(a.world_size, 8u);
    EXPECT_EQ(a.nnodes, 4u);
    EXPECT_EQ(a.generation, 0u);  // nobody restarted yet
    EXPECT_EQ(a.master_addr, "127.0.0.1");
    EXPECT_EQ(a.master_port, 29500);
  }
}

// The node each hello names (NODE_NAME) stays known to the leader after the
// pod's connection is gone, so its metrics can name a lost pod's node.
TEST_F(RendezvousTest, TheLeaderKeepsEachPodsNodeAfterItsConnectionCloses) {
  auto leader = MakeLeader(3);
  Outcome own;
  wire::Hello mine = HelloFor(0, 3);
  mine.node_name = "gpu-node-0";
  leader->Start(mine, [&](auto r) { own = r; });
  std::map<int, Outcome> got;
  std::vector<std::shared_ptr<Member>> members;
  for (std::uint32_t i : {1u, 2u}) {
    wire::Hello h = HelloFor(i, 3);
    if (i == 1) h.node_name = "gpu-node-" + std::to_string(i);  // pod 2 names none
    members.push_back(MakeMember(h, leader->port()));
    members.back()->Start([&got, i](auto r) { got[i] = r; });
  }
  RunUntil([&] { return own && got.size() == 2; });
  ASSERT_TRUE(own && own->ok()) << (own ? own->status().ToString() : "no result");
  members[0]->Close();
  io_.run_for(50ms);
  EXPECT_EQ(leader->node_name(1), "gpu-node-1");
  EXPECT_EQ(leader->node_name(2), "");
  EXPECT_EQ(leader->node_name(7), "") << "never admitted";
}

// After an in-place restart the survivors ask for their last generation + 1; a
// replaced pod (the leader here) starts at 0 and continues the gang's count.
// A fresh leader (a replaced leader pod, at generation 0) continues the
// survivors' count, up to --max-restarts.
TEST_F(RendezvousTest, FreshLeaderContinuesTheSurvivorsGeneration) {
  LeaderOptions lo;
  lo.max_generation = 2;
  auto leader = MakeLeader(3, 0, "", lo);
  Outcome own;
  leader->Start(HelloFor(0, 3), [&](auto r) { own = r; });  // a fresh leader: generation 0
  std::map<int, Outcome> got;
  std::vector<std::shared_ptr<Member>> members;
  for (std::uint32_t i : {1u, 2u}) {
    wire::Hello h = HelloFor(i, 3);
    h.generation = i == 1 ? 2 : 1;
    members.push_back(MakeMember(h, leader->port()));
    members.back()->Start([&got, i](auto r) { got[i] = r; });
  }
  RunUntil([&] { return own && got.size() == 2; });
  ASSERT_TRUE(own && own->ok()) << (own ? own->status().ToString() : "no result");
  EXPECT_EQ((*own)->generation, 2u);
  for (std::uint32_t i : {1u, 2u}) {
    ASSERT_TRUE(got[i] && got[i]->ok()) << i;
    EXPECT_EQ((*got[i])->generation, 2u) << i;
  }
}

// Elastic sizes count restarts apart from generations (a join's is none). A
// fresh leader (a replaced leader pod: generation 0, no restarts) continues the
// members' count, so neither TORCHELASTIC_RESTART_COUNT nor the --max-restarts
// budget starts over; a leader that restarted in place keeps its own.
TEST_F(RendezvousTest, FreshElasticLeaderContinuesTheMembersRestartCount) {
  for (const bool fresh : {true, false}) {
    LeaderOptions lo;
    lo.max_generation = std::nullopt;  // elastic: joins make generations, not restarts
    lo.restarts = fresh ? 0 : 1;
    auto leader = MakeLeader(3, 0, "", lo);
    Outcome own;
    wire::Hello own_hello = HelloFor(0, 3);
    own_hello.generation = fresh ? 0 : 4;
    leader->Start(own_hello, [&](auto r) { own = r; });
    std::map<int, Outcome> got;
    std::vector<std::shared_ptr<Member>> members;
    for (std::uint32_t i : {1u, 2u}) {
      wire::Hello h = HelloFor(i, 3);
      h.generation = 4;
      h.restarts = i == 1 ? 2 : 1;
      members.push_back(MakeMember(h, leader->port()));
      members.back()->Start([&got, i](auto r) { got[i] = r; });
    }
    RunUntil([&] { return own && got.size() == 2; });
    ASSERT_TRUE(own && own->ok()) << (own ? own->status().ToString() : "no result");
    const std::uint32_t want = fresh ? 2 : 1;
    EXPECT_EQ((*own)->restarts, std::optional<std::uint32_t>(want)) << "fresh " << fresh;
    for (std::uint32_t i : {1u, 2u}) {
      ASSERT_TRUE(got[i] && got[i]->ok()) << i;
      EXPECT_EQ((*got[i])->restarts, std::optional<std::uint32_t>(want)) << i;
      EXPECT_EQ((*got[i])->generation, 4u) << i;
    }
  }
}

TEST_F(RendezvousTest, EveryPodGetsTheSameFreshNcclIdsMadeOncePerRound) {
  LeaderOptions o;
  int calls = 0;
  std::uint32_t world = 0;
  std::string id(128, '\0');
  id[5] = '\xff';
  o.make_nccl_ids = [&](std::uint32_t world_size, const std::string& leader_addr) {
    ++calls;
    world = world_size;
    EXPECT_EQ(leader_addr, "127.0.0.1");
    return std::make_pair(22809u, std::vector<std::string>{id, std::string(128, 'x')});
  };
  auto leader = MakeLeader(3, 0, "", o);
  Outcome own;
  leader->Start(HelloFor(0, 3), [&](auto r) { own = r; });
  std::map<int, Outcome> got;
  auto members = StartMembers(*this, 3, leader->port(), &got);
  RunUntil([&] { return own && got.size() == 2; });
  ASSERT_TRUE(own && own->ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(world, 6u);
  for (const Outcome* r : {&own, &got[1], &got[2]}) {
    ASSERT_TRUE(*r && (*r)->ok());
    EXPECT_EQ((**r)->nccl_version, 22809u);
    ASSERT_EQ((**r)->nccl_ids.size(), 2u);
    EXPECT_EQ((**r)->nccl_ids[0], id);  // all 128 bytes, NULs included
  }
}

TEST_F(RendezvousTest, MemberStartingFirstRetriesUntilTheLeaderListens) {
  std::uint16_t port = FreePort();
  Outcome got, own;
  auto member = MakeMember(HelloFor(1, 2), port);
  member->Start([&](auto r) { got = r; });
  std::shared_ptr<Leader> leader;
  asio::steady_timer later(io_, 400ms);
  later.async_wait([&](auto) {
    leader = MakeLeader(2, port);
    leader->Start(HelloFor(0, 2), [&](auto r) { own = r; });
  });
  RunUntil([&] { return got && own; });
  ASSERT_TRUE(got && got->ok()) << (got ? got->status().ToString() : "no result");
  ASSERT_TRUE(own && own->ok());
}

// A member whose launch configuration differs exits config itself; the leader
// refuses it with the reason and keeps serving (a hello is unauthenticated:
// it must never fail the leader).
TEST_F(RendezvousTest, MismatchedConfigurationFailsOnlyThatMemberNamingTheField) {
  auto leader = MakeLeader(2);
  Outcome own, got, good;
  leader->Start(HelloFor(0, 2, 2), [&](auto r) { own = r; });
  auto member = MakeMember(HelloFor(1, 2, 4), leader->port());  // 4 workers per pod vs 2
  member->Start([&](auto r) { got = r; });
  RunUntil([&] { return got.has_value(); });
  ASSERT_TRUE(got && !got->ok());
  EXPECT_EQ(got->status().failure_class(), FailureClass::kConfig);
  EXPECT_NE(got->status().message().find("nproc_per_node=4 on pod 1"), std::string::npos)
      << got->status().message();
  EXPECT_NE(got->status().message().find("nproc_per_node=2 on pod 0"), std::string::npos);
  EXPECT_FALSE(own.has_value()) << "the leader waits on";
  auto right = MakeMember(HelloFor(1, 2, 2), leader->port());
  right->Start([&](auto r) { good = r; });
  RunUntil([&] { return own && good; });
  ASSERT_TRUE(own && own->ok()) << (own ? own->status().ToString() : "no result");
  ASSERT_TRUE(good && good->ok());
}

TEST_F(RendezvousTest, StrangersAndDuplicatesAreRefusedAndTheGangStillForms) {
  auto leader = MakeLeader(3);
  Outcome own, stranger, dup, first, second;
  leader->Start(HelloFor(0, 3), [&](auto r) { own = r; });
  auto m1 = MakeMember(HelloFor(1, 3), leader->port());
  m1->Start([&](auto r) { first = r; });
  RunUntil([&] { return leader->admitted() == 2; });
  auto s = MakeMember(HelloFor(2, 3, 2, "other-job-0"), leader->port(), 1500ms);
  s->Start([&](auto r) { stranger = r; });
  // A second pod with index 1 while the first is live (it answers the waiting
  // heartbeats): a clash, naming both pods; without a token refused for now
  // (a mistake cannot be told from a stranger): it retries, then infra.
  auto d = MakeMember(HelloFor(1, 3), leader->port(), 1500ms);
  d->Start([&](auto r) { dup = r; });
  RunUntil([&] { return stranger && dup; });
  ASSERT_TRUE(stranger && !stranger->ok());
  EXPECT_EQ(stranger->status().failure_class(), FailureClass::kInfra) << "retried, then infra";
  EXPECT_NE(stranger->status().message().find("belongs to job 'other-job-0'"), std::string::npos)
      << stranger->status().message();
  ASSERT_TRUE(dup && !dup->ok());
  EXPECT_EQ(dup->status().failure_class(), FailureClass::kInfra) << "no token: retried";
  EXPECT_NE(dup->status().message().find("two live pods claim index 1"), std::string::npos)
      << dup->status().message();
  EXPECT_FALSE(own.has_value()) << "the leader waits on";
  auto m2 = MakeMember(HelloFor(2, 3), leader->port());
  m2->Start([&](auto r) { second = r; });
  RunUntil([&] { return own && first && second; });
  ASSERT_TRUE(own && own->ok());
  ASSERT_TRUE(first && first->ok());
  ASSERT_TRUE(second && second->ok());
  EXPECT_EQ((*second)->rank_base, 4u);
}

// A stranger with the right job id (anyone can read the leader's host label)
// and another nnodes used to make the leader exit config: FailJob for the whole
// Job. Now only the stranger is refused; the admitted pod stays in.
TEST_F(RendezvousTest, StrangerWithAnotherNnodesCannotFailTheGang) {
  auto leader = MakeLeader(3);
  Outcome own, first, bad, second;
  leader->Start(HelloFor(0, 3), [&](auto r) { own = r; });
  auto m1 = MakeMember(HelloFor(1, 3), leader->port());
  m1->Start([&](auto r) { first = r; });
  RunUntil([&] { return leader->admitted() == 2; });
  auto stranger = MakeMember(HelloFor(2, 4), leader->port());  // says 4 pods
  stranger->Start([&](auto r) { bad = r; });
  RunUntil([&] { return bad.has_value(); });
  ASSERT_TRUE(bad && !bad->ok());
  EXPECT_EQ(bad->status().failure_class(), FailureClass::kConfig);
  EXPECT_NE(bad->status().message().find("nnodes=4 on pod 2"), std::string::npos)
      << bad->status().message();
  EXPECT_FALSE(own.has_value());
  EXPECT_FALSE(first.has_value()) << "the admitted pod is not released";
  auto m2 = MakeMember(HelloFor(2, 3), leader->port());
  m2->Start([&](auto r) { second = r; });
  RunUntil([&] { return own && first && second; });
  ASSERT_TRUE(own && own->ok());
  ASSERT_TRUE(first && first->ok());
  ASSERT_TRUE(second && second->ok());
}

// The generation is the leader's: a hello cannot raise it (a stranger asking
// for 2^32-1 used to disable --max-restarts), nor ask beyond --max-restarts.
TEST_F(RendezvousTest, GenerationIsTheLeadersAlone) {
  LeaderOptions lo;
  lo.max_generation = 3;
  auto leader = MakeLeader(3, 0, "", lo);
  Outcome own, got1, got2, bogus;
  wire::Hello own_hello = HelloFor(0, 3);
  own_hello.generation = 1;  // the leader has run generation 0 and restarted
  leader->Start(own_hello, [&](auto r) { own = r; });
  wire::Hello huge = HelloFor(2, 3);
  huge.generation = 0xFFFFFFFFu;
  auto s = MakeMember(huge, leader->port());
  s->Start([&](auto r) { bogus = r; });
  RunUntil([&] { return bogus.has_value(); });
  ASSERT_TRUE(bogus && !bogus->ok());
  EXPECT_NE(bogus->status().message().find("beyond --max-restarts 3"), std::string::npos)
      << bogus->status().message();
  wire::Hello h1 = HelloFor(1, 3), h2 = HelloFor(2, 3);
  h1.generation = 1;
  h2.generation = 0;  // a replaced member
  auto m1 = MakeMember(h1, leader->port());
  auto m2 = MakeMember(h2, leader->port());
  m1->Start([&](auto r) { got1 = r; });
  m2->Start([&](auto r) { got2 = r; });
  RunUntil([&] { return own && got1 && got2; });
  ASSERT_TRUE(own && own->ok());
  EXPECT_EQ((*own)->generation, 1u);
  ASSERT_TRUE(got1 && got1->ok());
  EXPECT_EQ((*got1)->generation, 1u);
  ASSERT_TRUE(got2 && got2->ok());
  EXPECT_EQ((*got2)->generation, 1u);
}

// A non-fresh leader's round admits its own generation (and 0) only: a
// member asking for more (within --max-restarts) is refused for now, so it
// neither raises the leader's generation nor takes an index (admission.h,
// rule 9); one asking for the round's joins it.
TEST_F(RendezvousTest, HelloCannotRaiseARunningLeadersGeneration) {
  LeaderOptions lo;
  lo.max_generation = 5;
  auto leader = MakeLeader(2, 0, "", lo);
  Outcome own, got, right;
  wire::Hello own_hello = HelloFor(0, 2);
  own_hello.generation = 2;
  leader->Start(own_hello, [&](auto r) { own = r; });
  wire::Hello h = HelloFor(1, 2);
  h.generation = 4;
  auto m = MakeMember(h, leader->port(), 500ms);
  m->Start([&](auto r) { got = r; });
  RunUntil([&] { return got.has_value(); });
  ASSERT_TRUE(got && !got->ok());
  EXPECT_EQ(got->status().failure_class(), FailureClass::kInfra) << "retried, then infra";
  EXPECT_NE(got->status().message().find("asks for generation 4"), std::string::npos)
      << got->status().message();
  EXPECT_FALSE(own.has_value());
  h.generation = 2;
  auto m2 = MakeMember(h, leader->port());
  m2->Start([&](auto r) { right = r; });
  RunUntil([&] { return own.has_value() && right.has_value(); });
  ASSERT_TRUE(own && own->ok());
  EXPECT_EQ((*own)->generation, 2u);
  ASSERT_TRUE(right && right->ok());
}

// A pod that died without a FIN still holds its index: while it was heard from
// within holder_liveness a second claim is a clash; once silent longer, the
// replacement takes the index at once (never refused).
TEST_F(RendezvousTest, ASilentHoldersIndexGoesToTheReplacement) {
  LeaderOptions lo;
  lo.holder_liveness = 300ms;
  lo.waiting_heartbeat = 50ms;
  auto leader = MakeLeader(3, 0, "", lo);
  Outcome own, got, other;
  leader->Start(HelloFor(0, 3), [&](auto r) { own = r; });
  // A raw connection claims index 1, then goes silent (its pod is gone).
  auto stale = std::make_unique<asio::ip::tcp::socket>(io_);
  stale->connect({asio::ip::address_v4::loopback(), leader->port()});
  auto frame = wire::Encode(HelloFor(1, 3));
  asio::write(*stale, asio::buffer(frame));
  RunUntil([&] { return leader->admitted() == 2; });
  RunUntil([&] { return false; }, 600ms);  // silent past holder_liveness
  auto m = MakeMember(HelloFor(1, 3), leader->port());
  m->Start([&](auto r) { got = r; });
  RunUntil([&] { return leader->admitted() == 2 && got.has_value(); }, 500ms);
  EXPECT_FALSE(got.has_value()) << "admitted, waiting for the gang, not refused";
  auto m2 = MakeMember(HelloFor(2, 3), leader->port());
  m2->Start([&](auto r) { other = r; });
  RunUntil([&] { return got && own && other; });
  ASSERT_TRUE(got && got->ok()) << (got ? got->status().ToString() : "no result");
  ASSERT_TRUE(own && own->ok());
  ASSERT_TRUE(other && other->ok());
}

TEST_F(RendezvousTest, PodsOfAnotherAttemptNeverGetAnAssignment) {
  // Attempt 2's leader; a stale member of attempt 1 keeps being refused (and
  // retrying) while the attempt-2 member joins.
  auto leader = MakeLeader(2);
  Outcome own, stale, fresh;
  wire::Hello lh = HelloFor(0, 2);
  lh.attempt = 2;
  leader->Start(lh, [&](auto r) { own = r; });
  wire::Hello old_hello = HelloFor(1, 2);
  old_hello.attempt = 1;
  auto s = MakeMember(old_hello, leader->port(), 800ms);
  s->Start([&](auto r) { stale = r; });
  RunUntil([&] { return stale.has_value(); });
  ASSERT_TRUE(stale && !stale->ok());
  EXPECT_EQ(stale->status().failure_class(), FailureClass::kInfra);
  EXPECT_NE(stale->status().message().find("attempt 1"), std::string::npos)
      << stale->status().message();
  wire::Hello new_hello = HelloFor(1, 2);
  new_hello.attempt = 2;
  auto m = MakeMember(new_hello, leader->port());
  m->Start([&](auto r) { fresh = r; });
  RunUntil([&] { return fresh && own; });
  ASSERT_TRUE(fresh && fresh->ok());
  EXPECT_EQ((*fresh)->attempt, 2u);
}

TEST_F(RendezvousTest, SharedTokenMutualAuthentication) {
  const std::string token = "s3cret-token-value";
  auto leader = MakeLeader(3, 0, token);
  Outcome own, good, wrong, none;
  leader->Start(HelloFor(0, 3), [&](auto r) { own = r; });
  auto w = MakeMember(HelloFor(1, 3), leader->port(), 3s, "another-token");
  w->Start([&](auto r) { wrong = r; });
  auto n = MakeMember(HelloFor(1, 3), leader->port(), 3s, "");
  n->Start([&](auto r) { none = r; });
  RunUntil([&] { return wrong && none; });
  ASSERT_TRUE(wrong && !wrong->ok());
  EXPECT_EQ(wrong->status().failure_class(), FailureClass::kConfig);
  EXPECT_NE(wrong->status().message().find("failed authentication"), std::string::npos)
      << wrong->status().message();
  ASSERT_TRUE(none && !none->ok());
  EXPECT_NE(none->status().message().find("requires the shared token"), std::string::npos)
      << none->status().message();
  for (const auto& r : {wrong, none}) {
    EXPECT_EQ(r->status().message().find(token), std::string::npos) << "never in a message";
  }
  EXPECT_EQ(leader->admitted(), 1u) << "neither got in";
  // The right token on both sides: the gang forms.
  auto g1 = MakeMember(HelloFor(1, 3), leader->port(), 5s, token);
  g1->Start([&](auto r) { good = r; });
  Outcome good2;
  auto g2 = MakeMember(HelloFor(2, 3), leader->port(), 5s, token);
  g2->Start([&](auto r) { good2 = r; });
  RunUntil([&] { return own && good && good2; });
  ASSERT_TRUE(good && good->ok()) << (good ? good->status().ToString() : "none");
  ASSERT_TRUE(own && own->ok());
}

TEST_F(RendezvousTest, TokenNeverCrossesTheWire) {
  const std::string token = "a-token-nobody-may-see";
  auto leader = MakeLeader(2, 0, token);
  leader->Start(HelloFor(0, 2), [](auto) {});
  asio::ip::tcp::socket raw(io_);
  raw.connect({asio::ip::address_v4::loopback(), leader->port()});
  wire::Hello h = HelloFor(1, 2);
  h.nonce = std::string(32, 'n');
  auto frame = wire::Encode(h);
  asio::write(raw, asio::buffer(frame));
  std::string received;
  raw.non_blocking(true);
  RunUntil([&] {
    char buf[4096];
    boost::system::error_code ec;
    std::size_t n = raw.read_some(asio::buffer(buf), ec);
    received.append(buf, n);
    return received.size() >= wire::kHeaderSize + 64;
  }, 3s);
  wire::Decoder d;
  ASSERT_TRUE(d.Feed(std::span(reinterpret_cast<const std::uint8_t*>(received.data()),
                               received.size())).ok());
  auto m = d.Next();
  ASSERT_TRUE(m.ok() && m->has_value());
  const auto* c = std::get_if<wire::Challenge>(&**m);
  ASSERT_NE(c, nullptr) << "the leader challenges first";
  EXPECT_EQ(c->nonce.size(), 32u);
  EXPECT_EQ(received.find(token), std::string::npos);
  EXPECT_EQ(c->proof, LeaderProof(token, h.job_id, h.nonce, c->nonce));
}

TEST(AuthTest, ProofsBindRoleJobAndBothNonces) {
  const std::string t = "tok", a = NewNonce(), b = NewNonce();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, b);
  EXPECT_EQ(LeaderProof(t, "job", a, b).size(), 32u);
  EXPECT_NE(LeaderProof(t, "job", a, b), MemberProof(t, "job", a, b)) << "roles differ";
  EXPECT_NE(LeaderProof(t, "job", a, b), LeaderProof(t, "job", b, a));
  EXPECT_NE(LeaderProof(t, "job", a, b), LeaderProof(t, "job2", a, b));
  EXPECT_NE(LeaderProof(t, "job", a, b), LeaderProof("tok2", "job", a, b));
  EXPECT_TRUE(ProofsEqual(LeaderProof(t, "j", a, b), LeaderProof(t, "j", a, b)));
  EXPECT_FALSE(ProofsEqual("abc", "abcd"));
}

TEST_F(RendezvousTest, GarbageAndSilentConnectionsAreDroppedWithoutHarm) {
  auto leader = MakeLeader(2);
  Outcome own, got;
  leader->Start(HelloFor(0, 2), [&](auto r) { own = r; });
  asio::ip::tcp::socket probe(io_), silent(io_);
  probe.connect({asio::ip::address_v4::loopback(), leader->port()});
  silent.connect({asio::ip::address_v4::loopback(), leader->port()});
  const std::string http = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  asio::write(probe, asio::buffer(http));
  // Both get closed: the probe at once, the silent one at the handshake deadline.
  auto closed = [&](asio::ip::tcp::socket& s) {
    char c;
    boost::system::error_code ec;
    s.non_blocking(true);
    s.read_some(asio::buffer(&c, 1), ec);
    return ec == asio::error::eof || ec == asio::error::connection_reset;
  };
  auto t0 = Clock::now();
  RunUntil([&] { return closed(probe) && closed(silent); }, 30s);
  EXPECT_TRUE(closed(probe));
  EXPECT_TRUE(closed(silent));
  EXPECT_LT(Clock::now() - t0, 20s) << "a hang guard, not a speed target";
  auto member = MakeMember(HelloFor(1, 2), leader->port());
  member->Start([&](auto r) { got = r; });
  RunUntil([&] { return got && own; });
  ASSERT_TRUE(got && got->ok());
  ASSERT_TRUE(own && own->ok());
}

TEST_F(RendezvousTest, MemberGivesUpAtTheDeadlineWithDiagnostics) {
  std::uint16_t port = FreePort();
  Outcome got;
  auto t0 = Clock::now();
  auto member = MakeMember(HelloFor(1, 2), port, 800ms);
  member->Start([&](auto r) { got = r; });
  RunUntil([&] { return got.has_value(); }, 60s);
  auto elapsed = Clock::now() - t0;
  ASSERT_TRUE(got && !got->ok());
  EXPECT_EQ(got->status().failure_class(), FailureClass::kInfra);
  const std::string& m = got->status().message();
  EXPECT_NE(m.find("127.0.0.1"), std::string::npos) << m;
  EXPECT_NE(m.find("port " + std::to_string(port)), std::string::npos) << m;
  EXPECT_NE(m.find("refused"), std::string::npos) << m;
  EXPECT_GE(elapsed, 800ms);
  EXPECT_LT(elapsed, 30s) << "it gave up, and not at the next retry's whim (a hang guard)";
}

TEST_F(RendezvousTest, LeaderRestartBeforeAssignmentIsSurvived) {
  std::uint16_t port = FreePort();
  auto old_leader = MakeLeader(3, port);
  old_leader->Start(HelloFor(0, 3), [](auto) {});
  Outcome got, own;
  auto member = MakeMember(HelloFor(1, 3), port);
  member->Start([&](auto r) { got = r; });
  RunUntil([&] { return old_leader->admitted() == 2; });
  old_leader->Close();  // the leader's pod restarts before the gang is complete
  old_leader.reset();
  std::shared_ptr<Leader> leader;
  std::shared_ptr<Member> m2;
  Outcome got2;
  asio::steady_timer later(io_, 200ms);
  later.async_wait([&](auto) {
    leader = MakeLeader(3, port);
    leader->Start(HelloFor(0, 3), [&](auto r) { own = r; });
    m2 = MakeMember(HelloFor(2, 3), port);
    m2->Start([&](auto r) { got2 = r; });
  });
  RunUntil([&] { return got && own && got2; });
  ASSERT_TRUE(got && got->ok()) << (got ? got->status().ToString() : "no result");
  ASSERT_TRUE(own && own->ok());
}

// A Stop that arrives in the same read as the Assignment is handled at once,
// not when the leader's next frame happens to come.
TEST_F(RendezvousTest, StopInTheSameReadAsTheAssignmentIsNotHeldBack) {
  asio::ip::tcp::acceptor acceptor(io_, {asio::ip::address_v4::loopback(), 0});
  const std::uint16_t port = acceptor.local_endpoint().port();
  asio::ip::tcp::socket peer(io_);
  std::array<std::uint8_t, 4096> rx{};
  std::vector<std::uint8_t> out;
  acceptor.async_accept(peer, [&](boost::system::error_code ec) {
    ASSERT_FALSE(ec);
    peer.async_read_some(asio::buffer(rx), [&](boost::system::error_code ec2, std::size_t) {
      ASSERT_FALSE(ec2);  // the hello; then both frames in one write
      wire::Assignment a{.generation = 0, .nnodes = 2, .world_size = 4, .rank_base = 2,
                         .master_addr = "127.0.0.1", .master_port = 29500,
                         .run_id = "trainer-0", .job_id = "trainer-0"};
      out = wire::Encode(a);
      auto stop = wire::Encode(wire::Stop{.failed_index = 0, .reason = "pod 0: failed"});
      out.insert(out.end(), stop.begin(), stop.end());
      asio::async_write(peer, asio::buffer(out), [](auto, auto) {});
    });
  });
  Outcome got;
  std::optional<wire::Stop> stopped;
  auto member = MakeMember(HelloFor(1, 2), port);
  member->Start([&](auto r) {
    got = r;
    if (!r.ok()) return;
    // Heartbeats far apart: nothing else arrives that could wake the read.
    member->StartChannel({.on_stop = [&](const wire::Stop& s) { stopped = s; },
                          .on_lost = [](const std::string&) {}},
                         60s, 3);
  });
  RunUntil([&] { return stopped.has_value() || (got && !got->ok()); }, 5s);
  ASSERT_TRUE(got && got->ok()) << (got ? got->status().ToString() : "no assignment");
  ASSERT_TRUE(stopped.has_value()) << "the buffered Stop was not delivered";
  EXPECT_EQ(stopped->reason, "pod 0: failed");
  member->Close();
}

// A member joins a leader whose pending-handshake slots are held by 64 idle
// sockets, each reopened when the leader closes it; `token` empty or shared.
// Returns how long the join took.
Clock::duration JoinBesideIdleConnections(RendezvousTest& t, const std::string& token) {
  LeaderOptions lo;
  lo.handshake_timeout = 10s;  // as long as the old default: only eviction can help
  lo.max_pending_handshakes = 2;
  auto leader = t.MakeLeader(2, 0, token, lo);
  Outcome own, got;
  leader->Start(HelloFor(0, 2), [&](auto r) { own = r; });
  const asio::ip::tcp::endpoint ep(asio::ip::address_v4::loopback(), leader->port());
  std::vector<std::unique_ptr<asio::ip::tcp::socket>> idle(64);
  std::vector<std::array<char, 16>> bufs(idle.size());
  std::function<void(std::size_t)> open_idle = [&](std::size_t k) {
    idle[k] = std::make_unique<asio::ip::tcp::socket>(t.io_);
    idle[k]->async_connect(ep, [&, k](boost::system::error_code ec) {
      if (ec || own) return;
      idle[k]->async_read_some(asio::buffer(bufs[k]), [&, k](boost::system::error_code, std::size_t) {
        if (!own) open_idle(k);  // dropped: come straight back
      });
    });
  };
  for (std::size_t k = 0; k < idle.size(); ++k) open_idle(k);
  t.RunUntil([] { return false; }, 300ms);  // let them fill every slot
  auto t0 = Clock::now();
  auto member = t.MakeMember(HelloFor(1, 2), leader->port(), 10s, token);
  member->Start([&](auto r) { got = r; });
  t.RunUntil([&] { return own && got; }, 60s);
  EXPECT_TRUE(got && got->ok()) << (got ? got->status().ToString() : "no result");
  EXPECT_TRUE(own && own->ok());
  for (auto& s : idle) {
    boost::system::error_code ec;
    if (s) s->close(ec);
  }
  return Clock::now() - t0;
}

// Connections that send nothing, reopened as soon as the leader drops them,
// used to fill the pending-handshake slots: accepting paused and members sat in
// the listen backlog until a slot timed out (17-37 s with 2,000 of them). The
// oldest pending connection now makes room, so a member gets in at once.
TEST_F(RendezvousTest, IdleConnectionsCannotLockOutAMember) {
  // A hang guard with room for a busy machine, far below the 17 s of old.
  EXPECT_LT(JoinBesideIdleConnections(*this, ""), 10s);
}

// With a token a member's handshake takes a round trip (challenge, proof):
// idle sockets arriving meanwhile must not push it out, only one another.
TEST_F(RendezvousTest, IdleConnectionsCannotLockOutAnAuthenticatingMember) {
  EXPECT_LT(JoinBesideIdleConnections(*this, "s3cret-token-value"), 10s);
}

// The same flood, reopening as fast as the leader drops, evicted a member whose
// hello came a little late (a loaded node: 50 ms behind its connect) within
// milliseconds, again on every retry (bench/wire_faults.py, idle: the gang did not
// form in 60 s in half the runs). Eviction now takes the oldest connection of the
// address holding the most slots, so a member from its own address keeps its slot.
TEST_F(RendezvousTest, AFloodFromOneAddressCannotEvictAnotherAddressesSlowHello) {
  LeaderOptions lo;
  lo.nnodes = 2;
  lo.run_id = "trainer-0";
  lo.max_pending_handshakes = 8;
  auto l = Leader::Listen(io_.get_executor(), 0, lo);
  ASSERT_TRUE(l.ok());
  auto leader = std::move(l).value();
  Outcome own;
  leader->Start(HelloFor(0, 2), [&](auto r) { own = r; });
  const asio::ip::tcp::endpoint ep(asio::ip::address_v4::loopback(), leader->port());
  std::vector<std::unique_ptr<asio::ip::tcp::socket>> idle(64);
  std::vector<std::array<char, 16>> bufs(idle.size());
  std::size_t reopens = 0;
  std::function<void(std::size_t)> open_idle = [&](std::size_t k) {
    idle[k] = std::make_unique<asio::ip::tcp::socket>(io_);
    idle[k]->async_connect(ep, [&, k](boost::system::error_code ec) {
      if (ec || own) return;
      idle[k]->async_read_some(asio::buffer(bufs[k]), [&, k](boost::system::error_code, std::size_t) {
        ++reopens;
        if (!own) open_idle(k);  // dropped: come straight back
      });
    });
  };
  for (std::size_t k = 0; k < idle.size(); ++k) open_idle(k);
  RunUntil([] { return false; }, 200ms);
  // The member: from 127.0.0.2 (loopback routes all of 127/8), its hello 300 ms
  // after its connect, while the flood churns through the slots.
  asio::ip::tcp::socket member(io_);
  member.open(asio::ip::tcp::v4());
  member.bind({asio::ip::make_address_v4("127.0.0.2"), 0});
  member.connect(ep);
  const std::size_t before = reopens;
  RunUntil([] { return false; }, 300ms);
  EXPECT_GT(reopens - before, 64u) << "the flood did not churn through the slots meanwhile";
  asio::write(member, asio::buffer(wire::Encode(HelloFor(1, 2))));
  RunUntil([&] { return own.has_value(); }, 5s);
  ASSERT_TRUE(own && own->ok()) << (own ? own->status().ToString() : "the gang did not form");
  for (auto& s : idle) {
    boost::system::error_code ec;
    if (s) s->close(ec);
  }
}

// A flood of bad connections from one address costs one warning per window,
// the next one saying how many were not logged.
TEST_F(RendezvousTest, BadConnectionWarningsAreRateLimitedPerPeer) {
  auto leader = MakeLeader(2);
  leader->Start(HelloFor(0, 2), [](auto) {});
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  auto log = spdlog::get("rendezvous");
  ASSERT_NE(log, nullptr);
  log->sinks().push_back(sink);
  int closed = 0;
  for (int i = 0; i < 200; ++i) {
    asio::ip::tcp::socket s(io_);
    s.connect({asio::ip::address_v4::loopback(), leader->port()});
    asio::write(s, asio::buffer(std::string("GET / HTTP/1.1\r\n\r\n")));
    RunUntil([&] {
      char c;
      boost::system::error_code ec;
      s.non_blocking(true);
      s.read_some(asio::buffer(&c, 1), ec);
      return ec == asio::error::eof || ec == asio::error::connection_reset;
    }, 2s);
    ++closed;
  }
  log->sinks().pop_back();
  std::string text = out.str();
  std::size_t lines = std::count(text.begin(), text.end(), '\n');
  EXPECT_EQ(closed, 200);
  EXPECT_GE(lines, 1u) << text;
  EXPECT_LE(lines, 2u) << text;
  EXPECT_NE(text.find("bad magic"), std::string::npos) << text;
}

// A stranger's flood of connections that send a Hello and hang up (during the
// token's challenge, or once admitted before the gang forms) costs one line
// per address per window, not one per connection (README "Strangers on the port").
TEST_F(RendezvousTest, HangUpFloodsAreRateLimitedPerPeer) {
  struct Case {
    std::string token, line;
  };
  for (const Case& c : {Case{"s3cret-token-value-of-32-bytes-or-more",
                             "hung up during authentication"},
                        Case{"", "disconnected"}}) {
    auto leader = MakeLeader(3, 0, c.token);
    leader->Start(HelloFor(0, 3), [](auto) {});
    std::ostringstream out;
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
    auto log = spdlog::get("rendezvous");
    ASSERT_NE(log, nullptr);
    log->sinks().push_back(sink);
    wire::Hello hello = HelloFor(1, 3);
    if (!c.token.empty()) hello.nonce = NewNonce();
    const auto frame = wire::Encode(hello);
    constexpr int kFlood = 100;
    for (int i = 0; i < kFlood; ++i) {
      asio::ip::tcp::socket s(io_);
      s.connect({asio::ip::address_v4::loopback(), leader->port()});
      asio::write(s, asio::buffer(frame));
      s.non_blocking(true);
      // The challenge arrives (token), or the leader has admitted the Hello (none).
      const std::size_t before = leader->admitted();
      RunUntil([&] {
        if (c.token.empty()) return leader->admitted() > before;
        char ch;
        boost::system::error_code ec;
        return s.read_some(asio::buffer(&ch, 1), ec) > 0;
      }, 2s);
      s.close();
      RunUntil([&] { return leader->admitted() == before; }, 2s);
    }
    RunUntil([] { return false; }, 100ms);
    log->sinks().pop_back();
    const std::string text = out.str();
    std::size_t lines = 0;
    for (std::size_t at = text.find(c.line); at != std::string::npos;
         at = text.find(c.line, at + 1)) {
      ++lines;
    }
    EXPECT_GE(lines, 1u) << c.line << ": " << text;
    EXPECT_LE(lines, 2u) << c.line << ": " << text;
  }
}

TEST(PeerLogLimiterTest, OneLinePerPeerPerWindowThenTheCount) {
  PeerLogLimiter limit(10s, 1, 4);
  auto t = Clock::now();
  EXPECT_EQ(limit.Admit("10.0.0.1", t), 0u);
  EXPECT_EQ(limit.Admit("10.0.0.1", t + 1s), std::nullopt);
  EXPECT_EQ(limit.Admit("10.0.0.1", t + 2s), std::nullopt);
  EXPECT_EQ(limit.Admit("10.0.0.2", t + 2s), 0u) << "another peer has its own budget";
  EXPECT_EQ(limit.Admit("10.0.0.1", t + 11s), 2u) << "the next window's line carries the count";
  EXPECT_EQ(limit.Admit("10.0.0.1", t + 12s), std::nullopt);
  for (int i = 0; i < 100; ++i) limit.Admit("192.0.2." + std::to_string(i), t + 13s);
  EXPECT_LE(limit.tracked(), 5u) << "bounded however many peers";
}

// A rendezvous port still held by a leftover process is retried until the
// deadline (it used to exit 75 within a millisecond).
TEST_F(RendezvousTest, BusyRendezvousPortIsRetriedUntilFree) {
  std::uint16_t port = FreePort();
  auto holder = std::make_unique<asio::ip::tcp::acceptor>(
      io_, asio::ip::tcp::endpoint(asio::ip::address_v4::any(), port));
  LeaderOptions lo;
  lo.bind_deadline = Clock::now() + 5s;
  auto leader = MakeLeader(2, port, "", lo);
  ASSERT_NE(leader, nullptr);
  Outcome own, got;
  leader->Start(HelloFor(0, 2), [&](auto r) { own = r; });
  auto member = MakeMember(HelloFor(1, 2), port);
  member->Start([&](auto r) { got = r; });
  RunUntil([&] { return own.has_value(); }, 700ms);
  EXPECT_FALSE(own.has_value()) << "still waiting for the port";
  holder.reset();  // the leftover process exits
  RunUntil([&] { return own && got; });
  ASSERT_TRUE(own && own->ok()) << (own ? own->status().ToString() : "no result");
  ASSERT_TRUE(got && got->ok());
}

TEST_F(RendezvousTest, RendezvousPortBusyPastTheDeadlineIsInfraNamingThePort) {
  std::uint16_t port = FreePort();
  asio::ip::tcp::acceptor holder(io_, asio::ip::tcp::endpoint(asio::ip::address_v4::any(), port));
  LeaderOptions lo;
  lo.bind_deadline = Clock::now() + 600ms;
  auto leader = MakeLeader(2, port, "", lo);
  ExpectLeaderFailsAsInfraNaming(leader, HelloFor(0, 2),
                                 "rendezvous port " + std::to_string(port));
}

// MASTER_PORT taken on the leader's pod: rank 0's store could not listen, and
// the trainer's bind error became a worker failure. Now it is infra naming it.
TEST_F(RendezvousTest, BusyMasterPortIsInfraNamingIt) {
  std::uint16_t master = FreePort();
  asio::ip::tcp::acceptor holder(io_, asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(),
                                                              master));
  LeaderOptions lo;
  lo.master_port = master;
  lo.check_master_port = true;
  lo.bind_deadline = Clock::now() + 500ms;
  auto leader = MakeLeader(1, 0, "", lo);
  ExpectLeaderFailsAsInfraNaming(leader, HelloFor(0, 1), "MASTER_PORT " + std::to_string(master));
}

// No MASTER_PORT given (LeaderOptions::master_port 0): the leader picks one
// free on its host and every pod of the round gets the same one, never 0.
TEST_F(RendezvousTest, MasterPortZeroIsAFreePortHandedToEveryPod) {
  LeaderOptions lo;
  lo.master_port = 0;
  lo.check_master_port = true;
  auto leader = MakeLeader(3, 0, "", lo);
  Outcome own;
  std::map<int, Outcome> got;
  leader->Start(HelloFor(0, 3), [&](auto r) { own = r; });
  std::vector<std::shared_ptr<Member>> members;
  for (std::uint32_t i : {1u, 2u}) {
    members.push_back(MakeMember(HelloFor(i, 3), leader->port()));
    members.back()->Start([&got, i](auto r) { got[i] = r; });
  }
  RunUntil([&] { return own && got.size() == 2; });
  ASSERT_TRUE(own && own->ok()) << (own ? own->status().ToString() : "no result");
  const std::uint16_t port = (*own)->master_port;
  EXPECT_NE(port, 0);
  EXPECT_NE(port, leader->port());
  for (std::uint32_t i : {1u, 2u}) {
    ASSERT_TRUE(got[i] && got[i]->ok()) << i;
    EXPECT_EQ((*got[i])->master_port, port) << i;
  }
  // Free now, as rank 0's store needs it (on every interface, as TCPStore binds).
  boost::system::error_code ec;
  asio::ip::tcp::acceptor store(io_);
  store.open(asio::ip::tcp::v4(), ec);
  store.set_option(asio::ip::tcp::acceptor::reuse_address(true), ec);
  store.bind({asio::ip::address_v4::any(), port}, ec);
  EXPECT_FALSE(ec) << ec.message();
}

// A leader address that accepts TCP but never answers (a frozen process: the
// kernel completes the handshake on its listening socket) held the member
// until its deadline with an empty "last error".
TEST_F(RendezvousTest, SilentLeaderIsNamedInTheLastError) {
  asio::ip::tcp::acceptor frozen(io_, {asio::ip::address_v4::loopback(), 0});  // never accepts
  MemberOptions o;
  o.leader_host = "127.0.0.1";
  o.port = frozen.local_endpoint().port();
  o.hello = HelloFor(1, 2);
  o.deadline = Clock::now() + 1500ms;
  o.reply_timeout = 300ms;
  o.backoff.initial = 20ms;
  o.backoff.cap = 100ms;
  o.backoff.min_delay = 10ms;
  auto m = Member::Create(io_.get_executor(), o);
  ASSERT_TRUE(m.ok());
  Outcome got;
  (*m)->Start([&](auto r) { got = r; });
  RunUntil([&] { return got.has_value(); }, 5s);
  ASSERT_TRUE(got && !got->ok());
  const std::string& msg = got->status().message();
  EXPECT_NE(msg.find("last error: 127.0.0.1: accepted the connection but sent nothing for 300 ms"),
            std::string::npos)
      << msg;
}

// Admitted members waiting for an incomplete gang hear heartbeats, so their
// reply deadline never mistakes a waiting leader for a frozen one.
TEST_F(RendezvousTest, WaitingMembersGetHeartbeatsAndKeepTheirPlace) {
  LeaderOptions lo;
  lo.waiting_heartbeat = 100ms;
  auto leader = MakeLeader(3, 0, "", lo);
  Outcome own, first, second;
  leader->Start(HelloFor(0, 3), [&](auto r) { own = r; });
  MemberOptions o;
  o.leader_host = "127.0.0.1";
  o.port = leader->port();
  o.hello = HelloFor(1, 3);
  o.deadline = Clock::now() + 10s;
  o.reply_timeout = 300ms;
  auto m1 = Member::Create(io_.get_executor(), o);
  ASSERT_TRUE(m1.ok());
  (*m1)->Start([&](auto r) { first = r; });
  RunUntil([] { return false; }, 1200ms);  // four reply deadlines
  EXPECT_FALSE(first.has_value());
  EXPECT_EQ(leader->admitted(), 2u) << "pod 1 kept its connection";
  auto m2 = MakeMember(HelloFor(2, 3), leader->port());
  m2->Start([&](auto r) { second = r; });
  RunUntil([&] { return own && first && second; });
  ASSERT_TRUE(first && first->ok());
  ASSERT_TRUE(second && second->ok());
}

// With a plan (hot spares, elastic sizes), the leader asks it at every join and
// at Reconsider (the agent's last-call timer): the round forms only when the
// plan says so; a joined pod it leaves out waits as a spare.
TEST_F(RendezvousTest, PlanIsAskedAtEveryJoinAndAtReconsider) {
  LeaderOptions o;
  bool ready = false;
  std::vector<std::vector<std::uint32_t>> asked;
  auto membership = std::make_shared<TestMembership>();
  o.membership = membership;
  membership->plan = [&](const std::vector<std::uint32_t>& joined)
      -> std::optional<std::map<std::uint32_t, std::uint32_t>> {
    asked.push_back(joined);
    if (!ready) return std::nullopt;
    return std::map<std::uint32_t, std::uint32_t>{{0, 0}, {2, 1}};
  };
  auto leader = MakeLeader(3, 0, "", o);
  Outcome own;
  leader->Start(HelloFor(0, 3), [&](auto r) { own = r; });
  std::map<int, Outcome> got;
  auto members = StartMembers(*this, 3, leader->port(), &got);
  RunUntil([&] { return !asked.empty() && asked.back().size() == 3; });
  ASSERT_FALSE(asked.empty());
  EXPECT_EQ(asked.back(), (std::vector<std::uint32_t>{0, 1, 2}));
  io_.run_for(100ms);
  EXPECT_FALSE(own) << "formed without the plan's word";
  ready = true;
  leader->Reconsider();
  RunUntil([&] { return own && got.size() == 2; });
  ASSERT_TRUE(own && own->ok());
  EXPECT_EQ((*own)->nnodes, 2u);
  ASSERT_TRUE(got[2] && got[2]->ok());
  EXPECT_EQ((*got[2])->node_rank, std::optional<std::uint32_t>(1));
  EXPECT_EQ((*got[2])->rank_base, 2u);
  ASSERT_TRUE(got[1] && got[1]->ok());
  EXPECT_TRUE((*got[1])->spare);
}

// LeaderMembership::AssignFirst orders the assignment writes only: it is asked
// about each member once the plan formed the round, and every member still
// gets its own assignment (who is written first is not observable here: one
// event loop reads all the members).
TEST_F(RendezvousTest, AssignFirstOrdersTheWritesOnly) {
  LeaderOptions o;
  bool formed = false;
  std::vector<std::uint32_t> asked;
  auto membership = std::make_shared<TestMembership>();
  o.membership = membership;
  membership->plan = [&](const std::vector<std::uint32_t>& joined)
      -> std::optional<std::map<std::uint32_t, std::uint32_t>> {
    if (joined.size() < 4) return std::nullopt;
    formed = true;
    return std::map<std::uint32_t, std::uint32_t>{{0, 0}, {1, 1}, {3, 2}};
  };
  membership->first = [&](std::uint32_t index) {
    EXPECT_TRUE(formed) << "asked before the plan formed the round";
    asked.push_back(index);
    return index == 3;
  };
  auto leader = MakeLeader(4, 0, "", o);
  Outcome own;
  leader->Start(HelloFor(0, 4), [&](auto r) { own = r; });
  std::map<int, Outcome> got;
  auto members = StartMembers(*this, 4, leader->port(), &got);
  RunUntil([&] { return own && got.size() == 3; });
  ASSERT_TRUE(own && own->ok());
  std::sort(asked.begin(), asked.end());
  EXPECT_EQ(asked, (std::vector<std::uint32_t>{1, 2, 3}));
  ASSERT_TRUE(got[3] && got[3]->ok());
  EXPECT_EQ((*got[3])->node_rank, std::optional<std::uint32_t>(2));
  EXPECT_FALSE((*got[3])->spare);
  ASSERT_TRUE(got[1] && got[1]->ok());
  EXPECT_EQ((*got[1])->node_rank, std::optional<std::uint32_t>(1));
  ASSERT_TRUE(got[2] && got[2]->ok());
  EXPECT_TRUE((*got[2])->spare);
}

// LeaderOptions::admit_late: after the round formed, a pod's hello still goes
// through Admit; on_join says whether it waits as a spare (a spare assignment
// of this generation, then the channel) or joins the next round (refused for
// now, field next_generation); StopAdmitting closes the door.
TEST_F(RendezvousTest, LatePodsWaitAsSparesOrJoinTheNextGeneration) {
  LeaderOptions o;
  o.admit_late = true;
  o.restarts = 3;
  auto membership = std::make_shared<TestMembership>();
  o.membership = membership;
  membership->plan = [](const std::vector<std::uint32_t>& joined)
      -> std::optional<std::map<std::uint32_t, std::uint32_t>> {
    if (joined.size() < 2) return std::nullopt;
    return std::map<std::uint32_t, std::uint32_t>{{0, 0}, {1, 1}};
  };
  auto leader = MakeLeader(4, 0, "", o);
  Outcome own;
  leader->Start(HelloFor(0, 4), [&](auto r) { own = r; });
  std::map<int, Outcome> got;
  auto first = MakeMember(HelloFor(1, 4), leader->port());
  first->Start([&](auto r) { got[1] = r; });
  RunUntil([&] { return own && got.size() == 1; });
  ASSERT_TRUE(own && own->ok());
  EXPECT_EQ((*own)->restarts, std::optional<std::uint32_t>(3));
  std::vector<std::uint32_t> joins;
  std::vector<std::uint32_t> lost;
  leader->StartChannel({.on_report = {},
                        .on_lost = [&](std::uint32_t i, const std::string&) { lost.push_back(i); },
                        .on_join = [&](std::uint32_t i) {
                          joins.push_back(i);
                          return i == 2;
                        }});
  auto spare = MakeMember(HelloFor(2, 4), leader->port());
  spare->Start([&](auto r) { got[2] = r; });
  RunUntil([&] { return got.size() == 2; });
  ASSERT_TRUE(got[2] && got[2]->ok()) << (got[2] ? got[2]->status().ToString() : "none");
  EXPECT_TRUE((*got[2])->spare);
  EXPECT_EQ((*got[2])->nnodes, 2u);
  EXPECT_EQ((*got[2])->generation, 0u);
  EXPECT_EQ((*got[2])->restarts, std::optional<std::uint32_t>(3));
  auto next = MakeMember(HelloFor(3, 4), leader->port(), 1500ms);
  next->Start([&](auto r) { got[3] = r; });
  RunUntil([&] { return std::find(joins.begin(), joins.end(), 3u) != joins.end(); });
  leader->StopAdmitting();
  RunUntil([&] { return got.size() == 3; });
  ASSERT_TRUE(got[3] && !got[3]->ok());
  EXPECT_EQ(got[3]->status().failure_class(), FailureClass::kInfra);
  EXPECT_NE(got[3]->status().message().find("it joins the next generation"), std::string::npos)
      << got[3]->status().message();
  ASSERT_FALSE(joins.empty());
  EXPECT_EQ(joins.front(), 2u);
  EXPECT_TRUE(lost.empty()) << "the spare is a live member of the channel";
}

// A member whose connection closes after the leader decided the round but
// before every assignment was written is in the generation (its node rank was
// given): the leader must report it lost, or the generation runs with a
// phantom rank (the trainers block in init_process_group) and a waiting spare
// is never called. Member 1 does not read, so the leader's writes to it stay
// in flight (its queue is stuck behind waiting heartbeats) while member 2
// hangs up; then member 1 drains and the round finishes.
TEST_F(RendezvousTest, AConnectionClosedWhileTheAssignmentsAreWrittenIsALoss) {
  LeaderOptions o;
  o.waiting_heartbeat = 1ms;
  bool ready = false;
  auto membership = std::make_shared<TestMembership>();
  o.membership = membership;
  membership->plan = [&](const std::vector<std::uint32_t>& joined)
      -> std::optional<std::map<std::uint32_t, std::uint32_t>> {
    if (!ready || joined.size() < 3) return std::nullopt;
    return std::map<std::uint32_t, std::uint32_t>{{0, 0}, {1, 1}, {2, 2}};
  };
  auto leader = MakeLeader(3, 0, "", o);
  Outcome own;
  leader->Start(HelloFor(0, 3), [&](auto r) { own = r; });
  asio::ip::tcp::socket stuck(io_), leaving(io_);
  stuck.open(asio::ip::tcp::v4());
  stuck.set_option(asio::socket_base::receive_buffer_size(1024));
  stuck.connect({asio::ip::address_v4::loopback(), leader->port()});
  leaving.connect({asio::ip::address_v4::loopback(), leader->port()});
  asio::write(stuck, asio::buffer(wire::Encode(HelloFor(1, 3))));
  asio::write(leaving, asio::buffer(wire::Encode(HelloFor(2, 3))));
  // Member 1's receive window and the leader's send buffer fill with waiting heartbeats.
  io_.run_for(1500ms);
  ready = true;
  leader->Reconsider();  // the round is decided: every node rank is given
  ASSERT_FALSE(own) << "member 1 did not read: its assignment cannot have been written";
  boost::system::error_code ec;
  leaving.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  leaving.close(ec);
  io_.run_for(300ms);
  // Member 1 reads again: its writes complete and the round finishes.
  stuck.non_blocking(true);
  std::array<char, 65536> sink{};
  RunUntil([&] {
    while (stuck.read_some(asio::buffer(sink), ec) > 0) {
    }
    return own.has_value();
  });
  ASSERT_TRUE(own && own->ok());
  EXPECT_EQ((*own)->nnodes, 3u);
  std::vector<std::uint32_t> lost;
  leader->StartChannel({.on_report = {},
                        .on_lost = [&](std::uint32_t i, const std::string&) { lost.push_back(i); },
                        .on_join = {}},
                       10s, 3);
  RunUntil([&] {
    while (stuck.read_some(asio::buffer(sink), ec) > 0) {
    }
    return !lost.empty();
  }, 3s);
  EXPECT_EQ(lost, (std::vector<std::uint32_t>{2})) << "a phantom rank: pod 2 was never lost";
}

// A peer that never reads cannot make the send queue grow without bound.
TEST(FrameQueueTest, QueueIsBoundedForAPeerThatDoesNotRead) {
  asio::io_context io;
  asio::ip::tcp::acceptor acc(io, {asio::ip::address_v4::loopback(), 0});
  auto a = std::make_shared<asio::ip::tcp::socket>(io);
  asio::ip::tcp::socket b(io);
  a->connect(acc.local_endpoint());
  acc.accept(b);  // b never reads
  FrameQueue q;
  std::vector<std::uint8_t> frame(64 * 1024, 'x');
  int accepted = 0;
  while (q.Send(*a, a, frame, {}, 1 << 20)) {
    ++accepted;
    io.restart();  // poll() stops the context whenever the queue ran empty
    io.poll();
    ASSERT_LT(accepted, 10000) << "never refused";
  }
  EXPECT_LE(q.queued_bytes(), std::size_t{1} << 20);
  io.restart();
  io.run_for(100ms);
  EXPECT_EQ(q.queued_bytes(), 0u) << "the shut-down socket's queue was dropped";
}

}  // namespace
}  // namespace trainlet::rendezvous

namespace trainlet::rendezvous {
namespace {

// Ranks by arrival (arrival.h, admission.h): pods without an index get node
// ranks 1, 2, ... in the order the leader admits them; the leader is 0.
TEST_F(RendezvousTest, PodsWithoutAnIndexGetNodeRanksInJoinOrder) {
  auto by_arrival = [](std::uint32_t index) {
    wire::Hello h = HelloFor(index, 3);
    h.config.emplace_back("ranks", "arrival");
    h.fingerprint = wire::Fingerprint(h.config);
    return h;
  };
  auto leader = MakeLeader(3);
  Outcome own, first, second;
  leader->Start(by_arrival(0), [&](auto r) { own = r; });
  auto a = MakeMember(by_arrival(wire::kNoIndex), leader->port());
  a->Start([&](auto r) { first = r; });
  RunUntil([&] { return leader->admitted() == 2; });
  ASSERT_EQ(leader->admitted(), 2u);
  EXPECT_EQ(leader->missing(), std::vector<std::uint32_t>{2}) << "the first took index 1";
  auto b = MakeMember(by_arrival(wire::kNoIndex), leader->port());
  b->Start([&](auto r) { second = r; });
  RunUntil([&] { return own && first && second; });
  ASSERT_TRUE(own && own->ok()) << (own ? own->status().ToString() : "no result");
  ASSERT_TRUE(first && first->ok()) << (first ? first->status().ToString() : "no result");
  ASSERT_TRUE(second && second->ok());
  EXPECT_EQ((*own)->rank_base, 0u);
  EXPECT_EQ((*first)->node_rank, 1u);
  EXPECT_EQ((*first)->rank_base, 2u);
  EXPECT_EQ((*second)->node_rank, 2u);
  EXPECT_EQ((*second)->rank_base, 4u);
  EXPECT_EQ((*second)->world_size, 6u);
}

// Elastic sizes numbered by arrival: the indices of the pods expected back
// (LeaderOptions::expected) are kept, so a newcomer takes the lowest other
// one; its assignment names that index beside its node rank (dense over the
// generation's pods). A pod arriving while the generation runs is given the
// next free index for the next round (on_join sees it), and with none left a
// further one is refused for now without reaching on_join.
TEST_F(RendezvousTest, ElasticByArrivalKeepsExpectedIndicesAndNamesTheIndex) {
  auto by_arrival = [](std::uint32_t index) {
    wire::Hello h = HelloFor(index, 4);
    h.config.emplace_back("ranks", "arrival");
    h.fingerprint = wire::Fingerprint(h.config);
    return h;
  };
  LeaderOptions o;
  o.admit_late = true;
  o.expected = {0, 1};  // pod 1 of the generation that ended rejoins later
  auto membership = std::make_shared<TestMembership>();
  o.membership = membership;
  membership->plan = [](const std::vector<std::uint32_t>& joined)
      -> std::optional<std::map<std::uint32_t, std::uint32_t>> {
    if (joined.size() < 2) return std::nullopt;
    std::map<std::uint32_t, std::uint32_t> ranks;
    for (std::uint32_t key : joined) ranks.emplace(key, 0);
    std::uint32_t r = 0;
    for (auto& [key, rank] : ranks) rank = r++;
    return ranks;
  };
  auto leader = MakeLeader(4, 0, "", o);
  Outcome own;
  std::map<int, Outcome> got;
  leader->Start(by_arrival(0), [&](auto r) { own = r; });
  auto newcomer = MakeMember(by_arrival(wire::kNoIndex), leader->port());
  newcomer->Start([&](auto r) { got[0] = r; });
  RunUntil([&] { return own && got.size() == 1; });
  ASSERT_TRUE(own && own->ok()) << (own ? own->status().ToString() : "no result");
  ASSERT_TRUE(got[0] && got[0]->ok()) << (got[0] ? got[0]->status().ToString() : "none");
  EXPECT_EQ((*got[0])->index, std::optional<std::uint32_t>(2)) << "index 1 is kept for pod 1";
  EXPECT_EQ((*got[0])->node_rank, std::optional<std::uint32_t>(1));
  EXPECT_EQ((*own)->index, std::optional<std::uint32_t>(0));
  std::vector<std::uint32_t> joins;
  leader->StartChannel({.on_report = {}, .on_lost = {}, .on_join = [&](std::uint32_t i) {
                          joins.push_back(i);
                          return false;  // the gang grows: the next generation
                        }});
  auto late = MakeMember(by_arrival(wire::kNoIndex), leader->port(), 1500ms);
  late->Start([&](auto r) { got[1] = r; });
  RunUntil([&] { return !joins.empty(); });
  auto full = MakeMember(by_arrival(wire::kNoIndex), leader->port(), 1500ms);
  full->Start([&](auto r) { got[2] = r; });
  RunUntil([&] { return got.size() == 3; });
  ASSERT_FALSE(joins.empty());
  for (std::uint32_t i : joins) EXPECT_EQ(i, 3u) << "1 kept, 2 held, 3 given; then none";
  ASSERT_TRUE(got[1] && !got[1]->ok()) << "it retries with index 3 until its deadline";
  EXPECT_NE(got[1]->status().message().find("it joins the next generation"), std::string::npos)
      << got[1]->status().message();
  ASSERT_TRUE(got[2] && !got[2]->ok());
  EXPECT_NE(got[2]->status().message().find("finds every node rank 1..3 taken"),
            std::string::npos)
      << got[2]->status().message();
}

// A pod with an index and a leader numbering by arrival: refused for good.
TEST_F(RendezvousTest, APodWithAnIndexCannotJoinAGangNumberedByArrival) {
  wire::Hello own_hello = HelloFor(0, 2);
  own_hello.config.emplace_back("ranks", "arrival");
  own_hello.fingerprint = wire::Fingerprint(own_hello.config);
  auto leader = MakeLeader(2);
  Outcome own, got;
  leader->Start(own_hello, [&](auto r) { own = r; });
  auto m = MakeMember(HelloFor(1, 2), leader->port());
  m->Start([&](auto r) { got = r; });
  RunUntil([&] { return got.has_value(); });
  ASSERT_TRUE(got && !got->ok());
  EXPECT_EQ(got->status().failure_class(), FailureClass::kConfig);
  EXPECT_NE(got->status().message().find("cannot share a gang"), std::string::npos)
      << got->status().message();
  EXPECT_FALSE(own.has_value()) << "the leader waits on";
}

// The agent that binds the endpoint's port first leads and hands the socket
// to its Leader; a second agent of the same host joins (torchrun's c10d
// falls back to a client when its bind fails).
TEST_F(RendezvousTest, TheFirstToBindTheEndpointLeadsAndTheSecondJoins) {
  const std::uint16_t port = FreePort();
  EndpointClaim first = ClaimEndpoint("127.0.0.1", port, 2);
  EndpointClaim second = ClaimEndpoint("localhost", port, 2);
  ASSERT_TRUE(first.lead) << first.how;
  EXPECT_GE(first.fd, 0);
  EXPECT_FALSE(second.lead);
  EXPECT_EQ(second.fd, -1);
  EXPECT_NE(second.how.find("taken"), std::string::npos) << second.how;
  EXPECT_FALSE(ClaimEndpoint("192.0.2.1", port, 2).lead) << "TEST-NET-1 is nobody's own";
  LeaderOptions o;
  o.listening_fd = first.fd;
  auto leader = MakeLeader(2, 0, "", o);
  EXPECT_EQ(leader->port(), port);
  Outcome own, got;
  leader->Start(HelloFor(0, 2), [&](auto r) { own = r; });
  auto m = MakeMember(HelloFor(1, 2), port);
  m->Start([&](auto r) { got = r; });
  RunUntil([&] { return own && got; });
  ASSERT_TRUE(own && own->ok()) << (own ? own->status().ToString() : "no result");
  ASSERT_TRUE(got && got->ok());
}

// A restart listens ahead while the leader pod's workers still stop: a member
// that connects before the Leader exists waits in the backlog (not refused)
// and is admitted once a Leader takes the socket over.
TEST_F(RendezvousTest, AMemberConnectingBeforeTheLeaderListensAheadIsAdmitted) {
  const std::uint16_t port = FreePort();
  const int fd = ListenAhead(port, 2);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(ListenAhead(port, 2), -1) << "the port is taken: no second listener";
  Outcome own, got;
  auto m = MakeMember(HelloFor(1, 2), port);
  m->Start([&](auto r) { got = r; });
  io_.run_for(std::chrono::milliseconds(300));  // connected, its hello unread
  if (io_.stopped()) io_.restart();
  EXPECT_FALSE(got.has_value()) << "no Leader yet, yet the member finished";
  LeaderOptions o;
  o.listening_fd = fd;
  auto leader = MakeLeader(2, 0, "", o);
  EXPECT_EQ(leader->port(), port);
  leader->Start(HelloFor(0, 2), [&](auto r) { own = r; });
  RunUntil([&] { return own && got; });
  ASSERT_TRUE(own && own->ok()) << (own ? own->status().ToString() : "no result");
  ASSERT_TRUE(got && got->ok()) << got->status().ToString();
}

TEST(IsOwnHostTest, AsTorchrunsMatchesMachineHostname) {
  namespace ip = boost::asio::ip;
  const std::vector<ip::address> ours{ip::make_address("10.0.0.5")};
  auto dns = [](const std::string& name) {
    return name == "node5.cluster" ? std::vector<ip::address>{ip::make_address("10.0.0.5")}
                                   : std::vector<ip::address>{ip::make_address("10.0.0.9")};
  };
  EXPECT_TRUE(IsOwnHost("localhost", "node5", ours, dns));
  EXPECT_TRUE(IsOwnHost("127.0.0.1", "node5", ours, dns));
  EXPECT_TRUE(IsOwnHost("::1", "node5", ours, dns));
  EXPECT_TRUE(IsOwnHost("node5", "node5", ours, dns)) << "its hostname";
  EXPECT_TRUE(IsOwnHost("10.0.0.5", "node5", ours, dns));
  EXPECT_TRUE(IsOwnHost("node5.cluster", "node5", ours, dns)) << "a name resolving here";
  EXPECT_FALSE(IsOwnHost("10.0.0.9", "node5", ours, dns));
  EXPECT_FALSE(IsOwnHost("node9", "node5", ours, dns));
}

}  // namespace
}  // namespace trainlet::rendezvous
