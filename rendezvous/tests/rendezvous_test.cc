// Leader and members over real loopback sockets, in one event loop.
#include <array>
#include <chrono>
#include <map>
#include <optional>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <gtest/gtest.h>

#include "trainlet/rendezvous/auth.h"
#include "trainlet/rendezvous/leader.h"
#include "trainlet/rendezvous/member.h"

namespace trainlet::rendezvous {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using exitcodes::FailureClass;
using exitcodes::Result;

wire::Hello HelloFor(std::uint32_t index, std::uint32_t nnodes, std::uint32_t nproc = 2,
                     std::string job = "trainer-0") {
  wire::Hello h;
  h.job_id = std::move(job);
  h.index = index;
  h.nproc_per_node = nproc;
  h.config = {{"nnodes", std::to_string(nnodes)},
              {"nproc_per_node", std::to_string(nproc)},
              {"master_port", "29500"}};
  h.fingerprint = wire::Fingerprint(h.config);
  return h;
}

class RendezvousTest : public ::testing::Test {
 protected:
  std::shared_ptr<Leader> MakeLeader(std::uint32_t nnodes, std::uint16_t port = 0,
                                     std::string token = "", LeaderOptions o = {}) {
    o.token = std::move(token);
    o.nnodes = nnodes;
    o.run_id = "trainer-0";
    o.handshake_timeout = 500ms;
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

// After an in-place restart the survivors ask for their last generation + 1; a
// replaced pod (the leader here) starts at 0 and continues the gang's count.
TEST_F(RendezvousTest, GenerationIsTheHighestAnyPodAsksFor) {
  auto leader = MakeLeader(3);
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
  std::vector<std::shared_ptr<Member>> members;
  for (std::uint32_t i : {1u, 2u}) {
    members.push_back(MakeMember(HelloFor(i, 3), leader->port()));
    members.back()->Start([&got, i](auto r) { got[i] = r; });
  }
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

TEST_F(RendezvousTest, MismatchedConfigurationFailsBothSidesNamingTheField) {
  auto leader = MakeLeader(2);
  Outcome own, got;
  leader->Start(HelloFor(0, 2, 2), [&](auto r) { own = r; });
  auto member = MakeMember(HelloFor(1, 2, 4), leader->port());  // 4 workers per pod vs 2
  member->Start([&](auto r) { got = r; });
  RunUntil([&] { return got && own; });
  ASSERT_TRUE(got && !got->ok());
  EXPECT_EQ(got->status().failure_class(), FailureClass::kConfig);
  EXPECT_NE(got->status().message().find("nproc_per_node=4 on pod 1"), std::string::npos)
      << got->status().message();
  EXPECT_NE(got->status().message().find("nproc_per_node=2 on pod 0"), std::string::npos);
  ASSERT_TRUE(own && !own->ok());
  EXPECT_EQ(own->status().failure_class(), FailureClass::kConfig);
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
  // A second pod with index 1 is told to wait (the first connection may be
  // stale); while the first holds the index it never gets in.
  auto d = MakeMember(HelloFor(1, 3), leader->port(), 1500ms);
  d->Start([&](auto r) { dup = r; });
  RunUntil([&] { return stranger && dup; });
  ASSERT_TRUE(stranger && !stranger->ok());
  EXPECT_EQ(stranger->status().failure_class(), FailureClass::kInfra) << "retried, then infra";
  EXPECT_NE(stranger->status().message().find("belongs to job 'other-job-0'"), std::string::npos)
      << stranger->status().message();
  ASSERT_TRUE(dup && !dup->ok());
  EXPECT_EQ(dup->status().failure_class(), FailureClass::kInfra) << "retriable, not config";
  EXPECT_NE(dup->status().message().find("index 1 already joined"), std::string::npos)
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

TEST_F(RendezvousTest, MismatchAlsoReleasesMembersAlreadyAdmitted) {
  auto leader = MakeLeader(3);
  Outcome own, first, bad;
  leader->Start(HelloFor(0, 3), [&](auto r) { own = r; });
  auto m1 = MakeMember(HelloFor(1, 3), leader->port());
  m1->Start([&](auto r) { first = r; });
  RunUntil([&] { return leader->admitted() == 2; });
  auto m2 = MakeMember(HelloFor(2, 4), leader->port());  // says 4 pods
  m2->Start([&](auto r) { bad = r; });
  auto t0 = Clock::now();
  RunUntil([&] { return own && first && bad; });
  ASSERT_TRUE(first && !first->ok()) << "the admitted pod is told, not left to time out";
  EXPECT_EQ(first->status().failure_class(), FailureClass::kConfig);
  EXPECT_NE(first->status().message().find("nnodes=4 on pod 2"), std::string::npos)
      << first->status().message();
  EXPECT_LT(Clock::now() - t0, 2s);
}

TEST_F(RendezvousTest, DuplicateGetsInOnceTheStaleConnectionCloses) {
  auto leader = MakeLeader(3);
  Outcome own, got, other;
  leader->Start(HelloFor(0, 3), [&](auto r) { own = r; });
  // A raw connection claims index 1, then dies (its pod is gone).
  auto stale = std::make_unique<asio::ip::tcp::socket>(io_);
  stale->connect({asio::ip::address_v4::loopback(), leader->port()});
  auto frame = wire::Encode(HelloFor(1, 3));
  asio::write(*stale, asio::buffer(frame));
  RunUntil([&] { return leader->admitted() == 2; });
  auto m = MakeMember(HelloFor(1, 3), leader->port());
  m->Start([&](auto r) { got = r; });
  RunUntil([&] { return false; }, 300ms);
  EXPECT_FALSE(got.has_value()) << "waits while index 1 is held";
  stale->close();
  RunUntil([&] { return leader->admitted() == 3; }, 3s);  // the replacement takes index 1
  auto m2 = MakeMember(HelloFor(2, 3), leader->port());
  m2->Start([&](auto r) { other = r; });
  RunUntil([&] { return got && own && other; });
  ASSERT_TRUE(got && got->ok()) << (got ? got->status().ToString() : "no result");
  ASSERT_TRUE(own && own->ok());
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
  RunUntil([&] { return closed(probe) && closed(silent); }, 3s);
  EXPECT_TRUE(closed(probe));
  EXPECT_TRUE(closed(silent));
  EXPECT_LT(Clock::now() - t0, 2s);
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
  RunUntil([&] { return got.has_value(); });
  auto elapsed = Clock::now() - t0;
  ASSERT_TRUE(got && !got->ok());
  EXPECT_EQ(got->status().failure_class(), FailureClass::kInfra);
  const std::string& m = got->status().message();
  EXPECT_NE(m.find("127.0.0.1"), std::string::npos) << m;
  EXPECT_NE(m.find("port " + std::to_string(port)), std::string::npos) << m;
  EXPECT_NE(m.find("refused"), std::string::npos) << m;
  EXPECT_GE(elapsed, 800ms);
  EXPECT_LT(elapsed, 2s);
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

}  // namespace
}  // namespace trainlet::rendezvous
