// trainlet/rendezvous/member_core.h — the member's end of the rendezvous and
// control channel, without I/O.
//
// Every rule of a member's join and of its control channel lives here: which
// address to try next, when to back off and for how long, the reply and
// connect timeouts, the overall deadline (--rdzv-timeout), the token's
// challenge and proof (auth.h), what each of the leader's refusals means, the
// check of the assignment (CheckAssignment), heartbeats both ways and the
// leader's silence taken as a loss. It reads no clock, opens no socket, draws
// no random number of its own: whoever drives it (rendezvous::Member over
// Boost.Asio and c-ares in production, a simulator on one thread with a
// simulated clock in tests) passes in what happened and carries out the
// actions it returns. The wire codec (wire.h) is the same in both.
//
// Driving it. Every input is a method that takes the current time `now` (the
// steady clock, or any clock that never goes back: only differences and the
// deadlines given in options are compared; a simulated clock starts after
// Clock::time_point{}, which the channel's pacing takes for "never") and
// returns the actions to carry out, in order. Nothing is ever done behind the caller's back: no callback,
// no timer, no thread. A driver loop is
//
//   MemberCore core(options);
//   Execute(core.Start(now));
//   for (;;) {                       // whatever happens next, at time `now`:
//     Execute(core.OnResolved(id, resolution, now));      // a ResolveName ended
//     Execute(core.OnConnected(conn, now));               // a Connect succeeded
//     Execute(core.OnReceived(conn, bytes, now));         // bytes from the leader
//     Execute(core.OnTimer(MemberTimer::kStep, now));     // an armed timer is due
//     ...
//   }
//
// Identifiers. ResolveName and Connect carry a fresh id (increasing from 1,
// shared by both kinds); the result of that operation is passed back with it.
// A result for an id the core no longer waits for (a connect it gave up on, a
// resolution after the deadline, bytes of a connection it closed) is ignored,
// so a driver never has to filter stale completions: it may, and need not,
// drop them. Every Connect is matched by exactly one Disconnect for the same
// id, once the core is done with that connection (also after a failed
// connect, or after OnClosed): the driver frees the socket there.
//
// Timers. One of each MemberTimer at a time: ArmTimer replaces that timer's
// earlier deadline, CancelTimer clears it. OnTimer(t, now) with `now` before
// the deadline last armed for `t`, or for a timer not armed (cancelled, or
// already fired), is ignored: a driver may deliver a late or stale expiry.
//
// Callbacks. Done, Stopped and Lost are the pod's results (Member's `done`,
// on_stop and on_lost). Done comes exactly once per Start unless Close()
// comes first; Stopped and Lost only after StartChannel; nothing comes after
// Close(). A driver that runs the pod's callback inline should stop carrying
// out the rest of a batch once the callback called Close() (closed() is then
// true): Member does so.
//
// Every input may also emit LogLine (one line per state change, the rest at
// debug level). Done with an error comes with Disconnect and CancelTimer for
// what ran; Done with the assignment keeps the connection. Inputs never block,
// throw or read the clock; allocation is bounded by the frames (wire.h's
// limits) and by the addresses of one resolution.
//
// Thread rules: not thread-safe; one loop owns it. Movable, not copyable.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "trainlet/exitcodes/status.h"
#include "trainlet/rendezvous/backoff.h"
#include "trainlet/rendezvous/resolve_error.h"
#include "trainlet/rendezvous/tunables.h"
#include "trainlet/rendezvous/wire.h"

