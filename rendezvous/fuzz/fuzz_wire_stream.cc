// libFuzzer entry for the wire decoder over a long stream: the input (after two
// bytes that seed the read sizes) is repeated until 256 KiB have been fed, in reads
// of pseudo-random sizes up to one maximal frame, draining after each read as
// the agent does. However the frames fall across reads, the decoder must never
// hold more than Decoder::kMaxBuffered bytes (a misaligned stream of heartbeats
// once grew the leader by ~17 MB/s), and must keep decoding what it decoded on
// the first pass.
#include <cstdint>
#include <cstdlib>

#include "trainlet/rendezvous/wire.h"

using namespace trainlet::rendezvous::wire;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  std::uint32_t state = std::uint32_t(data[0]) << 8 | data[1];  // read-size PRNG seed
  std::span<const std::uint8_t> body(data + 2, size - 2);
  constexpr std::size_t kTotal = 256 << 10;
  Decoder d;
  std::size_t fed = 0, pos = 0;
  while (fed < kTotal) {
    state = state * 1103515245u + 12345u;  // LCG: any sizes, deterministic per input
    std::size_t want = 1 + (state >> 8) % (kHeaderSize + kMaxPayload);
    // One read: `want` bytes of the endlessly repeated body.
    std::vector<std::uint8_t> read;
    read.reserve(want);
    while (read.size() < want) {
      std::size_t n = std::min(want - read.size(), body.size() - pos);
      read.insert(read.end(), body.begin() + pos, body.begin() + pos + n);
      pos = (pos + n) % body.size();
    }
    if (!d.Feed(read).ok()) return 0;
    fed += read.size();
    for (;;) {
      auto m = d.Next();
      if (!m.ok()) return 0;  // the stream is not a valid one: the agent closes it
      if (!m->has_value()) break;
    }
    if (d.held() > Decoder::kMaxBuffered) abort();
    if (d.buffered() >= kHeaderSize + kMaxPayload) abort();  // drained: at most a partial frame
  }
  return 0;
}
