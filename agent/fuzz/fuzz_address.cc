// libFuzzer entry for the one address parser (address.h): the input is values
// separated by NUL bytes, each parsed under both PortRules. Any bytes give a
// config error that names the source in one line, or an address that is
// canonical: parsing its host again (bare, and bracketed) gives the same host,
// an IP address is one (IsIpAddress) and a name none, no host keeps brackets
// or a zone id, and a port comes only where one may follow.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "trainlet/agent/base/address.h"
#include "trainlet/agent/base/values.h"

using namespace trainlet::agent;

namespace {

void Check(const std::string& v, PortRule rule) {
  auto a = ParseHostAddress("--what", v, rule);
  if (!a.ok()) {
    const std::string& m = a.status().message();
    if (m.find("--what") == std::string::npos) abort();
    if (m.find('\n') != std::string::npos && v.find('\n') == std::string::npos) abort();
    return;
  }
  if (a->host.empty() || a->host.find_first_of("[]%") != std::string::npos) abort();
  if (rule == PortRule::kNone && a->port) abort();
  if (a->is_ip() != IsIpAddress(a->host)) abort();
  for (const std::string& again : {a->host, "[" + a->host + "]"}) {
    auto b = ParseHostAddress("--what", again, PortRule::kNone);
    if (!b.ok() || b->host != a->host || b->kind != a->kind) abort();
  }
  if (a->kind == HostKind::kIPv6) {  // JoinHostPort brackets it; an endpoint reads it back
    auto e = ParseHostAddress("--what", JoinHostPort(a->host, 7), PortRule::kOptional);
    if (!e.ok() || e->host != a->host || e->port != 7) abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string all(reinterpret_cast<const char*>(data), size);
  const auto values = SplitOn(all, '\0');
  for (std::size_t i = 0; i < values.size() && i < 64; ++i) {
    Check(values[i], PortRule::kNone);
    Check(values[i], PortRule::kOptional);
  }
  return 0;
}
