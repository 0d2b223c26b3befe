#include "trainlet/rendezvous/member.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include "channel_core.h"
#include "frame_queue.h"
#include "trainlet/rendezvous/auth.h"
#include "logging.h"
#include "net_util.h"

namespace trainlet::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using exitcodes::Result;
using exitcodes::Status;

// Where the join stands. Completions of an earlier attempt are dropped in one
// place (Member::Bound); the phase says which completions are expected.
enum class Phase {
  kResolving,      // the leader's name is being resolved
  kConnecting,     // a connect to addresses[next_address - 1] is under way
  kAwaitingReply,  // connected, hello sent or being sent; the leader's frames are read
  kBackingOff,     // waiting before the next attempt (Retry)
  kJoined,         // the assignment came: the socket is the control channel now
  kClosed,         // failed, or Close(): nothing runs any more
};

struct Member::Impl {
  Impl(asio::any_io_executor ex, MemberOptions opts)
      : executor(ex),
        options(std::move(opts)),
        socket(ex),
        op_timer(ex),
        deadline_timer(ex),
        progress_timer(ex),
        backoff(options.backoff, options.seed) {}
  bool over() const { return phase == Phase::kJoined || phase == Phase::kClosed; }
  asio::any_io_executor executor;
  MemberOptions options;
  std::unique_ptr<Resolver> resolver;
  tcp::socket socket;
  asio::steady_timer op_timer;        // connect and reply timeouts, backoff sleep, channel checks
  asio::steady_timer deadline_timer;  // the whole join
  asio::steady_timer progress_timer;  // LogProgress, until the assignment
  Backoff backoff;
  std::shared_ptr<spdlog::logger> log = Logger("rendezvous");
  Done done;
  Phase phase = Phase::kResolving;
  // Raised whenever an attempt ends (a new connect, a retry, a silent leader):
  // completions bound to an earlier one are stale (Bound).
  std::uint64_t attempt = 0;
  Clock::time_point started;
  std::vector<asio::ip::address> addresses;  // from the last resolution
  std::size_t next_address = 0;
  std::vector<std::string> tried;  // "10.0.0.10" of every address ever tried
  std::string logged;              // the last state logged, to log changes only
  std::string last_error;
  std::optional<wire::Replaced> replaced;  // the leader's kReplacedField refusal
  std::string activity;  // what is under way ("connecting to 10.0.0.10"), for the timeout message
  std::string address;   // the address of the current connection
  ResolveError last_dns = ResolveError::kNone;  // of the last resolution
  bool ever_resolved = false;
  std::string refusal;  // the leader's last retriable refusal, kept for the timeout message
  bool authenticated = false;  // the leader proved the token on this connection
  int attempts = 0;
  wire::Decoder decoder;
  std::array<std::uint8_t, 4096> buf{};
  std::vector<std::uint8_t> hello_frame;
  // Control channel.
  bool channel = false;
  bool reported_ok = false;
  ChannelCallbacks callbacks;
  std::chrono::milliseconds heartbeat = tunables::kHeartbeatInterval;  // set by StartChannel
  int misses = tunables::kHeartbeatMisses;
  ChannelPeer leader;   // when the leader was last heard, its heartbeats (channel_core.h)
  ChannelPacer pacer;   // this side's heartbeats; heartbeat_silence()
  std::uint32_t step_rate_milli = 0;
  std::uint32_t slowest_rank = 0;
  FrameQueue outq;
};

// The one place stale completions are dropped: `handler` runs only while the
// join goes on in the attempt it was started in.
template <class Handler>
auto Member::Bound(Handler handler) {
  return [self = shared_from_this(), attempt = impl_->attempt,
          handler = std::move(handler)](auto&&... args) mutable {
    const Impl& im = *self->impl_;
    if (im.over() || im.attempt != attempt) return;
    handler(std::forward<decltype(args)>(args)...);
  };
}