namespace trainlet::rendezvous {

// What the member knows of the join before it starts. MemberOptions (member.h)
// adds the resolver's own options for the Asio shell.
struct MemberCoreOptions {
  std::string leader_host;  // DNS name or IP literal of the leader (index 0)
  std::uint16_t port = tunables::kRendezvousPort;  // the leader's rendezvous port
  wire::Hello hello;           // this pod's hello
  // The whole join (resolve + connect + assignment) must finish by then.
  std::chrono::steady_clock::time_point deadline;
  std::chrono::milliseconds connect_timeout = tunables::kConnectTimeout;  // per address per attempt
  // Once connected, the leader must send some frame (a heartbeat while the gang
  // is incomplete, a challenge, a refusal or the assignment) within this time;
  // a silent leader (frozen, or a terminating old pod still listed in DNS) is
  // left for the next resolved address.
  std::chrono::milliseconds reply_timeout = tunables::kReplyTimeout;
  BackoffOptions backoff;
  std::uint64_t seed = 0;  // jitter seed (tests pass a fixed one)
  std::string token;       // shared token (auth.h); empty: no authentication
  // Until the assignment, a line every `progress_interval`: what the member
  // waits for (the address it tries and the last error, or the gang), and the
  // time left until `deadline`.
  std::chrono::milliseconds progress_interval = tunables::kProgressInterval;
  // With a token: the fresh nonce of each connection's hello (kNonceBytes).
  // Empty: NewNonce (auth.h, getrandom(2)); a simulator passes a seeded source
  // so that a run replays from its seed.
  std::function<std::string()> nonce_source{};
};

// What a member does with the leader's assignment (a pure decision, tested
// row by row in tests/join_check_test.cc): take it, retry (the leader is a
// stale pod of another job, attempt or an earlier generation; `state` is the
// log line's state, `detail` the error), or fail config (`detail`: the leader
// did not authenticate while this pod has a token, or the assignment
// contradicts this pod's launch).
struct JoinCheck {
  enum class Verdict { kAccept, kRetry, kFail };
  Verdict verdict = Verdict::kAccept;
  std::string state;
  std::string detail;
};
// `hello`: this pod's; `token`: this pod has one; `authenticated`: the leader
// proved it on this connection.
JoinCheck CheckAssignment(const wire::Hello& hello, bool token, bool authenticated,
                          const wire::Assignment& assignment);

// The member's timers; each is armed at most once at a time.
enum class MemberTimer {
  kDeadline,   // the whole join (options.deadline), until Done
  kStep,       // a connect's or a reply's timeout, or the backoff before the next attempt
  kProgress,   // the next "still trying" line, until Done
  kHeartbeat,  // the control channel's next check (heartbeat / kChecksPerInterval)
};
inline constexpr std::size_t kMemberTimers = 4;

// A name resolution's result (the driver's resolver: c-ares, or the literal
// address itself, or the simulator's DNS).
struct Resolution {
  // The addresses as peers dial them ("10.0.0.10", "fd00::1"), in the order to
  // try them (RFC 6724). Empty unless `error` is kNone.
  std::vector<std::string> addresses;
  ResolveError error = ResolveError::kNone;
  std::string detail;  // for a failure, the resolver's words ("ARES_ESERVFAIL: ...")
};

// ---- the actions MemberCore returns (member::Action's alternatives) ----
// In their own namespace: the leader's core has actions of the same names.
namespace member {

struct ResolveName {  // resolve `name` (A and AAAA); answer OnResolved(id, ...)
  std::uint64_t id = 0;
  std::string name;
};
struct CancelResolve {};  // the resolution under way is no longer wanted
struct Connect {          // open a TCP connection; answer OnConnected/OnConnectFailed(conn, ...)
  std::uint64_t conn = 0;
  std::string address;  // as in Resolution::addresses
  std::uint16_t port = 0;
};
struct Send {  // write `frame` on `conn`, after the frames sent before it
  std::uint64_t conn = 0;
  std::vector<std::uint8_t> frame;
  std::uint64_t ticket = 0;  // Report's ticket; 0: none
};
struct Unsent {  // Report's frame went nowhere (no connection): `ticket` is done
  std::uint64_t ticket = 0;
};
struct Disconnect {  // close `conn` (or stop connecting it); no more events for it are wanted
  std::uint64_t conn = 0;
};
struct ArmTimer {  // call OnTimer(timer, now) once now >= at; replaces an earlier deadline
  MemberTimer timer = MemberTimer::kStep;
  std::chrono::steady_clock::time_point at;
};
struct CancelTimer {
  MemberTimer timer = MemberTimer::kStep;
};
struct LogLine {  // one line for the "rendezvous" logger
  enum class Level { kDebug, kInfo };
  Level level = Level::kInfo;
  std::string text;
};
struct Done {  // the join's result (Member::Done)
  exitcodes::Result<wire::Assignment> result;
};
struct Stopped {  // the leader stops the gang (ChannelCallbacks::on_stop)
  wire::Stop stop;
};
struct Lost {  // the leader is gone (ChannelCallbacks::on_lost)
  std::string why;
};

using Action = std::variant<ResolveName, CancelResolve, Connect, Send, Unsent, Disconnect,
                            ArmTimer, CancelTimer, LogLine, Done, Stopped, Lost>;

}  // namespace member

class MemberCore {
 public:
  using Clock = std::chrono::steady_clock;
  using Actions = std::vector<member::Action>;

  // Where the join stands.
  enum class Phase {
    kIdle,           // before Start
    kResolving,      // a ResolveName is under way
    kConnecting,     // a Connect is under way
    kAwaitingReply,  // connected, hello sent; the leader's frames are read
    kBackingOff,     // the kStep timer runs before the next attempt
    kJoined,         // Done came with the assignment: the connection is the control channel
    kClosed,         // Done came with an error, or Close(): nothing runs any more
  };

  // Precondition: ValidateBackoffOptions(options.backoff) is OK (Backoff aborts
  // otherwise). Does nothing else.
  explicit MemberCore(MemberCoreOptions options);
  ~MemberCore();
  MemberCore(MemberCore&&) noexcept;
  MemberCore& operator=(MemberCore&&) noexcept;

