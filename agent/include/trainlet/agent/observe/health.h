// trainlet/agent/observe/health.h — readiness and liveness for Kubernetes probes.
//
// A tiny HTTP/1.1 server (Boost.Beast) on the agent's event loop:
//   GET /readyz -> 200 once the gang has formed and the workers run, else 503;
//   GET /livez  -> 200 while the workers make progress (no hang found), else 503;
//   GET /metrics -> the pod's metrics in the Prometheus text format (metrics.h).
// Readiness meaning "the gang has formed" is what makes Kueue's waitForPodsReady
// evict gangs that never form. Each connection gets one request, which must
// arrive whole within HealthOptions::request_deadline, one answer, and is
// closed. Nobody can keep a probe out: at most max_connections are open, and a
// new one always gets in by evicting an idle or slow one (health_policy.h has
// the rules); out of descriptors, a reserved one is given up to answer. Those
// evictions, deadlines and accept failures are logged, at most one line per
// source address (or per kind) per 10 s. Single-threaded: all calls on the
// loop's thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/any_io_executor.hpp>

#include "trainlet/agent/observe/health_policy.h"
#include "trainlet/exitcodes/status.h"

namespace trainlet::agent {

// The health port's limits: one line each, value, unit, why. Tests pass
// smaller values; the agent runs on the defaults.
struct HealthOptions {
  std::size_t max_connections = 64;  // open at once; beyond, the oldest idle one of the address holding the most goes (kubelet probes + a scraper need a few; each holds a descriptor)
  std::chrono::milliseconds request_deadline{1000};  // ms from accept to a whole request: the kubelet and Prometheus send theirs at once (a lost segment is resent within ~200 ms), a slowloris never finishes
  std::chrono::milliseconds write_deadline{2000};    // ms to hand an answer (a /metrics body) to a client that does not read
  std::size_t max_header_bytes = 8192;  // request line + header fields; beyond: 431 (a probe's is ~100 bytes)
  std::chrono::milliseconds descriptor_grace{100};  // ms; out of descriptors, a connection open this long may be closed to accept another (a probe's request arrives within a round trip)
  int listen_backlog = 4096;            // connections waiting to be accepted; a flood must not fill the queue and drop a probe's SYN (1 s retransmit); net.core.somaxconn caps it
  std::chrono::milliseconds log_window{10'000};  // ms; at most one line per source address (evicted, too slow) or per kind (accept failed) per window, the rest counted
};

class HealthServer {
 public:
  using State = HealthState;  // health_policy.h
  // Listens on 0.0.0.0:`port` (all interfaces, so the kubelet can reach it).
  // `state` answers /readyz and /livez; `metrics` renders /metrics' body, on
  // the loop, per request (unset: 404). Errors (class config): the port cannot
  // be bound.
  [[nodiscard]] static exitcodes::Result<std::unique_ptr<HealthServer>> Start(
      boost::asio::any_io_executor executor, std::uint16_t port, std::function<State()> state,
      std::function<std::string()> metrics = {}, HealthOptions options = {});
  // Closes the port and every open connection.
  ~HealthServer();
  std::uint16_t port() const;

 private:
  struct Impl;
  explicit HealthServer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

// `trainlet probe ready|live|metrics`: GET the endpoint on 127.0.0.1:`port`
// within `timeout_ms`; returns 0 for HTTP 200, 1 otherwise (an exec probe's
// contract), saying why on stderr in one line (the kubelet shows it in the
// probe's event). For metrics the body goes to stdout (clusters where only
// exec reaches a pod). Blocks up to `timeout_ms`.
int Probe(const std::string& what, std::uint16_t port, int timeout_ms = 2000);

}  // namespace trainlet::agent
