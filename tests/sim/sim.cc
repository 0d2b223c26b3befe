#include "sim.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "trainlet/agent/base/tunables.h"
#include "trainlet/agent/front/cli.h"
#include "trainlet/exitcodes/status.h"
#include "world.h"

namespace trainlet::sim {

using exitcodes::FailureClass;

namespace {
std::uint64_t Below(std::mt19937_64& r, std::uint64_t n) { return n == 0 ? 0 : r() % n; }

SimConfig DrawConfig(std::mt19937_64& r) {
  SimConfig c;
  // Mostly small gangs (where interleavings are dense), sometimes up to 16 pods.
  const auto n = static_cast<std::uint32_t>(Below(r, 4) == 0 ? 1 + Below(r, 16) : 2 + Below(r, 4));
  c.max_nodes = n;
  c.min_nodes = n;
  if (n > 1 && Below(r, 3) == 0) c.min_nodes = 1 + static_cast<std::uint32_t>(Below(r, n - 1));
  c.spares = static_cast<std::uint32_t>(Below(r, 3) == 0 ? 1 + Below(r, 2) : 0);
  c.pods = c.max_nodes + c.spares;
  if (c.elastic() && Below(r, 2) == 0) {  // start between MIN and MAX; the rest scale up later
    c.pods = c.min_nodes + static_cast<std::uint32_t>(Below(r, c.max_nodes - c.min_nodes + 1));
  }
  c.workers = 1 + static_cast<std::uint32_t>(Below(r, 4));
  c.max_restarts = static_cast<std::uint32_t>(Below(r, 4));
  c.token = Below(r, 2) == 0;
  c.by_arrival = c.elastic() && c.spares == 0 && Below(r, 5) == 0;
  // The real defaults (agent/base/tunables.h), and shorter flags users set.
  const Ms timeouts[] = {30'000, 60'000, 120'000,
                         std::chrono::milliseconds(agent::kDefaultRdzvTimeout).count()};
  c.rdzv_timeout_ms = timeouts[Below(r, 4)];
  const Ms last_calls[] = {5'000, std::chrono::milliseconds(agent::kDefaultLastCall).count()};
  c.last_call_ms = last_calls[Below(r, 2)];
  const Ms graces[] = {5'000, std::chrono::milliseconds(agent::kDefaultGrace).count()};
  c.grace_ms = graces[Below(r, 2)];
  c.train_ms = 20'000 + static_cast<Ms>(Below(r, 220'000));
  // Now and then a combination the front door refuses (--gang layouts are otherwise not drawn).
  if (c.max_nodes > 1 && Below(r, 50) == 0) c.refused = c.elastic() ? 1 : 2;
  return c;
}

Fault DrawFault(std::mt19937_64& r, const SimConfig& c) {
  Fault f;
  f.t_ms = static_cast<Ms>(Below(r, 300'000));
  const std::uint32_t slots = c.max_nodes + c.spares;
  f.pod = static_cast<std::uint32_t>(Below(r, slots));
  const int kinds = static_cast<int>(FaultKind::kCount);
  f.kind = static_cast<FaultKind>(Below(r, kinds));
  if (!c.elastic() && (f.kind == FaultKind::kScaleUp || f.kind == FaultKind::kScaleDown)) {
    f.kind = FaultKind::kWorkerFail;
  }
  // The Job recreates a failed or deleted pod at its index; only an elastic gang's member
  // may go for good (a scale-down), never the leader (the Job's index 0).
  std::int64_t recreate = 2'000 + static_cast<Ms>(Below(r, 30'000));
  if (c.elastic() && f.pod != 0 && Below(r, 3) == 0) recreate = 0;
  switch (f.kind) {
    case FaultKind::kWorkerFail: {
      static constexpr FailureClass kClasses[] = {
          FailureClass::kWorker, FailureClass::kWorker, FailureClass::kInfra, FailureClass::kOom,
          FailureClass::kHardware, FailureClass::kBug, FailureClass::kConfig};
      f.arg = static_cast<std::int64_t>(kClasses[Below(r, std::size(kClasses))]);
      break;
    }
    case FaultKind::kKill:
    case FaultKind::kNodeDeath:
    case FaultKind::kEvict:
      f.arg = recreate;
      break;
    case FaultKind::kFreeze:
    case FaultKind::kPartition:  // blips (< 2.4 s: no loss) and cuts
      f.arg = Below(r, 2) == 0 ? 200 + static_cast<Ms>(Below(r, 1800)) : 3'000 + static_cast<Ms>(Below(r, 20'000));
      break;
    case FaultKind::kLateListener:
      f.arg = 500 + static_cast<Ms>(Below(r, 10'000));
      break;
    case FaultKind::kScaleUp:
      f.pod = c.max_nodes + c.spares > c.pods ? c.pods + static_cast<std::uint32_t>(Below(r, slots - c.pods)) : f.pod;
      break;
    case FaultKind::kScaleDown:
      f.pod = slots - 1;
      break;
    case FaultKind::kStranger:
      f.pod = 1 + static_cast<std::uint32_t>(Below(r, std::max<std::uint32_t>(slots - 1, 1)));
      break;
    default:
      break;
  }
  return f;
}

}  // namespace

Schedule DrawSchedule(std::uint64_t seed, int max_faults) {
  std::mt19937_64 r(seed);
  Schedule s;
  s.config = DrawConfig(r);
  const auto n = static_cast<int>(Below(r, static_cast<std::uint64_t>(max_faults) + 1));
  for (int i = 0; i < n; ++i) s.faults.push_back(DrawFault(r, s.config));
  s.world_seed = r();
  return s;
}

std::vector<std::string> RefusedArgv(const SimConfig& c) {
  const std::string layout = "leader=1,workers=" + std::to_string(c.max_nodes - 1);
  std::vector<std::string> argv{"trainlet", "--gang", layout};
  if (c.refused == 1) {
    argv.insert(argv.end(), {"--nnodes", std::to_string(c.min_nodes) + ":" + std::to_string(c.max_nodes)});
  } else {
    argv.insert(argv.end(), {"--spares", std::to_string(std::max<std::uint32_t>(c.spares, 1))});
  }
  argv.insert(argv.end(), {"--nproc-per-node", std::to_string(c.workers), "--", "python3", "train.py"});
  return argv;
}

namespace {
// The front door: the real front end refuses the combination, class config, before any pod runs.
RunResult FrontDoor(const Schedule& s) {
  const SimConfig& c = s.config;
  RunResult r;
  r.fault_hit.assign(s.faults.size(), false);  // no pod ran: no fault applied
  const std::vector<std::string> argv = RefusedArgv(c);
  // The front end takes milliseconds (CLI11, logging set-up): each command line once per process.
  static std::map<std::vector<std::string>, exitcodes::Status> seen;
  auto it = seen.find(argv);
  if (it == seen.end()) {
    const agent::FrontEnd fe = agent::PlanCommandLine(
        argv, {{"PATH", "/usr/bin:/bin"}, {"HOSTNAME", "x"}},
        [](const agent::FlagValues&, const agent::Settings&) { return agent::NodeFacts{}; });
    it = seen.emplace(argv, fe.status).first;
  }
  const exitcodes::Status& st = it->second;
  std::string line;
  for (const auto& a : argv) line += (line.empty() ? "" : " ") + a;
  if (st.ok() || st.failure_class() != FailureClass::kConfig) {
    r.violations.push_back("front door: '" + line + "' not refused as config (78): " +
                           (st.ok() ? "accepted" : st.message()));
  }
  for (std::uint32_t k = 0; k < c.pods; ++k) r.codes += (k ? "," : "") + std::to_string(78);
  return r;
}
}  // namespace

RunResult Run(const Schedule& s, bool trace) {
  if (s.config.refused != 0) return FrontDoor(s);
  World w(s, trace);
  RunResult r = w.Run();
  if (s.expect_codes && *s.expect_codes != r.codes) {
    r.violations.push_back("expected exit codes " + *s.expect_codes + ", got " + r.codes);
  }
  if (s.expect_restarts && *s.expect_restarts != r.last_restarts) {
    r.violations.push_back("expected " + std::to_string(*s.expect_restarts) + " restarts, got " +
                           std::to_string(r.last_restarts));
  }
  return r;
}

Schedule Shrink(const Schedule& s) {
  Schedule best = s;
  bool progress = true;
  while (progress) {
    progress = false;
    for (std::size_t i = 0; i < best.faults.size(); ++i) {
      Schedule t = best;
      t.faults.erase(t.faults.begin() + static_cast<std::ptrdiff_t>(i));
      if (!Run(t).violations.empty()) {
        best = std::move(t);
        progress = true;
        break;
      }
    }
  }
  return best;
}

}  // namespace trainlet::sim