Result<std::shared_ptr<Member>> Member::Create(asio::any_io_executor executor,
                                               MemberOptions options) {
  std::shared_ptr<Member> m(new Member());
  ResolverOptions resolver_options = options.resolver;
  m->impl_ = std::make_unique<Impl>(executor, std::move(options));
  // An IP address needs no DNS: no c-ares channel (resolv.conf, nsswitch.conf,
  // /dev/urandom) is set up for it; Resolve() hands the address straight over.
  boost::system::error_code literal;
  asio::ip::make_address(m->impl_->options.leader_host, literal);
  if (!literal) return m;
  auto resolver = Resolver::Create(executor, resolver_options);
  if (!resolver.ok()) return resolver.status();
  m->impl_->resolver = std::move(resolver).value();
  return m;
}

Member::~Member() { Close(); }

void Member::Close() {
  if (!impl_) return;
  impl_->phase = Phase::kClosed;
  impl_->channel = false;
  impl_->done = nullptr;
  boost::system::error_code ec;
  impl_->op_timer.cancel();
  impl_->deadline_timer.cancel();
  impl_->progress_timer.cancel();
  impl_->socket.close(ec);
  if (impl_->resolver) impl_->resolver->Cancel();
}

void Member::Start(Done done) {
  Impl& im = *impl_;
  im.done = std::move(done);
  im.started = Clock::now();
  im.hello_frame = wire::Encode(im.options.hello);
  im.deadline_timer.expires_at(im.options.deadline);
  im.deadline_timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (!ec) self->Finish(Status::Infra(self->TimeoutMessage()));
  });
  LogProgress();
  Resolve();
}

// Why the join did not finish by the deadline: the leader, the addresses
// tried, the last error (or what was under way), the leader's last refusal.
std::string Member::TimeoutMessage() const {
  const Impl& im = *impl_;
  auto secs = std::chrono::duration<double>(Clock::now() - im.started).count();
  std::string tried;
  for (const auto& a : im.tried) tried += (tried.empty() ? "" : ", ") + a;
  std::string last = !im.last_error.empty() ? im.last_error
                     : !im.activity.empty() ? "none yet (" + im.activity + ")"
                                            : "none yet";
  std::string hint;
  if (!im.ever_resolved && im.resolver) {
    // The name members dial is the leader pod's DNS name in the headless
    // Service; when it never resolved, the Service is where to look.
    hint = "; the leader's name " + im.options.leader_host + " never resolved (" +
           std::string(ResolveErrorName(im.last_dns)) +
           "): check that the headless Service selects the leader pod, that the pod's "
           "subdomain names that Service, and that the Service sets "
           "publishNotReadyAddresses: true";
  }
  return "could not join the leader " + im.options.leader_host + " port " +
         std::to_string(im.options.port) + " within " + fmt::format("{:.1f}", secs) + " s (" +
         std::to_string(im.attempts) + " attempts; addresses tried: " +
         (tried.empty() ? "none" : tried) + "; last error: " + last +
         (im.refusal.empty() || im.refusal == im.last_error ? ""
                                                            : "; the leader refused: " + im.refusal) +
         hint + ")";
}

void Member::LogProgress() {
  Impl& im = *impl_;
  im.progress_timer.expires_after(im.options.progress_interval);
  im.progress_timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    Impl& im = *self->impl_;
    if (ec || im.over()) return;
    auto left = std::chrono::duration<double>(im.options.deadline - Clock::now()).count();
    std::string tried;
    for (const auto& a : im.tried) tried += (tried.empty() ? "" : ", ") + a;
    if (im.logged == "joined") {
      im.log->info("rendezvous: connected to leader {} port {}, waiting for the gang to "
                   "form; {:.0f} s left",
                   im.options.leader_host, im.options.port, std::max(0.0, left));
    } else {
      im.log->info("rendezvous: still trying leader {} port {} ({}; addresses tried: {}; "
                   "last error: {}); {:.0f} s left",
                   im.options.leader_host, im.options.port,
                   im.logged.empty() ? "resolving" : im.logged, tried.empty() ? "none" : tried,
                   im.last_error.empty() ? "none" : im.last_error, std::max(0.0, left));
    }
    self->LogProgress();
  });
}

