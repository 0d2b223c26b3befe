// Private: the control channel's heartbeat bookkeeping, written once for both
// ends (leader.cc keeps a ChannelPeer per member and one ChannelPacer; member_core.cc
// one of each for its leader). Sans-IO: the caller passes the time, sends the
// heartbeats Make() returns and runs the check timer (kChecksPerInterval per
// interval); nothing here blocks or allocates. Not thread-safe: one event loop.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <utility>

#include "trainlet/rendezvous/wire.h"

namespace trainlet::rendezvous {

// Silence is checked this many times per heartbeat interval, so a silent peer
// is noticed within a quarter interval of the bound, not up to a whole one late.
inline constexpr int kChecksPerInterval = 4;

// What one end knows of the other: when it last heard from it, the peer's last
// heartbeat (to echo), and what that heartbeat said.
class ChannelPeer {
 public:
  using Clock = std::chrono::steady_clock;

  explicit ChannelPeer(Clock::time_point now = Clock::now()) : last_rx_(now) {}

  // Any frame from the peer arrived at `now`.
  void Heard(Clock::time_point now) { last_rx_ = now; }

  // The peer's heartbeat `hb` arrived at `now` (after Heard). Its sent_us is
  // kept to echo; an echo of our own sent_us gives the round trip, unless it is
  // from the future or claims an absurd hold (an older or confused peer).
  void OnHeartbeat(const wire::Heartbeat& hb, Clock::time_point now) {
    const std::uint64_t now_us = Micros(now);
    peer_sent_us_ = hb.sent_us;
    peer_rx_ = now;
    step_rate_milli_ = hb.step_rate_milli;
    slowest_rank_ = hb.slowest_rank;
    if (hb.echo_us != 0 && hb.echo_us <= now_us && now_us - hb.echo_us >= hb.echo_held_us) {
      rtt_seconds_ = static_cast<double>(now_us - hb.echo_us - hb.echo_held_us) / 1e6;
    }
  }

  // The heartbeat to send the peer at `now`: our clock, and its last heartbeat
  // echoed with how long we held it.
  wire::Heartbeat Make(Clock::time_point now) const {
    wire::Heartbeat hb;
    hb.sent_us = Micros(now);
    hb.echo_us = peer_sent_us_;
    if (peer_sent_us_ != 0) {
      hb.echo_held_us = static_cast<std::uint32_t>(std::min<std::int64_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(now - peer_rx_).count(),
          UINT32_MAX));
    }
    return hb;
  }

  // Whether the peer has been silent longer than `interval * misses` at `now`.
  bool Silent(Clock::time_point now, std::chrono::milliseconds interval, int misses) const {
    return now - last_rx_ > interval * misses;
  }

  Clock::time_point last_rx() const { return last_rx_; }
  std::optional<double> rtt_seconds() const { return rtt_seconds_; }
  std::uint32_t step_rate_milli() const { return step_rate_milli_; }
  std::uint32_t slowest_rank() const { return slowest_rank_; }

  // The steady clock in microseconds: heartbeats' opaque sent_us.
  static std::uint64_t Micros(Clock::time_point t) {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count());
  }

 private:
  Clock::time_point last_rx_;
  std::uint64_t peer_sent_us_ = 0;  // 0: no heartbeat yet
  Clock::time_point peer_rx_;
  std::optional<double> rtt_seconds_;
  std::uint32_t step_rate_milli_ = 0;
  std::uint32_t slowest_rank_ = 0;
};

// When this end sends its heartbeats, and the longest it went without.
class ChannelPacer {
 public:
  using Clock = std::chrono::steady_clock;

  // Whether a heartbeat is due at `now` (never sent, or `interval` since the
  // last); if so, it counts as sent now.
  bool Due(Clock::time_point now, std::chrono::milliseconds interval) {
    if (last_tx_ != Clock::time_point{} && now - last_tx_ < interval) return false;
    if (last_tx_ != Clock::time_point{}) longest_gap_ = std::max(longest_gap_, now - last_tx_);
    last_tx_ = now;
    return true;
  }

  // The longest gap between two heartbeats so far, or since the last one until
  // `now`; zero before the first.
  Clock::duration Silence(Clock::time_point now) const {
    if (last_tx_ == Clock::time_point{}) return {};
    return std::max(longest_gap_, now - last_tx_);
  }

 private:
  Clock::time_point last_tx_{};
  Clock::duration longest_gap_{};
};

// Both ends' StartChannel: the handshake's socket becomes the control channel with
// these callbacks, heartbeat interval (ms) and misses (heartbeats missed before the
// peer counts as lost). `Impl` is the leader's or the member's state; not thread-safe
// (the io_context's thread only).
// The caller marks its own state as in the channel.
template <class Impl, class Callbacks>
void OpenChannel(Impl& im, Callbacks callbacks, std::chrono::milliseconds heartbeat, int misses) {
  im.callbacks = std::move(callbacks);
  im.heartbeat = heartbeat;
  im.misses = misses;
}

}  // namespace trainlet::rendezvous
