#include "trace.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "invariants.h"

namespace trainlet::invariants {

namespace {

// `v` as a T: nlohmann converts any number (a negative one, a float) to an
// integer without a word; a field that cannot hold the value is refused instead.
template <typename T>
T Get(const nlohmann::json& v, const char* key) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (!v.is_number_integer()) throw std::runtime_error(std::string(key) + ": not an integer");
    const bool fits =
        v.is_number_unsigned()
            ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<T>::max())
            : v.get<std::int64_t>() >= static_cast<std::int64_t>(std::numeric_limits<T>::min()) &&
                  (v.get<std::int64_t>() < 0 ||
                   static_cast<std::uint64_t>(v.get<std::int64_t>()) <=
                       static_cast<std::uint64_t>(std::numeric_limits<T>::max()));
    if (!fits) throw std::runtime_error(std::string(key) + ": out of range");
  }
  return v.get<T>();
}

template <typename T>
void Take(const nlohmann::json& j, const char* key, T& out) {
  if (j.contains(key)) out = Get<T>(j.at(key), key);
}

Contract ParseContract(const nlohmann::json& j) {
  if (!j.is_object()) throw std::runtime_error("the contract is not an object");
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
  if (!j.is_object() || !j.contains("ev")) throw std::runtime_error("a record without \"ev\"");
  Record r;
  const auto kind = KindFromName(j.at("ev").get<std::string>());
  if (!kind) throw std::runtime_error("unknown ev " + j.at("ev").dump());
  r.kind = *kind;
  Take(j, "t", r.t_ms);
  Take(j, "pod", r.pod);
  r.inst = r.pod;
  Take(j, "inst", r.inst);
  Take(j, "generation", r.generation);
  if (j.contains("rank") && j.at("rank").is_string()) r.rank = kSpareRank;
  else Take(j, "rank", r.rank);
  Take(j, "world", r.world);
  Take(j, "restarts", r.restarts);
  Take(j, "code", r.code);
  Take(j, "stranger", r.stranger);
  if (j.contains("ranks")) {
    if (!j.at("ranks").is_array()) throw std::runtime_error("ranks: not an array");
    for (const auto& v : j.at("ranks")) r.ranks.push_back(Get<std::uint32_t>(v, "ranks"));
  }
  Take(j, "what", r.what);
  return r;
}

}  // namespace

TraceCheck CheckTrace(std::istream& in) {
  TraceCheck out;
  std::optional<Checker> checker;
  std::int64_t last = 0;
  int n = 0;
  try {
    for (std::string line; std::getline(in, line);) {
      ++n;
      if (line.size() > kMaxTraceLine) throw std::runtime_error("a line over 1 MiB");
      if (line.empty()) continue;
      const auto j = nlohmann::json::parse(line);
      if (j.is_object() && j.contains("contract")) {
        checker.emplace(ParseContract(j.at("contract")));
        continue;
      }
      if (!checker) throw std::runtime_error("the first line must be the contract");
      const Record r = ParseRecord(j);
      last = std::max(last, r.t_ms);
      checker->On(r);
    }
  } catch (const std::exception& e) {  // nlohmann's parse and type errors, ours
    out.code = 78;
    out.error = "line " + std::to_string(n) + ": " + e.what();
    return out;
  }
  if (!checker) {
    out.code = 78;
    out.error = "empty trace";
    return out;
  }
  checker->Finish(last);
  out.violations = checker->violations();
  out.code = checker->ok() ? 0 : 1;
  return out;
}

}  // namespace trainlet::invariants
