#include "trainlet/store.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

namespace trainlet {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::unique_ptr<StoreServer> Serve(int world = 4) {
  StoreError e;
  auto s = StoreServer::Start(0, world, &e);
  EXPECT_NE(s, nullptr) << e.message;
  return s;
}

TEST(StoreTest, SetGetBinaryValuesAcrossClients) {
  auto server = Serve();
  StoreClient a("127.0.0.1", server->port(), 2), b("localhost", server->port(), 2);
  std::string value("\0\xff\x01id", 5);
  ASSERT_TRUE(a.Set("id", value, 2s));
  auto got = b.Get("id", 2s);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, value);
}

TEST(StoreTest, GetWaitsUntilAnotherRankSets) {
  auto server = Serve();
  std::jthread setter([port = server->port()] {
    StoreClient c("127.0.0.1", port, 2);
    std::this_thread::sleep_for(100ms);
    EXPECT_TRUE(c.Set("late", "here", 2s));
  });
  StoreClient c("127.0.0.1", server->port(), 2);
  auto t0 = Clock::now();
  auto got = c.Get("late", 5s);
  EXPECT_GE(Clock::now() - t0, 90ms);
  setter.join();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, "here");
}

TEST(StoreTest, GetGivesUpAtItsDeadlineAndTheClientRecovers) {
  auto server = Serve();
  StoreClient c("127.0.0.1", server->port(), 1);
  StoreError e;
  auto t0 = Clock::now();
  EXPECT_FALSE(c.Get("never", 200ms, &e).has_value());
  auto took = Clock::now() - t0;
  EXPECT_TRUE(e.timed_out);
  EXPECT_NE(e.message.find("key 'never'"), std::string::npos) << e.message;
  EXPECT_GE(took, 190ms);
  EXPECT_LT(took, 30s) << "a hang guard: the key never comes";
  // The connection was reset: later calls get their own replies, not the stale one.
  ASSERT_TRUE(c.Set("never", "now", 2s));
  ASSERT_TRUE(c.Set("x", "1", 2s));
  EXPECT_EQ(c.Get("x", 2s).value_or(""), "1");
}

TEST(StoreTest, AddIsAtomicAcrossClients) {
  auto server = Serve(8);
  std::vector<std::jthread> ts;
  for (int t = 0; t < 8; ++t) {
    ts.emplace_back([port = server->port()] {
      StoreClient c("127.0.0.1", port, 8);
      for (int i = 0; i < 50; ++i) ASSERT_TRUE(c.Add("n", 1, 5s).has_value());
    });
  }
  for (auto& t : ts) t.join();
  StoreClient c("127.0.0.1", server->port(), 8);
  EXPECT_EQ(c.Add("n", 0, 2s).value_or(-1), 400);
}

TEST(StoreTest, BarrierIsReusableAndNamesTheMissingRanksAtItsDeadline) {
  auto server = Serve(4);
  std::atomic<int> passed{0};
  std::vector<std::jthread> ts;
  for (int r = 0; r < 4; ++r) {
    ts.emplace_back([&passed, port = server->port()] {
      StoreClient c("127.0.0.1", port, 4);
      for (int round = 0; round < 3; ++round) {
        StoreError e;
        ASSERT_TRUE(c.Barrier("step", 5s, &e)) << e.message;
        ++passed;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(passed.load(), 12);
  // Only 3 of 4 ranks come.
  std::vector<std::jthread> three;
  std::atomic<int> timed_out{0};
  for (int r = 0; r < 3; ++r) {
    three.emplace_back([&timed_out, port = server->port()] {
      StoreClient c("127.0.0.1", port, 4);
      StoreError e;
      if (!c.Barrier("partial", 300ms, &e) && e.timed_out &&
          e.message.find("of 4 ranks had arrived") != std::string::npos) {
        ++timed_out;
      }
    });
  }
  for (auto& t : three) t.join();
  EXPECT_EQ(timed_out.load(), 3);
}

TEST(StoreTest, ClientRetriesUntilTheServerListens) {
  // Reserve a port, release it, start the server there 200 ms later.
  int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_any;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  std::uint16_t port = ntohs(a.sin6_port);
  ::close(fd);
  std::unique_ptr<StoreServer> server;
  std::jthread later([&] {
    std::this_thread::sleep_for(200ms);
    StoreError e;
    server = StoreServer::Start(port, 2, &e);
  });
  StoreClient c("127.0.0.1", port, 2);
  StoreError e;
  EXPECT_TRUE(c.Set("k", "v", 5s, &e)) << e.message;
  later.join();
}

TEST(StoreTest, OversizedKeyIsRefusedWithoutSending) {
  auto server = Serve();
  StoreClient c("127.0.0.1", server->port(), 1);
  StoreError e;
  EXPECT_FALSE(c.Set(std::string(kMaxStoreKey + 1, 'k'), "v", 1s, &e));
  EXPECT_NE(e.message.find("limit"), std::string::npos);
}

TEST(StoreTest, UnreachableStoreTimesOut) {
  StoreClient c("127.0.0.1", 1, 1);  // nothing listens on port 1
  StoreError e;
  EXPECT_FALSE(c.Set("k", "v", 300ms, &e));
  EXPECT_TRUE(e.timed_out);
  EXPECT_NE(e.message.find("store unreachable"), std::string::npos) << e.message;
}

}  // namespace
}  // namespace trainlet
