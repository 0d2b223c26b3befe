// Resolver against a real dnsmasq on loopback (plus a tiny in-process UDP server
// for answers dnsmasq will not give on demand: SERVFAIL, silence).
#include "trainlet/rendezvous/resolver.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <gtest/gtest.h>

#include "trainlet/rendezvous/backoff.h"
#include "trainlet/rendezvous/name_check.h"

namespace trainlet::rendezvous {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using asio::ip::make_address;
using asio::ip::tcp;
using asio::ip::udp;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr const char* kDnsmasq = "/usr/sbin/dnsmasq";

// What a Kubernetes pod's /etc/resolv.conf looks like (nameserver replaced by
// ResolverOptions::servers in every test).
constexpr const char* kPodResolvConf =
    "nameserver 127.0.0.1\n"
    "search default.svc.cluster.local svc.cluster.local cluster.local\n"
    "options ndots:5\n";

std::vector<asio::ip::address> Addresses(std::initializer_list<const char*> literals) {
  std::vector<asio::ip::address> out;
  for (const char* l : literals) out.push_back(make_address(l));
  return out;
}

std::vector<asio::ip::address> Sorted(std::vector<asio::ip::address> v) {
  std::sort(v.begin(), v.end());
  return v;
}

void WriteFile(const fs::path& path, const std::string& content) {
  std::ofstream f(path, std::ios::trunc);
  f << content;
  ASSERT_TRUE(f.good()) << path;
}

// A dnsmasq child serving the hosts files of `dir`/hosts on 127.0.0.1:port()
// (UDP and TCP), answering NXDOMAIN for unknown names under cluster.local and
// REFUSED for everything else (it has no upstream). Killed by the destructor,
// and by the kernel if this process dies first (PR_SET_PDEATHSIG).
class Dnsmasq {
 public:
  // Empty `error` and a running server, or a reason.
  static std::unique_ptr<Dnsmasq> Start(const fs::path& dir, std::string* error) {
    for (int attempt = 0; attempt < 5; ++attempt) {
      const int port = FreePort();
      if (port <= 0) {
        *error = "no free loopback port";
        return nullptr;
      }
      auto d = std::unique_ptr<Dnsmasq>(new Dnsmasq(dir, port));
      if (d->Spawn(error) && d->WaitReady(error)) return d;
      // Most likely someone took the port between FreePort() and dnsmasq's bind.
    }
    return nullptr;
  }

  ~Dnsmasq() { Stop(); }

  int port() const { return port_; }
  std::string server() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string Log() const {
    std::ifstream f(dir_ / "dnsmasq.log");
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }

 private:
  Dnsmasq(fs::path dir, int port) : dir_(std::move(dir)), port_(port) {}

  // A port free for both UDP and TCP on 127.0.0.1 right now.
  static int FreePort() {
    for (int i = 0; i < 20; ++i) {
      asio::io_context io;
      boost::system::error_code ec;
      udp::socket u(io);
      u.open(udp::v4(), ec);
      if (!ec) u.bind({make_address("127.0.0.1"), 0}, ec);
      if (ec) continue;
      const int port = u.local_endpoint().port();
      tcp::acceptor t(io);
      t.open(tcp::v4(), ec);
      if (!ec) t.bind({make_address("127.0.0.1"), static_cast<unsigned short>(port)}, ec);
      if (!ec) return port;
    }
    return -1;
  }

  bool Spawn(std::string* error) {
    const std::vector<std::string> args = {
        kDnsmasq,
        "--conf-file=/dev/null",  // Not the system's /etc/dnsmasq.conf.
        "--keep-in-foreground",
        "--no-resolv",  // No upstream: unknown non-local names get REFUSED.
        "--no-hosts",   // Not /etc/hosts.
        "--no-poll",
        "--port=" + std::to_string(port_),
        "--listen-address=127.0.0.1",
        "--bind-interfaces",  // Only 127.0.0.1:port, so parallel instances coexist.
        "--user=root",        // Do not drop to nobody (a no-op when not root).
        "--pid-file=",        // No pid file.
        // Re-read on change (inotify), so a test can publish a record late.
        "--hostsdir=" + (dir_ / "hosts").string(),
        "--local=/cluster.local/",  // Answer NXDOMAIN there instead of forwarding.
        "--local-ttl=0",
        "--no-negcache",
        "--log-queries",
        "--log-facility=" + (dir_ / "dnsmasq.log").string(),
    };
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) {
      *error = std::string("fork: ") + std::strerror(errno);
      return false;
    }
    if (pid_ == 0) {
      // Only async-signal-safe calls between fork and exec.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      ::execv(kDnsmasq, argv.data());
      ::_exit(127);
    }
    return true;
  }

