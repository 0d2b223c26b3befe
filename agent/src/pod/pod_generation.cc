#include "pod/pod_generation.h"

#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>

namespace trainlet::agent {

PodGeneration::PodGeneration(boost::asio::any_io_executor executor, std::uint32_t join_generation,
                             double straggler_factor)
    : join(join_generation),
      number(join_generation),
      deadline_timer(executor),
      stragglers(straggler_factor),
      diag_timer(executor),
      verdict_timer(executor),
      settle_timer(executor),
      stall_timer(executor) {}

PodGeneration::~PodGeneration() {
  Close();
  JoinPreflight();
}

void PodGeneration::JoinPreflight() {
  if (preflight_cancel) preflight_cancel->store(true);
  if (preflight_thread.joinable()) preflight_thread.join();
}

void PodGeneration::Close() {
  if (member) member->Close();
  if (leader) leader->Close();
  deadline_timer.cancel();
  diag_timer.cancel();
  verdict_timer.cancel();
  settle_timer.cancel();
  stall_timer.cancel();
  stall_watch = false;
  if (heartbeats) heartbeats->Stop();
  // Removes the directory and what the workers left in it. Usually it is
  // empty: one rmdir(2) then, not remove_all's unlink-then-rmdir of the
  // directory (each locks the temp directory, which all pods on a node share
  // under `trainlet local`, and 64 pods ending at once spun on that lock: 11 %
  // of the CPU of a 64-pod rendezvous run, bench/HISTORY.md).
  if (dir.empty()) return;
  if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  dir.clear();
}

}  // namespace trainlet::agent
