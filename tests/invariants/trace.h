// tests/invariants/trace.h — the contract checker's trace format (JSON lines,
// check_trace.cc documents it) read and checked: what trainlet-check-trace
// runs, apart from main so that the fuzz target (tests/fuzz/fuzz_trace.cc)
// and the simulator-soak agreement share it.
#pragma once

#include <istream>
#include <string>
#include <vector>

namespace trainlet::invariants {

struct TraceCheck {
  int code = 0;                         // 0: keeps the contract; 1: violations; 78: bad input
  std::vector<std::string> violations;  // one line each (code 1)
  std::string error;                    // "line N: what" (code 78)
};

// Reads the trace from `in` to its end and checks it (Checker::On per record,
// Finish at the latest record's time). Bad input (not JSON, the contract not
// first, an unknown "ev", a field of the wrong type or out of its range, a
// line longer than kMaxTraceLine) is code 78 with the first bad line's number;
// never an exception. Memory grows with the trace (the checker keeps its
// instances and generations).
TraceCheck CheckTrace(std::istream& in);

inline constexpr std::size_t kMaxTraceLine = 1 << 20;  // bytes; a record is under 1 KiB

}  // namespace trainlet::invariants
