// rendezvous::Leader: the Boost.Asio shell around LeaderCore (leader_core.h).
// It owns the listener (and its bind retries), the sockets and the timers,
// turns what happens on them into the core's events, and carries out the
// actions the core returns. Every rule is the core's.
#include "trainlet/rendezvous/leader.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <unordered_map>
#include <utility>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include "frame_queue.h"
#include "logging.h"
#include "net_util.h"
#include "trainlet/rendezvous/backoff.h"
#include "trainlet/rendezvous/leader_core.h"
#include "trainlet/rendezvous/peer_log_limiter.h"

namespace trainlet::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;
using exitcodes::Result;
using exitcodes::Status;
using leader_io::ConnId;
using leader_io::TimerId;
using Clock = std::chrono::steady_clock;

struct Leader::Conn {
  explicit Conn(tcp::socket s) : socket(std::move(s)), timer(socket.get_executor()) {}
  tcp::socket socket;
  asio::steady_timer timer;  // the handshake deadline (TimerId::Kind::kHandshake)
  FrameQueue outq;
  ConnId id = 0;
  bool closed = false;
  bool fresh = true;  // not read yet: the first read is tried at accept (see ReadFrom)
};

struct Leader::Impl {
  Impl(asio::any_io_executor ex, LeaderOptions options)
      : executor(ex),
        acceptor(ex),
        accept_pause(ex),
        progress_timer(ex),
        waiting_timer(ex),
        heartbeat_timer(ex),
        nnodes(options.nnodes),
        master_port(options.master_port),
        check_master_port(options.check_master_port),
        bind_deadline(options.bind_deadline),
        core(std::move(options)) {}
  asio::any_io_executor executor;
  tcp::acceptor acceptor;
  asio::steady_timer accept_pause;     // accept errors; bind retries
  asio::steady_timer progress_timer;   // TimerId::Kind::kProgress
  asio::steady_timer waiting_timer;    // TimerId::Kind::kWaitingHeartbeat
  asio::steady_timer heartbeat_timer;  // TimerId::Kind::kHeartbeat
  // What the shell needs of LeaderOptions: the listener and MASTER_PORT.
  std::uint32_t nnodes;
  std::uint16_t master_port;  // 0 until one is picked (check below)
  bool check_master_port;
  Clock::time_point bind_deadline;
  LeaderCore core;
  bool bound = false;  // false while a busy port is retried (LeaderOptions::bind_deadline)
  std::unique_ptr<Backoff> bind_backoff;  // set at the first busy-port retry
  bool master_port_free = false;  // checked once (LeaderOptions::check_master_port)
  PeerLogLimiter log_limit{tunables::kBadConnectionLogWindow,
                           tunables::kMaxBadConnectionLogsPerPeer};
  std::shared_ptr<spdlog::logger> log = Logger("rendezvous");
  std::unordered_map<ConnId, std::shared_ptr<Conn>> conns;  // every open connection
  Done done;
  ChannelCallbacks callbacks;
  bool closed = false;  // Close()
  // One read buffer for every connection: reads wait for readiness
  // (async_wait) and then read here at once, on the one loop thread, so a
  // connection holds no buffer of its own (bench/HISTORY.md: memory at scale).
  std::vector<std::uint8_t> rx = std::vector<std::uint8_t>(16 * 1024);

  std::shared_ptr<Conn> Find(ConnId id) const {
    auto it = conns.find(id);
    return it == conns.end() ? nullptr : it->second;
  }
  asio::steady_timer* TimerFor(TimerId id) {
    switch (id.kind) {
      case TimerId::Kind::kHandshake: {
        auto conn = Find(id.conn);
        return conn ? &conn->timer : nullptr;
      }
      case TimerId::Kind::kWaitingHeartbeat: return &waiting_timer;
      case TimerId::Kind::kProgress: return &progress_timer;
      case TimerId::Kind::kHeartbeat: return &heartbeat_timer;
    }
    return nullptr;
  }
};

// Carries out one action of the core (leader_core.h says what each means).
struct Leader::Runner {
  Leader& leader;
  Impl& im;

