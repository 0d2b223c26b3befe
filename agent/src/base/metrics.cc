#include "trainlet/agent/base/metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include <fmt/format.h>

#include "trainlet/exitcodes/status.h"

namespace trainlet::agent {

namespace {

StreamCounters g_stdout, g_stderr;

// Every class name, so each family shows all of its series from the start
// (a rate over a series that appears late misses its first increase).
const std::vector<std::string>& ClassNames() {
  static const std::vector<std::string> names = [] {
    using exitcodes::FailureClass;
    std::vector<std::string> v;
    for (FailureClass c : {FailureClass::kOk, FailureClass::kWorker, FailureClass::kBug,
                           FailureClass::kConfig, FailureClass::kInfra, FailureClass::kHardware,
                           FailureClass::kOom, FailureClass::kPeerFailed,
                           FailureClass::kTerminated}) {
      v.emplace_back(exitcodes::ClassName(c));
    }
    return v;
  }();
  return names;
}

class Writer {
 public:
  void Family(const char* name, const char* type, const char* help) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void Sample(const char* name, double v, const std::string& labels = "") {
    out_ += name;
    if (!labels.empty()) out_ += "{" + labels + "}";
    out_ += ' ';
    out_ += fmt::format("{}", v);  // shortest round-trip form; integers without ".0"
    out_ += '\n';
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

// A label pair; the value escaped as the text format asks (backslash, double
// quote, line feed), for values from outside such as NODE_NAME.
std::string Label(const char* key, const std::string& value) {
  std::string out = std::string(key) + "=\"";
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    out += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return out + "\"";
}

}  // namespace

StreamCounters& OutputCounters(int fd) { return fd == STDERR_FILENO ? g_stderr : g_stdout; }

void PodMeters::CountWorkerExits(std::uint32_t workers,
                                 const std::optional<std::string>& first_failure_class,
                                 int collateral, bool stop_signal) {
  const std::uint32_t failed =
      (first_failure_class ? 1u : 0u) + static_cast<std::uint32_t>(collateral);
  if (first_failure_class) ++worker_exits[*first_failure_class];
  if (collateral > 0) {
    worker_exits[stop_signal ? "terminated" : "peer_failed"] +=
        static_cast<std::uint64_t>(collateral);
  }
  if (workers > failed) worker_exits["ok"] += workers - failed;
}

void PodMeters::Fill(MetricsSnapshot* s) const {
  s->restarts = restarts;
  s->worker_exits = worker_exits;
  s->last_failure_class = last_failure_class;
  s->last_culprit = last_culprit;
}

void FillProcessStats(MetricsSnapshot* s) {
  long pages = 0, resident = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "re")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  s->resident_bytes = static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  rusage ru{};
  if (::getrusage(RUSAGE_SELF, &ru) == 0) {
    auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
    s->cpu_seconds = secs(ru.ru_utime) + secs(ru.ru_stime);
  }
}

namespace {

// The gang: generation, restarts, rendezvous, pods, spares.
void RenderGang(const MetricsSnapshot& s, Writer& w) {
  w.Family("trainlet_gang_generation", "gauge",
           "Rendezvous generation the pod runs or joins (TORCHELASTIC_RESTART_COUNT).");
  w.Sample("trainlet_gang_generation", s.generation);
  w.Family("trainlet_gang_restarts_total", "counter", "In-place restarts of the gang.");
  w.Sample("trainlet_gang_restarts_total", static_cast<double>(s.restarts));
  w.Family("trainlet_rendezvous_duration_seconds", "gauge",
           "Duration of this generation's rendezvous (so far, while it waits).");
  w.Sample("trainlet_rendezvous_duration_seconds", s.rendezvous_seconds);
  w.Family("trainlet_gang_pods_joined", "gauge",
           "Pods in the gang: admitted so far on the leader; the whole gang once formed.");
  w.Sample("trainlet_gang_pods_joined", s.pods_joined);
  w.Family("trainlet_gang_pods_expected", "gauge", "Pods the gang needs (--nnodes; MAX if elastic).");
  w.Sample("trainlet_gang_pods_expected", s.pods_expected);
  w.Family("trainlet_gang_pods_min", "gauge",
           "Pods the gang can run with (--nnodes MIN; the fixed size otherwise).");
  w.Sample("trainlet_gang_pods_min", s.pods_min);
  w.Family("trainlet_gang_formed", "gauge",
           "1 while a generation's gang is formed and runs; 0 before and during a rendezvous.");
  w.Sample("trainlet_gang_formed", s.formed ? 1 : 0);
  w.Family("trainlet_gang_max_restarts", "gauge", "The in-place restart budget (--max-restarts).");
  w.Sample("trainlet_gang_max_restarts", s.max_restarts);
  w.Family("trainlet_gang_restart_count", "gauge",
           "Restarts counted against --max-restarts so far (TORCHELASTIC_RESTART_COUNT), the "
           "gang's count: a pod that joined late carries it on.");
  w.Sample("trainlet_gang_restart_count", s.restart_count);
  w.Family("trainlet_gang_spares_configured", "gauge", "Hot spares the gang keeps (--spares).");
  w.Sample("trainlet_gang_spares_configured", s.spares_configured);
  w.Family("trainlet_gang_spare", "gauge",
           "1 while this pod waits as a hot spare (--spares), without workers.");
  w.Sample("trainlet_gang_spare", s.spare ? 1 : 0);
  if (s.leader) {
    w.Family("trainlet_gang_replacements_total", "counter",
             "Leader: node ranks a hot spare took over from a lost or failed pod.");
    w.Sample("trainlet_gang_replacements_total", static_cast<double>(s.replacements.size()));
    w.Family("trainlet_gang_replacement", "gauge",
             "Leader: 1 per replacement so far: the generation, the node rank, the spare pod "
             "and the pod it replaced.");
    for (const Replacement& r : s.replacements) {
      w.Sample("trainlet_gang_replacement", 1,
               Label("generation", std::to_string(r.generation)) + "," +
                   Label("node_rank", std::to_string(r.node_rank)) + "," +
                   Label("spare", std::to_string(r.spare)) + "," +
                   Label("replaced", std::to_string(r.replaced)));
    }
  }
}

// This pod's workers: running, exits by class, the last failure.
void RenderWorkers(const MetricsSnapshot& s, Writer& w) {
  w.Family("trainlet_workers_running", "gauge", "This pod's workers that have not exited.");
  w.Sample("trainlet_workers_running", s.workers_running);
  w.Family("trainlet_worker_exits_total", "counter",
           "Worker exits by class: the first failure's class, peer_failed or terminated for "
           "workers stopped after it, ok for success.");
  for (const std::string& c : ClassNames()) {
    auto it = s.worker_exits.find(c);
    w.Sample("trainlet_worker_exits_total",
             static_cast<double>(it == s.worker_exits.end() ? 0 : it->second), Label("class", c));
  }
  w.Family("trainlet_last_failure", "gauge",
           "1 for the class of the gang's last failure seen by this pod, 0 for the others.");
  for (const std::string& c : ClassNames()) {
    if (c == "ok") continue;
    w.Sample("trainlet_last_failure", s.last_failure_class == c ? 1 : 0, Label("class", c));
  }
}

// The leader's per-member series (label "member": the pod's index): heartbeat
// round trips, step rates, stragglers, the last culprit.
void RenderLeaderPods(const MetricsSnapshot& s, Writer& w) {
  w.Family("trainlet_heartbeat_rtt_seconds", "gauge",
           "Leader: last control-channel heartbeat round trip per member pod.");
  for (const auto& [pod, v] : s.heartbeat_rtt_seconds) {
    w.Sample("trainlet_heartbeat_rtt_seconds", v, Label("member", std::to_string(pod)));
  }
  w.Family("trainlet_pod_step_rate", "gauge",
           "Leader: heartbeat-file touches per second of each pod's slowest worker.");
  for (const auto& [pod, v] : s.step_rate) {
    w.Sample("trainlet_pod_step_rate", v, Label("member", std::to_string(pod)));
  }
  w.Family("trainlet_straggler", "gauge",
           "Leader: 1 for a pod whose step rate is behind the gang's median by "
           "--straggler-factor.");
  for (std::uint32_t pod : s.stragglers) {
    w.Sample("trainlet_straggler", 1, Label("member", std::to_string(pod)));
  }
  w.Family("trainlet_gang_last_culprit", "gauge",
           "Leader: 1 for the pod whose failure or loss ended a generation last: its index, its "
           "node (NODE_NAME; empty if unknown) and the failure's class.");
  if (const auto& c = s.last_culprit) {
    w.Sample("trainlet_gang_last_culprit", 1,
             Label("member", std::to_string(c->index)) + "," + Label("node_name", c->node_name) +
                 "," + Label("class", c->failure_class));
  }
}

// Worker output through the agent, per stream (relaxed atomic counters).
void RenderOutput(Writer& w) {
  struct {
    const char* name;
    const char* help;
    std::atomic<std::uint64_t> StreamCounters::*field;
  } const streams[] = {
      {"trainlet_output_bytes_total", "Bytes of worker output forwarded, prefixes included.",
       &StreamCounters::bytes},
      {"trainlet_output_lines_total", "Lines of worker output forwarded.", &StreamCounters::lines},
      {"trainlet_output_dropped_lines_total",
       "Lines dropped because the output failed or stalled (0 otherwise).",
       &StreamCounters::dropped_lines},
  };
  for (const auto& f : streams) {
    w.Family(f.name, "counter", f.help);
    for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
      w.Sample(f.name,
               static_cast<double>((OutputCounters(fd).*f.field).load(std::memory_order_relaxed)),
               Label("stream", fd == STDERR_FILENO ? "stderr" : "stdout"));
    }
  }
}

}  // namespace

std::string RenderMetrics(const MetricsSnapshot& s) {
  Writer w;
  RenderGang(s, w);
  RenderWorkers(s, w);
  if (s.leader) RenderLeaderPods(s, w);
  w.Family("trainlet_worker_heartbeat_age_seconds", "gauge",
           "Seconds since each local worker last touched $TRAINLET_HEARTBEAT_FILE.");
  for (const auto& [lr, v] : s.heartbeat_age_seconds) {
    w.Sample("trainlet_worker_heartbeat_age_seconds", v, Label("local_rank", std::to_string(lr)));
  }
  RenderOutput(w);
  w.Family("trainlet_process_resident_memory_bytes", "gauge", "The agent's resident set.");
  w.Sample("trainlet_process_resident_memory_bytes", s.resident_bytes);
  w.Family("trainlet_process_cpu_seconds_total", "counter",
           "The agent's user and system CPU time.");
  w.Sample("trainlet_process_cpu_seconds_total", s.cpu_seconds);
  return w.Take();
}

}  // namespace trainlet::agent
