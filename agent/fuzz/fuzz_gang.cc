// libFuzzer entry for --gang (ParseGang): any bytes give a layout or a config
// error, never a crash; a layout prints back (ToString) to a value that parses
// to the same layout, and never holds more than the pod limit.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "trainlet/agent/spec/identity.h"

using trainlet::agent::ParseGang;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string value(reinterpret_cast<const char*>(data), size);
  auto layout = ParseGang("--gang", value);
  if (!layout.ok()) {
    if (layout.status().message().empty()) abort();
    return 0;
  }
  if (layout->roles.empty() || layout->total_pods() == 0 || layout->total_pods() > 1'000'000) {
    abort();
  }
  auto again = ParseGang("--gang", layout->ToString());
  if (!again.ok() || again->ToString() != layout->ToString() ||
      again->total_pods() != layout->total_pods()) {
    abort();
  }
  return 0;
}
