#include "trainlet/rendezvous/leader.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>
#include <map>
#include <optional>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include "channel_core.h"
#include "frame_queue.h"
#include "trainlet/rendezvous/admission.h"
#include "trainlet/rendezvous/auth.h"
#include "trainlet/rendezvous/backoff.h"
#include "trainlet/rendezvous/launch.h"
#include "logging.h"
#include "net_util.h"
#include "trainlet/rendezvous/peer_log_limiter.h"

namespace trainlet::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;
using exitcodes::Result;
using exitcodes::Status;

struct Leader::Conn {
  explicit Conn(tcp::socket s) : socket(std::move(s)), timer(socket.get_executor()) {}
  tcp::socket socket;
  asio::steady_timer timer;  // handshake deadline
  wire::Decoder decoder;  // no read buffer of its own: see Impl::rx
  std::string peer;                    // "10.0.0.12:41234", for messages
  std::string address;                 // "10.0.0.12": the key of the log rate limit
  std::optional<std::uint32_t> index;  // set once admitted
  std::uint32_t generation = 0;        // the generation its hello asked for
  std::optional<std::uint32_t> restarts;  // the restarts its hello counts (elastic)
  std::string job_name;                // its hello's (JobSet's Job), for the per-Job fence
  std::optional<std::uint32_t> job_restart_attempt;
  std::string instance_id;  // its hello's (never logged): who it is beyond its index
  bool closed = false;
  bool fresh = true;  // not read yet: the first read is tried at accept (see ReadFrom)
  // Control channel.
  FrameQueue outq;
  bool settled = false;  // reported success, or reported as lost/failed
  ChannelPeer peer_state;  // when it was last heard, its heartbeats (channel_core.h)
  // Authentication in progress: the hello waits for the member's proof.
  std::optional<wire::Hello> pending_hello;
  std::string leader_nonce;
};

// Where the leader's round is: one value, so that no impossible mix of
// flags can be written.
enum class RoundPhase {
  kAdmitting,  // hellos are admitted; the round is not decided
  kAssigning,  // the plan formed the round: its assignments are being written
  kFormed,     // every assignment written, `done` called; no channel yet
  kChannel,    // the control channel runs (StartChannel)
  kClosed,     // Close(): nothing more happens
};

