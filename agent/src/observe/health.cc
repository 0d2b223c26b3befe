#include "trainlet/agent/observe/health.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdio>
#include <unordered_map>

#include "trainlet/agent/base/address.h"
#include "trainlet/agent/base/metrics.h"
#include "trainlet/rendezvous/peer_log_limiter.h"

namespace trainlet::agent {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using ErrorCode = boost::system::error_code;

namespace {

constexpr auto kAcceptPause = std::chrono::milliseconds(100);  // out of descriptors, no reserve: retry accept(2) this often instead of spinning on it

// One connection: its socket, the request being parsed, the answer.
struct Session {
  Session(tcp::socket s, std::uint64_t i, std::size_t header_bytes)
      : stream(std::move(s)), id(i), buffer(header_bytes + 1024) {}
  beast::tcp_stream stream;
  std::uint64_t id;
  std::string address, peer;  // "10.0.0.7", "10.0.0.7:41234"
  beast::flat_buffer buffer;  // bounded: a header beyond the parser's limit ends the read
  http::request_parser<http::empty_body> parser;
  http::response<http::string_body> response;
  bool closed = false;
};

// A descriptor kept open for the moment accept(2) fails for lack of them
// (EMFILE at RLIMIT_NOFILE, ENFILE system-wide): closing it lets the waiting
// connection be accepted, so a probe is still answered and an idle connection
// evicted, which frees one to take the reserve again. The accept(2) man page's
// and libev's "special problem of accept()ing when you can't".
class ReserveDescriptor {
 public:
  ReserveDescriptor() { Take(); }
  ~ReserveDescriptor() { Release(); }
  ReserveDescriptor(const ReserveDescriptor&) = delete;
  ReserveDescriptor& operator=(const ReserveDescriptor&) = delete;
  // Holds one again unless it already does; false while none is to be had.
  bool Take() {
    if (fd_ < 0) fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    return fd_ >= 0;
  }
  bool held() const { return fd_ >= 0; }
  // Gives it up; false when none was held.
  bool Release() {
    if (fd_ < 0) return false;
    ::close(fd_);
    fd_ = -1;
    return true;
  }

 private:
  int fd_ = -1;
};

bool OutOfDescriptors(const ErrorCode& ec) {
  return ec.category() == boost::system::system_category() &&
         (ec.value() == EMFILE || ec.value() == ENFILE);
}

// "RLIMIT_NOFILE 1024" (the soft limit accept(2) ran into), for the log.
std::string NofileLimit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return "RLIMIT_NOFILE unknown";
  return "RLIMIT_NOFILE " +
         (r.rlim_cur == RLIM_INFINITY ? std::string("unlimited") : std::to_string(r.rlim_cur));
}

const char* Doing(HealthConnState s) {
  switch (s) {
    case HealthConnState::kReading:
      return "no whole request yet";
    case HealthConnState::kAnsweringMetrics:
      return "its /metrics answer unread";
    case HealthConnState::kAnswering:
      return "being answered";
  }
  return "?";
}

// How a read of the request header ended, or nullopt when the connection is
// simply gone (EOF, reset, cancelled) and gets no answer.
std::optional<HealthRead> ReadOutcome(const ErrorCode& ec) {
  if (!ec) return HealthRead::kComplete;
  if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
    return HealthRead::kHeaderTooLarge;
  }
  if (ec.category() == make_error_code(http::error::bad_method).category() &&
      ec != http::error::end_of_stream && ec != http::error::partial_message) {
    return HealthRead::kMalformed;
  }
  return std::nullopt;
}

}  // namespace