void Member::Resolve() {
  Impl& im = *impl_;
  ++im.attempts;
  im.phase = Phase::kResolving;
  im.activity = "resolving " + im.options.leader_host;
  auto on_resolved = Bound([this](ResolveOutcome out) {
    Impl& im = *impl_;
    im.last_dns = out.error;
    if (!out.ok()) {
      Retry("dns: " + im.options.leader_host + ": " + std::string(ResolveErrorName(out.error)),
            out.detail);
      return;
    }
    im.ever_resolved = true;
    im.addresses = std::move(out.addresses);
    im.next_address = 0;
    ConnectNext();
  });
  if (!im.resolver) {  // leader_host is an IP address (see Create)
    boost::system::error_code ec;
    ResolveOutcome literal{{asio::ip::make_address(im.options.leader_host, ec)}, ResolveError::kNone,
                           {}};
    asio::post(im.executor, [on_resolved, literal]() mutable { on_resolved(literal); });
    return;
  }
  im.resolver->Resolve(im.options.leader_host, on_resolved);
}

void Member::ConnectNext() {
  Impl& im = *impl_;
  if (im.next_address >= im.addresses.size()) {
    Retry("connect: " + im.options.leader_host + " port " + std::to_string(im.options.port) +
              " not reachable",
          im.last_error);
    return;
  }
  const asio::ip::address addr = im.addresses[im.next_address++];
  std::string text = AddressForPeers(addr);
  if (std::find(im.tried.begin(), im.tried.end(), text) == im.tried.end()) {
    im.tried.push_back(text);
  }
  boost::system::error_code ec;
  im.socket.close(ec);
  ++im.attempt;
  im.phase = Phase::kConnecting;
  im.address = text;
  im.activity = "connecting to " + text + " port " + std::to_string(im.options.port);
  im.op_timer.expires_after(im.options.connect_timeout);
  im.op_timer.async_wait(Bound([this](boost::system::error_code ec) {
    // Only while still connecting: once connected, the socket carries the
    // hello and must not be cancelled.
    if (ec || impl_->phase != Phase::kConnecting) return;
    boost::system::error_code ignored;
    impl_->socket.cancel(ignored);  // the connect completes with operation_aborted
  }));
  im.socket.async_connect(tcp::endpoint(addr, im.options.port),
                          Bound([this, text](boost::system::error_code ec) {
                            Impl& im = *impl_;
                            im.op_timer.cancel();
                            if (ec) {
                              im.last_error =
                                  text + ": " +
                                  (ec == asio::error::operation_aborted
                                       ? std::string("connect timed out")
                                       : ec.message());
                              ConnectNext();
                              return;
                            }
                            boost::system::error_code ignored;
                            im.socket.set_option(tcp::no_delay(true), ignored);
                            EnableDeadPeerDetection(im.socket);
                            SendHello();
                          }));
}

void Member::SendHello() {
  Impl& im = *impl_;
  im.phase = Phase::kAwaitingReply;
  im.decoder = wire::Decoder();
  im.authenticated = false;
  if (!im.options.token.empty()) {
    // A fresh nonce per connection: a recorded exchange is worth nothing.
    im.options.hello.nonce = NewNonce();
    im.hello_frame = wire::Encode(im.options.hello);
  }
  im.activity = "waiting for the leader's reply from " + im.address;
  ArmReplyTimer();
  asio::async_write(im.socket, asio::buffer(im.hello_frame),
                    Bound([this](boost::system::error_code ec, std::size_t) {
                      Impl& im = *impl_;
                      if (ec) {
                        im.last_error = "sending hello: " + ec.message();
                        Retry("connect: leader closed the connection", im.last_error);
                        return;
                      }
                      if (im.logged != "joined") {
                        im.log->info("rendezvous: connected to leader {} port {}, waiting for "
                                     "the gang",
                                     im.options.leader_host, im.options.port);
                        im.logged = "joined";
                      }
                      ReadReply();
                    }));
}

void Member::ArmReplyTimer() {
  Impl& im = *impl_;
  im.op_timer.expires_after(im.options.reply_timeout);
  im.op_timer.async_wait(Bound([this](boost::system::error_code ec) {
    Impl& im = *impl_;
    if (ec) return;
    // Connected, but not a frame since: a frozen process whose kernel still
    // completes handshakes, or an old leader being terminated. Another address
    // of the name may be the live leader.
    im.last_error = im.address + ": accepted the connection but sent nothing for " +
                    std::to_string(im.options.reply_timeout.count()) + " ms";
    if (im.logged != "silent:" + im.address) {
      im.log->info("rendezvous: leader {} ({}); trying the next address", im.last_error,
                   im.options.leader_host);
      im.logged = "silent:" + im.address;
    }
    ConnectNext();  // closes the socket; the read on it is stale now
  }));
}

