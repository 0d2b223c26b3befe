// trainlet/agent/base/metrics.h — the pod's metrics, in the Prometheus text format.
//
// GET /metrics on --health-port (health.h) and `trainlet probe metrics` answer
// with RenderMetrics() of a snapshot the pod takes on its event loop at each
// scrape: loop-owned values are read there, and the only values written by
// other threads (the output pumps' byte and line counts) are relaxed atomic
// counters, added once per write, never a lock on the forwarding path.
// Format: https://prometheus.io/docs/instrumenting/exposition_formats/
// (text 0.0.4): "# HELP" and "# TYPE" per family, base units (seconds, bytes),
// counters ending in _total. Labels stay low-cardinality: "member" (a pod's
// index) only on the leader's per-member series, "node_name" (NODE_NAME) on its
// one culprit series, "local_rank" per worker of this pod, "class" and "stream"
// from fixed sets. No label of ours is one the
// Prometheus Operator sets on its targets (namespace, pod, job, container,
// service, endpoint, instance), which would rename ours to exported_<name>.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace trainlet::agent {

// Worker output through the agent, per stream (the agent's fd 1 or 2).
struct StreamCounters {
  std::atomic<std::uint64_t> bytes{0};          // written, prefixes included
  std::atomic<std::uint64_t> lines{0};          // written
  std::atomic<std::uint64_t> dropped_lines{0};  // dropped: the output failed or stalled
};
// The process's counters for fd 1 (stdout) or 2 (stderr; any other fd: stdout).
StreamCounters& OutputCounters(int fd);

// Hot spares: a waiting spare took over a node rank in a generation.
struct Replacement {
  std::uint32_t generation = 0;  // the generation it took over in
  std::uint32_t node_rank = 0;
  std::uint32_t replaced = 0;    // the pod that left (lost, or failed with class hardware)
  std::uint32_t spare = 0;       // the spare that took its node rank
  bool operator==(const Replacement&) const = default;
};

// Leader: the pod whose failure or loss ended a generation last (a Stop's
// failed_index), so a node to drain can be named after that pod is gone.
struct Culprit {
  std::uint32_t index = 0;
  std::string node_name;       // its NODE_NAME (the downward API's spec.nodeName); "" unknown
  std::string failure_class;   // exitcodes::ClassName
  bool operator==(const Culprit&) const = default;
};

struct MetricsSnapshot {
  bool leader = false;
  bool formed = false;               // a generation's gang formed and runs (no rendezvous now)
  std::uint32_t generation = 0;
  std::uint64_t restarts = 0;        // in-place restarts of the gang so far
  double rendezvous_seconds = 0;     // this generation's rendezvous (so far, while waiting)
  std::uint32_t pods_joined = 0;     // leader: admitted so far; member: the gang once formed
  std::uint32_t pods_expected = 0;
  std::uint32_t pods_min = 0;        // --nnodes MIN (fixed sizes: pods_expected)
  std::uint32_t max_restarts = 0;    // --max-restarts, the budget
  std::uint32_t restart_count = 0;   // restarts counted against it (TORCHELASTIC_RESTART_COUNT)
  std::uint32_t spares_configured = 0;  // --spares
  // Hot spares (--spares): this pod waits as a spare now; leader: each spare
  // that took a node rank, oldest first.
  bool spare = false;
  std::vector<Replacement> replacements;
  std::uint32_t workers_running = 0;
  std::map<std::string, std::uint64_t> worker_exits;  // by class name ("ok", "bug", ...)
  std::optional<std::string> last_failure_class;      // the gang's last failure seen here
  std::optional<Culprit> last_culprit;                // leader: the last generation's culprit
  // Leader: per member pod index.
  std::map<std::uint32_t, double> heartbeat_rtt_seconds;
  std::map<std::uint32_t, double> step_rate;  // heartbeat-file touches per second
  std::vector<std::uint32_t> stragglers;      // pods behind the median by the factor
  // Per local rank: seconds since its heartbeat file was last touched.
  std::map<std::uint32_t, double> heartbeat_age_seconds;
  // Filled by FillProcessStats.
  double resident_bytes = 0;
  double cpu_seconds = 0;
};

// The pod's own counters, kept across its generations (restarts), on its loop.
struct PodMeters {
  std::uint64_t restarts = 0;                         // in-place restarts so far
  double rendezvous_seconds = 0;                      // the last completed rendezvous
  std::map<std::string, std::uint64_t> worker_exits;  // by class name
  std::optional<std::string> last_failure_class;      // class name of the gang's last failure
  std::optional<Culprit> last_culprit;                // leader: who failed last (its Stop)
  // Counts one generation's `workers` exits: the first failure's under
  // `first_failure_class` (nullopt: none failed first), the `collateral`
  // workers stopped after it as terminated (after a stop signal) or
  // peer_failed, the rest ok.
  void CountWorkerExits(std::uint32_t workers, const std::optional<std::string>& first_failure_class,
                        int collateral, bool stop_signal);
  // Fills restarts, worker_exits, last_failure_class and last_culprit of `s`.
  void Fill(MetricsSnapshot* s) const;
};

// Resident set (/proc/self/statm) and user + system CPU time (getrusage(2)).
void FillProcessStats(MetricsSnapshot* s);

// The Prometheus text exposition (version 0.0.4) of `s` and the output counters.
std::string RenderMetrics(const MetricsSnapshot& s);

// Content-Type of RenderMetrics' text.
inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace trainlet::agent
