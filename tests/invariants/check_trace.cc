// trainlet-check-trace: the gang's contract (invariants.h) over one run's
// trace, for the real-process soak (tests/soak/soak.py) and anyone with a
// trace. Input: JSON lines on stdin or in the file named, the first line the
// contract ({"contract": {"min_nodes": 2, "max_nodes": 4, "spares": 0,
// "max_restarts": 1, "rdzv_timeout_ms": 600000, "grace_ms": 25000}}), then
// one record per line ({"t": 1200, "ev": "gen", "inst": 3, "pod": 1,
// "generation": 2, "rank": 1, "world": 4, "restarts": 1}; keys as
// invariants.h's Record, "ev" its kind's name, "rank": "spare" for a spare).
// Output: one line per violation. Exit 0: none; 1: violations; 78: bad input.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "invariants.h"

namespace {

using trainlet::invariants::Contract;
using trainlet::invariants::Record;

template <typename T>
void Take(const nlohmann::json& j, const char* key, T& out) {
  if (j.contains(key)) out = j.at(key).get<T>();
}

Contract ParseContract(const nlohmann::json& j) {
  Contract c;
  Take(j, "min_nodes", c.min_nodes);
  Take(j, "max_nodes", c.max_nodes);
  Take(j, "spares", c.spares);
  Take(j, "max_restarts", c.max_restarts);
  Take(j, "rdzv_timeout_ms", c.rdzv_timeout_ms);
  Take(j, "grace_ms", c.grace_ms);
  Take(j, "slack_ms", c.slack_ms);
  return c;
}

Record ParseRecord(const nlohmann::json& j) {
  Record r;
  const auto kind = trainlet::invariants::KindFromName(j.at("ev").get<std::string>());
  if (!kind) throw std::runtime_error("unknown ev " + j.at("ev").dump());
  r.kind = *kind;
  Take(j, "t", r.t_ms);
  Take(j, "pod", r.pod);
  r.inst = r.pod;
  Take(j, "inst", r.inst);
  Take(j, "generation", r.generation);
  if (j.contains("rank")) {
    r.rank = j.at("rank").is_string() ? trainlet::invariants::kSpareRank
                                      : j.at("rank").get<std::uint32_t>();
  }
  Take(j, "world", r.world);
  Take(j, "restarts", r.restarts);
  Take(j, "code", r.code);
  Take(j, "stranger", r.stranger);
  Take(j, "ranks", r.ranks);
  Take(j, "what", r.what);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::ifstream file;
  if (argc > 1) {
    file.open(argv[1]);
    if (!file) {
      std::fprintf(stderr, "trainlet-check-trace: cannot open '%s'\n", argv[1]);
      return 78;
    }
  }
  std::istream& in = argc > 1 ? file : std::cin;
  std::string line;
  std::optional<trainlet::invariants::Checker> checker;
  std::int64_t last = 0;
  int n = 0;
  try {
    while (std::getline(in, line)) {
      ++n;
      if (line.empty()) continue;
      const auto j = nlohmann::json::parse(line);
      if (j.contains("contract")) {
        checker.emplace(ParseContract(j.at("contract")));
        continue;
      }
      if (!checker) throw std::runtime_error("the first line must be the contract");
      const Record r = ParseRecord(j);
      last = std::max(last, r.t_ms);
      checker->On(r);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainlet-check-trace: line %d: %s\n", n, e.what());
    return 78;
  }
  if (!checker) {
    std::fprintf(stderr, "trainlet-check-trace: empty trace\n");
    return 78;
  }
  checker->Finish(last);
  for (const auto& v : checker->violations()) std::printf("%s\n", v.c_str());
  return checker->ok() ? 0 : 1;
}
