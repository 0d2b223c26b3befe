// libFuzzer entry for the wire decoder: arbitrary bytes, split at a fuzzer-chosen
// point, must never crash, leak or allocate beyond the limits; every decoded
// message must re-encode to a frame that decodes to the same message.
#include <cstdint>
#include <cstdlib>

#include "trainlet/rendezvous/wire.h"

using namespace trainlet::rendezvous::wire;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::size_t split = data[0] % (size);
  std::span<const std::uint8_t> in(data + 1, size - 1);
  Decoder d;
  for (auto part : {in.first(std::min(split, in.size())), in.subspan(std::min(split, in.size()))}) {
    if (!d.Feed(part).ok()) return 0;
    for (;;) {
      auto m = d.Next();
      if (!m.ok() || !m->has_value()) break;
      auto again = Encode(**m);
      Decoder d2;
      if (!d2.Feed(again).ok()) abort();
      auto m2 = d2.Next();
      if (!m2.ok() || !m2->has_value() || !(**m2 == **m)) abort();
    }
  }
  return 0;
}
