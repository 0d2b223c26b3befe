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
// Every decision is MemberCore's (member_core.h, sans-IO); this class only
// resolves, connects, moves bytes, arms timers and runs the callbacks.
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
#include "trainlet/rendezvous/member_core.h"
#include "trainlet/rendezvous/resolver.h"
#include "trainlet/rendezvous/tunables.h"
#include "trainlet/rendezvous/wire.h"

namespace trainlet::rendezvous {

// The core's options (member_core.h: the leader, the hello, the deadline and
// timeouts, backoff, token) and the resolver's.
struct MemberOptions : MemberCoreOptions {
  ResolverOptions resolver;
};

// JoinCheck and CheckAssignment, the assignment's check: member_core.h.

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
  struct Conn;  // one TCP connection (member.cc)
  Member() = default;
  // Carries out the core's actions in order (I/O, timers, the callbacks);
  // `sent` is a report's completion (Send or Unsent with a ticket). Stops
  // once a callback closed this member.
  void Execute(MemberCore::Actions actions, std::function<void()> sent = {});
  void Carry(member::Action& action, std::function<void()>& sent);
  void ResolveName(const member::ResolveName& r);
  void Connect(const member::Connect& c);
  void Read(const std::shared_ptr<Conn>& conn);
  void ArmTimer(const member::ArmTimer& t);
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainlet::rendezvous
