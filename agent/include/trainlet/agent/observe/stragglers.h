// trainlet/agent/observe/stragglers.h — step rates from heartbeat files, and who is behind.
//
// A trainer that touches $TRAINLET_HEARTBEAT_FILE once per step (what hang
// detection already asks of it) shows its step rate with no other change: each
// touch (utimensat(2) or a write) is an inotify(7) IN_ATTRIB or IN_MODIFY
// event on the pod's loop. Each member sends the rate of its slowest worker in
// its control-channel heartbeats (wire::Heartbeat::step_rate_milli); the
// leader compares every pod's rate with the gang's median and names the pods
// more than a factor behind it. The rules are the pure functions below.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>

namespace trainlet::agent {

using StepClock = std::chrono::steady_clock;

// Steps per second from the last n touches (oldest first, at most
// StepMeter::kWindow): (n - 1) / their span; when the worker has been quiet
// for longer than their mean interval, the step in progress counts too:
// n / (span + quiet), so a worker that slows down or stops falls behind as
// its quiet grows, and one slow step among the window's barely moves it.
// 0 with fewer than 2 touches.
double StepRate(const std::deque<StepClock::time_point>& touches, StepClock::time_point now);

// The stragglers after one look at the gang's rates (pod index -> steps/s,
// only pods with a known rate > 0): a pod enters when rate * factor < the
// median of all rates, and leaves once rate * factor * 0.75 >= the median (a
// pod near the bound does not flap). `previous` is the last call's result.
// Fewer than 2 rates, or factor <= 1: none.
std::set<std::uint32_t> FindStragglers(const std::map<std::uint32_t, double>& rates,
                                       double factor, const std::set<std::uint32_t>& previous);

// The median of `rates`' values (the mean of the middle two for an even
// count); 0 when empty.
double MedianRate(const std::map<std::uint32_t, double>& rates);

// The leader's view of the gang's step rates in one generation: the rates of
// the last look and the pods named stragglers (FindStragglers with
// `factor`; 0 or less: rates only, none named). Logs a warning when a pod is
// named and a line when it catches up or stops reporting. One event-loop thread.
class StragglerBoard {
 public:
  explicit StragglerBoard(double factor) : factor_(factor) {}
  // One look: each pod's rate in steps/s (only pods with a rate) and the
  // global rank of its slowest worker (for the log line).
  void Look(const std::map<std::uint32_t, double>& rates,
            const std::map<std::uint32_t, std::uint32_t>& slowest_ranks);
  const std::map<std::uint32_t, double>& rates() const { return rates_; }
  const std::set<std::uint32_t>& stragglers() const { return stragglers_; }

 private:
  double factor_;
  std::map<std::uint32_t, double> rates_;  // by pod, steps/s
  std::set<std::uint32_t> stragglers_;     // pods named behind
};

// Counts touches of a pod's heartbeat files (inotify on the agent's loop).
// One event-loop thread; destroy before the loop.
class StepMeter {
 public:
  static constexpr std::size_t kWindow = 6;  // touches kept per worker
  // Watches `files` (index = local rank). nullptr when inotify is unavailable
  // (then no step rates: stragglers are not looked for).
  static std::unique_ptr<StepMeter> Create(boost::asio::any_io_executor executor,
                                           const std::vector<std::string>& files);
  ~StepMeter();
  // The slowest worker among those `running` (by local rank): its rate and
  // local rank; nullopt while any of them has no rate yet.
  std::optional<std::pair<double, std::uint32_t>> Slowest(
      const std::vector<bool>& running, StepClock::time_point now) const;

 private:
  struct Impl;
  explicit StepMeter(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

}  // namespace trainlet::agent
