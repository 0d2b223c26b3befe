// The member's sans-IO core (member_core.h): the join's rules and the control
// channel's, as MemberCore's inputs to actions.
#include "trainlet/rendezvous/member_core.h"

#include <arpa/inet.h>

#include <algorithm>
#include <utility>

#include <spdlog/fmt/fmt.h>

#include "channel_core.h"
#include "trainlet/rendezvous/auth.h"

namespace trainlet::rendezvous {

using Clock = std::chrono::steady_clock;
using Phase = MemberCore::Phase;
using exitcodes::Result;
using exitcodes::Status;

namespace {

// Whether `host` is an IP address (inet_pton(3)): such a name needs no DNS, and
// the timeout message gives no DNS hint for it.
bool IsAddressLiteral(const std::string& host) {
  unsigned char buf[sizeof(struct in6_addr)];
  return ::inet_pton(AF_INET, host.c_str(), buf) == 1 ||
         ::inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// A leader sends one Stop per generation; frames after the assignment are
// kept until StartChannel up to this many Stops (more is garbage: Lost).
inline constexpr std::size_t kMaxEarlyStops = 8;

// What the timeout message and the progress lines say about the attempts.
struct JoinLog {
  Clock::time_point started;
  int attempts = 0;                // resolutions started
  std::vector<std::string> tried;  // "10.0.0.10" of every address ever tried
  std::string logged;              // the last state logged, to log changes only
  std::string last_error;
  std::string activity;  // what is under way ("connecting to 10.0.0.10"), for the timeout message
  std::string refusal;   // the leader's last retriable refusal, kept for the timeout message
  ResolveError last_dns = ResolveError::kNone;  // of the last resolution
  bool ever_resolved = false;
};

// The control channel, once the assignment came.
struct ChannelState {
  bool open = false;         // StartChannel ran and the leader is not lost
  bool reported_ok = false;  // a Report with ok was sent: no Lost any more
  std::chrono::milliseconds heartbeat = tunables::kHeartbeatInterval;
  int misses = tunables::kHeartbeatMisses;
  ChannelPeer leader{Clock::time_point{}};  // when the leader was last heard (channel_core.h)
  ChannelPacer pacer;                       // this side's heartbeats
  std::uint32_t step_rate_milli = 0;
  std::uint32_t slowest_rank = 0;
  // Between the assignment and StartChannel: the Stops that came, and why the
  // connection ended (Lost at StartChannel).
  std::vector<wire::Stop> early_stops;
  std::optional<std::string> early_loss;
};

}  // namespace

struct MemberCore::State {
  explicit State(MemberCoreOptions o)
      : options(std::move(o)), backoff(options.backoff, options.seed) {}

  MemberCoreOptions options;
  Backoff backoff;
  Phase phase = Phase::kIdle;
  std::uint64_t last_id = 0;   // the last ResolveName's or Connect's id
  std::uint64_t conn = 0;      // the connection the core keeps (connecting or open); 0: none
  bool connected = false;      // `conn` is established
  std::vector<std::string> addresses;  // from the last resolution
  std::size_t next_address = 0;
  std::string address;  // the address of `conn`
  wire::Decoder decoder;
  std::vector<std::uint8_t> hello_frame;
  bool authenticated = false;  // the leader proved the token on this connection
  std::optional<wire::Replaced> replaced;  // the leader's kReplacedField refusal
  std::array<std::optional<Clock::time_point>, kMemberTimers> armed{};
  JoinLog log;
  ChannelState channel;
  Actions out;  // the actions of the input under way

  bool JoinOver() const { return phase == Phase::kJoined || phase == Phase::kClosed; }
  Actions Take() { return std::exchange(out, {}); }

