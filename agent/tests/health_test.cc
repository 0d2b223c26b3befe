// health_policy.h (who keeps a slot, what a request gets) as tables, and the
// health server (health.h) over real loopback sockets: its limits (400, 431,
// the request deadline), eviction from another source address (127.0.0.2,
// loopback too), and a probe answered with no descriptor left. Assertions are
// on what the sockets see, never on how fast (tests/e2e/test_probes.py and
// bench/probes.py have the rest).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "trainlet/agent/observe/health.h"
#include "trainlet/agent/observe/health_policy.h"

namespace trainlet::agent {
namespace {

using namespace std::chrono_literals;
using State = HealthConnState;
using Clock = HealthConnections::Clock;
const Clock::time_point kT0{};

// ---- the pure rules ---------------------------------------------------------------

TEST(HealthRouteTest, EachRequestGetsItsStatus) {
  struct Row {
    HealthRead read;
    const char* method;
    const char* target;
    HealthState state;
    bool has_metrics;
    int status;
    bool metrics;
  };
  const HealthState up{.ready = true, .live = true}, down{.ready = false, .live = false};
  const Row rows[] = {
      {HealthRead::kComplete, "GET", "/livez", up, true, 200, false},
      {HealthRead::kComplete, "GET", "/healthz", up, true, 200, false},
      {HealthRead::kComplete, "GET", "/livez", down, true, 503, false},
      {HealthRead::kComplete, "GET", "/readyz", up, true, 200, false},
      {HealthRead::kComplete, "GET", "/readyz", down, true, 503, false},
      {HealthRead::kComplete, "GET", "/readyz?verbose", up, true, 200, false},
      {HealthRead::kComplete, "GET", "/metrics", down, true, 200, true},
      {HealthRead::kComplete, "GET", "/metrics", up, false, 404, false},
      {HealthRead::kComplete, "GET", "/", up, true, 404, false},
      {HealthRead::kComplete, "GET", "/livezz", up, true, 404, false},
      {HealthRead::kComplete, "POST", "/livez", up, true, 405, false},
      {HealthRead::kComplete, "HEAD", "/readyz", up, true, 405, false},
      {HealthRead::kMalformed, "", "", up, true, 400, false},
      {HealthRead::kHeaderTooLarge, "", "", up, true, 431, false},
  };
  for (const Row& r : rows) {
    HealthReply reply = RouteHealthRequest(r.read, r.method, r.target, r.state, r.has_metrics);
    EXPECT_EQ(reply.status, r.status) << r.method << " " << r.target;
    EXPECT_EQ(reply.metrics, r.metrics) << r.method << " " << r.target;
    EXPECT_EQ(reply.allow_get_only, r.status == 405) << r.method << " " << r.target;
    if (!reply.metrics) {
      EXPECT_FALSE(reply.body.empty()) << r.method << " " << r.target;
    }
  }
}

// A hot spare (--spares) is live but not ready: /readyz says why.
TEST(HealthRouteTest, ASpareIsLiveAndNotReady) {
  const HealthState spare{.ready = false, .live = true, .spare = true};
  HealthReply ready = RouteHealthRequest(HealthRead::kComplete, "GET", "/readyz", spare, false);
  EXPECT_EQ(ready.status, 503);
  EXPECT_EQ(ready.body, "spare\n");
  EXPECT_EQ(RouteHealthRequest(HealthRead::kComplete, "GET", "/livez", spare, false).status, 200);
}

// A table of `max` holding connections 1, 2, ... from `addresses`, in that order.
HealthConnections Table(std::size_t max, std::initializer_list<const char*> addresses) {
  HealthConnections t(max);
  std::uint64_t id = 0;
  for (const char* a : addresses) t.Admit(++id, a, kT0);
  return t;
}

TEST(HealthConnectionsTest, BelowTheLimitNobodyIsEvicted) {
  HealthConnections t(3);
  EXPECT_FALSE(t.Admit(1, "a", kT0));
  EXPECT_FALSE(t.Admit(2, "a", kT0));
  EXPECT_FALSE(t.Admit(3, "b", kT0));
  EXPECT_EQ(t.size(), 3u);
  t.Remove(2);
  EXPECT_FALSE(t.Admit(4, "c", kT0));
  t.Remove(99);  // unknown: ignored
  EXPECT_EQ(t.size(), 3u);
}

TEST(HealthConnectionsTest, FullTheOldestOfTheAddressHoldingMostGoesNotTheNewcomer) {
  HealthConnections t = Table(4, {"kubelet", "flood", "flood", "flood"});
  auto e = t.Admit(5, "flood", kT0);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->id, 2u);  // the kubelet's (older) keeps its slot
  EXPECT_EQ(e->address, "flood");
  EXPECT_EQ(e->from_address, 3u);
  EXPECT_EQ(e->state, State::kReading);
  e = t.Admit(6, "kubelet", kT0);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->id, 3u);
  EXPECT_EQ(t.size(), 4u);
  t.Remove(3);  // the evicted one's close: already gone, ignored
  EXPECT_EQ(t.size(), 4u);
}