  // Polls (TCP connect) until dnsmasq listens, or it exits, or 5 s pass. dnsmasq
  // binds UDP before TCP and reads its hosts files before serving.
  bool WaitReady(std::string* error) {
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (Clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        *error = "dnsmasq exited early (status " + std::to_string(status) + "): " + Log();
        return false;
      }
      asio::io_context io;
      tcp::socket s(io);
      boost::system::error_code ec;
      s.connect({make_address("127.0.0.1"), static_cast<unsigned short>(port_)}, ec);
      if (!ec) return true;
      std::this_thread::sleep_for(milliseconds(5));
    }
    *error = "dnsmasq did not listen within 5 s: " + Log();
    Stop();
    return false;
  }

  void Stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    while (::waitpid(pid_, nullptr, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        break;
      }
      std::this_thread::sleep_for(milliseconds(2));
    }
    pid_ = -1;
  }

  fs::path dir_;
  int port_;
  pid_t pid_ = -1;
};

// A UDP DNS server on 127.0.0.1 that answers every query with a fixed RCODE
// (RFC 1035 4.1.1) and the question echoed, or stays silent when rcode < 0.
class FakeDnsServer {
 public:
  FakeDnsServer(asio::io_context& io, int rcode)
      : socket_(io, udp::endpoint(make_address("127.0.0.1"), 0)), rcode_(rcode) {
    Receive();
  }
  std::string server() const {
    return "127.0.0.1:" + std::to_string(socket_.local_endpoint().port());
  }
  int queries() const { return queries_; }
  void set_rcode(int rcode) { rcode_ = rcode; }
  // Stops listening, so an io_context::run() can return once the code under
  // test has nothing pending.
  void Close() {
    boost::system::error_code ec;
    socket_.close(ec);
  }

 private:
  void Receive() {
    socket_.async_receive_from(asio::buffer(buf_), peer_,
                               [this](const boost::system::error_code& ec, std::size_t n) {
                                 if (ec) return;  // Closed: `this` may be gone.
                                 ++queries_;
                                 if (rcode_ >= 0) Answer(n);
                                 Receive();
                               });
  }

  void Answer(std::size_t n) {
    // Header (12 bytes), then QNAME as labels up to the root label, QTYPE, QCLASS.
    std::size_t end = 12;
    while (end < n && buf_[end] != 0) end += 1 + buf_[end];
    end += 1 + 4;
    if (end > n) return;
    std::vector<std::uint8_t> reply(buf_.begin(), buf_.begin() + end);
    reply[2] = static_cast<std::uint8_t>(0x80 | (reply[2] & 0x79));  // QR; keep opcode, RD.
    reply[3] = static_cast<std::uint8_t>(0x80 | rcode_);             // RA; RCODE.
    std::fill(reply.begin() + 6, reply.begin() + 12, 0);             // No AN, NS, AR.
    boost::system::error_code ec;
    socket_.send_to(asio::buffer(reply), peer_, 0, ec);
  }

  udp::socket socket_;
  std::array<std::uint8_t, 1500> buf_{};
  udp::endpoint peer_;
  int rcode_;
  int queries_ = 0;
};

class ResolverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // c-ares reads these; keep the test hermetic.
    ::unsetenv("LOCALDOMAIN");
    ::unsetenv("RES_OPTIONS");
    ::unsetenv("HOSTALIASES");
    std::string tmpl = (fs::path(::testing::TempDir()) / "resolver_test.XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << std::strerror(errno);
    dir_ = tmpl;
    fs::create_directories(dir_ / "hosts");
    fs::create_directories(dir_ / "staging");
    ASSERT_NO_FATAL_FAILURE(WriteFile(dir_ / "resolv.conf", kPodResolvConf));
  }

  void TearDown() override {
    if (HasFailure() && dnsmasq_) std::cerr << "dnsmasq log:\n" << dnsmasq_->Log();
    dnsmasq_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Publishes a hosts(5) file atomically (rename), so dnsmasq never reads half of it.
  void Publish(const std::string& file, const std::string& content) {
    ASSERT_NO_FATAL_FAILURE(WriteFile(dir_ / "staging" / file, content));
    fs::rename(dir_ / "staging" / file, dir_ / "hosts" / file);
  }

  void StartDnsmasq() {
    std::string error;
    dnsmasq_ = Dnsmasq::Start(dir_, &error);
    ASSERT_NE(dnsmasq_, nullptr) << error;
  }

  // The pod's resolv.conf, and the dnsmasq as its only server.
  ResolverOptions Options() {
    ResolverOptions o;
    if (dnsmasq_) o.servers = {dnsmasq_->server()};
    o.resolv_conf_path = (dir_ / "resolv.conf").string();
    o.query_timeout = milliseconds(1000);
    o.tries = 2;
    return o;
  }

  std::unique_ptr<Resolver> MakeResolver(ResolverOptions options) {
    auto r = Resolver::Create(io_.get_executor(), std::move(options));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : nullptr;
  }

  // Runs the loop until `done()` or `timeout`; no sleeping.
  bool RunUntil(const std::function<bool()>& done, milliseconds timeout = milliseconds(5000)) {
    const auto deadline = Clock::now() + timeout;
    io_.restart();
    while (!done() && Clock::now() < deadline) io_.run_one_for(milliseconds(10));
    return done();
  }

  // One Resolve, run to completion; fails the test if `done` runs other than once.
  ResolveOutcome ResolveNow(Resolver& r, const std::string& name) {
    int calls = 0;
    ResolveOutcome out;
    r.Resolve(name, [&](ResolveOutcome o) {
      ++calls;
      out = std::move(o);
    });
    EXPECT_TRUE(RunUntil([&] { return calls > 0; })) << name;
    // Anything posted late (a second call) would run now.
    io_.restart();
    io_.poll();
    EXPECT_EQ(calls, 1) << name;
    return out;
  }

  asio::io_context io_;
  fs::path dir_;
  std::unique_ptr<Dnsmasq> dnsmasq_;
};

TEST_F(ResolverTest, ResolvesAnARecord) {
  ASSERT_NO_FATAL_FAILURE(Publish("leader", "10.0.0.7 leader.cluster.local\n"));
  ASSERT_NO_FATAL_FAILURE(StartDnsmasq());
  auto r = MakeResolver(Options());
  ASSERT_NE(r, nullptr);
  ResolveOutcome o = ResolveNow(*r, "leader.cluster.local");
  ASSERT_TRUE(o.ok()) << ResolveErrorName(o.error) << ": " << o.detail;
  EXPECT_EQ(o.addresses, Addresses({"10.0.0.7"}));
  EXPECT_TRUE(o.detail.empty());
}

TEST_F(ResolverTest, ReturnsEveryAAndAaaaAddress) {
  ASSERT_NO_FATAL_FAILURE(Publish("multi",
                                  "10.0.0.1 multi.cluster.local\n"
                                  "10.0.0.2 multi.cluster.local\n"
                                  "10.0.0.3 multi.cluster.local\n"
                                  "fd00::1 multi.cluster.local\n"
                                  "fd00::2 multi.cluster.local\n"
                                  "fd00::9 v6only.cluster.local\n"));
  ASSERT_NO_FATAL_FAILURE(StartDnsmasq());
  auto r = MakeResolver(Options());
  ASSERT_NE(r, nullptr);
  ResolveOutcome o = ResolveNow(*r, "multi.cluster.local");
  ASSERT_TRUE(o.ok()) << o.detail;
  EXPECT_EQ(Sorted(o.addresses),
            Sorted(Addresses({"10.0.0.1", "10.0.0.2", "10.0.0.3", "fd00::1", "fd00::2"})));
  // No A record but an AAAA one is a success, not NODATA.
  o = ResolveNow(*r, "v6only.cluster.local");
  ASSERT_TRUE(o.ok()) << o.detail;
  EXPECT_EQ(o.addresses, Addresses({"fd00::9"}));
}