  // Starts the join: arms kDeadline (options.deadline) and kProgress, and
  // resolves the leader's name (ResolveName). Once; later calls return nothing.
  [[nodiscard]] Actions Start(Clock::time_point now);

  // The ResolveName `id` ended. A failure backs off (ArmTimer kStep with the
  // next seeded backoff delay, a LogLine when the state changed) and resolves
  // again when kStep fires; success connects to the first address (Connect,
  // ArmTimer kStep at now + connect_timeout).
  [[nodiscard]] Actions OnResolved(std::uint64_t id, Resolution resolution, Clock::time_point now);

  // The Connect `conn` succeeded: sends the hello (Send) and arms the reply
  // timeout (kStep). The driver reads the connection from now on and passes
  // every byte to OnReceived, and its end (EOF, reset, an error) to OnClosed.
  [[nodiscard]] Actions OnConnected(std::uint64_t conn, Clock::time_point now);
  // The Connect `conn` failed (`why`: "Connection refused"): Disconnect, then
  // the next address (Connect), or a backoff once every address of the
  // resolution failed. A connect still pending at connect_timeout (kStep) is
  // given up the same way ("connect timed out").
  [[nodiscard]] Actions OnConnectFailed(std::uint64_t conn, const std::string& why,
                                        Clock::time_point now);

  // Bytes read from connection `conn`, any split (a part of a frame, several
  // frames). Before the assignment each frame re-arms the reply timeout and may
  // answer (a heartbeat, the proof), back off (a retriable refusal, a stale
  // leader, garbage), or end the join (Done: the assignment, or a refusal that
  // is final). After it, frames are kept until StartChannel, then each one
  // counts as the leader heard, and a Stop gives Stopped.
  [[nodiscard]] Actions OnReceived(std::uint64_t conn, std::span<const std::uint8_t> bytes,
                                   Clock::time_point now);

  // Connection `conn` ended (`why`: "End of file", "Connection reset by peer").
  // Before the assignment: a backoff. On the control channel: Lost. Between the
  // two: kept, and Lost at StartChannel.
  [[nodiscard]] Actions OnClosed(std::uint64_t conn, const std::string& why, Clock::time_point now);

  // Timer `timer` fired at `now` (see "Timers" above for stale expiries).
  // kDeadline ends the join with class infra (the message names the leader,
  // the addresses tried, the last error and the time spent); kStep is the
  // timeout or backoff under way; kProgress logs; kHeartbeat sends a due
  // heartbeat or declares the leader lost.
  [[nodiscard]] Actions OnTimer(MemberTimer timer, Clock::time_point now);

  // After Done with an assignment: the connection becomes the control channel,
  // a heartbeat every `heartbeat` (kHeartbeatInterval by default) both ways;
  // the leader silent for `heartbeat * misses` (ChannelPeer::Silent), or its
  // connection closed, or garbage from it, gives Lost (unless a Report with ok
  // was sent). Frames that came since the assignment are handled now (Stopped
  // for a Stop). Ignored in any other phase, or when the channel already runs.
  [[nodiscard]] Actions StartChannel(std::chrono::milliseconds heartbeat, int misses,
                                     Clock::time_point now);

  // Sends `report` to the leader (a result, a failure, or `leaving`: this pod's
  // own stop signal; before the assignment too). A Send with `ticket` while a
  // connection is established; otherwise Unsent{ticket}. `ticket` (0: none) is
  // the caller's, so it can tell when the frame was written. A report with
  // `ok` silences Lost from then on.
  [[nodiscard]] Actions Report(const wire::Report& report, std::uint64_t ticket,
                               Clock::time_point now);

  // The step rate the channel's heartbeats report from now on
  // (wire::Heartbeat::step_rate_milli, 0: unknown; slowest_rank).
  void SetStepRate(std::uint32_t step_rate_milli, std::uint32_t slowest_rank);

  // Ends everything: CancelResolve, Disconnect and CancelTimer for whatever is
  // under way; no Done, Stopped or Lost afterwards. Idempotent. (Member::Close
  // and ~Member; a pod that leaves sends Report with `leaving` first.)
  [[nodiscard]] Actions Close();

  Phase phase() const;
  bool closed() const { return phase() == Phase::kClosed; }
  // Whether StartChannel ran and the leader is not lost.
  bool in_channel() const;
  // The longest this member went without sending a heartbeat on the control
  // channel until `now`; zero while no channel runs.
  Clock::duration HeartbeatSilence(Clock::time_point now) const;
  // After Done with the leader's kReplacedField or kLeftField refusal: who
  // took this pod's place (kReplacedField only); nullopt otherwise.
  std::optional<wire::Replaced> replaced() const;
  // The hello as it stands (ranks by arrival: the index the leader gave).
  const wire::Hello& hello() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace trainlet::rendezvous