  void operator()(leader_io::Send& a) const {
    auto conn = im.Find(a.conn);
    std::function<void()> sent;
    if (a.notify) {
      sent = [weak = leader.weak_from_this(), id = a.conn] {
        auto self = weak.lock();
        if (!self || self->impl_->closed) return;
        self->impl_->core.Written(id, Clock::now());
        self->Apply();
      };
    }
    if (!conn || conn->closed) {
      if (sent) sent();
      return;
    }
    conn->outq.Send(conn->socket, conn, std::move(a.frame), std::move(sent));
  }
  void operator()(const leader_io::Close& a) const {
    auto conn = im.Find(a.conn);
    if (!conn) return;
    boost::system::error_code ec;
    conn->closed = true;
    conn->timer.cancel();
    conn->socket.close(ec);
    im.conns.erase(a.conn);
  }
  void operator()(const leader_io::ArmTimer& a) const {
    asio::steady_timer* timer = im.TimerFor(a.id);
    if (timer == nullptr) return;
    timer->expires_at(a.deadline);
    timer->async_wait([weak = leader.weak_from_this(), id = a.id](boost::system::error_code ec) {
      auto self = weak.lock();
      if (ec || !self || self->impl_->closed) return;
      self->impl_->core.TimerFired(id, Clock::now());
      self->Apply();
    });
  }
  void operator()(const leader_io::CancelTimer& a) const {
    if (asio::steady_timer* timer = im.TimerFor(a.id)) timer->cancel();
  }
  void operator()(const leader_io::StartAccepting&) const { leader.AcceptNext(); }
  void operator()(const leader_io::StopListening&) const {
    boost::system::error_code ec;
    im.acceptor.close(ec);
    im.accept_pause.cancel();
  }
  void operator()(leader_io::RoundDone& a) const {
    im.accept_pause.cancel();
    auto done = std::move(im.done);
    im.done = nullptr;
    if (done) asio::post(im.executor, [done, result = std::move(a.result)] { done(*result); });
  }
  void operator()(const leader_io::MemberLost& a) const {
    if (im.callbacks.on_lost) im.callbacks.on_lost(a.index, a.why);
  }
  void operator()(const leader_io::MemberReport& a) const {
    if (im.callbacks.on_report) im.callbacks.on_report(a.index, a.report);
  }
};

void Leader::Apply() {
  for (;;) {
    if (impl_->closed) return;
    std::vector<leader_io::Action> actions = impl_->core.TakeActions();
    if (actions.empty()) return;
    for (auto& action : actions) {
      if (impl_->closed) return;  // a callback closed the leader
      std::visit(Runner{*this, *impl_}, action);
    }
  }
}

namespace {

// Whether `port` can be bound on every interface now (bound, then closed at
// once), as a trainer's listener would; port 0: the kernel's choice, in *bound.
boost::system::error_code ProbeBind(const asio::any_io_executor& executor, std::uint16_t port,
                                    std::uint16_t* bound) {
  tcp::acceptor probe(executor);
  boost::system::error_code ec = OpenAndBind(probe, port);
  if (!ec) *bound = probe.local_endpoint(ec).port();
  return ec;
}

}  // namespace

Result<std::shared_ptr<Leader>> Leader::Listen(asio::any_io_executor executor, std::uint16_t port,
                                               LeaderOptions options) {
  std::shared_ptr<Leader> leader(new Leader());
  const int fd = std::exchange(options.listening_fd, -1);
  leader->impl_ = std::make_unique<Impl>(executor, std::move(options));
  Impl& im = *leader->impl_;
  if (fd >= 0) return Adopt(std::move(leader), fd);
  boost::system::error_code ec = BindAndListen(im.acceptor, port, BacklogFor(im.nnodes));
  if (ec == asio::error::address_in_use && port != 0 && Clock::now() < im.bind_deadline) {
    // A leftover process (the previous agent of this pod, a trainer's orphan)
    // still holds the port: retried from Start() until the deadline.
    leader->port_ = port;
    return leader;
  }
  if (ec) {
    return Status::Infra("cannot listen on rendezvous port " + std::to_string(port) + ": " +
                         ec.message());
  }
  im.bound = true;
  leader->port_ = im.acceptor.local_endpoint().port();
  return leader;
}

// Listen with options.listening_fd: the acceptor takes that socket over.
Result<std::shared_ptr<Leader>> Leader::Adopt(std::shared_ptr<Leader> leader, int fd) {
  Impl& im = *leader->impl_;
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  boost::system::error_code ec;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ec.assign(errno, boost::system::system_category());
  } else {
    im.acceptor.assign(addr.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), fd, ec);
  }
  if (ec) {
    ::close(fd);
    return Status::Infra("cannot take over the rendezvous listener: " + ec.message());
  }
  im.bound = true;
  leader->port_ = im.acceptor.local_endpoint(ec).port();
  return leader;
}