// 64 A records do not fit the 512-byte UDP limit (RFC 1035 4.2.1): dnsmasq sets
// TC and c-ares repeats the query over TCP (RFC 7766), which our loop drives too.
TEST_F(ResolverTest, TruncatedAnswerIsRetriedOverTcp) {
  std::string hosts;
  std::vector<asio::ip::address> want;
  for (int i = 1; i <= 64; ++i) {
    hosts += "10.1.0." + std::to_string(i) + " big.cluster.local\n";
    want.push_back(make_address("10.1.0." + std::to_string(i)));
  }
  ASSERT_NO_FATAL_FAILURE(Publish("big", hosts));
  ASSERT_NO_FATAL_FAILURE(StartDnsmasq());
  auto r = MakeResolver(Options());
  ASSERT_NE(r, nullptr);
  ResolveOutcome o = ResolveNow(*r, "big.cluster.local");
  ASSERT_TRUE(o.ok()) << o.detail;
  EXPECT_EQ(Sorted(o.addresses), Sorted(want));
}

TEST_F(ResolverTest, NxdomainIsNotFound) {
  ASSERT_NO_FATAL_FAILURE(StartDnsmasq());
  auto r = MakeResolver(Options());
  ASSERT_NE(r, nullptr);
  ResolveOutcome o = ResolveNow(*r, "nobody.cluster.local");
  EXPECT_EQ(o.error, ResolveError::kNotFound) << ResolveErrorName(o.error);
  EXPECT_FALSE(o.detail.empty());
  EXPECT_TRUE(o.addresses.empty());
}

TEST_F(ResolverTest, RefusedIsRefused) {
  ASSERT_NO_FATAL_FAILURE(StartDnsmasq());
  auto r = MakeResolver(Options());
  ASSERT_NE(r, nullptr);
  // Every search candidate is NXDOMAIN under cluster.local; the name as is is
  // outside it, and dnsmasq, having no upstream, answers REFUSED.
  ResolveOutcome o = ResolveNow(*r, "www.example");
  EXPECT_EQ(o.error, ResolveError::kRefused) << ResolveErrorName(o.error) << ": " << o.detail;
  EXPECT_EQ(o.detail.rfind("ARES_EREFUSED", 0), 0u) << o.detail;  // The RCODE, not ICMP.
}

// Nothing listens on the port: ICMP port unreachable, reported at once.
TEST_F(ResolverTest, ClosedPortIsRefusedWithoutWaitingForTheTimeout) {
  std::string server;
  {
    udp::socket s(io_, udp::endpoint(make_address("127.0.0.1"), 0));
    server = "127.0.0.1:" + std::to_string(s.local_endpoint().port());
  }
  ResolverOptions options = Options();
  options.servers = {server};
  options.query_timeout = milliseconds(60000);
  auto r = MakeResolver(options);
  ASSERT_NE(r, nullptr);
  const auto start = Clock::now();
  ResolveOutcome o = ResolveNow(*r, "leader.cluster.local");
  EXPECT_EQ(o.error, ResolveError::kRefused) << ResolveErrorName(o.error);
  EXPECT_EQ(o.detail.rfind("ARES_ECONNREFUSED", 0), 0u) << o.detail;
  // Far below the timeout: the refusal, not the timeout, ended it.
  EXPECT_LT(Clock::now() - start, milliseconds(30000));
}

TEST_F(ResolverTest, ServfailIsServerFailure) {
  FakeDnsServer servfail(io_, /*rcode=*/2);
  ResolverOptions options = Options();
  options.servers = {servfail.server()};
  auto r = MakeResolver(options);
  ASSERT_NE(r, nullptr);
  ResolveOutcome o = ResolveNow(*r, "leader.cluster.local");
  EXPECT_EQ(o.error, ResolveError::kServerFailure) << ResolveErrorName(o.error);
  EXPECT_EQ(o.detail.rfind("ARES_ESERVFAIL", 0), 0u) << o.detail;
  // A and AAAA for the first search candidate; SERVFAIL ends the search.
  EXPECT_EQ(servfail.queries(), 2);
}

