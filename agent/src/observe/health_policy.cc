#include "trainlet/agent/observe/health_policy.h"

#include <algorithm>
#include <map>

namespace trainlet::agent {

namespace {

// Lower goes first: a request still arriving before a /metrics body being
// written, before a probe's answer.
int EvictionRank(HealthConnState s) {
  switch (s) {
    case HealthConnState::kReading:
      return 0;
    case HealthConnState::kAnsweringMetrics:
      return 1;
    case HealthConnState::kAnswering:
      return 2;
  }
  return 2;
}

}  // namespace

std::optional<std::size_t> HealthConnections::Victim(
    const std::function<bool(const Entry&)>& eligible) const {
  // Per address: how many it holds and where its oldest eligible one is.
  // entries_ is oldest first, so the first seen is the oldest.
  struct Holding {
    std::size_t count = 0;
    std::optional<std::size_t> oldest;
  };
  std::map<std::string_view, Holding> by_address;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    Holding& h = by_address[entries_[i].address];
    ++h.count;
    if (!h.oldest && eligible(entries_[i])) h.oldest = i;
  }
  std::erase_if(by_address, [](const auto& kv) { return !kv.second.oldest; });
  if (by_address.empty()) return std::nullopt;
  auto most = std::min_element(by_address.begin(), by_address.end(), [](const auto& a,
                                                                        const auto& b) {
    if (a.second.count != b.second.count) return a.second.count > b.second.count;
    return *a.second.oldest < *b.second.oldest;
  });
  std::optional<std::size_t> victim;
  for (std::size_t i = *most->second.oldest; i < entries_.size(); ++i) {
    if (entries_[i].address != most->first || !eligible(entries_[i])) continue;
    if (!victim || EvictionRank(entries_[i].state) < EvictionRank(entries_[*victim].state)) {
      victim = i;
    }
  }
  return victim;
}

HealthConnections::Eviction HealthConnections::Forget(std::size_t index) {
  const Entry& e = entries_[index];
  Eviction out{e.id, e.address, 0, e.state};
  out.from_address = static_cast<std::size_t>(std::count_if(
      entries_.begin(), entries_.end(), [&](const Entry& x) { return x.address == out.address; }));
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(index));
  return out;
}

std::optional<HealthConnections::Eviction> HealthConnections::MakeRoom(
    Clock::time_point now, std::chrono::milliseconds grace) {
  // An idle one goes at once only when its address lost one within the grace
  // (a flood reconnecting): a probe whose request is a little late is not.
  auto flooding = [&](const std::string& address) {
    auto it = last_evicted_.find(address);
    return it != last_evicted_.end() && now - it->second < grace;
  };
  auto v = Victim([&](const Entry& e) {
    if (e.state == HealthConnState::kAnswering) return false;
    const bool idle = e.state == HealthConnState::kReading && !e.received;
    return (idle && flooding(e.address)) || now - e.since >= grace;
  });
  if (!v) return std::nullopt;
  if (last_evicted_.size() >= kMaxRemembered) {
    std::erase_if(last_evicted_, [&](const auto& kv) { return now - kv.second >= grace; });
  }
  if (last_evicted_.size() < kMaxRemembered) last_evicted_[entries_[*v].address] = now;
  return Forget(*v);
}

std::optional<HealthConnections::Eviction> HealthConnections::Admit(std::uint64_t id,
                                                                    std::string address,
                                                                    Clock::time_point now) {
  std::optional<Eviction> out;
  if (entries_.size() >= max_) {
    if (auto v = Victim([](const Entry&) { return true; })) out = Forget(*v);
  }
  entries_.push_back(Entry{id, std::move(address), HealthConnState::kReading, now});
  return out;
}

void HealthConnections::Set(std::uint64_t id, HealthConnState state) {
  for (Entry& e : entries_) {
    if (e.id == id) e.state = state;
  }
}

void HealthConnections::Received(std::uint64_t id) {
  for (Entry& e : entries_) {
    if (e.id == id) e.received = true;
  }
}

void HealthConnections::Remove(std::uint64_t id) {
  std::erase_if(entries_, [id](const Entry& e) { return e.id == id; });
}

HealthReply RouteHealthRequest(HealthRead read, std::string_view method, std::string_view target,
                               HealthState state, bool has_metrics) {
  if (read == HealthRead::kHeaderTooLarge) return {.status = 431, .body = "header too large\n"};
  if (read == HealthRead::kMalformed) return {.status = 400, .body = "bad request\n"};
  // The kubelet's httpGet probes and Prometheus send GET (RFC 9110, 9.3.1).
  if (method != "GET") {
    return {.status = 405, .body = "method not allowed\n", .metrics = false,
            .allow_get_only = true};
  }
  const std::string_view path = target.substr(0, target.find('?'));
  auto answer = [](bool ok) {
    return HealthReply{.status = ok ? 200 : 503, .body = ok ? "ok\n" : "not yet\n"};
  };
  if (path == "/readyz" && !state.ready && state.spare) return {.status = 503, .body = "spare\n"};
  if (path == "/readyz") return answer(state.ready);
  if (path == "/livez" || path == "/healthz") return answer(state.live);
  if (path == "/metrics" && has_metrics) return {.status = 200, .body = "", .metrics = true};
  return {.status = 404, .body = "not found\n"};
}

}  // namespace trainlet::agent
