// Class Pod (pod_wiring.h): the gang's control channel (rendezvous/leader.h,
// member.h) as gang events; pods joining a running generation; what a
// restart's Stop says of a spare taking a node rank; the leader's listener
// for the next round; the failure and culprit metrics.
#include <algorithm>
#include <string>

#include <spdlog/spdlog.h>

#include "pod/pod_wiring.h"
#include "trainlet/exitcodes/exit_code.h"
#include "trainlet/rendezvous/launch.h"

namespace trainlet::agent {

namespace tun = rendezvous::tunables;

void Pod::StartGangChannel() {
  PodGeneration& g = *gen_;
  const auto heartbeat = tun::kHeartbeatInterval;
  const int misses = tun::kHeartbeatMisses;
  if (g.leader) {
    g.leader->StartChannel(
        {.on_report = Guard([this](std::uint32_t index, const rendezvous::wire::Report& r) {
           Feed(gang::Report{index, r});
         }),
         .on_lost = Guard([this](std::uint32_t index, const std::string& why) {
           Feed(gang::Lost{index, why});  // whether it counts: membership.h M14
         }),
         .on_join = [this](std::uint32_t index) { return OnJoin(index); }},
        heartbeat, misses);
  } else if (g.member) {
    g.member->StartChannel(
        {.on_stop = Guard([this](const rendezvous::wire::Stop& stop) {
           NoteReplacement(stop);
           Feed(gang::Stop{stop});
         }),
         .on_lost = Guard([this](const std::string& why) { Feed(gang::Lost{0, why}); })},
        heartbeat, misses);
  }
}

// Leader: pod `index` was admitted while this generation runs. Whether the
// gang grows for it, or it waits as a spare, the membership machine decides
// (membership.h M13; gang_policy.h G12), and its roster counts it for the
// next round either way. True: it waits as a spare now.
bool Pod::OnJoin(std::uint32_t index) {
  if (concluded_ || gen_->retired()) return false;  // it joins the next round
  spdlog::info("pod {} joined while generation {} runs", index, gen_->number);
  return Feed(gang::Joined{.index = index}).joins_as_spare;
}

// Leader: the Stop of a restart names the spare the roster gives the
// failed pod's node rank when that pod is lost or leaves (roster.h), so the
// pod that leaves, the spare and the survivors can say who replaces whom.
rendezvous::wire::Stop Pod::WithReplacement(rendezvous::wire::Stop stop) {
  if (!stop.restart) return stop;
  const Roster* roster = policy_.roster();
  stop.replacement = roster ? roster->PlannedReplacement(stop.failed_index) : std::nullopt;
  if (stop.replacement) {
    spdlog::info("generation {}: spare pod {} is to take the node rank of pod {}",
                 stop.next_generation, *stop.replacement, stop.failed_index);
  }
  return stop;
}

// Leader: the next generation's rendezvous port listens from the moment the
// restart is decided (leader.h, ListenAhead): members whose workers stop
// sooner than ours wait in its backlog instead of backing off; the next
// generation's Leader takes it over (Stop() closes it if none does).
void Pod::ListenAhead() {
  if (options_.rdzv_listen_fd >= 0 || options_.rdzv_port == 0) return;
  options_.rdzv_listen_fd = rendezvous::ListenAhead(
      options_.rdzv_port, options_.identity.nnodes + options_.identity.spares);
}

// Member: what a restart's Stop says about a spare taking a pod's node
// rank; this pod, when it is the one leaving, names the spare when it exits.
void Pod::NoteReplacement(const rendezvous::wire::Stop& stop) {
  if (!stop.restart || !stop.replacement) return;
  const std::uint32_t own = options_.identity.index;
  if (stop.failed_index == own) {
    const std::uint32_t nproc = std::max(1u, options_.identity.nproc_per_node);
    const std::uint32_t node_rank = gen_->rank_base / nproc;
    replaced_by_ = exitcodes::Handover{.spare = *stop.replacement, .node_rank = node_rank,
                                       .generation = stop.next_generation};
    spdlog::warn("this pod leaves the gang; spare pod {} is to take its node rank {} in "
                 "generation {}", *stop.replacement, node_rank, stop.next_generation);
  } else {
    spdlog::info("generation {}: spare pod {}{} is to take the node rank of pod {}",
                 stop.next_generation, *stop.replacement,
                 *stop.replacement == own ? " (this pod)" : "", stop.failed_index);
  }
}

void Pod::NoteFailureClass(std::uint16_t failure_class) {
  meters_.last_failure_class =
      std::string(exitcodes::ClassName(exitcodes::FailureClass(failure_class)));
}

// Leader: trainlet_gang_last_culprit (metrics.h): the pod its Stop names,
// with the node that pod's hello named (its own NODE_NAME for this pod).
void Pod::NoteCulprit(const rendezvous::wire::Stop& stop, const PodGeneration& g) {
  const bool own = stop.failed_index == options_.identity.index;
  meters_.last_culprit = Culprit{
      .index = stop.failed_index,
      .node_name = own ? EnvOr("NODE_NAME")
                : g.leader ? g.leader->node_name(stop.failed_index) : std::string(),
      .failure_class = std::string(
          exitcodes::ClassName(exitcodes::FailureClass(stop.failure_class)))};
}

}  // namespace trainlet::agent