TEST_F(ResolverTest, SilentServerTimesOutWithinTheConfiguredTimeouts) {
  FakeDnsServer silent(io_, /*rcode=*/-1);
  ResolverOptions options = Options();
  options.servers = {silent.server()};
  options.query_timeout = milliseconds(100);
  options.tries = 2;
  auto r = MakeResolver(options);
  ASSERT_NE(r, nullptr);
  const auto start = Clock::now();
  ResolveOutcome o = ResolveNow(*r, "leader.cluster.local");
  const auto elapsed = Clock::now() - start;
  EXPECT_EQ(o.error, ResolveError::kTimeout) << ResolveErrorName(o.error);
  // c-ares doubles the timeout each round: 100 ms + 200 ms, and a timeout on the
  // first search candidate ends the lookup.
  EXPECT_GE(elapsed, milliseconds(290));
  EXPECT_LT(elapsed, milliseconds(1500));
  EXPECT_EQ(silent.queries(), 4);  // (A + AAAA) x 2 tries, one candidate.
}

TEST_F(ResolverTest, RecordPublishedLaterIsFoundByARetry) {
  ASSERT_NO_FATAL_FAILURE(StartDnsmasq());
  auto r = MakeResolver(Options());
  ASSERT_NE(r, nullptr);

  asio::steady_timer publish(io_, milliseconds(150));
  publish.async_wait([&](const boost::system::error_code& ec) {
    if (!ec) Publish("late", "10.0.0.9 late.cluster.local\n");
  });
  BackoffOptions bo;
  bo.initial = milliseconds(20);
  bo.cap = milliseconds(100);
  bo.min_delay = milliseconds(10);
  Backoff backoff(bo, /*seed=*/1);
  std::vector<ResolveError> seen;
  std::optional<ResolveOutcome> found;
  asio::steady_timer retry(io_);
  std::function<void()> attempt = [&] {
    r->Resolve("late.cluster.local", [&](ResolveOutcome o) {
      seen.push_back(o.error);
      if (o.ok()) {
        found = std::move(o);
        return;
      }
      retry.expires_after(backoff.Next());
      retry.async_wait([&](const boost::system::error_code& ec) {
        if (!ec) attempt();
      });
    });
  };
  attempt();
  ASSERT_TRUE(RunUntil([&] { return found.has_value(); })) << seen.size() << " attempts";
  EXPECT_EQ(seen.front(), ResolveError::kNotFound);
  EXPECT_GT(seen.size(), 1u);
  EXPECT_EQ(found->addresses, Addresses({"10.0.0.9"}));
}

// The Kubernetes case: a member resolves the leader as `trainer-0.trainer`,
// which only exists as trainer-0.trainer.<namespace>.svc.cluster.local.
TEST_F(ResolverTest, SearchDomainsFromResolvConfApply) {
  ASSERT_NO_FATAL_FAILURE(
      Publish("trainer", "10.0.0.7 trainer-0.trainer.default.svc.cluster.local\n"));
  ASSERT_NO_FATAL_FAILURE(StartDnsmasq());
  auto r = MakeResolver(Options());  // kPodResolvConf: search ... ndots:5.
  ASSERT_NE(r, nullptr);
  ResolveOutcome o = ResolveNow(*r, "trainer-0.trainer");
  ASSERT_TRUE(o.ok()) << ResolveErrorName(o.error) << ": " << o.detail;
  EXPECT_EQ(o.addresses, Addresses({"10.0.0.7"}));
}

