// trainlet/agent/observe/health_policy.h — the health server's decisions, as pure code.
//
// Who keeps a slot when the health port is full, and what a request gets. No
// I/O, no clocks: health.cc turns sockets into calls here and the decisions
// into closes and writes. Not thread-safe (one per event loop).
//
// The rules (README, "Probes"):
//  - A new connection is always admitted. When the table is full, one already
//    open makes room: the oldest of the source address holding the most
//    connections (ties: the address whose oldest connection is oldest), among
//    them first one still sending its request (idle and slow clients), then one
//    being sent a /metrics body, a probe's answer last. So whatever holds the
//    slots (sockets that send nothing, a byte at a time, or never read), a
//    probe that sends its request at once gets in, and one from an address of
//    its own (the kubelet's node address, loopback for an exec probe) keeps its
//    slot while other addresses flood, as the rendezvous port's handshakes do
//    (rendezvous/src/leader.cc, EvictPending).
//  - Out of descriptors, one connection is closed to accept the next, by the
//    same rules but only among those open for a grace period, or that sent
//    nothing while their address lost another within it (a flood
//    reconnecting), and never one being sent a probe's answer: with a
//    handful of descriptors a flood's idle ones turn over at once (the probe
//    behind them in the listen queue comes soon), while a probe whose request
//    is a little late is not evicted by the next. With none to close,
//    accepting waits.
//  - GET /livez (or /healthz) and GET /readyz answer 200 or 503 from the state
//    alone, never after /metrics; a query string is ignored. Another path: 404;
//    another method: 405. A request whose header exceeds the limit: 431 (RFC
//    6585, section 5); one that does not parse: 400.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainlet::agent {

// What one connection of the health port is doing.
enum class HealthConnState {
  kReading,           // accepted; its request is not complete yet (idle and slow clients)
  kAnsweringMetrics,  // a /metrics body is being written (a client that never reads sits here)
  kAnswering,         // a probe's answer or an error status is being written (one small write)
};

// The open connections of the health port, oldest first.
class HealthConnections {
 public:
  using Clock = std::chrono::steady_clock;
  // At most `max` (>= 1) connections are kept open.
  explicit HealthConnections(std::size_t max) : max_(max == 0 ? 1 : max) {}

  struct Eviction {
    std::uint64_t id;             // close this one now (already out of the table)
    std::string address;          // its source address
    std::size_t from_address;     // connections that address held, this one included
    HealthConnState state;        // what it was doing
  };
  // Connection `id` (ids grow: a larger id is newer) from `address` is in,
  // accepted at `now`. When `max` were already open, returns the one to close
  // first, chosen by the rules above, and forgets it.
  std::optional<Eviction> Admit(std::uint64_t id, std::string address, Clock::time_point now);
  // Out of descriptors, one must be freed to accept the next: the one to close,
  // chosen by the same rules among those open at least `grace` or idle from an
  // address that lost one within `grace`, never one being sent a probe's
  // answer; forgotten. nullopt when there is none (then wait).
  std::optional<Eviction> MakeRoom(Clock::time_point now, std::chrono::milliseconds grace);
  // Connection `id` moved on (its request arrived). Unknown ids are ignored.
  void Set(std::uint64_t id, HealthConnState state);
  // Bytes of connection `id`'s request have arrived (it is not idle).
  void Received(std::uint64_t id);
  // Connection `id` closed. Unknown ids (an evicted one) are ignored.
  void Remove(std::uint64_t id);

  std::size_t size() const { return entries_.size(); }
  std::size_t max() const { return max_; }

 private:
  struct Entry {
    std::uint64_t id;
    std::string address;
    HealthConnState state;
    Clock::time_point since;
    bool received = false;
  };
  // Index into entries_ of the one to evict among those `eligible`.
  std::optional<std::size_t> Victim(const std::function<bool(const Entry&)>& eligible) const;
  Eviction Forget(std::size_t index);
  static constexpr std::size_t kMaxRemembered = 4096;  // addresses whose last eviction is kept
  std::vector<Entry> entries_;  // oldest first
  std::map<std::string, Clock::time_point> last_evicted_;  // out of descriptors, per address
  std::size_t max_;
};

// How reading a request ended.
enum class HealthRead {
  kComplete,        // a whole request header arrived
  kMalformed,       // it does not parse as HTTP/1.x
  kHeaderTooLarge,  // its header passed the limit before it ended
};

struct HealthState {
  bool ready = false;  // the gang formed and the workers run
  bool live = true;    // no hang found
  bool spare = false;  // a hot spare (--spares): /readyz answers 503 "spare" (no workers here)
};

struct HealthReply {
  int status = 404;            // the HTTP status code
  std::string_view body;       // static text; empty for /metrics (the caller renders it)
  bool metrics = false;        // the body is /metrics' (rendered by the caller)
  bool allow_get_only = false; // 405: say "Allow: GET"
};

// What a request gets. `method` and `target` as sent (only read when `read` is
// kComplete); `has_metrics`: /metrics is served (else 404).
HealthReply RouteHealthRequest(HealthRead read, std::string_view method, std::string_view target,
                               HealthState state, bool has_metrics);

}  // namespace trainlet::agent