// Binds the rendezvous port (when Listen found it busy) and checks that
// MASTER_PORT is free, retrying both with backoff until options.bind_deadline;
// then the core accepts members (or, alone, assigns at once).
void Leader::BindAndAccept() {
  Impl& im = *impl_;
  if (im.closed || im.core.decided()) return;
  std::string busy;  // what is still in use, for the messages
  boost::system::error_code ec;
  if (!im.bound) {
    ec = BindAndListen(im.acceptor, port_, BacklogFor(im.nnodes));
    if (!ec) {
      im.bound = true;
      if (im.bind_backoff) im.log->info("leader: rendezvous port {} is free again", port_);
    } else {
      busy = "rendezvous port " + std::to_string(port_);
    }
  }
  const bool pick_master_port = im.master_port == 0;
  if (!ec && (im.check_master_port || pick_master_port) && !im.master_port_free) {
    std::uint16_t bound = 0;
    ec = ProbeBind(im.executor, im.master_port, &bound);
    if (!ec) {
      im.master_port_free = true;
      // torch 1.13's agent does the same for its workers (elastic/agent/server/
      // api.py _set_master_addr_port: _get_socket_with_port).
      if (pick_master_port) im.master_port = bound;
    } else {
      busy = "MASTER_PORT " + std::to_string(im.master_port) +
             " (where rank 0's store must listen)";
    }
  }
  auto now = Clock::now();
  if (!ec) {
    im.core.Listening(im.master_port, now);
    Apply();
    return;
  }
  if (ec != asio::error::address_in_use || now >= im.bind_deadline) {
    im.core.Fail(Status::Infra(
        "cannot listen on " + busy + ": " + ec.message() +
        (ec == asio::error::address_in_use
             ? " (still taken at the rendezvous deadline: another process in this pod or on "
               "this host holds it; free it or choose another port)"
             : "")));
    Apply();
    return;
  }
  if (!im.bind_backoff) {
    im.log->warn("leader: {} is in use ({}); retrying until the rendezvous deadline", busy,
                 ec.message());
    im.bind_backoff = std::make_unique<Backoff>(
        BackoffOptions{.initial = tunables::kBindRetryInitial, .cap = tunables::kBindRetryCap},
        static_cast<std::uint64_t>(now.time_since_epoch().count()));
  }
  auto delay = std::min<Clock::duration>(im.bind_backoff->Next(), im.bind_deadline - now);
  im.accept_pause.expires_after(delay);
  im.accept_pause.async_wait([self = shared_from_this()](boost::system::error_code wait_ec) {
    if (!wait_ec) self->BindAndAccept();
  });
}

Leader::~Leader() { Close(); }

std::uint32_t Leader::admitted() const { return impl_->core.admitted(); }
bool Leader::formed() const { return impl_->core.formed(); }
std::vector<std::uint32_t> Leader::missing() const { return impl_->core.missing(); }
bool Leader::AllMembersSettled() const { return impl_->core.AllMembersSettled(); }
std::map<std::uint32_t, std::string> Leader::instance_ids() const {
  return impl_->core.instance_ids();
}
std::map<std::uint32_t, Leader::PeerStats> Leader::peer_stats() const {
  return impl_->core.peer_stats();
}
std::string Leader::node_name(std::uint32_t index) const { return impl_->core.node_name(index); }
Clock::duration Leader::heartbeat_silence() const {
  return impl_->core.heartbeat_silence(Clock::now());
}

void Leader::Close() {
  if (!impl_) return;
  Impl& im = *impl_;
  im.closed = true;
  im.core.Close();
  im.done = nullptr;
  boost::system::error_code ec;
  im.acceptor.close(ec);
  im.accept_pause.cancel();
  im.progress_timer.cancel();
  im.waiting_timer.cancel();
  im.heartbeat_timer.cancel();
  for (auto& [id, c] : im.conns) {
    c->closed = true;
    c->timer.cancel();
    c->socket.close(ec);
  }
  im.conns.clear();
}

