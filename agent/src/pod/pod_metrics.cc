// Class Pod (pod_wiring.h): the pod's metrics (metrics.h), read on the loop
// at each scrape of /metrics.
#include "pod/pod_wiring.h"

namespace trainlet::agent {

MetricsSnapshot Pod::Metrics() const {
  const PodIdentity& id = options_.identity;
  MetricsSnapshot m;
  meters_.Fill(&m);
  m.leader = id.is_leader();
  m.pods_expected = id.nnodes;
  m.pods_min = id.min_pods();
  m.max_restarts = options_.max_restarts;
  m.restart_count = policy_.role().restarts();
  m.spares_configured = id.spares;
  if (const Roster* roster = policy_.roster()) m.replacements = roster->replacements();
  if (const PodGeneration* g = gen_.get()) {
    const bool joining = g->joining();
    m.generation = g->number;
    m.rendezvous_seconds =
        joining ? std::chrono::duration<double>(Clock::now() - g->round_started).count()
                : meters_.rendezvous_seconds;
    m.spare = g->spare();
    m.formed = gang_formed_ && !joining;
    m.pods_joined = joining ? (g->leader ? g->leader->admitted() : 0)
                            : (gang_formed_ ? ActivePods() : 0);
    for (std::uint32_t lr = 0; g->supervisor && lr < id.nproc_per_node; ++lr) {
      m.workers_running += g->supervisor->running(static_cast<int>(lr)) ? 1 : 0;
    }
    if (g->leader) {
      for (const auto& [pod, p] : g->leader->peer_stats()) {
        if (p.rtt_seconds) m.heartbeat_rtt_seconds[pod] = *p.rtt_seconds;
      }
    }
    m.step_rate = g->stragglers.rates();
    m.stragglers.assign(g->stragglers.stragglers().begin(), g->stragglers.stragglers().end());
    if (g->heartbeats) m.heartbeat_age_seconds = g->heartbeats->Ages();
  }
  FillProcessStats(&m);
  return m;
}

// The active pods of the generation that runs (elastic: its own size).
std::uint32_t Pod::ActivePods() const {
  return assigned_nnodes_ != 0 ? assigned_nnodes_ : options_.identity.nnodes;
}

}  // namespace trainlet::agent
