// Google Benchmark: exitcodes::Classify on the evidence a failing pod gathers
// (exit code only; an 8 KiB stderr tail searched for markers; no marker found).
#include <benchmark/benchmark.h>

#include "trainlet/exitcodes/classify.h"

namespace ec = trainlet::exitcodes;

namespace {

ec::Evidence WithTail(std::string tail, int exit_status) {
  ec::Evidence e;
  e.first_failure = ec::WorkerFailure{.local_rank = 1, .rank = 9,
                                      .exit = {.signaled = false, .exit_status = exit_status},
                                      .error_file_message = "",
                                      .stderr_tail = std::move(tail)};
  return e;
}

std::string Filler(std::size_t bytes) {
  std::string s;
  while (s.size() < bytes) s += "step 1234 loss 0.4321 lr 3.0e-4 tokens/s 123456\n";
  s.resize(bytes);
  return s;
}

void Run(benchmark::State& state, const ec::Evidence& e) {
  const ec::ExitCodeTable codes;
  const ec::MarkerTable markers = ec::MarkerTable::Defaults();
  for (auto _ : state) benchmark::DoNotOptimize(ec::Classify(e, codes, markers));
}

void BM_ClassifyExitCode(benchmark::State& state) { Run(state, WithTail("", 3)); }
BENCHMARK(BM_ClassifyExitCode);

void BM_ClassifyNoMarker8KiB(benchmark::State& state) { Run(state, WithTail(Filler(8192), 1)); }
BENCHMARK(BM_ClassifyNoMarker8KiB);

void BM_ClassifyNcclMarker8KiB(benchmark::State& state) {
  Run(state, WithTail(Filler(8000) + "\nRuntimeError: NCCL error: unhandled system error\n", 1));
}
BENCHMARK(BM_ClassifyNcclMarker8KiB);

}  // namespace
