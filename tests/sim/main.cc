// trainlet-sim: runs seeded simulations of a whole gang (sim.h) and checks
// each against the contract (tests/invariants). Usage:
//   trainlet-sim --seeds 1:5000            a range of seeds; coverage at the end
//   trainlet-sim --seeds 1:5000 --budget 60 stop starting runs after 60 s
//   trainlet-sim --seed 42 --trace         one run, its readable trace
//   trainlet-sim --replay FILE --trace     a saved schedule (tests/sim/regressions/*.sched)
//   trainlet-sim --regressions DIR         every *.sched in DIR must keep the contract
//   trainlet-sim --seeds 1:100000 --known tests/sim/findings/known
//                                          seeds of open findings ("SEED FINDING" lines) fail
//                                          as known; a listed seed that passes fails the batch
//                                          (the finding was fixed: the list must say so)
//   --member-end core|standin              the member's protocol end: the real MemberCore
//                                          (core_member.h, the default) or standin.cc's
//   --leader-end core|standin              the leader's protocol end: the real LeaderCore
//                                          (core_leader.h, the default; fixed gangs without
//                                          spares, the stand-in leads the others), every
//                                          mode over it with the pod's Roster (core-roster),
//                                          or standin.cc's; core needs --member-end core
//                                          (standin member: standin leader by default)
// A failing run prints its seed, its violation, the replay command and its
// shrunk schedule (--save DIR writes the schedule there). Exit 0: no
// violation; 1: violations; 78: bad arguments.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "core_leader.h"
#include "core_member.h"
#include "sim.h"
#include "trainlet/agent/pod/rule_hits.h"

