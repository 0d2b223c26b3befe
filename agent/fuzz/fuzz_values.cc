// libFuzzer entry for the front end's value parsers (values.h): the input is
// values separated by NUL bytes. Any bytes give a value in its documented
// range or a config error that names the source, never a crash.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "trainlet/agent/base/address.h"
#include "trainlet/agent/base/values.h"

using namespace trainlet::agent;

namespace {

template <class R>
void CheckNamed(const R& r) {
  if (!r.ok() && r.status().message().find("--what") == std::string::npos) abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string all(reinterpret_cast<const char*>(data), size);
  const std::vector<std::string> values = SplitOn(all, '\0');
  if (values.empty()) abort();  // SplitOn gives at least one piece
  for (std::size_t i = 0; i < values.size() && i < 64; ++i) {
    const std::string& v = values[i];
    auto count = ParseCount("--what", v, 1000);
    CheckNamed(count);
    if (count.ok() && (*count > 1000 || std::to_string(*count) != v)) abort();  // canonical
    auto port = ParsePort("--what", v);
    CheckNamed(port);
    if (port.ok() && *port == 0) abort();
    auto seconds = ParseSeconds("--what", v);
    CheckNamed(seconds);
    if (seconds.ok() && (seconds->count() < 1 || seconds->count() > 10'000'000'000LL)) abort();
    auto or_zero = ParseSecondsOrZero("--what", v);
    CheckNamed(or_zero);
    if (or_zero.ok() != (seconds.ok() || v == "0")) abort();
    auto rate = ParseRate("--what", v);
    CheckNamed(rate);
    if (rate.ok() && (*rate < 0 || !IsPlainDecimal(v))) abort();
    auto signal = ParseSignal("--what", v);
    CheckNamed(signal);
    if (signal.ok() && (*signal < 1 || *signal > 31 || *signal == 9 || *signal == 19)) abort();
    auto nnodes = ParseNnodes("--what", v);
    CheckNamed(nnodes);
    if (nnodes.ok()) {  // "N" or "MIN:MAX", canonical: it parses to itself
      auto again = ParseNnodes("--what", *nnodes);
      if (!again.ok() || *again != *nnodes) abort();
    }
    auto endpoint = ParseEndpoint("--what", v, 1);
    CheckNamed(endpoint);
    if (endpoint.ok() && endpoint->host.empty()) abort();
    if (auto st = ValidateDnsName("--what", v); !st.ok() && st.message().find("--what") == std::string::npos) {
      abort();
    }
  }
  return 0;
}
