// libFuzzer entry for the simulator's schedule parser (tests/sim/schedule.cc,
// sim.h ParseSchedule): any text is a schedule or a one-line error, never a
// crash; what parses stays within the documented bounds and prints
// (ScheduleText) to a text that parses to the same schedule.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "sim.h"

using namespace trainlet::sim;

namespace {
void Check(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::string error;
  const auto s = ParseSchedule(text, &error);
  if (!s) {
    Check(!error.empty() && error.find('\n') == std::string::npos);
    return 0;
  }
  const SimConfig& c = s->config;
  Check(c.min_nodes >= 1 && c.min_nodes <= c.max_nodes && c.max_nodes <= kMaxSchedulePods);
  Check(c.pods >= 1 && c.pods <= c.max_nodes + c.spares);
  Check(c.workers >= 1 && c.workers <= kMaxScheduleWorkers);
  for (const Fault& f : s->faults) {
    Check(f.pod < c.max_nodes + c.spares && f.t_ms >= 0 && f.arg >= 0);
  }
  const std::string printed = ScheduleText(*s);
  const auto again = ParseSchedule(printed, &error);
  Check(again.has_value());
  Check(ScheduleText(*again) == printed);
  return 0;
}
