// Google Benchmark: exitcodes::Classify on the evidence a failing pod gathers
// (exit code only; an 8 KiB stderr tail searched for markers; no marker found).
#include <benchmark/benchmark.h>

#include "trainlet/exitcodes/classify.h"
#include "trainlet/exitcodes/marker_scanner.h"

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

// exitcodes::MarkerScanner over forwarded output, in the pump's 64 KiB reads:
// bench/logs.py's lines (digits and 'x': no anchor byte at all), and a
// training log (log lines, NCCL INFO lines, a traceback, tqdm) with many.
namespace {

std::string Repeat(const std::string& unit, std::size_t bytes) {
  std::string s;
  while (s.size() < bytes) s += unit;
  s.resize(bytes);
  return s;
}

void Scan(benchmark::State& state, const std::string& text,
          ec::MarkerScanner::Search search = ec::MarkerScanner::Search::kBest) {
  const ec::MarkerTable markers = ec::MarkerTable::Defaults();
  if (!ec::MarkerScanner::Runs(search)) {
    state.SkipWithError("this CPU does not run that search");
    return;
  }
  constexpr std::size_t kRead = 64 * 1024;
  for (auto _ : state) {
    ec::MarkerScanner scanner(markers, search);
    for (std::size_t i = 0; i < text.size(); i += kRead) {
      scanner.Feed(std::string_view(text).substr(i, kRead));
    }
    benchmark::DoNotOptimize(scanner.best());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size()));
}

void BM_ScanLinegenLines(benchmark::State& state) {
  Scan(state, Repeat("000000012345 0 " + std::string(84, 'x') + "\n", 4 << 20));
}
BENCHMARK(BM_ScanLinegenLines);

// The same lines, one 64 KiB read's worth scanned again and again: in the
// cache, as in the pump, which scans each read right after read(2); by
// search (MarkerScanner::Search: 0 the best this CPU runs, 1 portable, 2
// SSSE3, 3 AVX2).
void BM_ScanLinegenLinesCached(benchmark::State& state) {
  Scan(state, Repeat("000000012345 0 " + std::string(84, 'x') + "\n", 64 << 10),
       static_cast<ec::MarkerScanner::Search>(state.range(0)));
}
BENCHMARK(BM_ScanLinegenLinesCached)->DenseRange(0, 3);

void BM_ScanTrainingLog(benchmark::State& state) {
  Scan(state, Repeat(
      "[2026-12-01 10:00:00,123] INFO train.py:88: Epoch 3/10 step 1200/5000 loss=0.4321 "
      "lr=3.0e-04 grad_norm=1.23 tokens/s=123456\n"
      "node-3:77:91 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[2] via P2P/IPC/read\n"
      "Traceback (most recent call last):\n"
      "  File \"/usr/lib/python3/dist-packages/torch/nn/modules/module.py\", line 1501, in "
      "_call_impl\n    return forward_call(*args, **kwargs)\n"
      "100%|##########| 5000/5000 [01:23<00:00, 60.12it/s]\n"
      "Saving checkpoint to /ckpt/step-1200.pt for every rank of the world\n",
      4 << 20));
}
BENCHMARK(BM_ScanTrainingLog);

}  // namespace
