// Google Benchmark: the process listings a stop makes (supervisor.h):
// ListDescendants of this process, its children only and all of them, with
// `Arg` children sleeping. Each call runs at the start of a stop on every pod.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include <benchmark/benchmark.h>

#include "trainlet/agent/run/supervisor.h"

namespace {

std::vector<pid_t> SpawnSleepers(int n) {
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::pause();
      ::_exit(0);
    }
    if (pid > 0) pids.push_back(pid);
  }
  return pids;
}

void Reap(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
}

void BM_ListChildren(benchmark::State& state) {
  auto pids = SpawnSleepers(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    benchmark::DoNotOptimize(trainlet::agent::ListDescendants(::getpid(), true));
  }
  Reap(pids);
}
BENCHMARK(BM_ListChildren)->Arg(1)->Arg(8);

void BM_ListDescendants(benchmark::State& state) {
  auto pids = SpawnSleepers(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    benchmark::DoNotOptimize(trainlet::agent::ListDescendants(::getpid()));
  }
  Reap(pids);
}
BENCHMARK(BM_ListDescendants)->Arg(1)->Arg(8);

}  // namespace