  void Arm(MemberTimer t, Clock::time_point at) {
    armed[static_cast<std::size_t>(t)] = at;
    out.push_back(member::ArmTimer{t, at});
  }
  void Cancel(MemberTimer t) {
    auto& a = armed[static_cast<std::size_t>(t)];
    if (!a) return;
    a.reset();
    out.push_back(member::CancelTimer{t});
  }
  void Log(std::string text, member::LogLine::Level level = member::LogLine::Level::kInfo) {
    out.push_back(member::LogLine{level, std::move(text)});
  }
  void SendFrame(std::vector<std::uint8_t> frame, std::uint64_t ticket = 0) {
    if (conn != 0 && connected) {
      out.push_back(member::Send{conn, std::move(frame), ticket});
    } else if (ticket != 0) {
      out.push_back(member::Unsent{ticket});
    }
  }
  void Drop() {  // gives the connection up
    if (conn != 0) out.push_back(member::Disconnect{conn});
    conn = 0;
    connected = false;
  }
  bool Current(std::uint64_t id) const { return id != 0 && id == conn; }

  // The join.
  void Resolve();
  void ConnectNext(Clock::time_point now);
  void Retry(const std::string& state, const std::string& detail, Clock::time_point now);
  void Finish(Result<wire::Assignment> result);
  void ProcessReplies(Clock::time_point now);
  void OnReply(const wire::Message& msg, Clock::time_point now);
  void OnReject(const wire::Reject& reject, Clock::time_point now);
  void OnAssignment(const wire::Assignment& a, Clock::time_point now);
  void AnswerChallenge(const wire::Challenge& challenge);
  void ReplyTimedOut(Clock::time_point now);
  void Progress(Clock::time_point now);
  std::string Tried() const;
  std::string TimeoutMessage(Clock::time_point now) const;
  // The channel.
  void ProcessChannel(Clock::time_point now);
  void ChannelLost(const std::string& why);
  void ChannelCheck(Clock::time_point now);
};

// ---- the join ----

void MemberCore::State::Resolve() {
  ++log.attempts;
  phase = Phase::kResolving;
  log.activity = "resolving " + options.leader_host;
  out.push_back(member::ResolveName{++last_id, options.leader_host});
}

void MemberCore::State::ConnectNext(Clock::time_point now) {
  Drop();
  if (next_address >= addresses.size()) {
    Retry("connect: " + options.leader_host + " port " + std::to_string(options.port) +
              " not reachable",
          log.last_error, now);
    return;
  }
  address = addresses[next_address++];
  if (std::find(log.tried.begin(), log.tried.end(), address) == log.tried.end()) {
    log.tried.push_back(address);
  }
  conn = ++last_id;
  phase = Phase::kConnecting;
  log.activity = "connecting to " + address + " port " + std::to_string(options.port);
  Arm(MemberTimer::kStep, now + options.connect_timeout);
  out.push_back(member::Connect{conn, address, options.port});
}

void MemberCore::State::Retry(const std::string& state, const std::string& detail,
                              Clock::time_point now) {
  if (JoinOver()) return;
  phase = Phase::kBackingOff;
  Drop();
  if (!detail.empty()) log.last_error = detail;
  const auto delay = backoff.Next();
  if (state != log.logged) {
    Log(state + " (" + log.last_error + "); retrying with backoff");
    log.logged = state;
  } else {
    Log(fmt::format("{}; attempt {}, next in {} ms", state, log.attempts, delay.count()),
        member::LogLine::Level::kDebug);
  }
  Arm(MemberTimer::kStep, now + delay);
}

void MemberCore::State::Finish(Result<wire::Assignment> result) {
  if (JoinOver()) return;
  if (phase == Phase::kResolving) out.push_back(member::CancelResolve{});
  phase = result.ok() ? Phase::kJoined : Phase::kClosed;
  Cancel(MemberTimer::kStep);
  Cancel(MemberTimer::kDeadline);
  Cancel(MemberTimer::kProgress);
  // On success the connection stays open: it becomes the control channel.
  if (!result.ok()) Drop();
  out.push_back(member::Done{std::move(result)});
}

// Handles every frame already decoded (one read may carry several: a heartbeat
// and then the assignment; what follows the assignment is the channel's).
void MemberCore::State::ProcessReplies(Clock::time_point now) {
  while (phase == Phase::kAwaitingReply) {
    auto next = decoder.Next();
    if (!next.ok()) {
      Retry("rendezvous: leader sent an invalid reply", next.status().message(), now);
      return;
    }
    if (!next->has_value()) return;
    Arm(MemberTimer::kStep, now + options.reply_timeout);  // the leader is alive
    OnReply(**next, now);
  }
  if (phase == Phase::kJoined) ProcessChannel(now);
}

// One frame of the leader's before the assignment.
void MemberCore::State::OnReply(const wire::Message& msg, Clock::time_point now) {
  if (std::holds_alternative<wire::Heartbeat>(msg)) {
    // Admitted, the gang incomplete: answer, so the leader knows this pod
    // is live and refuses a second pod claiming its index (leader.h).
    SendFrame(wire::Encode(wire::Heartbeat{}));
  } else if (const auto* challenge = std::get_if<wire::Challenge>(&msg)) {
    AnswerChallenge(*challenge);
  } else if (const auto* reject = std::get_if<wire::Reject>(&msg)) {
    OnReject(*reject, now);
  } else if (const auto* a = std::get_if<wire::Assignment>(&msg)) {
    OnAssignment(*a, now);
  } else {
    Retry("rendezvous: leader sent an invalid reply", "leader sent an unexpected message", now);
  }
}

void MemberCore::State::OnReject(const wire::Reject& reject, Clock::time_point now) {
  if (reject.retriable) {
    log.refusal = reject.reason;
    if (reject.field == wire::kNextGenerationField) {
      // Admitted at the leader's next round, which starts in moments (the
      // gang grows for this pod, or is starting its workers): retry as a
      // pod rejoining after a restart does, so the round does not form
      // without it at the last call.
      BackoffOptions rejoin = options.backoff;
      rejoin.initial = tunables::kRejoinBackoffInitial;
      rejoin.min_delay = tunables::kRejoinBackoffMin;
      backoff = Backoff(rejoin, options.seed);
      if (reject.index && options.hello.index == wire::kNoIndex) {
        // Ranks by arrival: the leader gave this pod an index for that round.
        options.hello.index = *reject.index;
        hello_frame = wire::Encode(options.hello);
        Log(fmt::format("rendezvous: the leader gave this pod index {} for its next generation",
                        *reject.index));
      }
    }
    Retry("rendezvous: leader refused this pod for now", reject.reason, now);
  } else if (reject.field == wire::kReplacedField || reject.field == wire::kLeftField) {
    // Lost to the gang, not misconfigured: infra, as the loss itself.
    replaced = reject.replaced;
    Finish(Status::Infra("the leader refused this pod: " + reject.reason));
  } else {
    Finish(Status::Config("the leader refused this pod: " + reject.reason));
  }
}

void MemberCore::State::OnAssignment(const wire::Assignment& a, Clock::time_point now) {
  const JoinCheck check =
      CheckAssignment(options.hello, !options.token.empty(), authenticated, a);
  switch (check.verdict) {
    case JoinCheck::Verdict::kAccept:
      Finish(a);
      return;
    case JoinCheck::Verdict::kRetry:
      Retry(check.state, check.detail, now);
      return;
    case JoinCheck::Verdict::kFail:
      Finish(Status::Config(check.detail));
      return;
  }
}

// The leader's challenge (auth.h): check its proof of the token, prove ours.
void MemberCore::State::AnswerChallenge(const wire::Challenge& challenge) {
  const wire::Hello& h = options.hello;
  if (options.token.empty()) {
    Finish(Status::Config("the leader requires authentication: give this pod the "
                          "shared token (--token-file)"));
    return;
  }
  if (!ProofsEqual(challenge.proof,
                   LeaderProof(options.token, h.job_id, h.nonce, challenge.nonce))) {
    Finish(Status::Config("the leader failed authentication: its token differs "
                          "from this pod's (--token-file)"));
    return;
  }
  authenticated = true;
  SendFrame(wire::Encode(
      wire::Proof{.proof = MemberProof(options.token, h.job_id, challenge.nonce, h.nonce)}));
}

// Connected, but not a frame since: a frozen process whose kernel still
// completes handshakes, or an old leader being terminated. Another address of
// the name may be the live leader.
void MemberCore::State::ReplyTimedOut(Clock::time_point now) {
  log.last_error = address + ": accepted the connection but sent nothing for " +
                   std::to_string(options.reply_timeout.count()) + " ms";
  if (log.logged != "silent:" + address) {
    Log("rendezvous: leader " + log.last_error + " (" + options.leader_host +
        "); trying the next address");
    log.logged = "silent:" + address;
  }
  ConnectNext(now);
}

std::string MemberCore::State::Tried() const {
  std::string tried;
  for (const auto& a : log.tried) tried += (tried.empty() ? "" : ", ") + a;
  return tried.empty() ? "none" : tried;
}

void MemberCore::State::Progress(Clock::time_point now) {
  const double left =
      std::max(0.0, std::chrono::duration<double>(options.deadline - now).count());
  if (log.logged == "joined") {
    Log(fmt::format("rendezvous: connected to leader {} port {}, waiting for the gang to "
                    "form; {:.0f} s left",
                    options.leader_host, options.port, left));
  } else {
    Log(fmt::format("rendezvous: still trying leader {} port {} ({}; addresses tried: {}; "
                    "last error: {}); {:.0f} s left",
                    options.leader_host, options.port,
                    log.logged.empty() ? "resolving" : log.logged, Tried(),
                    log.last_error.empty() ? "none" : log.last_error, left));
  }
  Arm(MemberTimer::kProgress, now + options.progress_interval);
}

// Why the join did not finish by the deadline: the leader, the addresses
// tried, the last error (or what was under way), the leader's last refusal.
std::string MemberCore::State::TimeoutMessage(Clock::time_point now) const {
  const double secs = std::chrono::duration<double>(now - log.started).count();
  const std::string last = !log.last_error.empty() ? log.last_error
                           : !log.activity.empty() ? "none yet (" + log.activity + ")"
                                                   : "none yet";
  std::string hint;
  if (!log.ever_resolved && !IsAddressLiteral(options.leader_host)) {
    // The name members dial is the leader pod's DNS name in the headless
    // Service; when it never resolved, the Service is where to look.
    hint = "; the leader's name " + options.leader_host + " never resolved (" +
           std::string(ResolveErrorName(log.last_dns)) +
           "): check that the headless Service selects the leader pod, that the pod's "
           "subdomain names that Service, and that the Service sets "
           "publishNotReadyAddresses: true";
  }
  return "could not join the leader " + options.leader_host + " port " +
         std::to_string(options.port) + " within " + fmt::format("{:.1f}", secs) + " s (" +
         std::to_string(log.attempts) + " attempts; addresses tried: " + Tried() +
         "; last error: " + last +
         (log.refusal.empty() || log.refusal == log.last_error
              ? ""
              : "; the leader refused: " + log.refusal) +
         hint + ")";
}

// ---- the control channel ----

// Frames after the assignment: kept until StartChannel, then the leader heard.
void MemberCore::State::ProcessChannel(Clock::time_point now) {
  while (conn != 0) {
    auto next = decoder.Next();
    if (!next.ok()) {
      ChannelLost("the leader sent garbage: " + next.status().message());
      return;
    }
    if (!next->has_value()) return;
    channel.leader.Heard(now);
    if (const auto* hb = std::get_if<wire::Heartbeat>(&**next)) channel.leader.OnHeartbeat(*hb, now);
    const auto* stop = std::get_if<wire::Stop>(&**next);
    if (stop == nullptr) continue;
    if (channel.open) {
      out.push_back(member::Stopped{*stop});
    } else if (channel.early_stops.size() < kMaxEarlyStops) {
      channel.early_stops.push_back(*stop);
    } else {
      ChannelLost("the leader sent garbage: more than " + std::to_string(kMaxEarlyStops) +
                  " stops");
    }
  }
}

void MemberCore::State::ChannelLost(const std::string& why) {
  Drop();
  if (!channel.open) {  // before StartChannel: said there
    if (!channel.early_loss) channel.early_loss = why;
    return;
  }
  channel.open = false;
  Cancel(MemberTimer::kHeartbeat);
  if (!channel.reported_ok) out.push_back(member::Lost{why});
}

void MemberCore::State::ChannelCheck(Clock::time_point now) {
  if (!channel.open) return;
  if (channel.leader.Silent(now, channel.heartbeat, channel.misses)) {
    ChannelLost("no heartbeat from the leader for " +
                std::to_string(channel.heartbeat.count() * channel.misses) + " ms");
    return;
  }
  if (channel.pacer.Due(now, channel.heartbeat)) {
    wire::Heartbeat hb = channel.leader.Make(now);
    hb.step_rate_milli = channel.step_rate_milli;
    hb.slowest_rank = channel.slowest_rank;
    SendFrame(wire::Encode(hb));
  }
  Arm(MemberTimer::kHeartbeat, now + channel.heartbeat / kChecksPerInterval);
}

// ---- MemberCore: inputs to the state above ----

MemberCore::MemberCore(MemberCoreOptions options)
    : s_(std::make_unique<State>(std::move(options))) {}
MemberCore::~MemberCore() = default;
MemberCore::MemberCore(MemberCore&&) noexcept = default;
MemberCore& MemberCore::operator=(MemberCore&&) noexcept = default;

MemberCore::Actions MemberCore::Start(Clock::time_point now) {
  State& s = *s_;
  if (s.phase != Phase::kIdle) return {};
  s.log.started = now;
  s.hello_frame = wire::Encode(s.options.hello);
  s.Arm(MemberTimer::kDeadline, s.options.deadline);
  s.Arm(MemberTimer::kProgress, now + s.options.progress_interval);
  s.Resolve();
  return s.Take();
}

MemberCore::Actions MemberCore::OnResolved(std::uint64_t id, Resolution resolution,
                                           Clock::time_point now) {
  State& s = *s_;
  if (s.phase != Phase::kResolving || id != s.last_id) return {};
  s.log.last_dns = resolution.error;
  if (resolution.error != ResolveError::kNone) {
    s.Retry("dns: " + s.options.leader_host + ": " +
                std::string(ResolveErrorName(resolution.error)),
            resolution.detail, now);
    return s.Take();
  }
  s.log.ever_resolved = true;
  s.addresses = std::move(resolution.addresses);
  s.next_address = 0;
  s.ConnectNext(now);
  return s.Take();
}

MemberCore::Actions MemberCore::OnConnected(std::uint64_t conn, Clock::time_point now) {
  State& s = *s_;
  if (s.phase != Phase::kConnecting || !s.Current(conn)) return {};
  s.connected = true;
  s.phase = Phase::kAwaitingReply;
  s.decoder = wire::Decoder();
  s.authenticated = false;
  if (!s.options.token.empty()) {
    // A fresh nonce per connection: a recorded exchange is worth nothing.
    s.options.hello.nonce = s.options.nonce_source ? s.options.nonce_source() : NewNonce();
    s.hello_frame = wire::Encode(s.options.hello);
  }
  s.log.activity = "waiting for the leader's reply from " + s.address;
  s.Arm(MemberTimer::kStep, now + s.options.reply_timeout);
  s.SendFrame(s.hello_frame);
  if (s.log.logged != "joined") {
    s.Log(fmt::format("rendezvous: connected to leader {} port {}, waiting for the gang",
                      s.options.leader_host, s.options.port));
    s.log.logged = "joined";
  }
  return s.Take();
}

MemberCore::Actions MemberCore::OnConnectFailed(std::uint64_t conn, const std::string& why,
                                                Clock::time_point now) {
  State& s = *s_;
  if (s.phase != Phase::kConnecting || !s.Current(conn)) return {};
  s.log.last_error = s.address + ": " + why;
  s.ConnectNext(now);
  return s.Take();
}

MemberCore::Actions MemberCore::OnReceived(std::uint64_t conn, std::span<const std::uint8_t> bytes,
                                           Clock::time_point now) {
  State& s = *s_;
  if (!s.Current(conn) || !s.connected || s.phase == Phase::kClosed) return {};
  Status fed = s.decoder.Feed(bytes);
  if (!fed.ok() && s.phase == Phase::kAwaitingReply) {
    s.Retry("rendezvous: leader sent an invalid reply", fed.message(), now);
  } else if (!fed.ok()) {
    s.ChannelLost("the leader sent garbage: " + fed.message());
  } else {
    s.ProcessReplies(now);
  }
  return s.Take();
}

MemberCore::Actions MemberCore::OnClosed(std::uint64_t conn, const std::string& why,
                                         Clock::time_point now) {
  State& s = *s_;
  if (!s.Current(conn) || s.phase == Phase::kClosed) return {};
  if (s.phase == Phase::kJoined) {
    s.ChannelLost("the leader's connection closed (" + why + ")");
  } else if (s.phase == Phase::kConnecting) {
    return OnConnectFailed(conn, why, now);
  } else {
    // The leader went away before assigning (restarted, or closed on us).
    s.Retry("rendezvous: leader connection lost",
            "leader closed the connection before assigning: " + why, now);
  }
  return s.Take();
}

MemberCore::Actions MemberCore::OnTimer(MemberTimer timer, Clock::time_point now) {
  State& s = *s_;
  auto& armed = s.armed[static_cast<std::size_t>(timer)];
  if (!armed || now < *armed || s.phase == Phase::kClosed) return {};
  armed.reset();
  switch (timer) {
    case MemberTimer::kDeadline:
      s.Finish(Status::Infra(s.TimeoutMessage(now)));
      break;
    case MemberTimer::kProgress:
      if (!s.JoinOver()) s.Progress(now);
      break;
    case MemberTimer::kHeartbeat:
      s.ChannelCheck(now);
      break;
    case MemberTimer::kStep:
      if (s.phase == Phase::kBackingOff) {
        s.Resolve();
      } else if (s.phase == Phase::kConnecting) {
        s.log.last_error = s.address + ": connect timed out";
        s.ConnectNext(now);
      } else if (s.phase == Phase::kAwaitingReply) {
        s.ReplyTimedOut(now);
      }
      break;
  }
  return s.Take();
}

MemberCore::Actions MemberCore::StartChannel(std::chrono::milliseconds heartbeat, int misses,
                                             Clock::time_point now) {
  State& s = *s_;
  if (s.phase != Phase::kJoined || s.channel.open) return {};
  ChannelState& ch = s.channel;
  ch.open = true;
  ch.heartbeat = heartbeat;
  ch.misses = misses;
  ch.leader.Heard(now);
  if (!ch.early_loss) s.ChannelCheck(now);  // the first heartbeat at once
  for (wire::Stop& stop : std::exchange(ch.early_stops, {})) {
    s.out.push_back(member::Stopped{std::move(stop)});
  }
  if (ch.early_loss) s.ChannelLost(*std::exchange(ch.early_loss, std::nullopt));
  return s.Take();
}

MemberCore::Actions MemberCore::Report(const wire::Report& report, std::uint64_t ticket,
                                       Clock::time_point) {
  State& s = *s_;
  if (report.ok) s.channel.reported_ok = true;
  s.SendFrame(wire::Encode(report), ticket);
  return s.Take();
}

void MemberCore::SetStepRate(std::uint32_t step_rate_milli, std::uint32_t slowest_rank) {
  s_->channel.step_rate_milli = step_rate_milli;
  s_->channel.slowest_rank = slowest_rank;
}

MemberCore::Actions MemberCore::Close() {
  State& s = *s_;
  if (s.phase == Phase::kClosed) return {};
  if (s.phase == Phase::kResolving) s.out.push_back(member::CancelResolve{});
  s.phase = Phase::kClosed;
  s.channel.open = false;
  s.Drop();
  for (std::size_t t = 0; t < kMemberTimers; ++t) s.Cancel(static_cast<MemberTimer>(t));
  return s.Take();
}

MemberCore::Phase MemberCore::phase() const { return s_->phase; }
bool MemberCore::in_channel() const { return s_->channel.open; }
std::optional<wire::Replaced> MemberCore::replaced() const { return s_->replaced; }
const wire::Hello& MemberCore::hello() const { return s_->options.hello; }

Clock::duration MemberCore::HeartbeatSilence(Clock::time_point now) const {
  return s_->channel.open ? s_->channel.pacer.Silence(now) : Clock::duration{};
}

// ---- the assignment's check (a pure decision) ----

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

}  // namespace trainlet::rendezvous
