// rendezvous::Member: MemberCore (member_core.h) over Boost.Asio and c-ares.
// Every decision is the core's; this file turns I/O into the core's inputs and
// its actions into I/O, and runs the pod's callbacks.
#include "trainlet/rendezvous/member.h"

#include <array>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include "frame_queue.h"
#include "logging.h"
#include "net_util.h"

namespace trainlet::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using exitcodes::Result;

// One TCP connection to one of the leader's addresses, shared with its
// handlers (they outlive a Disconnect until they complete).
struct Member::Conn {
  Conn(asio::any_io_executor ex, std::uint64_t id) : socket(ex), id(id) {}
  tcp::socket socket;
  std::uint64_t id;  // the core's connection id
  FrameQueue outq;
  std::array<std::uint8_t, 4096> buf{};
};

struct Member::Impl {
  Impl(asio::any_io_executor ex, MemberOptions opts)
      : executor(ex),
        core(std::move(opts)),
        timers{asio::steady_timer(ex), asio::steady_timer(ex), asio::steady_timer(ex),
               asio::steady_timer(ex)} {}
  asio::steady_timer& timer(MemberTimer t) { return timers[static_cast<std::size_t>(t)]; }

  asio::any_io_executor executor;
  MemberCore core;
  std::unique_ptr<Resolver> resolver;  // none when the leader's name is an IP address
  std::optional<asio::ip::address> literal;  // that address
  std::shared_ptr<Conn> conn;               // the core's connection, if any
  std::array<asio::steady_timer, kMemberTimers> timers;  // by MemberTimer
  std::shared_ptr<spdlog::logger> log = Logger("rendezvous");
  Done done;
  ChannelCallbacks callbacks;
};

Result<std::shared_ptr<Member>> Member::Create(asio::any_io_executor executor,
                                               MemberOptions options) {
  std::shared_ptr<Member> m(new Member());
  ResolverOptions resolver_options = options.resolver;
  // An IP address needs no DNS: no c-ares channel (resolv.conf, nsswitch.conf,
  // /dev/urandom) is set up for it; ResolveName hands the address straight over.
  boost::system::error_code literal;
  const auto address = asio::ip::make_address(options.leader_host, literal);
  m->impl_ = std::make_unique<Impl>(executor, std::move(options));
  if (!literal) {
    m->impl_->literal = address;
    return m;
  }
  auto resolver = Resolver::Create(executor, resolver_options);
  if (!resolver.ok()) return resolver.status();
  m->impl_->resolver = std::move(resolver).value();
  return m;
}

Member::~Member() { Close(); }

void Member::Close() {
  if (!impl_) return;
  impl_->done = nullptr;
  Execute(impl_->core.Close());
}

void Member::Start(Done done) {
  impl_->done = std::move(done);
  Execute(impl_->core.Start(Clock::now()));
}

void Member::StartChannel(ChannelCallbacks callbacks, std::chrono::milliseconds heartbeat,
                          int misses) {
  impl_->callbacks = std::move(callbacks);
  // Posted, so that no callback runs inside StartChannel (what came in the same
  // read as the assignment, a Stop when a pod failed at once, is handled first).
  asio::post(impl_->executor, [self = shared_from_this(), heartbeat, misses] {
    self->Execute(self->impl_->core.StartChannel(heartbeat, misses, Clock::now()));
  });
}

void Member::SendReport(const wire::Report& report, std::function<void()> sent) {
  Execute(impl_->core.Report(report, /*ticket=*/1, Clock::now()), std::move(sent));
}

void Member::SetStepRate(std::uint32_t step_rate_milli, std::uint32_t slowest_rank) {
  impl_->core.SetStepRate(step_rate_milli, slowest_rank);
}

std::chrono::steady_clock::duration Member::heartbeat_silence() const {
  return impl_->core.HeartbeatSilence(Clock::now());
}

std::optional<wire::Replaced> Member::replaced() const { return impl_->core.replaced(); }

void Member::Execute(MemberCore::Actions actions, std::function<void()> sent) {
  // A callback may drop the pod's last reference; none while closing in ~Member.
  const auto keep = weak_from_this().lock();
  for (member::Action& action : actions) {
    const bool callback =
        std::holds_alternative<member::Stopped>(action) || std::holds_alternative<member::Lost>(action);
    Carry(action, sent);
    // The pod's callback may have closed this member: the rest is moot.
    if (callback && impl_->core.closed()) return;
  }
}