void Member::ReadReply() {
  Impl& im = *impl_;
  im.socket.async_read_some(
      asio::buffer(im.buf), Bound([this](boost::system::error_code ec, std::size_t n) {
        Impl& im = *impl_;
        if (ec) {
          // The leader went away before assigning (restarted, or closed on us).
          im.last_error = "leader closed the connection before assigning: " + ec.message();
          Retry("rendezvous: leader connection lost", im.last_error);
          return;
        }
        Status fed = im.decoder.Feed(std::span(im.buf.data(), n));
        if (!fed.ok()) {
          im.last_error = fed.message();
          Retry("rendezvous: leader sent an invalid reply", im.last_error);
          return;
        }
        ProcessReply();
      }));
}

// Handles every message already decoded (one read may carry several: a
// heartbeat and then the assignment), then reads on while still waiting.
void Member::ProcessReply() {
  Impl& im = *impl_;
  while (im.phase == Phase::kAwaitingReply) {
    auto next = im.decoder.Next();
    if (!next.ok()) {
      im.last_error = next.status().message();
      Retry("rendezvous: leader sent an invalid reply", im.last_error);
      return;
    }
    if (!next->has_value()) {
      ReadReply();
      return;
    }
    ArmReplyTimer();  // the leader is alive
    OnReply(**next);
  }
}

// One frame of the leader's before the assignment.
void Member::OnReply(const wire::Message& msg) {
  Impl& im = *impl_;
  if (std::holds_alternative<wire::Heartbeat>(msg)) {
    // Admitted, the gang incomplete: answer, so the leader knows this pod
    // is live and refuses a second pod claiming its index (leader.h).
    Send(wire::Encode(wire::Heartbeat{}));
    return;
  }
  if (const auto* challenge = std::get_if<wire::Challenge>(&msg)) {
    AnswerChallenge(*challenge);
    return;
  }
  if (const auto* reject = std::get_if<wire::Reject>(&msg)) {
    if (reject->retriable) {
      im.refusal = reject->reason;
      if (reject->field == wire::kNextGenerationField) {
        // Admitted at the leader's next round, which starts in moments (the
        // gang grows for this pod, or is starting its workers): retry as a
        // pod rejoining after a restart does, so the round does not form
        // without it at the last call.
        BackoffOptions rejoin = im.options.backoff;
        rejoin.initial = tunables::kRejoinBackoffInitial;
        rejoin.min_delay = tunables::kRejoinBackoffMin;
        im.backoff = Backoff(rejoin, im.options.seed);
        if (reject->index && im.options.hello.index == wire::kNoIndex) {
          // Ranks by arrival: the leader gave this pod an index for that round.
          im.options.hello.index = *reject->index;
          im.hello_frame = wire::Encode(im.options.hello);
          im.log->info("rendezvous: the leader gave this pod index {} for its next generation",
                       *reject->index);
        }
      }
      Retry("rendezvous: leader refused this pod for now", reject->reason);
    } else if (reject->field == wire::kReplacedField || reject->field == wire::kLeftField) {
      // Lost to the gang, not misconfigured: infra, as the loss itself.
      im.replaced = reject->replaced;
      Finish(Status::Infra("the leader refused this pod: " + reject->reason));
    } else {
      Finish(Status::Config("the leader refused this pod: " + reject->reason));
    }
    return;
  }
  const auto* a = std::get_if<wire::Assignment>(&msg);
  if (a == nullptr) {
    im.last_error = "leader sent an unexpected message";
    Retry("rendezvous: leader sent an invalid reply", im.last_error);
    return;
  }
  const JoinCheck check = CheckAssignment(im.options.hello, !im.options.token.empty(),
                                          im.authenticated, *a);
  switch (check.verdict) {
    case JoinCheck::Verdict::kAccept:
      Finish(*a);
      return;
    case JoinCheck::Verdict::kRetry:
      im.last_error = check.detail;
      Retry(check.state, im.last_error);
      return;
    case JoinCheck::Verdict::kFail:
      Finish(Status::Config(check.detail));
      return;
  }
}

