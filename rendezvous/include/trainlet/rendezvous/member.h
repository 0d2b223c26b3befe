// trainlet/rendezvous/member.h — the member side of the gang rendezvous.
//
// Finds the leader and joins: resolve the leader's name (c-ares, every A and
// AAAA record), connect to each address in turn, send the Hello, wait for the
// Assignment. NXDOMAIN, SERVFAIL, DNS timeouts, refused or timed-out connects
// and a leader that closes before assigning are all retried with capped
// exponential backoff and jitter, re-resolving the name before every retry (a
// restarted leader comes back with a new IP), until the overall deadline.
// One log line per state change, not per attempt.
//
// Thread rules: create, Start and destroy on the thread running the executor;
// callbacks run there too.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/any_io_executor.hpp>

#include "trainlet/exitcodes/status.h"
#include "trainlet/rendezvous/backoff.h"
#include "trainlet/rendezvous/resolver.h"
#include "trainlet/rendezvous/tunables.h"
#include "trainlet/rendezvous/wire.h"

namespace trainlet::rendezvous {

struct MemberOptions {
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
  ResolverOptions resolver;
  BackoffOptions backoff;
  std::uint64_t seed = 0;  // jitter seed (tests pass a fixed one)
  std::string token;       // shared token (auth.h); empty: no authentication
  // Until the assignment, a line every `progress_interval`: what the member
  // waits for (the address it tries and the last error, or the gang), and the
  // time left until `deadline`.
  std::chrono::milliseconds progress_interval = tunables::kProgressInterval;
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

class Member : public std::enable_shared_from_this<Member> {
 public:
  using Done = std::function<void(exitcodes::Result<wire::Assignment>)>;

  // Errors: whatever Resolver::Create returns (class infra). A leader_host that
  // is an IP address creates no resolver (no DNS is needed) and cannot fail.
  [[nodiscard]] static exitcodes::Result<std::shared_ptr<Member>> Create(
      boost::asio::any_io_executor executor, MemberOptions options);
  ~Member();

  // Starts joining. `done` runs exactly once on the executor with:
  //  - the Assignment (checked against this pod's hello) once the leader sends it;
  //  - class config when the leader refuses this pod (message: the leader's reason)
  //    or sends an assignment that contradicts the hello; class infra when the
  //    refusal says a spare took this pod's place (wire::kReplacedField: it was
  //    declared lost; replaced() then says who);
  //  - class infra when the deadline passes first; the message names the leader,
  //    the addresses tried, the port, the last error (never empty: what was
  //    under way when nothing failed yet) and the time spent; when the leader's
  //    name never resolved it says so and what to check.
  void Start(Done done);

  // The control channel, after `done` reported an Assignment: heartbeats every
  // `heartbeat` both ways; the leader silent for `misses` heartbeats, or its
  // connection closing, is reported through on_lost (unless this pod already
  // reported success).
  struct ChannelCallbacks {
    std::function<void(const wire::Stop&)> on_stop;  // the leader stops the gang
    std::function<void(const std::string& why)> on_lost;
  };
  void StartChannel(ChannelCallbacks callbacks,
                    std::chrono::milliseconds heartbeat = tunables::kHeartbeatInterval,
                    int misses = tunables::kHeartbeatMisses);
  // Sends a report to the leader; `sent` runs once it is written (or failed).
  void SendReport(const wire::Report& report, std::function<void()> sent = {});

  // The step rate its heartbeats report from now on (wire::Heartbeat::
  // step_rate_milli, 0: unknown; slowest_rank).
  void SetStepRate(std::uint32_t step_rate_milli, std::uint32_t slowest_rank);

  // The longest this member went without sending a heartbeat on the control
  // channel, so far (between two, or since the last one until now); zero while
  // no channel runs (before StartChannel, after it ended or Close). The leader
  // gives this member up after `heartbeat * misses` without a frame from it.
  std::chrono::steady_clock::duration heartbeat_silence() const;

  // After `done` reported the leader's kReplacedField refusal: the spare that
  // took this pod's node rank, and in which generation; nullopt otherwise.
  std::optional<wire::Replaced> replaced() const;

  // Stops everything; `done` is not called afterwards. The connection is closed.
  void Close();

 private:
  struct Impl;
  Member() = default;
  void Resolve();
  void ConnectNext();
  void SendHello();
  void ReadReply();
  void ProcessReply();
  void OnReply(const wire::Message& message);
  void AnswerChallenge(const wire::Challenge& challenge);
  std::string TimeoutMessage() const;
  template <class Handler>
  auto Bound(Handler handler);  // see member.cc: drops stale completions
  void ArmReplyTimer();
  void ChannelProcess();
  void ChannelLost(const std::string& why);
  void Retry(const std::string& state, const std::string& detail);
  void Finish(exitcodes::Result<wire::Assignment> result);
  void LogProgress();
  void ChannelRead();
  void ChannelHeartbeat();
  void Send(std::vector<std::uint8_t> frame, std::function<void()> sent = {});
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainlet::rendezvous