struct HealthServer::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::any_io_executor ex, const HealthOptions& o)
      : acceptor(ex), accept_pause(ex), options(o), table(o.max_connections),
        log_limit(o.log_window, 1) {}
  tcp::acceptor acceptor;
  asio::steady_timer accept_pause;
  HealthOptions options;
  std::function<State()> state;
  std::function<std::string()> metrics;
  HealthConnections table;
  std::unordered_map<std::uint64_t, std::shared_ptr<Session>> sessions;
  std::uint64_t next_id = 0;
  ReserveDescriptor reserve;
  rendezvous::PeerLogLimiter log_limit;
  bool closed = false;

  // One line per `key` (a source address, or a kind) per log window; the
  // lines held back are counted in the next one.
  void Warn(const std::string& key, const std::string& line) {
    auto suppressed = log_limit.Admit(key, std::chrono::steady_clock::now());
    if (!suppressed) return;
    if (*suppressed == 0) {
      spdlog::warn("{}", line);
    } else {
      spdlog::warn("{} (and {} more like it for {} not logged: one line per {} s)", line,
                   *suppressed, key,
                   std::chrono::duration_cast<std::chrono::seconds>(options.log_window).count());
    }
  }

  void Accept() {
    acceptor.async_accept([self = shared_from_this()](ErrorCode ec, tcp::socket socket) {
      if (self->closed) return;
      if (ec) return self->OnAcceptFailed(ec);
      self->Admit(std::move(socket));
      self->Accept();
    });
  }

  // Out of descriptors, a descriptor is freed (the reserve, else an open
  // connection chosen as for a full table) so the waiting connection is
  // accepted at once: a probe still gets its answer. Other failures (ENOBUFS,
  // ENOMEM), or nothing to free: retry after a pause instead of spinning.
  void OnAcceptFailed(const ErrorCode& ec) {
    if (OutOfDescriptors(ec)) {
      std::string freed = "the reserve descriptor";
      if (!reserve.held()) {  // spent on a connection still open: close one (Close takes it back)
        NoteReceived();
        auto e = table.MakeRoom(std::chrono::steady_clock::now(), options.descriptor_grace);
        if (e) Evict(*e, "out of descriptors");
        freed = "an open connection's descriptor";
      }
      if (reserve.Release()) {
        Warn("accept", "health: accept failed: " + ec.message() + " (" + NofileLimit() +
                           "); " + freed + " is given up to accept the next connection");
        ErrorCode accept_ec;
        tcp::socket socket = acceptor.accept(accept_ec);  // non-blocking: would_block if it left
        if (!accept_ec) Admit(std::move(socket));
        reserve.Take();  // fails while no descriptor is free: retried as connections close
        return Accept();
      }
    }
    Warn("accept", "health: accept failed: " + ec.message() +
                       (OutOfDescriptors(ec) ? " (" + NofileLimit() + ")" : "") +
                       "; connections wait in the listen queue, retrying every " +
                       std::to_string(kAcceptPause.count()) + " ms");
    accept_pause.expires_after(kAcceptPause);
    accept_pause.async_wait([self = shared_from_this()](ErrorCode wait_ec) {
      if (wait_ec || self->closed) return;
      self->reserve.Take();
      self->Accept();
    });
  }

  // Which connections' requests have begun to arrive (read, or waiting in the
  // socket: FIONREAD), for the choice out of descriptors.
  void NoteReceived() {
    for (const auto& [id, s] : sessions) {
      ErrorCode ec;
      if (s->buffer.size() > 0 || s->stream.socket().available(ec) > 0) table.Received(id);
    }
  }

  void Admit(tcp::socket socket) {
    auto s = std::make_shared<Session>(std::move(socket), ++next_id, options.max_header_bytes);
    ErrorCode ec;
    auto remote = s->stream.socket().remote_endpoint(ec);
    s->address = ec ? "?" : PeerAddressText(remote.address());  // dual stack: v4 unmapped
    s->peer = ec ? "?" : JoinHostPort(s->address, remote.port());
    if (auto e = table.Admit(s->id, s->address, std::chrono::steady_clock::now())) {
      Evict(*e, "to admit " + s->peer);
    }
    sessions.emplace(s->id, s);
    Read(s);
  }

  void Evict(const HealthConnections::Eviction& e, const std::string& why) {
    auto it = sessions.find(e.id);
    if (it == sessions.end()) return;
    std::shared_ptr<Session> victim = it->second;
    Warn(victim->address, "health: closing " + victim->peer + " (" + Doing(e.state) + ") " +
                              why + ": " + e.address + " held " +
                              std::to_string(e.from_address) + " of the " +
                              std::to_string(table.max()) +
                              " connections allowed, the most; its oldest goes");
    Close(victim);
  }

  void Read(const std::shared_ptr<Session>& s) {
    s->parser.header_limit(static_cast<std::uint32_t>(options.max_header_bytes));
    s->stream.expires_after(options.request_deadline);
    http::async_read_header(s->stream, s->buffer, s->parser,
                            [self = shared_from_this(), s](ErrorCode ec, std::size_t) {
                              self->OnRequest(s, ec);
                            });
  }

  void OnRequest(const std::shared_ptr<Session>& s, const ErrorCode& ec) {
    if (s->closed) return;  // evicted meanwhile
    if (ec == beast::error::timeout) {
      Warn(s->address, "health: closing " + s->peer + ": no whole request within " +
                           std::to_string(options.request_deadline.count()) + " ms");
      return Close(s);
    }
    std::optional<HealthRead> read = ReadOutcome(ec);
    if (!read) return Close(s);
    std::string_view method, target;
    if (*read == HealthRead::kComplete) {
      const auto& request = s->parser.get();
      method = {request.method_string().data(), request.method_string().size()};
      target = {request.target().data(), request.target().size()};
    }
    HealthReply reply = RouteHealthRequest(*read, method, target, state ? state() : State{},
                                           static_cast<bool>(metrics));
    table.Set(s->id,
              reply.metrics ? HealthConnState::kAnsweringMetrics : HealthConnState::kAnswering);
    Answer(s, reply);
  }

  void Answer(const std::shared_ptr<Session>& s, const HealthReply& reply) {
    auto& res = s->response;
    res.version(11);
    res.result(static_cast<unsigned>(reply.status));
    res.keep_alive(false);
    res.set(http::field::content_type, reply.metrics ? kMetricsContentType : "text/plain");
    if (reply.allow_get_only) res.set(http::field::allow, "GET");
    res.body() = reply.metrics ? metrics() : std::string(reply.body);
    res.prepare_payload();
    s->stream.expires_after(options.write_deadline);
    http::async_write(s->stream, res, [self = shared_from_this(), s](ErrorCode, std::size_t) {
      self->Close(s);
    });
  }

  void Close(const std::shared_ptr<Session>& s) {
    if (s->closed) return;
    s->closed = true;
    ErrorCode ignored;
    s->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    s->stream.close();
    table.Remove(s->id);
    sessions.erase(s->id);
    reserve.Take();  // a descriptor is free again: hold the reserve if it was given up
  }

  void Stop() {
    closed = true;
    ErrorCode ignored;
    acceptor.close(ignored);
    accept_pause.cancel();
    auto open = sessions;
    for (auto& [id, s] : open) Close(s);
    reserve.Release();
  }
};

