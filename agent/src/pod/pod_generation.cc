#include "pod/pod_generation.h"

#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>
#include <utility>

#include <boost/asio/post.hpp>

namespace trainlet::agent {

PodGeneration::PodGeneration(boost::asio::any_io_executor executor, std::uint32_t join_generation,
                             double straggler_factor)
    : join(join_generation),
      number(join_generation),
      stragglers(straggler_factor),
      verdict_timer(executor),
      settle_timer(executor),
      stall_timer(executor),
      executor_(executor),
      deadline_timer_(executor),
      diag_timer_(executor) {}

PodGeneration::~PodGeneration() {
  Close();
  JoinPreflight();
}

void PodGeneration::StartRound(Clock::duration timeout, std::function<void()> on_deadline) {
  round_started = Clock::now();
  deadline_timer_.expires_at(round_started + timeout);
  deadline_timer_.async_wait(
      [weak = weak_from_this(), on_deadline = std::move(on_deadline)](boost::system::error_code ec) {
        auto self = weak.lock();
        if (!ec && self && self->joining()) on_deadline();
      });
}

exitcodes::Status PodGeneration::StartLeader(std::uint16_t port, rendezvous::LeaderOptions options,
                                             const rendezvous::wire::Hello& own,
                                             rendezvous::Leader::Done done) {
  auto listening = rendezvous::Leader::Listen(executor_, port, std::move(options));
  if (!listening.ok()) return listening.status();
  leader = std::move(listening).value();
  leader->Start(own, std::move(done));
  return exitcodes::Status::Ok();
}

exitcodes::Status PodGeneration::StartMember(const rendezvous::MemberOptions& options,
                                             rendezvous::Member::Done done) {
  auto created = rendezvous::Member::Create(executor_, options);
  if (!created.ok()) return created.status();
  member = std::move(created).value();
  member->Start(std::move(done));
  return exitcodes::Status::Ok();
}

void PodGeneration::Assign(std::uint32_t generation, std::uint32_t first_rank, bool spare) {
  deadline_timer_.cancel();
  number = generation;
  rank_base = first_rank;
  if (phase_ == Phase::kJoining) phase_ = spare ? Phase::kSpare : Phase::kPreparing;
}

void PodGeneration::StartPreflight(
    gpu::PreflightOptions po, std::function<void(double ms, const gpu::PreflightReport&)> done) {
  JoinPreflight();
  preflight_cancel_ = std::make_shared<std::atomic<bool>>(false);
  preflight_running = true;
  po.cancel = preflight_cancel_.get();
  preflight_thread_ = std::thread([ex = executor_, po = std::move(po), done = std::move(done),
                                   keep = preflight_cancel_]() mutable {
    const auto t0 = Clock::now();
    gpu::PreflightReport r = gpu::RunPreflight(po);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    boost::asio::post(ex, [done = std::move(done), ms, r = std::move(r)] { done(ms, r); });
  });
}

void PodGeneration::JoinPreflight() {
  if (preflight_cancel_) preflight_cancel_->store(true);
  if (preflight_thread_.joinable()) preflight_thread_.join();
}

exitcodes::Status PodGeneration::StartWorkers(SupervisorOptions options,
                                              std::vector<WorkerSpec> specs,
                                              Supervisor::Done done) {
  oom_baseline = ReadOomKillCount();
  workers_started = Clock::now();
  supervisor = std::make_unique<Supervisor>(executor_, std::move(options), std::move(done));
  if (exitcodes::Status s = supervisor->Start(std::move(specs)); !s.ok()) {
    supervisor.reset();
    return s;
  }
  if (phase_ == Phase::kPreparing) phase_ = Phase::kRunning;
  return exitcodes::Status::Ok();
}

void PodGeneration::StartWatch() {
  if (heartbeats) heartbeats->Start();
}

void PodGeneration::StopWorkers(int diagnostics_signal, Clock::duration delay) {
  if (!supervisor) return;
  if (diagnostics_signal == 0 || supervisor->stopping()) {
    supervisor->StopForPeer();
    return;
  }
  supervisor->SendDiagnostics(diagnostics_signal);
  diag_timer_.expires_after(delay);
  diag_timer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
    auto self = weak.lock();
    if (!ec && self && self->supervisor) self->supervisor->StopForPeer();
  });
}

void PodGeneration::Close() {
  if (member) member->Close();
  if (leader) leader->Close();
  deadline_timer_.cancel();
  diag_timer_.cancel();
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