struct Leader::Impl {
  explicit Impl(asio::any_io_executor ex)
      : executor(ex), acceptor(ex), accept_pause(ex), progress_timer(ex), waiting_timer(ex) {}
  asio::any_io_executor executor;
  tcp::acceptor acceptor;
  asio::steady_timer accept_pause;  // accept errors; bind retries
  asio::steady_timer progress_timer;  // LogProgress, while the gang is incomplete
  asio::steady_timer waiting_timer;  // heartbeats to members waiting for the assignment
  bool bound = false;  // false while a busy port is retried (LeaderOptions::bind_deadline)
  std::string bind_error;  // the last bind failure, for the final error
  std::unique_ptr<Backoff> bind_backoff;  // set at the first busy-port retry
  bool master_port_free = false;  // checked once (LeaderOptions::check_master_port)
  PeerLogLimiter log_limit{tunables::kBadConnectionLogWindow,
                           tunables::kMaxBadConnectionLogsPerPeer};
  LeaderOptions options;
  std::shared_ptr<spdlog::logger> log = Logger("rendezvous");
  std::optional<wire::Hello> own;
  Done done;
  RoundPhase phase = RoundPhase::kAdmitting;
  // The round was decided and written (or the leader closed): what admission
  // decided is final.
  bool formed() const { return phase >= RoundPhase::kFormed; }
  std::size_t pending = 0;                                 // connections mid-handshake
  std::map<std::string, std::size_t> pending_by_address;  // ... per peer address (eviction)
  std::map<std::uint32_t, std::shared_ptr<Conn>> members;  // index -> admitted connection
  // JobSet's job-restart-attempt: the highest seen per Job (the leader's own
  // included). Pods of a recreated Job replace the old Job's; older ones are stale.
  std::map<std::string, std::uint32_t> job_attempts;
  std::vector<std::shared_ptr<Conn>> all;                  // every open connection
  std::size_t writes_in_flight = 0;
  // The round formed and LeaderOptions::admit_late: accepting late pods, whose
  // assignment (a spare's) `assignment` makes (index, MASTER_ADDR).
  bool late = false;
  std::shared_ptr<const std::function<wire::Assignment(std::uint32_t, std::string)>> assignment;
  // What is kept per pod index apart from its connection (which a loss drops).
  struct Indices {
    // Ranks by arrival: indices given to pods without one that were admitted
    // while the generation runs, for the next round (they are not members here).
    std::set<std::uint32_t> given_late;
    std::map<std::uint32_t, std::string> node_names;  // its hello's node (node_name())
  } indices;
  // Control channel.
  ChannelCallbacks callbacks;
  std::chrono::milliseconds heartbeat = tunables::kHeartbeatInterval;  // set by StartChannel
  int misses = tunables::kHeartbeatMisses;
  std::unique_ptr<asio::steady_timer> heartbeat_timer;
  ChannelPacer pacer;  // this side's heartbeats; heartbeat_silence()
  // Channel events that arrived before StartChannel (the leader's own pod learns
  // of the assignment a moment after the members do).
  std::vector<std::function<void()>> early_events;
  // One read buffer for every connection: reads wait for readiness
  // (async_wait) and then read here at once, on the one loop thread, so a
  // connection holds no buffer of its own (bench/HISTORY.md: memory at scale).
  std::vector<std::uint8_t> rx = std::vector<std::uint8_t>(16 * 1024);
};

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
  leader->impl_ = std::make_unique<Impl>(executor);
  Impl& im = *leader->impl_;
  im.options = std::move(options);
  if (im.options.listening_fd >= 0) return Adopt(std::move(leader));
  boost::system::error_code ec = BindAndListen(im.acceptor, port, BacklogFor(im.options.nnodes));
  if (ec == asio::error::address_in_use && port != 0 &&
      std::chrono::steady_clock::now() < im.options.bind_deadline) {
    // A leftover process (the previous agent of this pod, a trainer's orphan)
    // still holds the port: retried from Start() until the deadline.
    im.bind_error = ec.message();
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
Result<std::shared_ptr<Leader>> Leader::Adopt(std::shared_ptr<Leader> leader) {
  Impl& im = *leader->impl_;
  const int fd = std::exchange(im.options.listening_fd, -1);
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
// then accepts members (or, alone, assigns at once).
void Leader::BindAndAccept() {
  Impl& im = *impl_;
  if (im.formed()) return;
  std::string busy;  // what is still in use, for the messages
  boost::system::error_code ec;
  if (!im.bound) {
    ec = BindAndListen(im.acceptor, port_, BacklogFor(im.options.nnodes));
    if (!ec) {
      im.bound = true;
      if (im.bind_backoff) im.log->info("leader: rendezvous port {} is free again", port_);
    } else {
      busy = "rendezvous port " + std::to_string(port_);
    }
  }
  const bool pick_master_port = im.options.master_port == 0;
  if (!ec && (im.options.check_master_port || pick_master_port) && !im.master_port_free) {
    std::uint16_t bound = 0;
    ec = ProbeBind(im.executor, im.options.master_port, &bound);
    if (!ec) {
      im.master_port_free = true;
      // torch 1.13's agent does the same for its workers (elastic/agent/server/
      // api.py _set_master_addr_port: _get_socket_with_port).
      if (pick_master_port) im.options.master_port = bound;
    } else {
      busy = "MASTER_PORT " + std::to_string(im.options.master_port) +
             " (where rank 0's store must listen)";
    }
  }
  if (ec) {
    auto now = std::chrono::steady_clock::now();
    if (ec != asio::error::address_in_use || now >= im.options.bind_deadline) {
      Finish(Status::Infra(
          "cannot listen on " + busy + ": " + ec.message() +
          (ec == asio::error::address_in_use
               ? " (still taken at the rendezvous deadline: another process in this pod or on "
                 "this host holds it; free it or choose another port)"
               : "")));
      return;
    }
    if (!im.bind_backoff) {
      im.log->warn("leader: {} is in use ({}); retrying until the rendezvous deadline", busy,
                   ec.message());
      im.bind_backoff = std::make_unique<Backoff>(
          BackoffOptions{.initial = tunables::kBindRetryInitial, .cap = tunables::kBindRetryCap},
          static_cast<std::uint64_t>(now.time_since_epoch().count()));
    }
    auto delay = std::min<std::chrono::steady_clock::duration>(im.bind_backoff->Next(),
                                                                im.options.bind_deadline - now);
    im.accept_pause.expires_after(delay);
    im.accept_pause.async_wait([self = shared_from_this()](boost::system::error_code wait_ec) {
      if (!wait_ec) self->BindAndAccept();
    });
    return;
  }
  if (im.options.nnodes > 1) AcceptNext();
  MaybeAssign();  // alone, or every pod expected (LeaderOptions::expected) is here already
}

Leader::~Leader() { Close(); }

std::uint32_t Leader::admitted() const {
  return static_cast<std::uint32_t>(impl_->members.size()) + (impl_->own ? 1 : 0);
}

bool Leader::formed() const { return impl_->phase != RoundPhase::kAdmitting; }

std::vector<std::uint32_t> Leader::missing() const {
  std::vector<std::uint32_t> out;
  const auto& expected = impl_->options.expected;
  for (std::uint32_t i = 1; i < impl_->options.nnodes; ++i) {
    if (!impl_->members.contains(i) && (expected.empty() || expected.contains(i))) {
      out.push_back(i);
    }
  }
  return out;
}

// The node rank of every pod joined (LeaderMembership::Plan), or by index
// without a membership; nullopt while the round cannot form yet.
std::optional<std::map<std::uint32_t, std::uint32_t>> Leader::NodeRanks() {
  Impl& im = *impl_;
  if (!im.options.membership) {
    if (admitted() < im.options.nnodes) return std::nullopt;
    std::map<std::uint32_t, std::uint32_t> ranks{{0, 0}};
    for (const auto& [index, conn] : im.members) ranks[index] = index;
    return ranks;
  }
  std::vector<std::uint32_t> joined{0};
  for (const auto& [index, conn] : im.members) joined.push_back(index);
  return im.options.membership->Plan(joined);
}

void Leader::Close() {
  if (!impl_) return;
  impl_->phase = RoundPhase::kClosed;
  impl_->done = nullptr;
  boost::system::error_code ec;
  impl_->acceptor.close(ec);
  impl_->accept_pause.cancel();
  impl_->progress_timer.cancel();
  impl_->waiting_timer.cancel();
  if (impl_->heartbeat_timer) impl_->heartbeat_timer->cancel();
  for (auto& c : impl_->all) {
    c->closed = true;
    c->timer.cancel();
    c->socket.close(ec);
  }
  impl_->all.clear();
  impl_->members.clear();
}

void Leader::Start(wire::Hello own, Done done) {
  Impl& im = *impl_;
  im.done = std::move(done);
  if (own.index != 0) {
    Finish(Status::Config("the leader must be the pod with index 0, not " +
                          std::to_string(own.index)));
    return;
  }
  if (own.job_restart_attempt) im.job_attempts[own.job_name] = *own.job_restart_attempt;
  im.own = std::move(own);
  if (im.options.nnodes > 1) {
    im.log->info("leader: listening on port {}, waiting for {} pod(s)", port_,
                 im.options.nnodes - 1);
    WaitingHeartbeat();
    LogProgress();
  }
  asio::post(im.executor, [self = shared_from_this()] { self->BindAndAccept(); });
}

void Leader::AcceptNext() {
  impl_->acceptor.async_accept([self = shared_from_this()](boost::system::error_code ec,
                                                           tcp::socket s) {
    Impl& im = *self->impl_;
    if (!im.acceptor.is_open()) return;
    if (!ec) {
      self->OnAccept(std::make_shared<Conn>(std::move(s)));
      if (!im.formed() || im.late) self->AcceptNext();
      return;
    }
    // EMFILE/ENFILE/ENOBUFS persist: pause instead of spinning on them.
    if (im.log_limit.Admit("(accept)", std::chrono::steady_clock::now())) {  // per kind
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
  auto remote = conn->socket.remote_endpoint(ec);
  conn->address = ec ? "?" : AddressForPeers(remote.address());
  conn->peer = ec ? "?" : conn->address + ":" + std::to_string(remote.port());
  if (im.formed() && !im.late) {
    Warn(conn, "leader: dropping connection from " + conn->peer + ": rendezvous already complete");
    conn->socket.close(ec);
    return;
  }
  if (im.pending >= im.options.max_pending_handshakes) EvictPending();
  conn->socket.set_option(tcp::no_delay(true), ec);
  conn->socket.non_blocking(true, ec);  // ReadFrom reads only what is there
  EnableDeadPeerDetection(conn->socket);
  ++im.pending;
  ++im.pending_by_address[conn->address];
  im.all.push_back(conn);
  conn->timer.expires_after(im.options.handshake_timeout);
  conn->timer.async_wait([self = shared_from_this(), conn](boost::system::error_code ec) {
    if (ec || conn->closed || conn->index) return;
    self->Warn(conn, "leader: " + conn->peer + " sent no valid hello within " +
                         std::to_string(self->impl_->options.handshake_timeout.count()) +
                         " ms; dropped");
    self->Drop(conn);
  });
  ReadFrom(conn);
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

// Reads what `conn` has into the shared buffer and handles every whole
// message, then waits for more.
void Leader::OnReadable(const std::shared_ptr<Conn>& conn, boost::system::error_code ec) {
  Impl& im = *impl_;
  if (conn->closed) return;
  std::size_t n = 0;
  if (!ec) n = conn->socket.read_some(asio::buffer(im.rx), ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) {
    ReadFrom(conn);
    return;
  }
  if (ec) {
    OnReadError(conn, ec);
    return;
  }
  Status fed = conn->decoder.Feed(std::span(im.rx.data(), n));
  for (;;) {
    auto next = conn->decoder.Next();
    if (!fed.ok() || !next.ok()) {
      const Status& s = fed.ok() ? next.status() : fed;
      Warn(conn, "leader: closing " + conn->peer + ": " + s.message());
      if (conn->decoder.peer_version() != 0 && conn->decoder.peer_version() != wire::kVersion) {
        Refuse(conn, {"protocol_version", s.message()});
      } else {
        Drop(conn);
      }
      return;
    }
    if (!next->has_value()) break;
    conn->peer_state.Heard(std::chrono::steady_clock::now());
    Dispatch(conn, std::move(**next));
    if (conn->closed) return;
  }
  ReadFrom(conn);
}

// One message from `conn`, by where its handshake stands.
void Leader::Dispatch(const std::shared_ptr<Conn>& conn, wire::Message message) {
  if (conn->index) {  // admitted: from now on only channel messages
    OnChannelMessage(conn, message);
    return;
  }
  if (const auto* proof = std::get_if<wire::Proof>(&message); proof && conn->pending_hello) {
    OnProof(conn, *proof);
    return;
  }
  auto* hello = std::get_if<wire::Hello>(&message);
  if (hello == nullptr || conn->pending_hello) {
    Warn(conn, "leader: closing " + conn->peer + ": unexpected message");
    Drop(conn);
    return;
  }
  OnHello(conn, std::move(*hello));
}

// The connection closed or failed: an admitted member is lost (once the
// round was decided: it has a node rank, so the generation must not run with
// it, agent membership.h M14) or frees its index (before).
void Leader::OnReadError(const std::shared_ptr<Conn>& conn, boost::system::error_code ec) {
  Impl& im = *impl_;
  if (conn->index && im.phase != RoundPhase::kAdmitting && !conn->settled) {
    conn->settled = true;
    std::uint32_t index = *conn->index;
    Drop(conn);
    Deliver([self = this, index, why = "its connection closed (" + ec.message() + ")"] {
      if (self->impl_->callbacks.on_lost) self->impl_->callbacks.on_lost(index, why);
    });
    return;
  }
  if (conn->pending_hello) {
    Warn(conn, fmt::format("leader: pod {} ({}) hung up during authentication (its token "
                           "differs?)", conn->pending_hello->index, conn->peer));
  }
  if (conn->index) {
    // Before the assignment this frees the index for a restarted pod; after
    // it, the pod's agent has exited.
    auto line = fmt::format("leader: pod {} ({}) disconnected: {}", *conn->index, conn->peer,
                            ec.message());
    if (im.formed()) im.log->debug("{}", line); else Warn(conn, line);  // Warn: rate-limited
  }
  Drop(conn);
}

void Leader::OnHello(const std::shared_ptr<Conn>& conn, wire::Hello hello) {
  Impl& im = *impl_;
  std::string who = "pod " + std::to_string(hello.index) + " (" + conn->peer + ")";
  const std::string& token = im.options.token;
  if (token.empty() && !hello.nonce.empty()) {
    Refuse(conn, {"token", who + " authenticates with a token, but this leader has no "
                                 "--token-file"});
    return;
  }
  if (!token.empty()) {
    if (hello.nonce.size() != kNonceBytes) {
      Refuse(conn, {"token", who + " did not authenticate: this leader requires the shared "
                                   "token (--token-file)"});
      return;
    }
    // Prove we hold the token; the member proves it back (OnProof) before
    // anything about the gang is decided or sent.
    conn->leader_nonce = NewNonce();
    wire::Challenge challenge{.nonce = conn->leader_nonce,
                              .proof = LeaderProof(token, hello.job_id, hello.nonce,
                                                   conn->leader_nonce)};
    conn->pending_hello = std::move(hello);
    Send(conn, wire::Encode(challenge));
    return;
  }
  Admit(conn, std::move(hello));
}

void Leader::OnProof(const std::shared_ptr<Conn>& conn, const wire::Proof& proof) {
  Impl& im = *impl_;
  wire::Hello hello = std::move(*conn->pending_hello);
  conn->pending_hello.reset();
  std::string expected =
      MemberProof(im.options.token, hello.job_id, conn->leader_nonce, hello.nonce);
  if (!ProofsEqual(proof.proof, expected)) {
    Refuse(conn, {"token", "pod " + std::to_string(hello.index) + " (" + conn->peer +
                               ") failed authentication: its token differs from the leader's"});
    return;
  }
  Admit(conn, std::move(hello));
}

namespace {

// This side's "address:port" of `socket`, for messages; "?" when unknown.
std::string LocalEndpointOf(const tcp::socket& socket) {
  boost::system::error_code ec;
  auto ep = socket.local_endpoint(ec);
  return ec ? "?" : AddressForPeers(ep.address()) + ":" + std::to_string(ep.port());
}

}  // namespace

// The decision is Admit (admission.h); this applies it.
void Leader::Admit(const std::shared_ptr<Conn>& conn, wire::Hello hello) {
  Impl& im = *impl_;
  std::optional<IndexHolder> holder;
  if (auto it = im.members.find(hello.index); it != im.members.end()) {
    const Conn& h = *it->second;
    holder = IndexHolder{
        .peer = h.peer,
        .live = std::chrono::steady_clock::now() - h.peer_state.last_rx() <=
                im.options.holder_liveness,
        .job_name = h.job_name,
        .job_restart_attempt = h.job_restart_attempt,
        .instance_id = h.instance_id};
  }
  // Only a hello without an index needs it: O(nnodes) per hello (12,500 pods: O(n^2), ~3 s).
  std::optional<std::uint32_t> free_index;
  if (hello.index == wire::kNoIndex) {
    free_index = LowestFreeIndex(
        im.options.nnodes,
        [&im](std::uint32_t i) {
          return im.members.contains(i) || im.indices.given_late.contains(i);
        },
        im.options.expected);
  }
  const LeaderMembership* m = im.options.membership.get();
  const Admission decided = rendezvous::Admit(
      AdmissionState{.own = *im.own,
                     .nnodes = im.options.nnodes,
                     .max_generation = im.options.max_generation,
                     .leader_id = im.options.leader_id,
                     .job_attempts = im.job_attempts,
                     .holder = std::move(holder),
                     .replaced = m ? m->ReplacedOf(hello.index) : std::nullopt,
                     .left = m ? m->LeftOf(hello.index) : std::nullopt,
                     .lost_spare = m ? m->LostSpareOf(hello.index) : std::nullopt,
                     .free_index = free_index,
                     .token = !im.options.token.empty(),
                     .kept_id = KeptId(hello.index),
                     .peer = conn->peer,
                     .address = conn->address,
                     .local = LocalEndpointOf(conn->socket)},
      hello);
  if (decided.record_job_attempt) im.job_attempts[hello.job_name] = *decided.record_job_attempt;
  if (decided.drop_older_of_job) DropOlderOfJob(hello);
  switch (decided.verdict) {
    case Admission::Verdict::kRefuse:
      Refuse(conn, decided.reject);
      return;
    case Admission::Verdict::kRivalLeader:
      // Both must stop: it gets a final refusal, this leader fails config once
      // that refusal is written.
      Refuse(conn, decided.reject, [self = shared_from_this(), reason = decided.reject.reason] {
        self->Finish(Status::Config(reason));
      });
      return;
    case Admission::Verdict::kAdmit:
      break;
  }
  const std::uint32_t index = decided.index;
  im.indices.node_names[index] = hello.node_name;  // node_name(): kept after the pod is gone
  if (im.options.membership) im.options.membership->OnAdmitted(index, hello);
  const bool late = im.formed();
  conn->instance_id = hello.instance_id;
  if (decided.replace_holder) ReplaceHolder(conn, index);
  if (late) {
    AdmitLate(conn, index, hello.index == wire::kNoIndex);
    return;
  }
  conn->index = index;
  conn->generation = hello.generation;
  conn->restarts = hello.restarts;
  conn->job_name = hello.job_name;
  conn->job_restart_attempt = hello.job_restart_attempt;
  conn->timer.cancel();
  NotPending(conn);
  im.members[index] = conn;
  im.log->debug("leader: pod {} joined from {} ({}/{}){}", index, conn->peer, admitted(),
                im.options.nnodes, hello.index == wire::kNoIndex ? " by arrival" : "");
  MaybeAssign();
}

// The instance id of the survivor the round keeps `index` for
// (LeaderOptions::kept_ids), while it keeps it; empty: none.
std::string Leader::KeptId(std::uint32_t index) const {
  const Impl& im = *impl_;
  if (im.formed() || std::chrono::steady_clock::now() >= im.options.keep_until) return {};
  auto it = im.options.kept_ids.find(index);
  return it == im.options.kept_ids.end() ? std::string() : it->second;
}

std::map<std::uint32_t, std::string> Leader::instance_ids() const {
  std::map<std::uint32_t, std::string> out;
  for (const auto& [index, conn] : impl_->members) {
    if (!conn->closed && !conn->instance_id.empty()) out[index] = conn->instance_id;
  }
  return out;
}

// The holder of `index` gives way to `conn` (admission.h: replace_holder): it
// went silent, it is `conn`'s own pod on an old connection, or another pod
// took the index the round kept for `conn`.
void Leader::ReplaceHolder(const std::shared_ptr<Conn>& conn, std::uint32_t index) {
  Impl& im = *impl_;
  const auto holder_conn = im.members.at(index);
  if (im.formed() && !holder_conn->settled) {  // an active pod or a spare: lost
    holder_conn->settled = true;
    Deliver([self = this, index, why = "a new pod (" + conn->peer + ") claims its index"] {
      if (self->impl_->callbacks.on_lost) self->impl_->callbacks.on_lost(index, why);
    });
  }
  const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - holder_conn->peer_state.last_rx());
  std::string why;
  if (!holder_conn->instance_id.empty() && holder_conn->instance_id == conn->instance_id) {
    why = "the same pod held it on an older connection, from " + holder_conn->peer;
  } else if (silent > im.options.holder_liveness) {
    why = "its holder " + holder_conn->peer + " has been silent for " +
          std::to_string(silent.count()) + " ms";
  } else {
    why = "it is kept for that pod (it ran the index in the last generation); " +
          holder_conn->peer + " held it";
  }
  Warn(conn, fmt::format("leader: index {} claimed again from {}; {}: replacing it", index, conn->peer, why));
  Drop(holder_conn);
}

// A pod admitted while the generation runs (LeaderOptions::admit_late).
// `by_arrival`: the pod had no index; `index` is the one it was given, which it
// keeps (the Reject or the Assignment tells it).
void Leader::AdmitLate(const std::shared_ptr<Conn>& conn, std::uint32_t index, bool by_arrival) {
  Impl& im = *impl_;
  const bool told = im.phase == RoundPhase::kChannel && im.callbacks.on_join;  // the next round expects it
  const bool spare = told && im.callbacks.on_join(index);
  if (!spare || !im.assignment) {
    wire::Reject next{wire::kNextGenerationField,
                      "pod " + std::to_string(index) + " (" + conn->peer +
                          ") joined while a generation runs: it joins the next generation",
                      /*retriable=*/true};
    if (by_arrival && told) {
      next.index = index;
      im.indices.given_late.insert(index);  // no other newcomer gets it meanwhile
    }
    Refuse(conn, std::move(next));
    return;
  }
  conn->index = index;
  conn->timer.cancel();
  NotPending(conn);
  im.members[index] = conn;
  conn->peer_state.Heard(std::chrono::steady_clock::now());
  im.log->info("leader: pod {} joined from {} while the generation runs: it waits as a spare",
               index, conn->peer);
  Send(conn, wire::Encode((*im.assignment)(index, MasterAddrFor(conn))));
}

// MASTER_ADDR for a member: the leader address that member itself reached us
// on (proven reachable from there, never loopback in a pod), or --local-addr.
std::string Leader::MasterAddrFor(const std::shared_ptr<Conn>& conn) const {
  if (!impl_->options.master_addr.empty()) return impl_->options.master_addr;
  boost::system::error_code ec;
  auto local = conn->socket.local_endpoint(ec);
  return ec ? std::string() : AddressForPeers(local.address());
}

// A pod of a recreated Job (admission.h, rule 4): the old Job's pods still
// admitted are stale.
void Leader::DropOlderOfJob(const wire::Hello& hello) {
  Impl& im = *impl_;
  const std::uint32_t jra = *hello.job_restart_attempt;
  auto members = im.members;
  for (auto& [index, old] : members) {
    if (old->job_name != hello.job_name || old->job_restart_attempt.value_or(0) >= jra) continue;
    im.log->info("leader: Job '{}' was recreated (job-restart-attempt {}): dropping pod {} ({}) "
                 "of its attempt {}",
                 hello.job_name, jra, index, old->peer, old->job_restart_attempt.value_or(0));
    Drop(old);
  }
}

void Leader::Refuse(const std::shared_ptr<Conn>& conn, wire::Reject reject,
                    std::function<void()> then) {
  Warn(conn, "leader: refused " + conn->peer + ": " + reject.reason);
  auto frame = std::make_shared<std::vector<std::uint8_t>>(wire::Encode(reject));
  conn->timer.cancel();
  // Stop reading; the write completes (or fails) and then the socket closes.
  asio::async_write(conn->socket, asio::buffer(*frame),
                    [self = shared_from_this(), conn, frame,
                     then = std::move(then)](boost::system::error_code, std::size_t) {
                      self->Drop(conn);
                      if (then) then();
                    });
  conn->closed = true;  // no further reads are processed
}

void Leader::Drop(const std::shared_ptr<Conn>& conn) {
  Impl& im = *impl_;
  boost::system::error_code ec;
  bool was_open = conn->socket.is_open();
  conn->closed = true;
  conn->timer.cancel();
  conn->socket.close(ec);
  if (!was_open) return;
  std::erase(im.all, conn);
  if (conn->index) {
    auto it = im.members.find(*conn->index);
    if (it != im.members.end() && it->second == conn) im.members.erase(it);
  } else {
    NotPending(conn);
  }
}

void Leader::NotPending(const std::shared_ptr<Conn>& conn) {
  Impl& im = *impl_;
  if (im.pending > 0) --im.pending;
  auto it = im.pending_by_address.find(conn->address);
  if (it != im.pending_by_address.end() && --it->second == 0) im.pending_by_address.erase(it);
}

void Leader::EvictPending() {
  // The oldest pending connection of the address holding the most pending
  // slots goes, not the new one: whatever holds the slots (idle sockets,
  // reopened as soon as they are dropped), a member that sends its hello at
  // once gets in, and one from an address of its own (every pod has its own
  // IP) keeps its slot while it sends its hello, however fast a flood from
  // other addresses reopens.
  Impl& im = *impl_;
  auto most = std::max_element(im.pending_by_address.begin(), im.pending_by_address.end(),
                               [](const auto& a, const auto& b) { return a.second < b.second; });
  if (most == im.pending_by_address.end()) return;
  const std::string& address = most->first;
  // Of that address, one whose hello came and who is answering the token's
  // challenge (a round trip) goes only when none that sent nothing is left.
  auto from = [&](const auto& c) { return !c->index && !c->closed && c->address == address; };
  auto oldest = std::find_if(im.all.begin(), im.all.end(),
                             [&](const auto& c) { return from(c) && !c->pending_hello; });
  if (oldest == im.all.end()) oldest = std::find_if(im.all.begin(), im.all.end(), from);
  if (oldest == im.all.end()) {  // all of them refused, their Reject being written
    oldest = std::find_if(im.all.begin(), im.all.end(),
                          [](const auto& c) { return !c->index && !c->closed; });
  }
  if (oldest == im.all.end()) return;
  std::shared_ptr<Conn> victim = *oldest;
  Warn(victim, "leader: dropping " + victim->peer + ": no valid hello yet, and " +
                   std::to_string(im.pending) + " connections are mid-handshake (" +
                   std::to_string(most->second) + " from " + address + "; its oldest goes)");
  Drop(victim);
}

void Leader::Reconsider() {
  if (impl_ && impl_->own) MaybeAssign();
}

// The gang's generation is the leader's own. Only a fresh leader (a replaced
// leader pod, at 0) cannot know the count: it continues the survivors' (they
// ask for their last generation + 1; Admit bounds it by --max-restarts).
std::uint32_t Leader::RoundGeneration() const {
  const Impl& im = *impl_;
  std::uint32_t generation = im.own->generation;
  if (generation == 0) {
    for (const auto& [index, conn] : im.members) {
      generation = std::max(generation, conn->generation);
    }
  }
  return generation;
}

// As RoundGeneration, for the restarts counted (elastic sizes, where a join's
// generation is none): a replaced leader continues the members' count.
std::optional<std::uint32_t> Leader::RoundRestarts() const {
  const Impl& im = *impl_;
  std::optional<std::uint32_t> restarts = im.options.restarts;
  if (!restarts || im.own->generation != 0) return restarts;
  for (const auto& [index, conn] : im.members) {
    if (conn->restarts) restarts = std::max(*restarts, *conn->restarts);
  }
  return restarts;
}

std::vector<std::pair<std::shared_ptr<Leader::Conn>, std::string>> Leader::AssignmentTargets(
    std::string* own_addr) {
  Impl& im = *impl_;
  // MASTER_ADDR for each member is the leader address that member itself
  // reached us on: proven reachable from there, and never loopback in a pod.
  *own_addr = "127.0.0.1";  // single-pod gang: nobody else needs to reach us
  std::vector<std::pair<std::shared_ptr<Conn>, std::string>> targets;
  for (auto& [index, conn] : im.members) {
    boost::system::error_code ec;
    auto local = conn->socket.local_endpoint(ec);
    if (ec) continue;
    targets.emplace_back(conn, MasterAddrFor(conn));
    if (*own_addr == "127.0.0.1" && !local.address().is_loopback()) {
      *own_addr = targets.back().second;
    }
  }
  if (!im.options.master_addr.empty()) *own_addr = im.options.master_addr;
  if (LeaderMembership* m = im.options.membership.get()) {
    std::stable_partition(targets.begin(), targets.end(),
                          [m](const auto& t) { return m->AssignFirst(*t.first->index); });
  }
  return targets;
}

void Leader::MaybeAssign() {
  Impl& im = *impl_;
  if (im.phase != RoundPhase::kAdmitting) return;
  std::optional<std::map<std::uint32_t, std::uint32_t>> ranks = NodeRanks();
  if (!ranks) return;
  im.phase = RoundPhase::kAssigning;
  const std::uint32_t nproc = im.own->nproc_per_node;
  const auto active = static_cast<std::uint32_t>(ranks->size());
  // The node rank goes in the assignment where it is not the member's own
  // index: a membership plan, or pods numbered by arrival (launch.h).
  const bool by_arrival = RanksByArrival(im.own->config);
  const bool membership = im.options.membership != nullptr || by_arrival;
  const std::uint32_t generation = RoundGeneration();
  std::function<wire::Assignment(std::uint32_t, std::string)> make =
      [nproc, generation, active, ranks = *ranks, membership, by_arrival,
       port = im.options.master_port,
       jax_port = im.options.jax_port, run_id = im.options.run_id, job_id = im.own->job_id,
       attempt = im.own->attempt](std::uint32_t index, std::string master_addr) {
    auto node = ranks.find(index);
    const std::uint32_t node_rank = node == ranks.end() ? 0 : node->second;
    return wire::Assignment{.generation = generation,
                            .nnodes = active,
                            .world_size = active * nproc,
                            .rank_base = node_rank * nproc,
                            .master_addr = std::move(master_addr),
                            .master_port = port,
                            .run_id = run_id,
                            .job_id = job_id,
                            .attempt = attempt,
                            .nccl_version = 0,
                            .nccl_ids = {},
                            .jax_port = jax_port,
                            .node_rank = membership ? std::optional(node_rank) : std::nullopt,
                            .spare = node == ranks.end(),
                            .index = by_arrival ? std::optional(index) : std::nullopt};
  };
  std::string own_addr;
  const std::vector<std::pair<std::shared_ptr<Conn>, std::string>> targets =
      AssignmentTargets(&own_addr);
  // Fresh NCCL ids for this round, the same for every pod (gpu/nccl.h; NVIDIA/nccl#1038).
  std::pair<std::uint32_t, std::vector<std::string>> nccl;
  if (im.options.make_nccl_ids) {
    nccl = im.options.make_nccl_ids(active * nproc, own_addr);
  }
  make = [base = make, nccl, restarts = RoundRestarts()](std::uint32_t index,
                                                             std::string addr) {
    wire::Assignment a = base(index, std::move(addr));
    std::tie(a.nccl_version, a.nccl_ids) = nccl;
    a.restarts = restarts;
    return a;
  };
  // One `make` shared by every write's completion and by late spares: a copy
  // in each would hold the whole gang's node ranks per member, O(n^2) memory
  // (bench/RESULTS.md: a leader RSS of 7,184 MiB at 12,500 pods).
  im.assignment = std::make_shared<const decltype(make)>(std::move(make));
  const auto shared_make = im.assignment;
  for (auto& [conn, addr] : targets) {
    ++im.writes_in_flight;
    Send(conn, wire::Encode((*shared_make)(*conn->index, addr)),
         [self = shared_from_this(), own_addr, shared_make] {
           Impl& im = *self->impl_;
           if (--im.writes_in_flight == 0) self->Finish((*shared_make)(0, own_addr));
         });
  }
  if (im.writes_in_flight == 0) Finish((*shared_make)(0, own_addr));
}

void Leader::Finish(Result<wire::Assignment> result) {
  Impl& im = *impl_;
  if (im.formed()) return;
  im.phase = RoundPhase::kFormed;
  im.progress_timer.cancel();
  im.waiting_timer.cancel();
  im.accept_pause.cancel();
  boost::system::error_code ec;
  im.late = result.ok() && im.options.admit_late && im.acceptor.is_open();
  // Late and stray connections are refused by the kernel now, unless late pods are admitted.
  if (!im.late) im.acceptor.close(ec);
  if (result.ok()) im.log->info("leader: all {} pod(s) joined", admitted());
  auto done = std::move(im.done);
  im.done = nullptr;
  if (done) asio::post(im.executor, [done, result] { done(result); });
}

void Leader::Send(const std::shared_ptr<Conn>& conn, std::vector<std::uint8_t> frame,
                  std::function<void()> then) {
  if (conn->closed) {
    if (then) then();
    return;
  }
  conn->outq.Send(conn->socket, conn, std::move(frame), std::move(then));
}

void Leader::StartChannel(ChannelCallbacks callbacks, std::chrono::milliseconds heartbeat,
                          int misses) {
  Impl& im = *impl_;
  OpenChannel(im, std::move(callbacks), heartbeat, misses);
  if (im.phase != RoundPhase::kClosed) im.phase = RoundPhase::kChannel;
  auto now = std::chrono::steady_clock::now();
  for (auto& [index, conn] : im.members) conn->peer_state.Heard(now);
  im.heartbeat_timer = std::make_unique<asio::steady_timer>(im.executor);
  Heartbeat();
  auto early = std::move(im.early_events);
  im.early_events.clear();
  for (auto& event : early) event();
}

// Events run here or in StartChannel, both on a live Leader, so they capture a raw
// `this`: a shared_ptr kept in early_events would keep a leader whose channel never
// started alive forever (a cycle LeakSanitizer reports).
void Leader::Deliver(std::function<void()> event) {
  if (impl_->phase == RoundPhase::kChannel) {
    event();
  } else {
    impl_->early_events.push_back(std::move(event));
  }
}

void Leader::Heartbeat() {
  Impl& im = *impl_;
  if (im.phase != RoundPhase::kChannel || !im.heartbeat_timer) return;
  auto now = std::chrono::steady_clock::now();
  auto members = im.members;  // on_lost may drop entries
  const bool send = im.pacer.Due(now, im.heartbeat);
  for (auto& [index, conn] : members) {
    if (conn->closed) continue;
    if (!conn->settled && conn->peer_state.Silent(now, im.heartbeat, im.misses)) {
      conn->settled = true;
      Drop(conn);
      Deliver([self = this, index = index,  // Clang 14 cannot capture a structured binding
               why = "no heartbeat for " + std::to_string(im.heartbeat.count() * im.misses) +
                     " ms"] {
        if (self->impl_->callbacks.on_lost) self->impl_->callbacks.on_lost(index, why);
      });
      continue;
    }
    if (send) Send(conn, wire::Encode(conn->peer_state.Make(now)));
  }
  // Wake for the next send, and at the moment the first member's silence
  // reaches the bound: a silent peer is declared lost on time, not up to a
  // check interval late (a hot spare's start waits on it: bench/spares.py).
  auto wake = std::chrono::steady_clock::duration(im.heartbeat / kChecksPerInterval);
  for (const auto& [index, conn] : im.members) {
    if (conn->closed || conn->settled) continue;
    const auto bound = conn->peer_state.last_rx() + im.heartbeat * im.misses - now;
    wake = std::min(wake, bound + std::chrono::milliseconds(1));
  }
  im.heartbeat_timer->expires_after(std::max(wake, decltype(wake)(std::chrono::milliseconds(1))));
  im.heartbeat_timer->async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (!ec) self->Heartbeat();
  });
}

void Leader::OnChannelMessage(const std::shared_ptr<Conn>& conn, const wire::Message& m) {
  Impl& im = *impl_;
  if (const auto* hb = std::get_if<wire::Heartbeat>(&m)) {
    conn->peer_state.OnHeartbeat(*hb, std::chrono::steady_clock::now());
    return;
  }
  if (const auto* r = std::get_if<wire::Report>(&m)) {
    if (r->index != *conn->index) {
      Warn(conn, fmt::format("leader: pod {} sent a report for index {}; closing", *conn->index,
                             r->index));
      ProtocolError(conn, "protocol error (a report for another index)");
      return;
    }
    if (conn->settled) return;  // one report per pod: the first one stands
    if (r->leaving && im.phase == RoundPhase::kAdmitting) {
      // Stopped while it waits in the round: the round goes on without it.
      const std::uint32_t index = *conn->index;
      im.log->info("leader: pod {} ({}) leaves before the round formed ({})", index, conn->peer,
                   r->reason);
      Drop(conn);
      if (im.options.membership) im.options.membership->OnLeave(index);
      MaybeAssign();
      return;
    }
    conn->settled = true;
    Deliver([self = this, index = *conn->index, report = *r] {
      if (self->impl_->callbacks.on_report) self->impl_->callbacks.on_report(index, report);
    });
    return;
  }
  Warn(conn, fmt::format("leader: pod {} sent an unexpected message; closing", *conn->index));
  ProtocolError(conn, "protocol error");
}

// An admitted member broke the protocol: dropped, and lost unless it had
// settled already. Through Deliver: this may run before StartChannel (the
// member spoke in the moment between its assignment and the leader's own),
// when no callback is set yet.
void Leader::ProtocolError(const std::shared_ptr<Conn>& conn, std::string why) {
  const std::uint32_t index = *conn->index;
  const bool was_settled = conn->settled;
  conn->settled = true;
  Drop(conn);
  if (was_settled) return;
  Deliver([self = this, index, why = std::move(why)] {
    if (self->impl_->callbacks.on_lost) self->impl_->callbacks.on_lost(index, why);
  });
}

void Leader::WaitingHeartbeat() {
  Impl& im = *impl_;
  if (im.formed()) return;
  im.waiting_timer.expires_after(im.options.waiting_heartbeat);
  im.waiting_timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    Impl& im = *self->impl_;
    if (ec || im.formed()) return;
    auto frame = wire::Encode(wire::Heartbeat{});
    auto members = im.members;  // a failed send may drop entries
    for (auto& [index, conn] : members) self->Send(conn, frame);
    self->WaitingHeartbeat();
  });
}

void Leader::Warn(const std::shared_ptr<Conn>& conn, const std::string& line) {
  Impl& im = *impl_;
  auto suppressed = im.log_limit.Admit(conn->address, std::chrono::steady_clock::now());
  if (!suppressed) return;
  if (*suppressed == 0) {
    im.log->warn("{}", line);
  } else {
    im.log->warn("{} (and {} more from {} since its last line, not logged: at most {} per {} s)",
                 line, *suppressed, conn->address, tunables::kMaxBadConnectionLogsPerPeer,
                 std::chrono::duration_cast<std::chrono::seconds>(tunables::kBadConnectionLogWindow)
                     .count());
  }
}

void Leader::BroadcastStop(const wire::Stop& stop) {
  auto frame = wire::Encode(stop);
  for (auto& [index, conn] : impl_->members) Send(conn, frame);
}

void Leader::StopAdmitting() {
  impl_->late = false;
  boost::system::error_code ec;
  impl_->acceptor.close(ec);
}

std::map<std::uint32_t, Leader::PeerStats> Leader::peer_stats() const {
  std::map<std::uint32_t, PeerStats> out;
  for (const auto& [index, conn] : impl_->members) {
    const ChannelPeer& p = conn->peer_state;
    if (!conn->closed) out[index] = {p.rtt_seconds(), p.step_rate_milli(), p.slowest_rank()};
  }
  return out;
}

std::string Leader::node_name(std::uint32_t index) const {
  const auto& names = impl_->indices.node_names;
  auto it = names.find(index);
  return it == names.end() ? std::string() : it->second;
}

std::chrono::steady_clock::duration Leader::heartbeat_silence() const {
  const Impl& im = *impl_;
  if (im.phase != RoundPhase::kChannel || !im.heartbeat_timer) return {};
  return im.pacer.Silence(std::chrono::steady_clock::now());
}

bool Leader::AllMembersSettled() const {
  for (const auto& [index, conn] : impl_->members) {
    if (!conn->settled && !conn->closed) return false;
  }
  return true;
}

std::string CompactIndices(const std::vector<std::uint32_t>& sorted, std::size_t max_runs) {
  std::string out;
  std::size_t runs = 0;
  for (std::size_t i = 0; i < sorted.size();) {
    std::size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (runs == max_runs) {
      out += fmt::format(" (+{} more)", sorted.size() - i);
      break;
    }
    if (!out.empty()) out += ',';
    out += std::to_string(sorted[i]);
    if (j > i) {
      out += '-';
      out += std::to_string(sorted[j]);
    }
    ++runs;
    i = j + 1;
  }
  return out;
}

void Leader::LogProgress() {
  Impl& im = *impl_;
  im.progress_timer.expires_after(im.options.progress_interval);
  im.progress_timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    Impl& im = *self->impl_;
    if (ec || im.formed()) return;
    std::string left;
    if (im.options.deadline) {
      auto s = std::chrono::duration<double>(*im.options.deadline -
                                             std::chrono::steady_clock::now()).count();
      left = fmt::format("; {:.0f} s left", std::max(0.0, s));
    }
    im.log->info("leader: waiting for the gang: {} of {} pod(s) joined; missing indices {}{}{}",
                 self->admitted(), im.options.nnodes, CompactIndices(self->missing(), 16),
                 im.pending > 0 ? fmt::format("; {} connection(s) mid-handshake", im.pending)
                                : std::string(),
                 left);
    self->LogProgress();
  });
}

}  // namespace trainlet::rendezvous
