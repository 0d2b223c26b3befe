// trainlet-check-trace: the gang's contract (invariants.h) over one run's
// trace, for the real-process soak (tests/soak/soak.py) and anyone with a
// trace. Input: JSON lines on stdin or in the file named, the first line the
// contract ({"contract": {"min_nodes": 2, "max_nodes": 4, "spares": 0,
// "max_restarts": 1, "rdzv_timeout_ms": 600000, "grace_ms": 25000}}), then
// one record per line ({"t": 1200, "ev": "gen", "inst": 3, "pod": 1,
// "generation": 2, "rank": 1, "world": 4, "restarts": 1}; keys as
// invariants.h's Record, "ev" its kind's name, "rank": "spare" for a spare).
// Output: one line per violation. Exit 0: none; 1: violations; 78: bad input
// (trace.h: CheckTrace).
#include <cstdio>
#include <fstream>
#include <iostream>

#include "trace.h"

int main(int argc, char** argv) {
  std::ifstream file;
  if (argc > 1) {
    file.open(argv[1]);
    if (!file) {
      std::fprintf(stderr, "trainlet-check-trace: cannot open '%s'\n", argv[1]);
      return 78;
    }
  }
  const auto result = trainlet::invariants::CheckTrace(argc > 1 ? file : std::cin);
  if (result.code == 78) {
    std::fprintf(stderr, "trainlet-check-trace: %s\n", result.error.c_str());
    return 78;
  }
  for (const auto& v : result.violations) std::printf("%s\n", v.c_str());
  return result.code;
}