// The leader's challenge (auth.h): check its proof of the token, prove ours.
void Member::AnswerChallenge(const wire::Challenge& challenge) {
  Impl& im = *impl_;
  const wire::Hello& h = im.options.hello;
  if (im.options.token.empty()) {
    Finish(Status::Config("the leader requires authentication: give this pod the "
                          "shared token (--token-file)"));
    return;
  }
  if (!ProofsEqual(challenge.proof,
                   LeaderProof(im.options.token, h.job_id, h.nonce, challenge.nonce))) {
    Finish(Status::Config("the leader failed authentication: its token differs "
                          "from this pod's (--token-file)"));
    return;
  }
  im.authenticated = true;
  Send(wire::Encode(
      wire::Proof{.proof = MemberProof(im.options.token, h.job_id, challenge.nonce, h.nonce)}));
}

JoinCheck CheckAssignment(const wire::Hello& h, bool token, bool authenticated,
                          const wire::Assignment& a) {
  using V = JoinCheck::Verdict;
  if (token && !authenticated) {
    return {V::kFail, "", "the leader did not authenticate (it has no --token-file?); "
                          "refusing its assignment"};
  }
  if (a.job_id != h.job_id || a.attempt != h.attempt) {
    // A leader of another job or attempt (a stale pod still holding the
    // name): never follow it; the right one may come up under the same name.
    return {V::kRetry, "rendezvous: refused a leader of another job or attempt",
            "leader belongs to job '" + a.job_id + "' attempt " + std::to_string(a.attempt) +
                ", this pod to '" + h.job_id + "' attempt " + std::to_string(h.attempt)};
  }
  if (a.generation < h.generation) {
    // A leader behind this pod's own count: a pod of an earlier generation
    // still holding the name. The current leader comes back under it.
    return {V::kRetry, "rendezvous: refused a leader of an earlier generation",
            "leader runs generation " + std::to_string(a.generation) +
                ", this pod joins generation " + std::to_string(h.generation)};
  }
  // The node rank is the index unless the leader's membership policy placed
  // this pod elsewhere (hot spares, elastic sizes); a spare has none.
  const std::uint32_t node_rank = a.node_rank.value_or(h.index);
  if ((!a.spare && a.rank_base != node_rank * h.nproc_per_node) || a.nnodes == 0 ||
      a.world_size != a.nnodes * h.nproc_per_node || a.master_addr.empty() ||
      a.master_port == 0) {
    return {V::kFail, "",
            fmt::format("the leader's assignment contradicts this pod's launch (rank_base {} for "
                        "index {} with {} workers per pod; world size {} for {} pods)",
                        a.rank_base, h.index, h.nproc_per_node, a.world_size, a.nnodes)};
  }
  return {V::kAccept, "", ""};
}

void Member::Retry(const std::string& state, const std::string& detail) {
  Impl& im = *impl_;
  if (im.over()) return;
  ++im.attempt;  // whatever was under way is stale now
  im.phase = Phase::kBackingOff;
  boost::system::error_code ec;
  im.socket.close(ec);
  if (!detail.empty()) im.last_error = detail;
  auto delay = im.backoff.Next();
  if (state != im.logged) {
    im.log->info("{} ({}); retrying with backoff", state, im.last_error);
    im.logged = state;
  } else {
    im.log->debug("{}; attempt {}, next in {} ms", state, im.attempts, delay.count());
  }
  im.op_timer.expires_after(delay);
  im.op_timer.async_wait(Bound([this](boost::system::error_code ec) {
    if (!ec) Resolve();
  }));
}

void Member::Finish(Result<wire::Assignment> result) {
  Impl& im = *impl_;
  if (im.over()) return;
  im.phase = result.ok() ? Phase::kJoined : Phase::kClosed;
  im.op_timer.cancel();
  im.deadline_timer.cancel();
  im.progress_timer.cancel();
  if (im.resolver) im.resolver->Cancel();
  if (!result.ok()) {
    boost::system::error_code ec;
    im.socket.close(ec);
  }
  // On success the socket stays open: it becomes the control channel
  // (StartChannel).
  auto done = std::move(im.done);
  im.done = nullptr;
  if (done) asio::post(im.executor, [done, result] { done(result); });
}