void Member::Carry(member::Action& action, std::function<void()>& sent) {
  Impl& im = *impl_;
  std::visit(
      [&](auto& a) {
        using A = std::decay_t<decltype(a)>;
        if constexpr (std::is_same_v<A, member::ResolveName>) {
          ResolveName(a);
        } else if constexpr (std::is_same_v<A, member::CancelResolve>) {
          if (im.resolver) im.resolver->Cancel();
        } else if constexpr (std::is_same_v<A, member::Connect>) {
          Connect(a);
        } else if constexpr (std::is_same_v<A, member::Send>) {
          auto on_sent = a.ticket != 0 ? std::exchange(sent, {}) : std::function<void()>{};
          if (im.conn && im.conn->id == a.conn) {
            im.conn->outq.Send(im.conn->socket, im.conn, std::move(a.frame), std::move(on_sent));
          } else if (on_sent) {
            on_sent();
          }
        } else if constexpr (std::is_same_v<A, member::Unsent>) {
          if (auto on_sent = std::exchange(sent, {})) on_sent();
        } else if constexpr (std::is_same_v<A, member::Disconnect>) {
          if (im.conn && im.conn->id == a.conn) {
            boost::system::error_code ignored;
            im.conn->socket.close(ignored);  // its pending operations end, aborted
            im.conn.reset();
          }
        } else if constexpr (std::is_same_v<A, member::ArmTimer>) {
          ArmTimer(a);
        } else if constexpr (std::is_same_v<A, member::CancelTimer>) {
          im.timer(a.timer).cancel();
        } else if constexpr (std::is_same_v<A, member::LogLine>) {
          im.log->log(a.level == member::LogLine::Level::kInfo ? spdlog::level::info
                                                               : spdlog::level::debug,
                      a.text);
        } else if constexpr (std::is_same_v<A, member::Done>) {
          if (auto done = std::exchange(im.done, nullptr)) {
            asio::post(im.executor, [done, result = std::move(a.result)] { done(result); });
          }
        } else if constexpr (std::is_same_v<A, member::Stopped>) {
          if (im.callbacks.on_stop) im.callbacks.on_stop(a.stop);
        } else if constexpr (std::is_same_v<A, member::Lost>) {
          if (im.callbacks.on_lost) im.callbacks.on_lost(a.why);
        }
      },
      action);
}

void Member::ResolveName(const member::ResolveName& r) {
  Impl& im = *impl_;
  auto on_resolved = [self = shared_from_this(), id = r.id](ResolveOutcome out) {
    Resolution res{{}, out.error, std::move(out.detail)};
    for (const auto& a : out.addresses) res.addresses.push_back(AddressForPeers(a));
    self->Execute(self->impl_->core.OnResolved(id, std::move(res), Clock::now()));
  };
  if (im.literal) {  // leader_host is an IP address (see Create)
    ResolveOutcome out{{*im.literal}, ResolveError::kNone, {}};
    asio::post(im.executor, [on_resolved, out]() mutable { on_resolved(std::move(out)); });
    return;
  }
  im.resolver->Resolve(r.name, on_resolved);
}

void Member::Connect(const member::Connect& c) {
  Impl& im = *impl_;
  auto conn = std::make_shared<Conn>(im.executor, c.conn);
  im.conn = conn;
  boost::system::error_code bad;
  const auto address = asio::ip::make_address(c.address, bad);
  if (bad) {  // not from a resolver: the core's caller passed it
    asio::post(im.executor, [self = shared_from_this(), conn, why = bad.message()] {
      self->Execute(self->impl_->core.OnConnectFailed(conn->id, why, Clock::now()));
    });
    return;
  }
  conn->socket.async_connect(
      tcp::endpoint(address, c.port), [self = shared_from_this(), conn](boost::system::error_code ec) {
        MemberCore& core = self->impl_->core;
        if (ec) {
          self->Execute(core.OnConnectFailed(conn->id, ec.message(), Clock::now()));
          return;
        }
        boost::system::error_code ignored;
        conn->socket.set_option(tcp::no_delay(true), ignored);
        EnableDeadPeerDetection(conn->socket);
        self->Execute(core.OnConnected(conn->id, Clock::now()));
        if (conn->socket.is_open()) self->Read(conn);
      });
}

// Reads `conn` until it ends or is closed; every byte goes to the core.
void Member::Read(const std::shared_ptr<Conn>& conn) {
  conn->socket.async_read_some(
      asio::buffer(conn->buf),
      [self = shared_from_this(), conn](boost::system::error_code ec, std::size_t n) {
        MemberCore& core = self->impl_->core;
        if (ec) {
          self->Execute(core.OnClosed(conn->id, ec.message(), Clock::now()));
          return;
        }
        self->Execute(core.OnReceived(conn->id, std::span(conn->buf.data(), n), Clock::now()));
        if (conn->socket.is_open()) self->Read(conn);
      });
}

void Member::ArmTimer(const member::ArmTimer& t) {
  asio::steady_timer& timer = impl_->timer(t.timer);
  timer.expires_at(t.at);
  timer.async_wait([self = shared_from_this(), which = t.timer](boost::system::error_code ec) {
    if (!ec) self->Execute(self->impl_->core.OnTimer(which, Clock::now()));
  });
}

}  // namespace trainlet::rendezvous