TEST_F(ResolverTest, SearchDomainsAndNdotsFromOptions) {
  ASSERT_NO_FATAL_FAILURE(
      Publish("trainer", "10.0.0.7 trainer-0.trainer.default.svc.cluster.local\n"));
  ASSERT_NO_FATAL_FAILURE(WriteFile(dir_ / "resolv.conf", "nameserver 127.0.0.1\n"));
  ASSERT_NO_FATAL_FAILURE(StartDnsmasq());
  struct Case {
    std::vector<std::string> search;
    int ndots;
    ResolveError want;
  };
  const std::vector<std::string> k8s = {"default.svc.cluster.local", "svc.cluster.local",
                                        "cluster.local"};
  const Case cases[] = {
      {k8s, 5, ResolveError::kNone},
      // 1 dot >= ndots:1, so the name goes out as is first; REFUSED ends the
      // search (as in glibc's res_search), so the search domain is never tried.
      {k8s, 1, ResolveError::kRefused},
      // An empty list overrides resolv.conf: no search at all.
      {{}, 5, ResolveError::kRefused},
  };
  for (const Case& c : cases) {
    ResolverOptions options = Options();
    options.search_domains = c.search;
    options.ndots = c.ndots;
    auto r = MakeResolver(options);
    ASSERT_NE(r, nullptr);
    ResolveOutcome o = ResolveNow(*r, "trainer-0.trainer");
    EXPECT_EQ(o.error, c.want) << "ndots " << c.ndots << ", " << c.search.size()
                               << " domains: " << ResolveErrorName(o.error) << " " << o.detail;
  }
}

TEST_F(ResolverTest, IpLiteralResolvesToItselfWithoutAQueryAndNotInline) {
  FakeDnsServer silent(io_, /*rcode=*/-1);
  ResolverOptions options = Options();
  options.servers = {silent.server()};
  auto r = MakeResolver(options);
  ASSERT_NE(r, nullptr);
  for (const char* literal : {"10.1.2.3", "fd00::7", "::ffff:10.0.0.1"}) {
    bool returned = false;
    bool inline_call = false;
    std::optional<ResolveOutcome> out;
    r->Resolve(literal, [&](ResolveOutcome o) {
      inline_call = !returned;
      out = std::move(o);
    });
    returned = true;
    ASSERT_TRUE(RunUntil([&] { return out.has_value(); }));
    EXPECT_FALSE(inline_call);
    ASSERT_TRUE(out->ok()) << out->detail;
    EXPECT_EQ(out->addresses, Addresses({literal}));
  }
  io_.restart();
  io_.poll();  // Deliver any datagram that was sent.
  EXPECT_EQ(silent.queries(), 0);
}

TEST_F(ResolverTest, BadNamesFailWithoutAQuery) {
  FakeDnsServer silent(io_, /*rcode=*/-1);
  ResolverOptions options = Options();
  options.servers = {silent.server()};
  auto r = MakeResolver(options);
  ASSERT_NE(r, nullptr);
  const std::string long_label(64, 'a');  // RFC 1035 2.3.4: labels are <= 63 octets.
  for (const std::string& name :
       {std::string(), std::string("a\0b", 3), std::string(300, 'a'), long_label + ".cluster.local"}) {
    ResolveOutcome o = ResolveNow(*r, name);
    EXPECT_EQ(o.error, ResolveError::kBadName) << name << ": " << ResolveErrorName(o.error);
  }
  EXPECT_EQ(silent.queries(), 0);
}

TEST_F(ResolverTest, CancelEndsQueriesInFlightAndTheResolverStaysUsable) {
  FakeDnsServer server(io_, /*rcode=*/-1);
  ResolverOptions options = Options();
  options.servers = {server.server()};
  options.search_domains = std::vector<std::string>{};
  auto r = MakeResolver(options);
  ASSERT_NE(r, nullptr);
  std::vector<ResolveError> results;
  for (const char* name : {"a.cluster.local", "b.cluster.local", "c.cluster.local"}) {
    r->Resolve(name, [&](ResolveOutcome o) { results.push_back(o.error); });
  }
  ASSERT_TRUE(RunUntil([&] { return server.queries() >= 6; }));  // All on the wire.
  r->Cancel();
  ASSERT_TRUE(RunUntil([&] { return results.size() == 3; }));
  EXPECT_EQ(results, std::vector<ResolveError>(3, ResolveError::kCancelled));

  server.set_rcode(3);  // NXDOMAIN from now on.
  EXPECT_EQ(ResolveNow(*r, "d.cluster.local").error, ResolveError::kNotFound);
  // Nothing left behind: no timer, no socket wait keeps the loop alive.
  server.Close();
  io_.restart();
  const auto start = Clock::now();
  io_.run();
  EXPECT_LT(Clock::now() - start, milliseconds(500));
  EXPECT_EQ(results.size(), 3u);
}

