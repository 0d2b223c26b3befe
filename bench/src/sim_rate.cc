// trainlet-sim-rate: simulated gang runs per minute on one core, logging
// (traces) off, for a fixed run shape: the simulator's default configuration
// draw (tests/sim/sim.h DrawSchedule: 1-16 pods, 1-4 workers, spares 0-2,
// fixed or MIN:MAX, --max-restarts 0-3, token or not), up to 4 faults, up to
// 10 simulated minutes a run. Seeds from 1 up, each checked by the contract
// checker as in CI. Usage: trainlet-sim-rate [SECONDS] [core|member-core|standin]
// (default 20 and core: trainlet-sim's default ends, the real MemberCore,
// tests/sim/core_member.h, and the real LeaderCore, tests/sim/core_leader.h,
// for fixed gangs without spares; member-core: the stand-in leader everywhere;
// standin: both stand-ins).
// Prints one line: runs, CPU seconds, runs per minute (CPU), events per run.
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include <string>

#include "core_leader.h"
#include "core_member.h"
#include "sim.h"

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 20.0;
  const std::string end = argc > 2 ? argv[2] : "core";
  if (seconds <= 0 || (end != "core" && end != "member-core" && end != "standin")) {
    std::fprintf(stderr, "usage: trainlet-sim-rate [SECONDS > 0] [core|member-core|standin]\n");
    return 78;
  }
  namespace sim = trainlet::sim;
  sim::SetMemberEndKind(end == "standin" ? sim::MemberEndKind::kStandIn : sim::MemberEndKind::kCore);
  sim::SetLeaderEndKind(end == "core" ? sim::LeaderEndKind::kCore : sim::LeaderEndKind::kStandIn);
  const std::clock_t start = std::clock();  // this process's CPU time: one core, one thread
  std::uint64_t runs = 0, events = 0, failed = 0;
  double cpu = 0;
  for (std::uint64_t seed = 1; cpu < seconds; ++seed) {
    const trainlet::sim::RunResult r = trainlet::sim::Run(trainlet::sim::DrawSchedule(seed, 4));
    ++runs;
    events += r.events;
    failed += r.violations.empty() ? 0 : 1;
    if (runs % 256 == 0) cpu = static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
  }
  cpu = static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
  std::printf("sim_rate (ends %s): %llu runs in %.1f s CPU: %.0f runs/min on one core, %.0f events/run, "
              "%llu with violations\n",
              end.c_str(), static_cast<unsigned long long>(runs), cpu, static_cast<double>(runs) * 60.0 / cpu,
              static_cast<double>(events) / static_cast<double>(runs),
              static_cast<unsigned long long>(failed));
  return 0;
}
