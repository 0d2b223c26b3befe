// libFuzzer entry for the contract checker's trace reader and the checker
// itself (tests/invariants/trace.h CheckTrace, invariants.h): any bytes are a
// trace that keeps the contract (0), breaks it (1, with violations) or is bad
// input (78, one error line): never a crash or an exception.
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#include "trace.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  const auto r = trainlet::invariants::CheckTrace(in);
  const bool ok = (r.code == 0 && r.violations.empty() && r.error.empty()) ||
                  (r.code == 1 && !r.violations.empty() && r.error.empty()) ||
                  (r.code == 78 && !r.error.empty());
  if (!ok) std::abort();
  return 0;
}
