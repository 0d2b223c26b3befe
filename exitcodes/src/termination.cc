#include "trainlet/exitcodes/termination.h"

#include <cmath>

#include <nlohmann/json.hpp>

namespace trainlet::exitcodes {
namespace {

bool IsContinuation(unsigned char c) { return (c & 0xC0) == 0x80; }

std::string Dump(const nlohmann::json& j) {
  // Replace invalid UTF-8 instead of throwing: worker output is arbitrary bytes.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string Utf8Head(const std::string& text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  std::size_t end = max_bytes;
  while (end > 0 && IsContinuation(static_cast<unsigned char>(text[end]))) --end;
  return text.substr(0, end);
}

std::string Utf8Tail(const std::string& text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  std::size_t start = text.size() - max_bytes;
  while (start < text.size() && IsContinuation(static_cast<unsigned char>(text[start]))) ++start;
  return text.substr(start);
}

std::string TerminationMessage(const TerminationInfo& info, std::size_t limit) {
  nlohmann::json j;
  j["class"] = std::string(ClassName(info.verdict.failure_class));
  j["code"] = info.verdict.code;
  j["reason"] = info.verdict.reason;
  j["evidence"] = info.verdict.evidence;
  if (info.verdict.rule > 0) j["rule"] = info.verdict.rule;
  j["pod_index"] = info.pod_index;
  j["attempt"] = info.attempt;
  if (!info.node_name.empty()) j["node"] = info.node_name;
  std::string tail;
  if (info.first_failure) {
    const WorkerFailure& f = *info.first_failure;
    j["first_failure"] = {{"local_rank", f.local_rank},
                          {"rank", f.rank},
                          {"exit", f.exit.Describe()}};
    tail = f.stderr_tail;
  }
  if (info.replaced_by) {
    j["replaced_by"] = {{"spare", info.replaced_by->spare},
                        {"node_rank", info.replaced_by->node_rank},
                        {"generation", info.replaced_by->generation}};
  }
  if (!info.phase_ms.empty()) {
    nlohmann::json phases = nlohmann::json::object();
    for (const auto& [k, v] : info.phase_ms) phases[k] = std::round(v * 10) / 10;  // 0.1 ms
    j["phases_ms"] = phases;
  }
  // Fit: first without the tail, shortening the reason if even that is too
  // long, then give the tail whatever room is left. Escaping can grow text up to
  // 6x (\u00XX), so shrink until the dump fits.
  std::string reason = info.verdict.reason;
  j["stderr_tail"] = "";
  while (Dump(j).size() > limit && !reason.empty()) {
    reason = Utf8Head(reason, reason.size() / 2);
    j["reason"] = reason + "...";
  }
  std::size_t room = limit - std::min(limit, Dump(j).size());
  std::string t = Utf8Tail(tail, room);
  for (;;) {
    j["stderr_tail"] = t;
    if (Dump(j).size() <= limit || t.empty()) break;
    std::size_t over = Dump(j).size() - limit;
    t = Utf8Tail(t, t.size() > over ? t.size() - over : 0);
  }
  std::string out = Dump(j);
  return out.size() <= limit ? out : "{}";
}

}  // namespace trainlet::exitcodes
