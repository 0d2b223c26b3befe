// trainlet/rendezvous/leader_io.h — what goes in and out of LeaderCore
// (leader_core.h): connection ids, timers, the actions the caller carries out.
#pragma once

#include <chrono>
#include <compare>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "trainlet/exitcodes/status.h"
#include "trainlet/rendezvous/wire.h"

namespace trainlet::rendezvous {

namespace leader_io {

using Clock = std::chrono::steady_clock;
using ConnId = std::uint64_t;  // given by LeaderCore::Accepted, ascending, never reused
using NonceSource = std::function<std::string()>;  // kNonceBytes random bytes (auth.h)

// The core's timers: one handshake deadline per pending connection, and three
// of the leader's own. Arming an armed timer moves its deadline.
struct TimerId {
  enum class Kind : std::uint8_t {
    kHandshake,         // `conn` sent no valid hello in time (LeaderOptions::handshake_timeout)
    kWaitingHeartbeat,  // heartbeats to members waiting for the assignment
    kProgress,          // the "waiting for the gang" line
    kHeartbeat,         // the control channel's heartbeats and silence checks
  };
  Kind kind = Kind::kHandshake;
  ConnId conn = 0;  // kHandshake only
  auto operator<=>(const TimerId&) const = default;
};

// Write `frame` on `conn` after the frames queued before it. `notify`: call
// LeaderCore::Written(conn) once it is written or its write failed (also when
// the connection was closed meanwhile).
struct Send {
  ConnId conn = 0;
  std::vector<std::uint8_t> frame;
  bool notify = false;
};
// Close `conn` (its frames not yet written may be dropped) and cancel its
// timer; the core forgets it: no Closed() is expected for it.
struct Close {
  ConnId conn = 0;
};
// Fire LeaderCore::TimerFired(id) at `deadline` (absolute), replacing any
// earlier deadline of `id`.
struct ArmTimer {
  TimerId id;
  Clock::time_point deadline;
};
struct CancelTimer {
  TimerId id;
};
// Start accepting connections on the listener (each one: Accepted).
struct StartAccepting {};
// Close the listener for good: later pods find the port closed.
struct StopListening {};
// Leader::Start's `done`: run it once, with this result (the leader pod's own
// Assignment, or the error that ends the rendezvous).
// Shared, not inline: an Action is as large as its largest alternative, and
// the round queues one Send per member (bench/RESULTS.md: memory at scale).
struct RoundDone {
  std::shared_ptr<const exitcodes::Result<wire::Assignment>> result;
};
// Leader::ChannelCallbacks::on_lost / on_report. Never before StartChannel:
// events of the moment between the assignment and StartChannel are held back
// until then.
struct MemberLost {
  std::uint32_t index = 0;
  std::string why;
};
struct MemberReport {
  std::uint32_t index = 0;
  wire::Report report;
};

using Action = std::variant<Send, Close, ArmTimer, CancelTimer, StartAccepting, StopListening,
                            RoundDone, MemberLost, MemberReport>;

// What the caller knows of a connection it accepted. Addresses as peers write
// them (net_util.h AddressForPeers: IPv4-mapped IPv6 as plain IPv4).
struct Endpoints {
  std::string peer_address;  // "10.0.0.12"; "?" when unknown
  std::uint16_t peer_port = 0;
  std::string local_address;  // this leader's end; "" when unknown (never assigned then)
  std::uint16_t local_port = 0;
  bool local_loopback = false;  // the local address is a loopback one
};

}  // namespace leader_io

}  // namespace trainlet::rendezvous
