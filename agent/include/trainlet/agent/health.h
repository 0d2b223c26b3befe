// trainlet/agent/health.h — readiness and liveness for Kubernetes probes.
//
// A tiny HTTP/1.1 server (Boost.Beast) on the agent's event loop:
//   GET /readyz -> 200 once the gang has formed and the workers run, else 503;
//   GET /livez  -> 200 while the workers make progress (no hang found), else 503;
//   GET /metrics -> the pod's metrics in the Prometheus text format (metrics.h).
// Readiness meaning "the gang has formed" is what makes Kueue's waitForPodsReady
// evict gangs that never form. Each connection gets one request, a 2 s
// deadline, and is closed; at most 16 are served at once. Single-threaded: all
// calls on the loop's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/any_io_executor.hpp>

#include "trainlet/exitcodes/status.h"

namespace trainlet::agent {

class HealthServer {
 public:
  struct State {
    bool ready = false;
    bool live = true;
    bool spare = false;  // a hot spare: /readyz answers 503 "spare" (no workers here)
  };
  // Listens on 0.0.0.0:`port` (all interfaces, so the kubelet can reach it).
  // `metrics` renders /metrics' body, on the loop, per request (unset: 404).
  // Errors (class config): the port cannot be bound.
  [[nodiscard]] static exitcodes::Result<std::unique_ptr<HealthServer>> Start(
      boost::asio::any_io_executor executor, std::uint16_t port, std::function<State()> state,
      std::function<std::string()> metrics = {});
  ~HealthServer();
  std::uint16_t port() const;

 private:
  struct Impl;
  explicit HealthServer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

// `trainlet probe ready|live|metrics`: GET the endpoint on 127.0.0.1:`port`
// within `timeout_ms`; returns 0 for HTTP 200, 1 otherwise (an exec probe's
// contract). For metrics the body goes to stdout (clusters where only exec
// reaches a pod).
int Probe(const std::string& what, std::uint16_t port, int timeout_ms = 2000);

}  // namespace trainlet::agent