TEST_F(ResolverTest, DestroyingTheResolverWithQueriesInFlightIsSafe) {
  FakeDnsServer silent(io_, /*rcode=*/-1);
  ResolverOptions options = Options();
  options.servers = {silent.server()};
  int calls = 0;
  ResolveError error = ResolveError::kNone;
  {
    auto r = MakeResolver(options);
    ASSERT_NE(r, nullptr);
    r->Resolve("leader.cluster.local", [&](ResolveOutcome o) {
      ++calls;
      error = o.error;
    });
    // Let it reach the wire, so a socket wait and a retransmit timer are pending.
    ASSERT_TRUE(RunUntil([&] { return silent.queries() >= 2; }));
  }
  silent.Close();
  io_.restart();
  const auto start = Clock::now();
  io_.run();  // Returns once the posted completion ran: nothing else is pending.
  EXPECT_LT(Clock::now() - start, milliseconds(500));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(error, ResolveError::kCancelled);
}

TEST_F(ResolverTest, DestroyingTheResolverFromACompletionIsSafe) {
  FakeDnsServer silent(io_, /*rcode=*/-1);
  ResolverOptions options = Options();
  options.servers = {silent.server()};
  std::unique_ptr<Resolver> r = MakeResolver(options);
  ASSERT_NE(r, nullptr);
  std::vector<ResolveError> results;
  r->Resolve("leader.cluster.local", [&](ResolveOutcome o) { results.push_back(o.error); });
  ASSERT_TRUE(RunUntil([&] { return silent.queries() >= 2; }));
  r->Resolve("10.0.0.1", [&](ResolveOutcome o) {
    results.push_back(o.error);
    r.reset();  // The owner drops the resolver from a callback.
  });
  silent.Close();
  io_.restart();
  io_.run();
  EXPECT_EQ(r, nullptr);
  EXPECT_EQ(results, (std::vector<ResolveError>{ResolveError::kNone, ResolveError::kCancelled}));
}

TEST_F(ResolverTest, ManyConcurrentQueriesEachCompleteOnce) {
  std::string hosts;
  for (int i = 0; i < 10; ++i) {
    hosts += "10.2.0." + std::to_string(i + 1) + " w" + std::to_string(i) + ".cluster.local\n";
  }
  ASSERT_NO_FATAL_FAILURE(Publish("workers", hosts));
  ASSERT_NO_FATAL_FAILURE(StartDnsmasq());
  auto r = MakeResolver(Options());
  ASSERT_NE(r, nullptr);
  std::vector<int> calls(30, 0);
  std::vector<ResolveOutcome> outs(30);
  for (int i = 0; i < 30; ++i) {
    std::string name;
    if (i < 10) name = "w" + std::to_string(i) + ".cluster.local";
    else if (i < 20) name = "nx" + std::to_string(i) + ".cluster.local";
    else name = "10.3.0." + std::to_string(i);
    r->Resolve(name, [&, i](ResolveOutcome o) {
      ++calls[i];
      outs[i] = std::move(o);
    });
  }
  io_.restart();
  io_.run();  // Returns when all are done.
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ(calls[i], 1) << i;
    if (i < 10) {
      EXPECT_EQ(outs[i].addresses, Addresses({("10.2.0." + std::to_string(i + 1)).c_str()})) << i;
    } else if (i < 20) {
      EXPECT_EQ(outs[i].error, ResolveError::kNotFound) << i;
    } else {
      EXPECT_EQ(outs[i].addresses, Addresses({("10.3.0." + std::to_string(i)).c_str()})) << i;
    }
  }
}