void Leader::Start(wire::Hello own, Done done) {
  Impl& im = *impl_;
  im.done = std::move(done);
  if (own.index == 0 && im.nnodes > 1) {
    im.log->info("leader: listening on port {}, waiting for {} pod(s)", port_, im.nnodes - 1);
  }
  im.core.Start(std::move(own), Clock::now());
  Apply();
  asio::post(im.executor, [self = shared_from_this()] { self->BindAndAccept(); });
}

void Leader::Reconsider() {
  if (!impl_ || impl_->closed) return;
  impl_->core.Reconsider(Clock::now());
  Apply();
}

void Leader::StartChannel(ChannelCallbacks callbacks, std::chrono::milliseconds heartbeat,
                          int misses) {
  Impl& im = *impl_;
  im.callbacks = callbacks;
  im.core.StartChannel(std::move(callbacks.on_join), heartbeat, misses, Clock::now());
  Apply();
}

void Leader::BroadcastStop(const wire::Stop& stop) {
  impl_->core.BroadcastStop(stop);
  Apply();
}

void Leader::StopAdmitting() {
  impl_->core.StopAdmitting();
  Apply();
  boost::system::error_code ec;
  impl_->acceptor.close(ec);
}

void Leader::AcceptNext() {
  impl_->acceptor.async_accept([self = shared_from_this()](boost::system::error_code ec,
                                                           tcp::socket s) {
    Impl& im = *self->impl_;
    if (!im.acceptor.is_open() || im.closed) return;
    if (!ec) {
      self->OnAccept(std::make_shared<Conn>(std::move(s)));
      if (im.acceptor.is_open()) self->AcceptNext();
      return;
    }
    // EMFILE/ENFILE/ENOBUFS persist: pause instead of spinning on them.
    if (im.log_limit.Admit("(accept)", Clock::now())) {  // per kind
      im.log->warn("leader: accept failed: {}; pausing 100 ms", ec.message());
    }
    im.accept_pause.expires_after(std::chrono::milliseconds(100));
    im.accept_pause.async_wait([self](boost::system::error_code wait_ec) {
      if (!wait_ec) self->AcceptNext();
    });
  });
}

void Leader::OnAccept(std::shared_ptr<Conn> conn) {
  Impl& im = *impl_;
  boost::system::error_code ec;
  leader_io::Endpoints ep;
  auto remote = conn->socket.remote_endpoint(ec);
  ep.peer_address = ec ? "?" : AddressForPeers(remote.address());
  ep.peer_port = ec ? 0 : remote.port();
  auto local = conn->socket.local_endpoint(ec);
  if (!ec) {
    ep.local_address = AddressForPeers(local.address());
    ep.local_port = local.port();
    ep.local_loopback = local.address().is_loopback();
  }
  conn->socket.set_option(tcp::no_delay(true), ec);
  conn->socket.non_blocking(true, ec);  // ReadFrom reads only what is there
  EnableDeadPeerDetection(conn->socket);
  conn->id = im.core.Accepted(ep, Clock::now());
  im.conns[conn->id] = conn;
  Apply();
  if (!conn->closed) ReadFrom(conn);
}

void Leader::ReadFrom(std::shared_ptr<Conn> conn) {
  auto on_ready = [self = shared_from_this(), conn](boost::system::error_code ec) {
    self->OnReadable(conn, ec);
  };
  // A member's hello follows its connect at once, so it is usually there by the
  // time the connection is accepted: read it then, and the member is admitted
  // before any idle connection can push it out of the pending slots.
  if (conn->fresh) {
    conn->fresh = false;
    on_ready({});
    return;
  }
  conn->socket.async_wait(tcp::socket::wait_read, std::move(on_ready));
}

// Reads what `conn` has into the shared buffer and hands it to the core,
// then waits for more; a read error goes to the core too (which closes it).
void Leader::OnReadable(const std::shared_ptr<Conn>& conn, boost::system::error_code ec) {
  Impl& im = *impl_;
  if (conn->closed || im.closed) return;
  std::size_t n = 0;
  if (!ec) n = conn->socket.read_some(asio::buffer(im.rx), ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) {
    ReadFrom(conn);
    return;
  }
  if (ec) {
    im.core.Closed(conn->id, ec.message(), Clock::now());
    Apply();
    return;
  }
  im.core.Received(conn->id, std::span(im.rx.data(), n), Clock::now());
  Apply();
  if (!conn->closed && !im.closed) ReadFrom(conn);
}

}  // namespace trainlet::rendezvous
