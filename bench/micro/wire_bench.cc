// Google Benchmark: the rendezvous wire codec (encode and decode of the frames
// a rendezvous and its control channel exchange). Built with -DTRAINLET_BENCH=ON.
#include <benchmark/benchmark.h>

#include "trainlet/rendezvous/launch.h"
#include "trainlet/rendezvous/wire.h"

namespace wire = trainlet::rendezvous::wire;

namespace {

wire::Hello SampleHello() {
  return trainlet::rendezvous::MakeHello({.job_id = "trainer-0c8f5d2e-6f4e-4b1c-9d0a-3a5e1f7b2c44",
                                          .attempt = 0,
                                          .index = 4711,
                                          .nnodes = 12500,
                                          .nproc_per_node = 8,
                                          .master_port = 29500});
}

wire::Assignment SampleAssignment() {
  return {.generation = 1, .nnodes = 12500, .world_size = 100000, .rank_base = 37688,
          .master_addr = "10.12.34.56", .master_port = 29500, .run_id = "trainer",
          .job_id = "trainer-0c8f5d2e-6f4e-4b1c-9d0a-3a5e1f7b2c44", .attempt = 0};
}

void BM_EncodeHello(benchmark::State& state) {
  wire::Message m = SampleHello();
  for (auto _ : state) benchmark::DoNotOptimize(wire::Encode(m));
}
BENCHMARK(BM_EncodeHello);

void BM_EncodeAssignment(benchmark::State& state) {
  wire::Message m = SampleAssignment();
  for (auto _ : state) benchmark::DoNotOptimize(wire::Encode(m));
}
BENCHMARK(BM_EncodeAssignment);

void BM_EncodeHeartbeat(benchmark::State& state) {
  wire::Message m = wire::Heartbeat{};
  for (auto _ : state) benchmark::DoNotOptimize(wire::Encode(m));
}
BENCHMARK(BM_EncodeHeartbeat);

// One connection's decoder fed one whole frame, as a leader reads a hello.
void DecodeOne(benchmark::State& state, const wire::Message& m) {
  auto frame = wire::Encode(m);
  for (auto _ : state) {
    wire::Decoder d;
    if (!d.Feed(frame).ok()) state.SkipWithError("feed");
    auto next = d.Next();
    if (!next.ok() || !next->has_value()) state.SkipWithError("decode");
    benchmark::DoNotOptimize(next);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * frame.size()));
}
void BM_DecodeHello(benchmark::State& state) { DecodeOne(state, SampleHello()); }
BENCHMARK(BM_DecodeHello);
void BM_DecodeAssignment(benchmark::State& state) { DecodeOne(state, SampleAssignment()); }
BENCHMARK(BM_DecodeAssignment);

// A long-lived control channel: heartbeats through one decoder, arriving in
// reads of state.range(0) frames.
void BM_DecodeHeartbeatStream(benchmark::State& state) {
  auto one = wire::Encode(wire::Heartbeat{});
  std::vector<std::uint8_t> chunk;
  for (int i = 0; i < state.range(0); ++i) chunk.insert(chunk.end(), one.begin(), one.end());
  wire::Decoder d;
  for (auto _ : state) {
    if (!d.Feed(chunk).ok()) state.SkipWithError("feed");
    for (;;) {
      auto next = d.Next();
      if (!next.ok()) state.SkipWithError("decode");
      if (!next->has_value()) break;
    }
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_DecodeHeartbeatStream)->Arg(1)->Arg(64);

void BM_Fingerprint(benchmark::State& state) {
  auto config = SampleHello().config;
  for (auto _ : state) benchmark::DoNotOptimize(wire::Fingerprint(config));
}
BENCHMARK(BM_Fingerprint);

}  // namespace