namespace {

using namespace trainlet::sim;
namespace hits = trainlet::agent::rule_hits;

struct Options {
  std::uint64_t first = 1, last = 1000;
  double budget_s = 0;  // 0: no limit
  bool trace = false;
  bool shrink = true;
  int max_faults = 4;
  std::string replay, regressions, save, known;
  std::string member_end = "core", leader_end;  // leader_end "": as the member end
};

struct Coverage {
  std::array<std::uint64_t, static_cast<std::size_t>(FaultKind::kCount)> faults{};
  std::array<std::uint64_t, hits::kGangRules + 1> gang{};
  std::array<std::uint64_t, hits::kMembershipRules + 1> membership{};
};

template <typename A>
std::vector<std::uint64_t> Snapshot(const A& counters) {
  std::vector<std::uint64_t> v;
  for (const auto& c : counters) v.push_back(c.load(std::memory_order_relaxed));
  return v;
}

void Print(const Coverage& c, std::uint64_t runs) {
  std::printf("coverage over %llu runs (runs that hit each):\n", static_cast<unsigned long long>(runs));
  std::printf("  faults:");
  for (std::size_t k = 0; k < c.faults.size(); ++k) {
    std::printf(" %s=%llu", FaultName(static_cast<FaultKind>(k)),
                static_cast<unsigned long long>(c.faults[k]));
  }
  std::printf("\n  gang rules:");
  for (std::size_t k = 1; k < c.gang.size(); ++k) std::printf(" G%zu=%llu", k, static_cast<unsigned long long>(c.gang[k]));
  std::printf("\n  membership rules:");
  for (std::size_t k = 1; k < c.membership.size(); ++k) {
    std::printf(" M%zu=%llu", k, static_cast<unsigned long long>(c.membership[k]));
  }
  std::printf("\n");
}

// One run with its coverage; true when it kept the contract.
bool RunOne(const Schedule& s, const std::string& label, const Options& o, Coverage& cov) {
  const auto g0 = Snapshot(hits::gang);
  const auto m0 = Snapshot(hits::membership);
  const RunResult r = Run(s, o.trace);
  const auto g1 = Snapshot(hits::gang);
  const auto m1 = Snapshot(hits::membership);
  for (std::size_t k = 0; k < g1.size(); ++k) cov.gang[k] += g1[k] != g0[k];
  for (std::size_t k = 0; k < m1.size(); ++k) cov.membership[k] += m1[k] != m0[k];
  for (std::size_t k = 0; k < s.faults.size(); ++k) {
    if (r.fault_hit[k]) ++cov.faults[static_cast<std::size_t>(s.faults[k].kind)];
  }
  if (o.trace) {
    std::printf("%s", ScheduleText(s).c_str());
    for (const auto& line : r.trace) std::printf("  %s\n", line.c_str());
  }
  if (r.violations.empty()) return true;
  std::printf("FAIL %s: %s\n", label.c_str(), r.violations.front().c_str());
  for (std::size_t k = 1; k < r.violations.size() && k < 5; ++k) {
    std::printf("  also: %s\n", r.violations[k].c_str());
  }
  const Schedule small = o.shrink ? Shrink(s) : s;
  std::printf("  shrunk schedule (%zu of %zu faults):\n", small.faults.size(), s.faults.size());
  std::istringstream lines(ScheduleText(small));
  for (std::string line; std::getline(lines, line);) std::printf("    %s\n", line.c_str());
  if (!o.save.empty()) {
    std::filesystem::create_directories(o.save);
    const std::string path = o.save + "/" + label + ".sched";
    std::ofstream(path) << "# " << r.violations.front() << "\n" << ScheduleText(small);
    std::printf("  saved: %s; replay: trainlet-sim --replay %s --trace\n", path.c_str(), path.c_str());
  } else if (label.rfind("seed-", 0) == 0) {
    std::printf("  replay: trainlet-sim --seed %s --trace\n", label.c_str() + 5);
  }
  return false;
}

// The protocol ends: core (member_core.h, leader_core.h) or the stand-ins
// (standin.cc). The core leader needs the core member (real heartbeats).
bool SetEnds(Options& o) {
  if (o.leader_end.empty()) o.leader_end = o.member_end;
  const auto ok = [](const std::string& e) { return e == "core" || e == "standin"; };
  if (!ok(o.member_end) || (!ok(o.leader_end) && o.leader_end != "core-roster")) return false;
  if (o.leader_end != "standin" && o.member_end != "core") {
    std::fprintf(stderr, "trainlet-sim: --leader-end core needs --member-end core\n");
    return false;
  }
  SetMemberEndKind(o.member_end == "core" ? MemberEndKind::kCore : MemberEndKind::kStandIn);
  SetLeaderEndKind(o.leader_end == "core"          ? LeaderEndKind::kCore
                   : o.leader_end == "core-roster" ? LeaderEndKind::kCoreRoster
                                                   : LeaderEndKind::kStandIn);
  return true;
}

bool ParseArgs(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--trace") o.trace = true;
    else if (a == "--no-shrink") o.shrink = false;
    else if (a == "--seeds" && (v = next())) {
      if (std::sscanf(v, "%llu:%llu", reinterpret_cast<unsigned long long*>(&o.first),
                      reinterpret_cast<unsigned long long*>(&o.last)) != 2) return false;
    } else if (a == "--seed" && (v = next())) {
      o.first = o.last = std::strtoull(v, nullptr, 10);
    } else if (a == "--budget" && (v = next())) o.budget_s = std::atof(v);
    else if (a == "--max-faults" && (v = next())) o.max_faults = std::atoi(v);
    else if (a == "--replay" && (v = next())) o.replay = v;
    else if (a == "--regressions" && (v = next())) o.regressions = v;
    else if (a == "--save" && (v = next())) o.save = v;
    else if (a == "--known" && (v = next())) o.known = v;
    else if (a == "--member-end" && (v = next())) o.member_end = v;
    else if (a == "--leader-end" && (v = next())) o.leader_end = v;
    else return false;
  }
  return o.first <= o.last && o.max_faults >= 0 && SetEnds(o);
}

