// Google Benchmark: the agent's line prefixing (agent/src/run/pump.h LinePrefixer)
// on one 64 KiB read of 100-byte lines, and of 20-byte lines.
#include <benchmark/benchmark.h>

#include <string>

#include "../../agent/src/run/pump.h"

namespace {

std::string Lines(std::size_t line_bytes) {
  std::string s;
  for (int i = 0; s.size() + line_bytes <= 64 * 1024; ++i) {
    std::string line = std::to_string(i) + " ";
    line.resize(line_bytes - 1, 'x');
    s += line + '\n';
  }
  s += "a line that goes on in the next read";
  return s;
}

void BM_PrefixLines(benchmark::State& state) {
  const std::string data = Lines(static_cast<std::size_t>(state.range(0)));
  trainlet::agent::LinePrefixer p("[rank12]: ", 64 * 1024);
  for (auto _ : state) {
    p.Feed(data);
    benchmark::DoNotOptimize(p.output().data());
    p.ClearOutput();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * data.size()));
}
BENCHMARK(BM_PrefixLines)->Arg(100)->Arg(20);

}  // namespace