exitcodes::Result<std::unique_ptr<HealthServer>> HealthServer::Start(
    asio::any_io_executor executor, std::uint16_t port, std::function<State()> state,
    std::function<std::string()> metrics, HealthOptions options) {
  auto impl = std::make_shared<Impl>(executor, options);
  impl->state = std::move(state);
  impl->metrics = std::move(metrics);
  // Dual stack: the kubelet probes the pod's IP, an IPv6 one on an IPv6-only
  // or IPv6-first cluster; one IPv6 socket with IPV6_V6ONLY off (ipv6(7))
  // takes IPv4 peers too. IPv4 alone where the kernel has IPv6 off.
  ErrorCode ec;
  tcp::endpoint ep(asio::ip::address_v6::any(), port);
  impl->acceptor.open(tcp::v6(), ec);
  if (!ec) impl->acceptor.set_option(asio::ip::v6_only(false), ec);
  if (ec) {
    ErrorCode ignored;
    impl->acceptor.close(ignored);
    ep = tcp::endpoint(asio::ip::address_v4::any(), port);
    impl->acceptor.open(tcp::v4(), ec);
  }
  if (!ec) impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(options.listen_backlog, ec);
  // The reserve descriptor's accept(2) must not wait when the connection left.
  if (!ec) impl->acceptor.non_blocking(true, ec);
  if (ec) {
    return exitcodes::Status::Config("--health-port " + std::to_string(port) +
                                     ": cannot listen: " + ec.message());
  }
  impl->Accept();
  return std::unique_ptr<HealthServer>(new HealthServer(impl));
}

HealthServer::~HealthServer() { impl_->Stop(); }

std::uint16_t HealthServer::port() const { return impl_->acceptor.local_endpoint().port(); }

int Probe(const std::string& what, std::uint16_t port, int timeout_ms) {
  asio::io_context io;
  beast::tcp_stream stream(io);
  stream.expires_after(std::chrono::milliseconds(timeout_ms));
  const std::string target = what == "live" ? "/livez" : what == "metrics" ? "/metrics" : "/readyz";
  std::string why = "no answer within " + std::to_string(timeout_ms) + " ms";
  int result = 1;
  auto failed = [&](const char* step, const ErrorCode& ec) {
    why = std::string(step) + ": " + (ec == beast::error::timeout ? why : ec.message());
  };
  stream.async_connect(
      tcp::endpoint(asio::ip::address_v4::loopback(), port), [&](ErrorCode ec) {
        if (ec) return failed("connect", ec);
        auto req = std::make_shared<http::request<http::empty_body>>(http::verb::get, target, 11);
        req->set(http::field::host, "127.0.0.1");
        http::async_write(stream, *req, [&, req](ErrorCode ec, std::size_t) {
          if (ec) return failed("send", ec);
          auto buffer = std::make_shared<beast::flat_buffer>();
          auto res = std::make_shared<http::response<http::string_body>>();
          http::async_read(stream, *buffer, *res, [&, buffer, res](ErrorCode ec, std::size_t) {
            if (ec) return failed("read", ec);
            if (res->result() == http::status::ok) result = 0;
            why = "HTTP " + std::to_string(res->result_int());
            if (result == 0 && what == "metrics") {
              std::fwrite(res->body().data(), 1, res->body().size(), stdout);
            }
          });
        });
      });
  io.run();
  if (result != 0) {
    std::fprintf(stderr, "trainlet probe %s: GET http://127.0.0.1:%u%s: %s\n", what.c_str(),
                 static_cast<unsigned>(port), target.c_str(), why.c_str());
  }
  return result;
}

}  // namespace trainlet::agent