void Member::StartChannel(ChannelCallbacks callbacks, std::chrono::milliseconds heartbeat,
                          int misses) {
  Impl& im = *impl_;
  OpenChannel(im, std::move(callbacks), heartbeat, misses);
  im.channel = true;
  im.leader.Heard(Clock::now());
  // What came in the same read as the assignment (a Stop, when a pod failed at
  // once) is handled first, posted so no callback runs inside StartChannel.
  asio::post(im.executor, [self = shared_from_this()] {
    if (self->impl_->channel) self->ChannelProcess();
  });
  ChannelHeartbeat();
}

void Member::ChannelRead() {
  Impl& im = *impl_;
  im.socket.async_read_some(asio::buffer(im.buf), [self = shared_from_this()](
                                                      boost::system::error_code ec, std::size_t n) {
    Impl& im = *self->impl_;
    if (!im.channel) return;
    if (ec) {
      self->ChannelLost("the leader's connection closed (" + ec.message() + ")");
      return;
    }
    Status fed = im.decoder.Feed(std::span(im.buf.data(), n));
    if (!fed.ok()) {
      self->ChannelLost("the leader sent garbage: " + fed.message());
      return;
    }
    self->ChannelProcess();
  });
}

void Member::ChannelLost(const std::string& why) {
  Impl& im = *impl_;
  im.channel = false;
  boost::system::error_code ignored;
  im.op_timer.cancel();
  im.socket.close(ignored);
  if (!im.reported_ok && im.callbacks.on_lost) im.callbacks.on_lost(why);
}

void Member::ChannelProcess() {
  Impl& im = *impl_;
  for (;;) {
    auto next = im.decoder.Next();
    if (!next.ok()) {
      ChannelLost("the leader sent garbage: " + next.status().message());
      return;
    }
    if (!next->has_value()) break;
    const auto now = Clock::now();
    im.leader.Heard(now);
    if (const auto* hb = std::get_if<wire::Heartbeat>(&**next)) im.leader.OnHeartbeat(*hb, now);
    if (const auto* stop = std::get_if<wire::Stop>(&**next)) {
      if (im.callbacks.on_stop) im.callbacks.on_stop(*stop);
      if (!im.channel) return;
    }
  }
  ChannelRead();
}

void Member::ChannelHeartbeat() {
  Impl& im = *impl_;
  if (!im.channel) return;
  const auto now = Clock::now();
  if (im.leader.Silent(now, im.heartbeat, im.misses)) {
    ChannelLost("no heartbeat from the leader for " +
                std::to_string(im.heartbeat.count() * im.misses) + " ms");
    return;
  }
  if (im.pacer.Due(now, im.heartbeat)) {
    wire::Heartbeat hb = im.leader.Make(now);
    hb.step_rate_milli = im.step_rate_milli;
    hb.slowest_rank = im.slowest_rank;
    Send(wire::Encode(hb));
  }
  im.op_timer.expires_after(im.heartbeat / kChecksPerInterval);
  im.op_timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (!ec) self->ChannelHeartbeat();
  });
}

std::optional<wire::Replaced> Member::replaced() const { return impl_->replaced; }

std::chrono::steady_clock::duration Member::heartbeat_silence() const {
  const Impl& im = *impl_;
  if (!im.channel) return {};
  return im.pacer.Silence(Clock::now());
}

void Member::SetStepRate(std::uint32_t step_rate_milli, std::uint32_t slowest_rank) {
  impl_->step_rate_milli = step_rate_milli;
  impl_->slowest_rank = slowest_rank;
}

void Member::SendReport(const wire::Report& report, std::function<void()> sent) {
  if (report.ok) impl_->reported_ok = true;
  Send(wire::Encode(report), std::move(sent));
}

void Member::Send(std::vector<std::uint8_t> frame, std::function<void()> sent) {
  Impl& im = *impl_;
  if (!im.socket.is_open()) {
    if (sent) sent();
    return;
  }
  im.outq.Send(im.socket, shared_from_this(), std::move(frame), std::move(sent));
}

}  // namespace trainlet::rendezvous
