#include "trainlet/agent/pod.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include "output.h"
#include "trainlet/agent/evidence.h"
#include "trainlet/agent/health.h"
#include "trainlet/agent/signals.h"
#include "trainlet/agent/supervisor.h"
#include "trainlet/exitcodes/exit_code.h"
#include "trainlet/exitcodes/termination.h"
#include "trainlet/rendezvous/launch.h"
#include "trainlet/rendezvous/leader.h"
#include "trainlet/rendezvous/member.h"

namespace trainlet::agent {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using exitcodes::Result;
using exitcodes::Status;

std::vector<std::string> WorkerEnvironment(const std::map<std::string, std::string>& base,
                                           const WorkerPlacement& p) {
  std::map<std::string, std::string> env = base;
  const std::uint32_t rank = p.rank_base + p.local_rank;
  auto set = [&env](const std::string& k, const std::string& v) { env[k] = v; };
  set("RANK", std::to_string(rank));
  set("LOCAL_RANK", std::to_string(p.local_rank));
  set("WORLD_SIZE", std::to_string(p.world_size));
  set("LOCAL_WORLD_SIZE", std::to_string(p.nproc_per_node));
  set("GROUP_RANK", std::to_string(p.group_rank));
  set("GROUP_WORLD_SIZE", std::to_string(p.nnodes));
  set("ROLE_NAME", "default");
  set("ROLE_RANK", std::to_string(rank));
  set("ROLE_WORLD_SIZE", std::to_string(p.world_size));
  set("MASTER_ADDR", p.master_addr);
  set("MASTER_PORT", std::to_string(p.master_port));
  set("TORCHELASTIC_RUN_ID", p.run_id);
  set("TORCHELASTIC_RESTART_COUNT", "0");
  set("TORCHELASTIC_MAX_RESTARTS", "0");
  // The trainers' rank 0 hosts the store itself (init_process_group env://).
  set("TORCHELASTIC_USE_AGENT_STORE", "False");
  if (!p.error_file.empty()) set("TORCHELASTIC_ERROR_FILE", p.error_file);
  // torchrun's default: several workers per pod would otherwise oversubscribe.
  if (p.nproc_per_node > 1 && !env.contains("OMP_NUM_THREADS")) set("OMP_NUM_THREADS", "1");
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

namespace {

// A hang's diagnostics signal (stack dumps) gets this long before the stop.
constexpr std::chrono::seconds kDiagnosticsDelay{2};

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// One pod's run. Lives on the stack of RunPod; every callback runs on `io`.
class Pod {
 public:
  explicit Pod(const PodOptions& o)
      : options_(o), deadline_timer_(io_), hang_timer_(io_), diag_timer_(io_) {}

  int Run() {
    started_ = Clock::now();
    const PodIdentity& id = options_.identity;
    // Several agents may share one terminal (trainlet local) or one log stream:
    // every line says which pod wrote it.
    spdlog::set_pattern("[trainlet pod" + std::to_string(id.index) +
                        " %Y-%m-%dT%H:%M:%S.%e %l] %v");
    if (::getpid() != 1) {
      // Orphaned grandchildren are re-parented to us instead of to the real
      // init, so we can reap them (prctl(2), PR_SET_CHILD_SUBREAPER).
      ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    }
    spdlog::info("pod index {} of {} ({}), {} worker(s) per pod, job '{}' attempt {}, {}",
                 id.index, id.nnodes, id.index_source, id.nproc_per_node, id.job_id, id.attempt,
                 ::getpid() == 1 ? "PID 1" : "child subreaper");
    // Output never blocks the loop; what is still queued for a slow reader at
    // exit gets a bounded chance (exiting before the kubelet's SIGKILL matters
    // more).
    ScopedOutputSinks sinks(io_);
    auto signals = SignalSource::Create(io_.get_executor(), [this](int s) { OnSignal(s); });
    if (!signals.ok()) return Fail(signals.status());
    signals_ = std::move(signals).value();
    if (options_.health_port != 0) {
      auto health = HealthServer::Start(io_.get_executor(), options_.health_port, [this] {
        // Ready: the gang formed and our workers run. Live: no hang found.
        return HealthServer::State{.ready = supervisor_ != nullptr && !own_result_,
                                   .live = !hang_reason_};
      });
      if (!health.ok()) return Fail(health.status());
      health_ = std::move(health).value();
    }

    if (Status s = StartRendezvous(); !s.ok()) return Fail(s);
    io_.run();
    return exit_code_;
  }

 private:
  Status StartRendezvous() {
    const PodIdentity& id = options_.identity;
    rendezvous::wire::Hello hello = rendezvous::MakeHello({.job_id = id.job_id,
                                                           .attempt = id.attempt,
                                                           .index = id.index,
                                                           .nnodes = id.nnodes,
                                                           .nproc_per_node = id.nproc_per_node,
                                                           .master_port = options_.master_port});
    auto on_assignment = [this](Result<rendezvous::wire::Assignment> a) { OnAssignment(a); };

    deadline_timer_.expires_after(options_.rdzv_timeout);
    deadline_timer_.async_wait([this](boost::system::error_code ec) {
      if (ec || supervisor_) return;
      std::string missing;
      if (leader_) {
        for (auto i : leader_->missing()) missing += (missing.empty() ? "" : ",") + std::to_string(i);
        Finish(Status::Infra("rendezvous timed out after " +
                             std::to_string(options_.rdzv_timeout.count() / 1000) + " s: " +
                             std::to_string(leader_->admitted()) + " of " +
                             std::to_string(options_.identity.nnodes) +
                             " pods joined; missing indices " + missing));
      }
      // Members time out through their own deadline (same instant) with details.
    });

    if (id.is_leader()) {
      rendezvous::LeaderOptions lo;
      lo.nnodes = id.nnodes;
      lo.master_port = options_.master_port;
      lo.run_id = id.job_id;
      lo.token = options_.token;
      // Every pod of the gang may be mid-handshake at once (bench/HISTORY.md: scale).
      lo.max_pending_handshakes = std::max<std::size_t>(lo.max_pending_handshakes, id.nnodes);
      auto leader = rendezvous::Leader::Listen(io_.get_executor(), options_.rdzv_port, lo);
      if (!leader.ok()) return leader.status();
      leader_ = std::move(leader).value();
      leader_->Start(hello, on_assignment);
      return Status::Ok();
    }
    rendezvous::MemberOptions mo;
    mo.leader_host = id.leader_host;
    mo.port = options_.rdzv_port;
    mo.hello = hello;
    mo.deadline = started_ + options_.rdzv_timeout;
    mo.token = options_.token;
    mo.seed = static_cast<std::uint64_t>(::getpid()) ^
              static_cast<std::uint64_t>(Clock::now().time_since_epoch().count());
    spdlog::info("joining leader {} port {} ({})", id.leader_host, options_.rdzv_port,
                 id.leader_source);
    auto member = rendezvous::Member::Create(io_.get_executor(), mo);
    if (!member.ok()) return member.status();
    member_ = std::move(member).value();
    member_->Start(on_assignment);
    return Status::Ok();
  }

  void OnAssignment(const Result<rendezvous::wire::Assignment>& result) {
    deadline_timer_.cancel();
    if (!result.ok()) {
      Finish(result.status());
      return;
    }
    const auto& a = *result;
    const PodIdentity& id = options_.identity;
    phase_ms_["rendezvous"] = Ms(Clock::now() - started_);
    rank_base_ = a.rank_base;
    spdlog::info("rendezvous {:.1f} ms: generation {}, world size {}, ranks {}..{}, "
                 "MASTER_ADDR={} MASTER_PORT={}",
                 Ms(Clock::now() - started_), a.generation, a.world_size, a.rank_base,
                 a.rank_base + id.nproc_per_node - 1, a.master_addr, a.master_port);

    std::string error_dir = MakeErrorDir();
    std::vector<WorkerSpec> specs;
    for (std::uint32_t lr = 0; lr < id.nproc_per_node; ++lr) {
      WorkerPlacement p{.local_rank = lr,
                        .nproc_per_node = id.nproc_per_node,
                        .group_rank = id.index,
                        .nnodes = a.nnodes,
                        .rank_base = a.rank_base,
                        .world_size = a.world_size,
                        .master_addr = a.master_addr,
                        .master_port = a.master_port,
                        .run_id = a.run_id,
                        .error_file = error_dir.empty()
                                          ? ""
                                          : error_dir + "/error-" + std::to_string(lr) + ".json"};
      auto env = WorkerEnvironment(options_.env, p);
      if (options_.hang_timeout.count() > 0 && !error_dir.empty()) {
        std::string hb = error_dir + "/heartbeat-" + std::to_string(lr);
        if (int fd = ::open(hb.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
            fd >= 0) {
          ::close(fd);
          heartbeat_files_.push_back(hb);
          env.push_back("TRAINLET_HEARTBEAT_FILE=" + hb);
        }
      }
      specs.push_back({options_.command, std::move(env),
                       "[rank" + std::to_string(a.rank_base + lr) + "]: "});
    }
    SupervisorOptions so;
    so.grace = options_.grace;
    so.on_first_failure = [this](const FirstFailure& f) {
      GangFailure("local rank " + std::to_string(f.local_rank) + " (rank " +
                  std::to_string(rank_base_ + f.local_rank) + ") failed: " + f.exit.Describe());
    };
    oom_baseline_ = ReadOomKillCount();
    workers_started_ = Clock::now();
    supervisor_ = std::make_unique<Supervisor>(
        io_.get_executor(), so, [this](SupervisorResult r) { OnWorkersDone(r); });
    if (Status s = supervisor_->Start(std::move(specs)); !s.ok()) {
      supervisor_.reset();
      Finish(s);
      return;
    }
    spdlog::info("started {} worker(s) {:.1f} ms after start", id.nproc_per_node,
                 Ms(Clock::now() - started_));
    // Only now: gang events that arrived early (replayed here) can stop workers.
    StartGangChannel();
    if (!heartbeat_files_.empty()) {
      heartbeat_started_ = std::filesystem::file_time_type::clock::now();
      WatchHeartbeats();
    }
  }

  // ---- Hang detection: heartbeat files' mtimes, polled on the loop ----

  void WatchHeartbeats() {
    const auto steady = options_.hang_timeout;
    const auto start = options_.hang_start_timeout.count() > 0 ? options_.hang_start_timeout
                                                               : steady;
    auto poll = std::clamp(std::min(steady, start) / 4, std::chrono::milliseconds(50),
                           std::chrono::milliseconds(1000));
    hang_timer_.expires_after(poll);
    hang_timer_.async_wait([this, steady, start](boost::system::error_code ec) {
      if (ec || own_result_ || hang_reason_ || supervisor_->stopping()) return;
      auto now = std::filesystem::file_time_type::clock::now();
      std::string hung;
      for (std::size_t lr = 0; lr < heartbeat_files_.size(); ++lr) {
        if (!supervisor_->running(static_cast<int>(lr))) continue;  // finished: not hung
        std::error_code fec;
        auto mtime = std::filesystem::last_write_time(heartbeat_files_[lr], fec);
        if (fec) continue;
        bool never = mtime <= heartbeat_started_;
        auto since = now - (never ? heartbeat_started_ : mtime);
        if (since > (never ? start : steady)) {
          hung += (hung.empty() ? "" : ", ") + std::string("local rank ") + std::to_string(lr) +
                  (never ? " never showed progress in " : " showed no progress for ") +
                  fmt::format("{:.1f} s",
                              std::chrono::duration<double>(never ? start : steady).count());
        }
      }
      if (hung.empty()) {
        WatchHeartbeats();
        return;
      }
      hang_reason_ = hung;
      spdlog::error("hang: {}; sending {} for diagnostics, stopping in 2 s", hung,
                    exitcodes::SignalName(options_.hang_signal));
      supervisor_->OnSignal(options_.hang_signal);
      GangFailure("hang: " + hung, /*hang=*/true);
      hang_timer_.expires_after(kDiagnosticsDelay);
      hang_timer_.async_wait([this](boost::system::error_code ec) {
        if (!ec && supervisor_) supervisor_->StopForPeer();
      });
    });
  }

  std::string MakeErrorDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "trainlet-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) return "";
    error_dir_ = tmpl;
    return tmpl;
  }

  // ---- The gang's control channel (see rendezvous/leader.h, member.h) ----

  void StartGangChannel() {
    const std::uint32_t own = options_.identity.index;
    if (leader_) {
      leader_->StartChannel(
          {.on_report =
               [this](std::uint32_t index, const rendezvous::wire::Report& r) {
                 if (!r.ok) {
                   PodFailed(index, "pod " + std::to_string(index) + ": " + r.reason);
                 } else if (own_result_) {
                   MaybeConcludeLeader();
                 }
               },
           .on_lost =
               [this](std::uint32_t index, const std::string& why) {
                 PodFailed(index, "pod " + std::to_string(index) + " was lost: " + why);
               }});
    } else if (member_) {
      member_->StartChannel(
          {.on_stop =
               [this, own](const rendezvous::wire::Stop& stop) {
                 // Our own failure (already stopping), or one we reported before
                 // hearing of this one: ours stays ours.
                 if (stop.failed_index == own || reported_failure_) return;
                 if (!peer_failure_) {
                   peer_failure_ = "pod " + std::to_string(stop.failed_index) +
                                   " failed first (" + stop.reason + ")";
                   spdlog::warn("the leader stops the gang: {}", *peer_failure_);
                 }
                 StopForPeer(stop.diagnostics_signal);
               },
           .on_lost =
               [this](const std::string& why) {
                 // After our own failure the leader may leave first: not a peer's fault.
                 if (peer_failure_ || reported_failure_) return;
                 peer_failure_ = "lost the leader: " + why;
                 spdlog::warn("{}; stopping the workers", *peer_failure_);
                 StopForPeer(0);
               }});
    }
  }

  // Stops our workers because of another pod; with a diagnostics signal (a
  // hang somewhere in the gang) the workers get it first, for stack dumps.
  void StopForPeer(int diagnostics_signal) {
    if (!supervisor_) return;
    if (diagnostics_signal == 0 || supervisor_->stopping()) {
      supervisor_->StopForPeer();
      return;
    }
    supervisor_->OnSignal(diagnostics_signal);
    diag_timer_.expires_after(kDiagnosticsDelay);
    diag_timer_.async_wait([this](boost::system::error_code ec) {
      if (!ec && supervisor_) supervisor_->StopForPeer();
    });
  }

  // This pod failed (a worker, a stop request, a hang): tell the gang, once.
  void GangFailure(const std::string& reason, bool hang = false) {
    if (reported_failure_) return;
    reported_failure_ = true;
    const std::uint32_t own = options_.identity.index;
    if (leader_) {
      PodFailed(own, "pod " + std::to_string(own) + ": " + reason, hang);
    } else if (member_) {
      member_->SendReport(
          {.index = own,
           .ok = false,
           .failure_class = static_cast<std::uint16_t>(hang ? exitcodes::FailureClass::kInfra
                                                            : exitcodes::FailureClass::kWorker),
           .reason = reason});
    }
  }

  // Leader only: the first failure reported decides; everyone else is told.
  void PodFailed(std::uint32_t index, const std::string& reason, bool hang = false) {
    if (first_failed_index_) return;
    first_failed_index_ = index;
    hang = hang || reason.find(": hang: ") != std::string::npos;
    spdlog::warn("gang: {}; stopping every pod", reason);
    leader_->BroadcastStop({.failed_index = index,
                            .reason = reason,
                            .diagnostics_signal = static_cast<std::uint16_t>(
                                hang ? options_.hang_signal : 0)});
    if (index != options_.identity.index) {
      peer_failure_ = "pod " + std::to_string(index) + " failed first (" + reason + ")";
      StopForPeer(hang ? options_.hang_signal : 0);
      if (own_result_) MaybeConcludeLeader();
    }
  }

  void OnWorkersDone(const SupervisorResult& r) {
    phase_ms_["run"] = Ms(Clock::now() - workers_started_);
    own_result_ = r;
    const bool clean = !r.first_failure && !r.stop_signal && !r.peer_stop;
    if (member_ && clean) {
      // Tell the leader before leaving, so our exit is not read as a loss.
      member_->SendReport({.index = options_.identity.index, .ok = true, .failure_class = 0,
                           .reason = ""},
                          [this] { ConcludeWorkers(); });
      return;
    }
    if (leader_ && clean && !leader_->AllMembersSettled()) {
      // The leader's connections are the gang's: it leaves last.
      spdlog::info("workers finished; waiting for the other pods to finish");
      return;
    }
    ConcludeWorkers();
  }

  void MaybeConcludeLeader() {
    if (concluded_ || !own_result_) return;
    if (first_failed_index_ || leader_->AllMembersSettled()) ConcludeWorkers();
  }

  void ConcludeWorkers() {
    if (concluded_) return;
    concluded_ = true;
    const SupervisorResult& r = *own_result_;
    exitcodes::Evidence e;
    // The gang failed elsewhere first: collateral, even if our own workers had
    // finished (a leader must not report success for a gang that failed). A
    // stop request we received first stays ours (a preempted pod exits 143
    // even while the gang falls apart).
    if (!r.stop_signal) e.peer_failure = peer_failure_;
    // Found before any failure (the watcher stops once the workers are being
    // stopped), so a worker that then died of the diagnostics signal or the
    // SIGTERM is collateral of the hang.
    if (!r.stop_signal) e.hang = hang_reason_;
    if (r.first_failure) {
      const int lr = r.first_failure->local_rank;
      exitcodes::WorkerFailure f;
      f.local_rank = lr;
      f.rank = static_cast<int>(rank_base_) + lr;
      f.exit = r.first_failure->exit;
      f.stderr_tail = supervisor_->StderrTail(lr);
      if (!error_dir_.empty()) {
        f.error_file_message =
            ReadErrorFileMessage(error_dir_ + "/error-" + std::to_string(lr) + ".json");
      }
      e.first_failure = f;
    }
    e.stop_signal = r.stop_signal;
    e.collateral = r.collateral;
    if (auto now = ReadOomKillCount(); now && oom_baseline_ && *now > *oom_baseline_) {
      e.oom_kills = *now - *oom_baseline_;
    }
    Conclude(e);
  }

  // Classifies, writes the termination message, logs the summary last, stops.
  void Conclude(const exitcodes::Evidence& e) {
    exitcodes::Verdict v = exitcodes::Classify(e, options_.codes, options_.markers);
    exit_code_ = v.code;
    if (v.failure_class == exitcodes::FailureClass::kOk) {
      spdlog::info("exit 0: every worker finished ({:.1f} s)",
                   Ms(Clock::now() - started_) / 1000);
    } else {
      exitcodes::TerminationInfo info;
      info.verdict = v;
      info.first_failure = e.first_failure;
      info.pod_index = options_.identity.index;
      info.attempt = options_.identity.attempt;
      info.phase_ms = phase_ms_;
      if (auto it = options_.env.find("NODE_NAME"); it != options_.env.end()) {
        info.node_name = it->second;
      }
      std::string summary = exitcodes::TerminationMessage(info);
      WriteTerminationLog(options_.termination_log, summary);
      spdlog::error("exit {} ({}): {}", v.code, exitcodes::ClassName(v.failure_class), summary);
    }
    Stop();
  }

  void OnSignal(int signo) {
    if (supervisor_) {
      if (signo == SIGCHLD) {
        supervisor_->Reap();
      } else {
        if (signo == SIGTERM || signo == SIGINT) {
          if (own_result_ && !concluded_) {
            // The workers are done and the leader only waits for the others:
            // stop them and leave now, or the kubelet's SIGKILL would come first.
            // (A member in this state has already reported success.)
            if (leader_) GangFailure("stopped by " + exitcodes::SignalName(signo));
            own_result_->stop_signal = signo;
            ConcludeWorkers();
            return;
          }
          if (!own_result_) GangFailure("stopped by " + exitcodes::SignalName(signo));
        }
        supervisor_->OnSignal(signo);
      }
      return;
    }
    if (signo == SIGCHLD) {
      (void)ReapOrphans();
    } else if (signo == SIGTERM || signo == SIGINT) {
      // No worker runs yet: nothing to forward, nothing to wait for.
      Finish(Status(exitcodes::FailureClass::kTerminated,
                    "received " + exitcodes::SignalName(signo) + " before the workers started"));
    } else {
      spdlog::debug("ignoring {} before the workers started", exitcodes::SignalName(signo));
    }
  }

  void Finish(const Status& s) {
    exitcodes::Evidence e;
    e.agent_failure = s;
    Conclude(e);
  }

  void Stop() {
    if (member_) member_->Close();
    if (leader_) leader_->Close();
    deadline_timer_.cancel();
    hang_timer_.cancel();
    diag_timer_.cancel();
    health_.reset();
    if (signals_) signals_->Close();
    if (!error_dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(error_dir_, ec);
    }
    io_.stop();
  }

  int Fail(const Status& s) {
    Finish(s);
    return exit_code_;
  }

  const PodOptions& options_;
  asio::io_context io_;
  asio::steady_timer deadline_timer_;
  asio::steady_timer hang_timer_;
  asio::steady_timer diag_timer_;  // diagnostics signal -> stop, after a hang elsewhere
  std::vector<std::string> heartbeat_files_;  // by local rank
  std::filesystem::file_time_type heartbeat_started_;
  std::optional<std::string> hang_reason_;
  Clock::time_point started_;
  std::unique_ptr<SignalSource> signals_;
  std::unique_ptr<HealthServer> health_;
  std::shared_ptr<rendezvous::Leader> leader_;
  std::shared_ptr<rendezvous::Member> member_;
  std::unique_ptr<Supervisor> supervisor_;
  std::string error_dir_;
  std::uint32_t rank_base_ = 0;
  std::optional<std::uint64_t> oom_baseline_;  // memory cgroup oom_kill before the workers
  Clock::time_point workers_started_;
  std::map<std::string, double> phase_ms_;
  // Gang state.
  std::optional<SupervisorResult> own_result_;    // set when our workers are all gone
  std::optional<std::string> peer_failure_;       // another pod failed first / leader lost
  std::optional<std::uint32_t> first_failed_index_;  // leader: whose failure came first
  bool reported_failure_ = false;
  bool concluded_ = false;
  int exit_code_ = 0;
};

}  // namespace

int RunPod(const PodOptions& options) {
  Pod pod(options);
  return pod.Run();
}

}  // namespace trainlet::agent
