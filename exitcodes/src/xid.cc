#include "trainlet/exitcodes/xid.h"

#include <array>

namespace trainlet::exitcodes {
namespace {

struct XidRow {
  std::uint64_t xid;
  XidCause cause;
  std::string_view meaning;
};

// From NVIDIA's Xid catalogue, https://docs.nvidia.com/deploy/xid-errors/
// ("Xid Error Listing" and its per-Xid causes). Application: the listed cause
// is a user application error, and the GPU serves the next program well.
// Hardware: ECC, memory remapping, NVLink, bus, power, micro-controller,
// GSP firmware: the GPU or node needs attention (reset, drain, service).
constexpr auto kXidTable = std::to_array<XidRow>({
    {13, XidCause::kApplication, "graphics engine exception"},
    {31, XidCause::kApplication, "GPU memory page fault"},
    {32, XidCause::kHardware, "invalid or corrupted push buffer stream"},
    {38, XidCause::kHardware, "driver firmware error"},
    {43, XidCause::kApplication, "GPU stopped processing"},
    {45, XidCause::kApplication, "preemptive cleanup, due to previous errors"},
    {48, XidCause::kHardware, "double-bit ECC error"},
    {54, XidCause::kHardware, "auxiliary power is not connected to the GPU board"},
    {61, XidCause::kHardware, "internal micro-controller breakpoint/warning"},
    {62, XidCause::kHardware, "internal micro-controller halt"},
    {63, XidCause::kHardware, "ECC page retirement or row remapping recorded"},
    {64, XidCause::kHardware, "ECC page retirement or row remapper recording failure"},
    {74, XidCause::kHardware, "NVLink error"},
    {79, XidCause::kHardware, "GPU has fallen off the bus"},
    {92, XidCause::kHardware, "high single-bit ECC error rate"},
    {94, XidCause::kHardware, "contained ECC error"},
    {95, XidCause::kHardware, "uncontained ECC error"},
    {119, XidCause::kHardware, "GSP RPC timeout"},
    {120, XidCause::kHardware, "GSP error"},
});

}  // namespace

XidInfo LookUpXid(std::uint64_t xid) {
  for (const XidRow& r : kXidTable) {
    if (r.xid == xid) return {r.cause, r.meaning};
  }
  return {};
}

std::optional<std::uint64_t> ParseXid(std::string_view line) {
  std::size_t at = line.find("Xid");
  if (at == std::string_view::npos) return std::nullopt;
  std::size_t i = at + 3;
  auto skip = [&](std::string_view chars) {
    while (i < line.size() && chars.find(line[i]) != std::string_view::npos) ++i;
  };
  skip(" \t");
  if (i < line.size() && line[i] == '(') {
    std::size_t close = line.find(')', i);
    if (close == std::string_view::npos) return std::nullopt;
    i = close + 1;
  }
  skip(" \t:");
  std::uint64_t n = 0;
  std::size_t digits = 0;
  for (; i < line.size() && line[i] >= '0' && line[i] <= '9' && digits < 9; ++i, ++digits) {
    n = n * 10 + static_cast<std::uint64_t>(line[i] - '0');
  }
  if (digits == 0) return std::nullopt;
  return n;
}

}  // namespace trainlet::exitcodes