TEST(HealthConnectionsTest, WithinThatAddressReadingGoesBeforeMetricsBeforeAProbesAnswer) {
  HealthConnections t = Table(4, {"x", "x", "x", "x"});
  t.Set(1, State::kAnswering);
  t.Set(2, State::kAnsweringMetrics);
  auto e = t.Admit(5, "y", kT0);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->id, 3u);  // the oldest still reading
  t.Set(4, State::kAnswering);
  t.Set(5, State::kAnswering);
  e = t.Admit(6, "y", kT0);  // x: 1 answering, 2 metrics, 4 answering; y: 5
  ASSERT_TRUE(e);
  EXPECT_EQ(e->id, 2u);
  EXPECT_EQ(e->state, State::kAnsweringMetrics);
  e = t.Admit(7, "z", kT0);  // x: 1, 4 (both answering), y: 5, 6 — a tie: x's oldest is older
  ASSERT_TRUE(e);
  EXPECT_EQ(e->id, 1u);
  EXPECT_EQ(e->state, State::kAnswering);
}

TEST(HealthConnectionsTest, TiesGoToTheAddressWhoseOldestIsOldest) {
  HealthConnections t = Table(4, {"b", "a", "a", "b"});
  auto e = t.Admit(5, "c", kT0);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->id, 1u);
}

TEST(HealthConnectionsTest, MakeRoomEvictsTheIdleAtOnceOthersAfterTheGrace) {
  EXPECT_FALSE(HealthConnections(64).MakeRoom(kT0, 100ms));
  HealthConnections t = Table(64, {"kubelet", "flood", "flood"});
  t.Admit(4, "flood", kT0 + 50ms);
  t.Set(2, State::kAnswering);
  for (std::uint64_t id : {1, 3, 4}) t.Received(id);
  EXPECT_FALSE(t.MakeRoom(kT0 + 99ms, 100ms)) << "each received some of its request < 100 ms ago";
  auto e = t.MakeRoom(kT0 + 100ms, 100ms);  // flood: 3 (4 too young, 2 being answered)
  ASSERT_TRUE(e);
  EXPECT_EQ(e->id, 3u);
  EXPECT_EQ(e->from_address, 3u);
  e = t.MakeRoom(kT0 + 100ms, 100ms);  // flood's 2 is answered, 4 is young: the kubelet's
  ASSERT_TRUE(e);
  EXPECT_EQ(e->id, 1u);
  EXPECT_FALSE(t.MakeRoom(kT0 + 100ms, 100ms));
  t.Admit(5, "flood", kT0 + 100ms);  // sends nothing, and flood just lost one: goes at once
  e = t.MakeRoom(kT0 + 100ms, 100ms);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->id, 5u);
  t.Admit(6, "prober", kT0 + 100ms);  // its request not here yet, its address lost none: stays
  EXPECT_FALSE(t.MakeRoom(kT0 + 101ms, 100ms));
  t.Remove(6);
  e = t.MakeRoom(kT0 + 150ms, 100ms);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->id, 4u);
  EXPECT_FALSE(t.MakeRoom(kT0 + 10s, 100ms)) << "a probe's answer being sent is never closed";
  EXPECT_EQ(t.size(), 1u);
}

