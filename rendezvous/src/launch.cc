#include "trainlet/rendezvous/launch.h"

namespace trainlet::rendezvous {

wire::LaunchConfig MakeLaunchConfig(const LaunchSettings& s) {
  const bool elastic = s.min_nodes != 0 && s.min_nodes < s.nnodes;
  wire::LaunchConfig c = {{"nnodes", elastic ? std::to_string(s.min_nodes) + ":" +
                                                   std::to_string(s.nnodes)
                                             : std::to_string(s.nnodes)},
                          {"nproc_per_node", std::to_string(s.nproc_per_node)},
                          {"master_port", std::to_string(s.master_port)},
                          {"max_restarts", std::to_string(s.max_restarts)},
                          {"gang", s.gang}};
  if (s.preflight) c.emplace_back("preflight", "1");
  if (s.spares > 0) c.emplace_back("spares", std::to_string(s.spares));
  if (s.ranks_by_arrival) c.emplace_back("ranks", "arrival");
  return c;
}

bool RanksByArrival(const wire::LaunchConfig& config) {
  for (const auto& [key, value] : config) {
    if (key == "ranks") return value == "arrival";
  }
  return false;
}

wire::Hello MakeHello(const LaunchSettings& s) {
  wire::Hello hello;
  hello.job_id = s.job_id;
  hello.attempt = s.attempt;
  hello.index = s.index;
  hello.nproc_per_node = s.nproc_per_node;
  hello.config = MakeLaunchConfig(s);
  hello.fingerprint = wire::Fingerprint(hello.config);
  hello.generation = s.generation;
  hello.job_name = s.job_name;
  hello.job_restart_attempt = s.job_restart_attempt;
  hello.restarts = s.restarts;
  hello.node_name = s.node_name;
  return hello;
}

}  // namespace trainlet::rendezvous