TEST(ResolverCreateTest, RejectsBadOptions) {
  asio::io_context io;
  struct Case {
    const char* what;
    std::function<void(ResolverOptions&)> mutate;
  };
  const Case cases[] = {
      {"zero timeout", [](ResolverOptions& o) { o.query_timeout = milliseconds(0); }},
      {"zero tries", [](ResolverOptions& o) { o.tries = 0; }},
      {"ndots 16", [](ResolverOptions& o) { o.ndots = 16; }},
      {"empty search domain", [](ResolverOptions& o) { o.search_domains = {{""}}; }},
      {"host name as server", [](ResolverOptions& o) { o.servers = {"dns.example"}; }},
      {"comma in server", [](ResolverOptions& o) { o.servers = {"127.0.0.1,127.0.0.2"}; }},
      {"missing resolv.conf", [](ResolverOptions& o) { o.resolv_conf_path = "/nonexistent/x"; }},
  };
  for (const Case& c : cases) {
    ResolverOptions o;
    o.servers = {"127.0.0.1:53"};
    c.mutate(o);
    auto r = Resolver::Create(io.get_executor(), o);
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_EQ(r.status().failure_class(), exitcodes::FailureClass::kConfig) << c.what;
  }
  ResolverOptions ok;
  ok.servers = {"127.0.0.1:5353", "[::1]:53", "10.96.0.10"};
  EXPECT_TRUE(Resolver::Create(io.get_executor(), ok).ok());
}

TEST(ResolveErrorNameTest, NamesAreStable) {
  EXPECT_EQ(ResolveErrorName(ResolveError::kNotFound), "not_found");
  EXPECT_EQ(ResolveErrorName(ResolveError::kServerFailure), "server_failure");
  EXPECT_EQ(ResolveErrorName(ResolveError::kTimeout), "timeout");
  EXPECT_EQ(ResolveErrorName(ResolveError::kCancelled), "cancelled");
}

// The leader's own name, checked through DNS only: missing from DNS (the
// Service does not select the pod, publishNotReadyAddresses off) it is reported
// with what to fix, however /etc/hosts reads; resolving to this pod it is not.
TEST_F(ResolverTest, LeaderNameCheckSaysWhatToFix) {
  ASSERT_NO_FATAL_FAILURE(Publish("other", "10.0.0.9 trainer-0.other.cluster.local\n"));
  ASSERT_NO_FATAL_FAILURE(Publish("ours", "10.0.0.7 trainer-0.trainer.cluster.local\n"));
  ASSERT_NO_FATAL_FAILURE(StartDnsmasq());
  auto start = [&](const std::string& name, std::optional<std::string>* got) {
    NameCheckOptions o;
    o.name = name;
    o.resolver = Options();
    o.patience = milliseconds(300);
    o.interval = milliseconds(50);
    o.local_addresses = [] { return Addresses({"127.0.0.1", "10.0.0.7"}); };
    auto c = LeaderNameCheck::Start(io_.get_executor(), o,
                                    [got](const std::string& p) { *got = p; });
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return std::move(c).value();
  };
  std::optional<std::string> missing, foreign, fine;
  auto c1 = start("trainer-0.nowhere.cluster.local", &missing);
  auto c2 = start("trainer-0.other.cluster.local", &foreign);
  auto c3 = start("trainer-0.trainer.cluster.local", &fine);
  RunUntil([&] { return missing && foreign; }, milliseconds(5000));
  RunUntil([] { return false; }, milliseconds(500));
  ASSERT_TRUE(missing.has_value());
  EXPECT_NE(missing->find("trainer-0.nowhere.cluster.local does not resolve"), std::string::npos)
      << *missing;
  EXPECT_NE(missing->find("publishNotReadyAddresses"), std::string::npos) << *missing;
  ASSERT_TRUE(foreign.has_value());
  EXPECT_NE(foreign->find("resolves to 10.0.0.9, none of them this pod's (10.0.0.7)"),
            std::string::npos)
      << *foreign;
  EXPECT_FALSE(fine.has_value()) << *fine;
}

// hosts_file = false never reads /etc/hosts (where the kubelet writes the
// pod's own FQDN): "localhost" only exists there, so DNS alone cannot find it.
TEST_F(ResolverTest, DnsOnlySkipsTheHostsFile) {
  ASSERT_NO_FATAL_FAILURE(StartDnsmasq());
  ResolverOptions o = Options();
  o.search_domains = std::vector<std::string>{};
  auto with_hosts = MakeResolver(o);
  o.hosts_file = false;
  auto dns_only = MakeResolver(o);
  ASSERT_NE(with_hosts, nullptr);
  ASSERT_NE(dns_only, nullptr);
  EXPECT_TRUE(ResolveNow(*with_hosts, "localhost").ok());
  EXPECT_FALSE(ResolveNow(*dns_only, "localhost").ok());
}

}  // namespace
}  // namespace trainlet::rendezvous