TEST(HealthConnectionsTest, OutOfDescriptorsAProbeIsNotEvictedByTheConnectionsAfterIt) {
  // Out of descriptors, the flood reconnects as fast as it can and sends
  // nothing, a probe comes in between and its request is late: the flood's go
  // (once the first waited the grace, at once), the probe's stays until it is
  // answered.
  HealthConnections t(64);
  auto now = kT0;
  t.Admit(1, "flood", now);
  now += 1ms;
  t.Admit(2, "kubelet", now);  // its request is late: nothing received yet
  for (std::uint64_t id = 3; id < 50; ++id) {
    now += 1ms;
    if (auto e = t.MakeRoom(now, 100ms)) {
      ASSERT_NE(e->id, 2u) << "at " << id;
    }
    t.Admit(id, "flood", now);
  }
  t.Set(2, State::kAnswering);
  for (std::uint64_t id = 50; id < 500; ++id) {
    now += 1ms;
    if (auto e = t.MakeRoom(now, 100ms)) {
      ASSERT_NE(e->id, 2u) << "at " << id;
    }
    t.Admit(id, "flood", now);
  }
}

TEST(HealthConnectionsTest, AFloodFromOneAddressNeverEvictsAnotherAddresssConnection) {
  HealthConnections t(16);
  t.Admit(1, "kubelet", kT0);
  t.Admit(2, "scraper", kT0);
  t.Set(2, State::kAnsweringMetrics);
  for (std::uint64_t id = 3; id < 10'000; ++id) {
    auto e = t.Admit(id, "flood", kT0);
    if (e) {
      ASSERT_EQ(e->address, "flood") << "at " << id;
      ASSERT_EQ(e->state, State::kReading);
    }
    if (id % 3 == 0) t.Remove(id);  // some flood requests complete and are answered
    ASSERT_LE(t.size(), 16u);
  }
}

// ---- the server, over loopback ----------------------------------------------------

