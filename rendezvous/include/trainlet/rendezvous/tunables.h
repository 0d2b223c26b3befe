// trainlet/rendezvous/tunables.h — every timing and size the gang runs on, in one place.
//
// One line each: name, value, unit, why. Code takes its defaults from here
// (LeaderOptions, MemberOptions, Pod); tests may pass smaller values through
// those options, never by editing this file. Header-only constants; thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "trainlet/exitcodes/ports.h"

namespace trainlet::rendezvous::tunables {

using std::chrono::milliseconds;

// ---- control channel (leader <-> members, after and while waiting for the assignment) ----
inline constexpr milliseconds kHeartbeatInterval{400};  // ms; a frame each way per interval: cheap at 12,500 pods; a lost pod known 2.4 s after its last frame, so at most ~2.5 s after it froze (checks 4x per interval). A link blip of d s leaves a peer silent for up to interval + d + one retransmission (200 ms, kept linear by TCP_THIN_LINEAR_TIMEOUTS: net_util.h), so 1.6 s blips must fit in 2.4 s: 0.4 + 1.6 + 0.2
inline constexpr int kHeartbeatMisses = 6;               // intervals; silent this long (2.4 s) = lost (one lost packet plus a retransmit must not count)
inline constexpr milliseconds kWaitingHeartbeatInterval{800};  // ms; the leader's heartbeats to members waiting for the assignment (they give a silent leader up after kReplyTimeout, 2.4 s: three of them); the control channel's pace would double the leader's frames while 12,500 pods wait
inline constexpr milliseconds kLeaderCheckInterval{800};  // ms; the leader's name check and rival-leader probe rounds (name_check.h, leader_probe.h): DNS and connects, not the heartbeats' pace

// ---- the leader's handshakes ----
inline constexpr milliseconds kHandshakeTimeout{3000};   // ms; a member sends its hello (and proof) within one RTT of connecting; idle sockets must not hold a slot long
inline constexpr std::size_t kMaxPendingHandshakes = 256;  // connections; raised to the gang's size by the agent; beyond it the oldest pending one is evicted, so idle sockets cannot lock members out
inline constexpr std::size_t kMinListenBacklog = 4096;  // connections; at least this (or the gang + 64) may wait to be accepted: idle sockets must not fill the queue and drop members' SYNs (1 s, 3 s, 7 s retransmits); net.core.somaxconn caps it
inline constexpr std::size_t kMaxBadConnectionLogsPerPeer = 1;  // lines per peer address per kBadConnectionLogWindow; the rest are counted, then summed up in one line
inline constexpr milliseconds kBadConnectionLogWindow{10'000};  // ms; a scanner or a flood of random bytes costs one log line per peer per 10 s

// ---- the member's join ----
inline constexpr milliseconds kConnectTimeout{3000};     // ms per address per attempt; a SYN retransmit (1 s) plus slack, then the next address
inline constexpr milliseconds kReplyTimeout{kHeartbeatInterval * kHeartbeatMisses};  // ms; a leader that accepted but sent no frame (not even a heartbeat) for this long is frozen or stale: try the next address

// ---- the leader's own name (name_check.h) ----
inline constexpr milliseconds kLeaderNameCheckPatience{15'000};  // ms; a pod's record appears seconds after its IP and NXDOMAIN is cached briefly: warn only once it stays wrong this long

// ---- the leader's listening socket ----
inline constexpr std::uint16_t kRendezvousPort = exitcodes::ports::kRendezvous;  // port; torchrun's default (trainlet/exitcodes/ports.h, the ports' one home)
inline constexpr std::uint16_t kMasterPort = exitcodes::ports::kTorchMaster;    // port; torch's MASTER_PORT default, the trainers' store when one is asked for by number
inline constexpr milliseconds kBindRetryInitial{100};    // ms; first wait after EADDRINUSE (a leftover process or TIME_WAIT usually lets go within seconds)
inline constexpr milliseconds kBindRetryCap{1000};       // ms; longest wait between bind attempts, until the rendezvous deadline

// ---- logs while waiting ----
inline constexpr milliseconds kProgressInterval{10'000};  // ms; a leader or member still waiting in the rendezvous says what for (missing indices; address and last error) this often: a line per 10 s per pod, minutes of silence otherwise

// ---- wire buffers ----
inline constexpr std::size_t kMaxQueuedFrameBytes = 1 << 20;  // bytes queued for one peer that does not read; beyond it the connection is closed (a healthy peer drains in ms)

// ---- the gang's rules around the channel (agent/src/pod/pod.cc, gang_policy.h) ----
inline constexpr milliseconds kStallLimit{kHeartbeatInterval * kHeartbeatMisses};  // ms; the pod's own event loop idle this long (SIGSTOP, a frozen node): its peers have given it up, so it is the culprit (infra)
inline constexpr milliseconds kStallTick{kHeartbeatInterval / 4};  // ms; the own-stall clock ticks at the heartbeat checks' pace
inline constexpr milliseconds kVerdictTimeout{kHeartbeatInterval * kHeartbeatMisses + milliseconds(2000)};  // ms; a member whose worker failed waits this long for the leader's word (restart, or who was first): past a lost leader's detection
inline constexpr milliseconds kDiagnosticsDelay{2000};   // ms; a hang's diagnostics signal (faulthandler stack dumps) before the stop
inline constexpr milliseconds kRejoinBackoffInitial{50};  // ms; first retry when rejoining after a restart: the leader re-listens as soon as its own workers are gone
inline constexpr milliseconds kRejoinBackoffMin{10};      // ms; the jittered retry's floor while rejoining

}  // namespace trainlet::rendezvous::tunables
