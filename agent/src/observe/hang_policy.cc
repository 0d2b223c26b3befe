#include "trainlet/agent/observe/hang_policy.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

namespace trainlet::agent {

namespace {

std::string Seconds(std::chrono::milliseconds d) {
  return fmt::format("{:.1f} s", std::chrono::duration<double>(d).count());
}

void Append(std::string& list, const std::string& item) {
  list += (list.empty() ? "" : ", ") + item;
}

}  // namespace

HangPolicy::HangPolicy(HangOptions options, int workers)
    : options_(options), noted_(static_cast<std::size_t>(std::max(workers, 0)), false) {}

std::chrono::milliseconds HangPolicy::PollInterval() const {
  auto shortest = options_.timeout;
  if (options_.start_timeout) shortest = std::min(shortest, *options_.start_timeout);
  return std::clamp(shortest / 4, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
}

HangCheck HangPolicy::Check(std::chrono::milliseconds elapsed,
                            const std::vector<HeartbeatSample>& samples) {
  HangCheck out;
  std::string silent;  // never touched, not watched: noted once
  for (std::size_t lr = 0; lr < noted_.size() && lr < samples.size(); ++lr) {
    const HeartbeatSample& s = samples[lr];
    if (!s.running) continue;
    const std::string who = "local rank " + std::to_string(lr);
    if (s.since_touch) {
      if (*s.since_touch > options_.timeout) {
        Append(out.hung, who + " showed no progress for " + Seconds(options_.timeout));
      }
    } else if (options_.start_timeout) {
      if (elapsed > *options_.start_timeout) {
        Append(out.hung, who + " never showed progress in " + Seconds(*options_.start_timeout));
      }
    } else if (elapsed > options_.timeout && !noted_[lr]) {
      noted_[lr] = true;
      Append(silent, std::to_string(lr));
    }
  }
  if (!silent.empty()) {
    out.note = "local rank(s) " + silent + " did not touch TRAINLET_HEARTBEAT_FILE in " +
               Seconds(options_.timeout) +
               ": not watched for hangs until they do (--hang-start-timeout requires a first "
               "touch)";
  }
  return out;
}

std::optional<std::uint64_t> ParseSignalMask(std::string_view status, std::string_view field) {
  std::size_t at = 0;
  while (at < status.size()) {
    std::size_t end = status.find('\n', at);
    if (end == std::string_view::npos) end = status.size();
    std::string_view line = status.substr(at, end - at);
    at = end + 1;
    if (line.size() <= field.size() || line.substr(0, field.size()) != field ||
        line[field.size()] != ':') {
      continue;
    }
    std::string_view v = line.substr(field.size() + 1);
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    std::uint64_t mask = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), mask, 16);
    if (ec != std::errc() || p == v.data() || p != v.data() + v.size()) return std::nullopt;
    return mask;
  }
  return std::nullopt;
}

bool MaskHas(std::uint64_t mask, int signo) {
  return signo >= 1 && signo <= 64 && ((mask >> (signo - 1)) & 1U) != 0;
}

DiagnosticsPlan PlanDiagnostics(int signo, const std::vector<pid_t>& worker_groups,
                                const std::vector<ProcessSignals>& processes) {
  DiagnosticsPlan plan;
  for (std::size_t lr = 0; lr < worker_groups.size(); ++lr) {
    const pid_t group = worker_groups[lr];
    if (group <= 0) continue;  // exited: its group id may belong to a stranger now
    bool any = false;
    for (const ProcessSignals& p : processes) {
      if (p.pgid != group || !p.caught || !MaskHas(*p.caught, signo)) continue;
      plan.send_to.push_back(p.pid);
      any = true;
    }
    if (!any) plan.without_handler.push_back(static_cast<int>(lr));
  }
  return plan;
}

}  // namespace trainlet::agent
