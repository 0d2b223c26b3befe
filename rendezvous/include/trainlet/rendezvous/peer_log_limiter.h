// trainlet/rendezvous/peer_log_limiter.h — at most a few log lines per peer
// address per window; the rest are counted and the count is reported with the
// peer's next logged line. A flood of bad connections (a port scanner, random
// bytes, a misconfigured client) then costs a handful of lines instead of one
// per connection. Used by the leader's port and the agent's health port. Pure:
// the caller passes the time. Not thread-safe (one per event loop).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

namespace trainlet::rendezvous {

class PeerLogLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  // `per_window` lines per peer per `window`; at most `max_peers` peers are
  // tracked (beyond that, new peers share one entry, "other peers").
  PeerLogLimiter(std::chrono::milliseconds window, std::size_t per_window,
                 std::size_t max_peers = 4096)
      : window_(window), per_window_(per_window), max_peers_(max_peers) {}

  // For a line about `peer` at `now`: nullopt when it must not be logged (it is
  // counted); otherwise how many lines about this peer were suppressed since
  // its last logged one (0 usually), to be said in this line.
  std::optional<std::uint64_t> Admit(const std::string& peer, Clock::time_point now) {
    auto it = peers_.find(peer);
    if (it == peers_.end()) {
      if (peers_.size() >= max_peers_) Expire(now);
      const std::string& key = peers_.size() >= max_peers_ ? kOther : peer;
      it = peers_.try_emplace(key, Entry{now, 0, 0}).first;
    }
    Entry& e = it->second;
    if (now - e.window_start >= window_) {
      e.window_start = now;
      e.logged = 0;
    }
    if (e.logged < per_window_) {
      ++e.logged;
      std::uint64_t suppressed = e.suppressed;
      e.suppressed = 0;
      return suppressed;
    }
    ++e.suppressed;
    return std::nullopt;
  }

  std::size_t tracked() const { return peers_.size(); }

 private:
  struct Entry {
    Clock::time_point window_start;
    std::size_t logged;
    std::uint64_t suppressed;
  };
  // Forgets peers whose window ended with nothing left unreported.
  void Expire(Clock::time_point now) {
    std::erase_if(peers_, [&](const auto& kv) {
      return now - kv.second.window_start >= window_ && kv.second.suppressed == 0;
    });
  }
  inline static const std::string kOther = "(other peers)";
  std::chrono::milliseconds window_;
  std::size_t per_window_;
  std::size_t max_peers_;
  std::unordered_map<std::string, Entry> peers_;
};

}  // namespace trainlet::rendezvous