// "SEED FINDING" lines ('#' comments); nullopt on a bad line.
std::optional<std::map<std::uint64_t, std::string>> LoadKnown(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::map<std::uint64_t, std::string> out;
  for (std::string line; std::getline(f, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream l(line);
    std::uint64_t seed = 0;
    std::string finding;
    if (!(l >> seed >> finding)) return std::nullopt;
    out[seed] = finding;
  }
  return out;
}

std::optional<Schedule> Load(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    std::fprintf(stderr, "trainlet-sim: cannot read '%s'\n", path.c_str());
    return std::nullopt;
  }
  std::stringstream text;
  text << f.rdbuf();
  std::string error;
  auto s = ParseSchedule(text.str(), &error);
  if (!s) std::fprintf(stderr, "trainlet-sim: %s: %s\n", path.c_str(), error.c_str());
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!ParseArgs(argc, argv, o)) {
    std::fprintf(stderr,
                 "usage: trainlet-sim [--seeds A:B | --seed N | --replay FILE | --regressions DIR]"
                 " [--trace] [--budget S] [--max-faults N] [--no-shrink] [--save DIR]"
                 " [--member-end core|standin] [--leader-end core|core-roster|standin]\n");
    return 78;
  }
  Coverage cov;
  std::uint64_t runs = 0, failed = 0;
  if (!o.replay.empty() || !o.regressions.empty()) {
    std::vector<std::string> files;
    if (!o.replay.empty()) files.push_back(o.replay);
    if (!o.regressions.empty()) {
      for (const auto& e : std::filesystem::directory_iterator(o.regressions)) {
        if (e.path().extension() == ".sched") files.push_back(e.path().string());
      }
      std::sort(files.begin(), files.end());
    }
    for (const auto& path : files) {
      const auto s = Load(path);
      if (!s) return 78;
      ++runs;
      o.shrink = o.shrink && o.regressions.empty();
      failed += RunOne(*s, std::filesystem::path(path).stem().string(), o, cov) ? 0 : 1;
    }
    std::printf("%llu schedules, %llu failed\n", static_cast<unsigned long long>(runs),
                static_cast<unsigned long long>(failed));
    return failed == 0 ? 0 : 1;
  }
  std::map<std::uint64_t, std::string> known;
  if (!o.known.empty()) {
    const auto k = LoadKnown(o.known);
    if (!k) {
      std::fprintf(stderr, "trainlet-sim: --known %s: not 'SEED FINDING' lines\n", o.known.c_str());
      return 78;
    }
    known = *k;
  }
  const auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  std::uint64_t known_failed = 0;
  for (std::uint64_t seed = o.first; seed <= o.last; ++seed) {
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (o.budget_s > 0 && elapsed > o.budget_s) break;
    ++runs;
    const auto k = known.find(seed);
    Options quiet = o;
    if (k != known.end()) quiet.shrink = false;
    const bool ok = RunOne(DrawSchedule(seed, o.max_faults), "seed-" + std::to_string(seed), quiet, cov);
    if (k != known.end()) {
      if (ok) {
        std::printf("FIXED? seed %llu, listed as finding %s, keeps the contract now: update %s\n",
                    static_cast<unsigned long long>(seed), k->second.c_str(), o.known.c_str());
        ++failed;
      } else {
        std::printf("  known: finding %s (tests/sim/findings/%s.sched)\n", k->second.c_str(),
                    k->second.c_str());
        ++known_failed;
      }
      continue;
    }
    if (!ok && ++failed >= 20) break;
  }
  if (known_failed > 0) {
    std::printf("%llu runs failed as known open findings (%s)\n",
                static_cast<unsigned long long>(known_failed), o.known.c_str());
  }
  elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%llu runs (seeds %llu..%llu), %llu failed, %.1f s, %.0f runs/min\n",
              static_cast<unsigned long long>(runs), static_cast<unsigned long long>(o.first),
              static_cast<unsigned long long>(o.first + runs - 1),
              static_cast<unsigned long long>(failed), elapsed,
              elapsed > 0 ? static_cast<double>(runs) * 60.0 / elapsed : 0.0);
  Print(cov, runs);
  return failed == 0 ? 0 : 1;
}