// A HealthServer on port 0 whose loop runs on its own thread; stopped and
// joined however the test ends.
class Running {
 public:
  explicit Running(HealthOptions o, HealthState state = {.ready = false, .live = true}) {
    auto s = HealthServer::Start(io_.get_executor(), 0, [state] { return state; },
                                 [] { return std::string("trainlet_up 1\n"); }, o);
    if (!s.ok()) throw std::runtime_error(s.status().message());
    server_ = std::move(s).value();
    port_ = server_->port();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~Running() {
    guard_.reset();
    io_.stop();
    thread_.join();
    server_.reset();
  }
  std::uint16_t port() const { return port_; }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_ =
      boost::asio::make_work_guard(io_);
  std::unique_ptr<HealthServer> server_;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

// A blocking client socket from `source` (127.0.0.x) connected to the server;
// reads give up after 20 s so a broken server fails the test instead of hanging it.
int Connect(std::uint16_t port, const char* source = "127.0.0.1") {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{.tv_sec = 20, .tv_usec = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &a.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Everything the server sends until it closes (or the 20 s read timeout).
std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

std::string Exchange(std::uint16_t port, const std::string& request,
                     const char* source = "127.0.0.1") {
  int fd = Connect(port, source);
  if (fd < 0) return "connect failed";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  ::shutdown(fd, SHUT_WR);
  std::string reply = ReadAll(fd);
  ::close(fd);
  return reply;
}

std::string StatusLine(const std::string& reply) { return reply.substr(0, reply.find("\r\n")); }

// Whether the server closed `fd` (EOF or reset) by now; false while it is open.
bool ClosedByServer(int fd) {
  char c;
  ssize_t n = ::recv(fd, &c, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

TEST(HealthServerTest, AnswersEachRequestWithItsStatus) {
  Running s({});
  EXPECT_EQ(StatusLine(Exchange(s.port(), "GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")),
            "HTTP/1.1 200 OK");
  EXPECT_EQ(StatusLine(Exchange(s.port(), "GET /readyz HTTP/1.0\r\n\r\n")),
            "HTTP/1.1 503 Service Unavailable");
  const std::string metrics = Exchange(s.port(), "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(StatusLine(metrics), "HTTP/1.1 200 OK");
  EXPECT_NE(metrics.find("\r\n\r\ntrainlet_up 1\n"), std::string::npos) << metrics;
  EXPECT_EQ(StatusLine(Exchange(s.port(), "GET /nope HTTP/1.1\r\n\r\n")),
            "HTTP/1.1 404 Not Found");
  const std::string post = Exchange(s.port(), "POST /livez HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(StatusLine(post), "HTTP/1.1 405 Method Not Allowed");
  EXPECT_NE(post.find("\r\nAllow: GET\r\n"), std::string::npos) << post;
}

TEST(HealthServerTest, AMalformedRequestGets400AndAnOversizedHeader431) {
  HealthOptions o;
  o.max_header_bytes = 1024;
  Running s(o);
  EXPECT_EQ(StatusLine(Exchange(s.port(), "HELLO\r\n\r\n")), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(StatusLine(Exchange(s.port(), "GET /livez FTP/1.1\r\n\r\n")),
            "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(StatusLine(Exchange(s.port(), "GET /livez HTTP/1.1\r\nNo colon here\r\n\r\n")),
            "HTTP/1.1 400 Bad Request");
  const std::string big = "GET /livez HTTP/1.1\r\nX-Big: " + std::string(2000, 'a') + "\r\n\r\n";
  EXPECT_EQ(StatusLine(Exchange(s.port(), big)), "HTTP/1.1 431 Request Header Fields Too Large");
  const std::string many = "GET /livez HTTP/1.1\r\n" + [] {
    std::string h;
    for (int i = 0; i < 200; ++i) h += "X-" + std::to_string(i) + ": v\r\n";
    return h;
  }() + "\r\n";
  EXPECT_EQ(StatusLine(Exchange(s.port(), many)), "HTTP/1.1 431 Request Header Fields Too Large");
  // Just under the limit is fine.
  const std::string fits = "GET /livez HTTP/1.1\r\nX-Big: " + std::string(900, 'a') + "\r\n\r\n";
  EXPECT_EQ(StatusLine(Exchange(s.port(), fits)), "HTTP/1.1 200 OK");
}

TEST(HealthServerTest, ARequestThatDoesNotArriveWithinTheDeadlineIsClosed) {
  HealthOptions o;
  o.request_deadline = 200ms;
  Running s(o);
  int idle = Connect(s.port(), "127.0.0.2");
  int slow = Connect(s.port(), "127.0.0.2");
  ASSERT_GE(idle, 0);
  ASSERT_GE(slow, 0);
  ::send(slow, "GET /livez HTTP/1.1\r\n", 21, MSG_NOSIGNAL);  // never ends its header
  EXPECT_EQ(ReadAll(idle), "");  // closed without an answer (not the 20 s read timeout)
  EXPECT_EQ(ReadAll(slow), "");
  EXPECT_TRUE(ClosedByServer(idle));
  EXPECT_TRUE(ClosedByServer(slow));
  ::close(idle);
  ::close(slow);
  EXPECT_EQ(StatusLine(Exchange(s.port(), "GET /livez HTTP/1.1\r\n\r\n")), "HTTP/1.1 200 OK");
}

TEST(HealthServerTest, IdleAndSlowConnectionsCannotKeepAProbeOut) {
  // Far more connections than slots, from another address, that send nothing
  // or a byte of a header that never ends: the probe gets in, and it was the
  // flood's oldest that made room.
  HealthOptions o;
  o.max_connections = 8;
  o.request_deadline = 60s;  // only eviction can make room here
  Running s(o);
  std::vector<int> flood;
  for (int i = 0; i < 50; ++i) {
    int fd = Connect(s.port(), "127.0.0.2");
    ASSERT_GE(fd, 0) << i;
    if (i % 2) ::send(fd, "G", 1, MSG_NOSIGNAL);
    flood.push_back(fd);
  }
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(StatusLine(Exchange(s.port(), "GET /livez HTTP/1.1\r\n\r\n")), "HTTP/1.1 200 OK");
  }
  // Accepted in order, so by the first answer its admission was made: the 8
  // slots held the flood's newest 8 and the probe evicted the oldest of them;
  // the next probes found the slot it left.
  for (std::size_t i = 0; i < flood.size(); ++i) {
    EXPECT_EQ(ClosedByServer(flood[i]), i < flood.size() - 8 + 1) << "flood connection " << i;
  }
  // A probe from the flood's own address gets in too (the newcomer never goes).
  EXPECT_EQ(StatusLine(Exchange(s.port(), "GET /livez HTTP/1.1\r\n\r\n", "127.0.0.2")),
            "HTTP/1.1 200 OK");
  for (int fd : flood) ::close(fd);
}

// The number of the highest descriptor open in this process.
int HighestOpenDescriptor() {
  int highest = 2;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    highest = std::max(highest, std::stoi(e.path().filename().string()));
  }
  return highest;
}

TEST(HealthServerTest, OutOfDescriptorsAProbeIsStillAnsweredAndTheReasonLogged) {
  // A child process runs the server with RLIMIT_NOFILE just above its highest
  // descriptor and every lower one taken: accept(2) fails with EMFILE.
  int port_pipe[2], log_pipe[2];
  ASSERT_EQ(::pipe(port_pipe), 0);
  ASSERT_EQ(::pipe(log_pipe), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::dup2(log_pipe[1], 1);  // spdlog's default logger writes to stdout
    ::dup2(log_pipe[1], 2);
    ::close(log_pipe[0]);
    ::close(port_pipe[0]);
    boost::asio::io_context io;
    auto s = HealthServer::Start(io.get_executor(), 0,
                                 [] { return HealthState{.ready = false, .live = true}; });
    if (!s.ok()) ::_exit(3);
    std::uint16_t port = (*s)->port();
    rlimit r{};
    ::getrlimit(RLIMIT_NOFILE, &r);
    r.rlim_cur = static_cast<rlim_t>(HighestOpenDescriptor() + 1);
    if (::setrlimit(RLIMIT_NOFILE, &r) != 0) ::_exit(4);
    while (::open("/dev/null", O_RDONLY) >= 0) {
    }  // fill the gaps below the limit
    if (::write(port_pipe[1], &port, sizeof port) != sizeof port) ::_exit(5);
    io.run();
    ::_exit(0);
  }
  ::close(port_pipe[1]);
  ::close(log_pipe[1]);
  std::uint16_t port = 0;
  ASSERT_EQ(::read(port_pipe[0], &port, sizeof port), static_cast<ssize_t>(sizeof port));
  ::close(port_pipe[0]);
  std::vector<int> idle;
  for (int i = 0; i < 5; ++i) idle.push_back(Connect(port, "127.0.0.2"));
  int answered = 0;
  for (int i = 0; i < 10; ++i) {
    if (StatusLine(Exchange(port, "GET /livez HTTP/1.1\r\n\r\n")) == "HTTP/1.1 200 OK") ++answered;
  }
  for (int fd : idle) ::close(fd);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  std::string log;
  char buf[4096];
  for (ssize_t n; (n = ::read(log_pipe[0], buf, sizeof buf)) > 0;) log.append(buf, n);
  ::close(log_pipe[0]);
  EXPECT_EQ(answered, 10) << log;
  EXPECT_NE(log.find("health: accept failed: Too many open files (RLIMIT_NOFILE "),
            std::string::npos)
      << log;
}

}  // namespace
}  // namespace trainlet::agent
