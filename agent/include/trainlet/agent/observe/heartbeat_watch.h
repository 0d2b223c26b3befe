// trainlet/agent/observe/heartbeat_watch.h — one generation's heartbeat files, watched.
//
// With hang detection on (--hang-timeout), every worker gets
// TRAINLET_HEARTBEAT_FILE and shows progress by touching it. The watch polls
// the files' mtimes on the agent's loop and judges them with the hang rules
// (hang_policy.h); between looks it counts the touches for step rates
// (stragglers.h StepMeter, inotify). It only observes: what a hang means for
// the gang is the pod's (gang_policy.h), told through `on_hang`.
//
// One event-loop thread. A watch belongs to one generation of the pod and is
// destroyed with it; Stop() (or the destructor) cancels its pending look.
#pragma once

#include <cstdint>
#include <ctime>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "trainlet/agent/observe/hang_policy.h"
#include "trainlet/agent/observe/stragglers.h"

namespace trainlet::agent {

class HeartbeatWatch {
 public:
  struct Callbacks {
    // Whether the workers still run and are not being stopped: no look otherwise.
    std::function<bool()> watching;
    // Whether the worker of this local rank still runs.
    std::function<bool(int local_rank)> running;
    // After each look that found no hang (the moment to read step rates).
    std::function<void()> on_look;
    // Once: the workers named in `hung` showed no progress (hang_policy.h).
    std::function<void(const std::string& hung)> on_hang;
  };

  // Creates `dir`/heartbeat-<local_rank> (truncated), its mtime at "never
  // touched" (a time no touch can produce); its path, or "" when it cannot be
  // made (that worker then gets no heartbeat file). Blocks for the open(2).
  static std::string CreateFile(const std::string& dir, std::uint32_t local_rank);

  // Watches `files` (index = local rank) with the rules of `hang`.
  HeartbeatWatch(boost::asio::any_io_executor executor, HangOptions hang,
                 std::vector<std::string> files, Callbacks callbacks);
  ~HeartbeatWatch();
  HeartbeatWatch(const HeartbeatWatch&) = delete;
  HeartbeatWatch& operator=(const HeartbeatWatch&) = delete;

  // The workers started: counts touches from now (a step meter when inotify
  // works) and looks every HangPolicy::PollInterval (at least 4 times a second
  // with a step meter, so a straggler is named within a step or two).
  void Start();
  // No look after this (idempotent); the step meter goes too.
  void Stop();

  const std::vector<std::string>& files() const { return files_; }
  // The hang found, if any ("local rank 1 showed no progress for ...").
  const std::optional<std::string>& hang() const { return hang_; }
  // Seconds since each worker last touched its file (since Start at most), by local rank.
  std::map<std::uint32_t, double> Ages() const;
  // The slowest worker among those `running`: its steps/s and local rank;
  // nullopt without a step meter or while any of them has no rate yet.
  std::optional<std::pair<double, std::uint32_t>> Slowest(const std::vector<bool>& running) const;
  bool measures_steps() const { return step_meter_ != nullptr; }

 private:
  void Arm();
  void Look();

  HangOptions options_;
  std::vector<std::string> files_;
  Callbacks callbacks_;
  boost::asio::steady_timer timer_;
  std::optional<HangPolicy> policy_;
  std::unique_ptr<StepMeter> step_meter_;
  std::filesystem::file_time_type started_{};
  std::optional<std::string> hang_;
  bool stopped_ = false;
  std::shared_ptr<void> alive_ = std::make_shared<int>(0);  // expires with the watch
};

}  // namespace trainlet::agent
