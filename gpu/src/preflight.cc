#include "trainlet/gpu/preflight.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "trainlet/gpu/devices.h"

extern char** environ;

namespace trainlet::gpu {

using exitcodes::FailureClass;
using exitcodes::Result;
using exitcodes::Status;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kExitHardware = 74;
constexpr int kExitInfra = 75;
constexpr int kExitConfig = 78;

// The CUDA driver API the child needs (cuda.h), resolved by name.
struct Cuda {
  int (*init)(unsigned) = nullptr;
  int (*device_get)(int*, int) = nullptr;
  int (*device_count)(int*) = nullptr;
  int (*uuid)(unsigned char*, int) = nullptr;
  int (*ctx_retain)(void**, int) = nullptr;
  int (*ctx_set)(void*) = nullptr;
  int (*mem_alloc)(unsigned long long*, std::size_t) = nullptr;
  int (*mem_free)(unsigned long long) = nullptr;
  int (*htod)(unsigned long long, const void*, std::size_t) = nullptr;
  int (*dtoh)(void*, unsigned long long, std::size_t) = nullptr;
  int (*stream_create)(void**, unsigned) = nullptr;
  int (*stream_query)(void*) = nullptr;
  int (*error_name)(int, const char**) = nullptr;
};

std::string CuName(const Cuda& cu, int rc) {
  const char* n = nullptr;
  if (cu.error_name != nullptr && cu.error_name(rc, &n) == 0 && n != nullptr) return n;
  return "CUresult " + std::to_string(rc);
}

const char* Get(const char* name) { return std::getenv(name); }

std::uint64_t EnvU64(const char* name, std::uint64_t fallback) {
  const char* v = Get(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  unsigned long long n = std::strtoull(v, &end, 10);
  return end != nullptr && *end == '\0' ? n : fallback;
}

int Emit(nlohmann::json j, FailureClass c, const std::string& reason) {
  int code = c == FailureClass::kOk         ? 0
             : c == FailureClass::kHardware ? kExitHardware
             : c == FailureClass::kConfig   ? kExitConfig
                                            : kExitInfra;
  j["class"] = std::string(exitcodes::ClassName(c));
  j["reason"] = reason;
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
  return code;
}

// What the child is asked to do: TRAINLET_PREFLIGHT_* (preflight.h), set by RunPreflight.
struct ChildConfig {
  std::uint32_t rank = 0;
  int local_rank = 0;
  std::uint32_t world = 1;
  std::chrono::milliseconds timeout{60'000};
  bool require = false;
  std::size_t bytes = 64 << 20;  // a multiple of 4: floats
  double min_busbw = 0;          // GB/s
};

ChildConfig ReadChildConfig() {
  ChildConfig c;
  c.rank = static_cast<std::uint32_t>(EnvU64("TRAINLET_PREFLIGHT_RANK", 0));
  c.local_rank = static_cast<int>(EnvU64("TRAINLET_PREFLIGHT_LOCAL_RANK", 0));
  c.world = static_cast<std::uint32_t>(EnvU64("TRAINLET_PREFLIGHT_WORLD_SIZE", 1));
  c.timeout = std::chrono::milliseconds(EnvU64("TRAINLET_PREFLIGHT_TIMEOUT_MS", 60'000));
  c.require = EnvU64("TRAINLET_PREFLIGHT_REQUIRE_GPUS", 0) != 0;
  c.bytes = std::max<std::size_t>(
      4, static_cast<std::size_t>(EnvU64("TRAINLET_PREFLIGHT_BYTES", 64 << 20)) / 4 * 4);
  const char* min_busbw = Get("TRAINLET_PREFLIGHT_MIN_BUSBW");
  c.min_busbw = min_busbw != nullptr ? std::atof(min_busbw) : 0.0;
  return c;
}

// One preflight child, its steps in order: the device (CUDA driver API, dlopen'd), NCCL's
// communicator, an all-reduce checked for correctness, then its bandwidth. Each step returns
// the exit status when the run ends there (after printing its JSON line), nullopt to go on.
class PreflightChild {
 public:
  explicit PreflightChild(ChildConfig c) : c_(c), deadline_(Clock::now() + c.timeout) {
    j_["rank"] = c_.rank;
    j_["local_rank"] = c_.local_rank;
    j_["gpu"] = "GPU " + std::to_string(c_.local_rank);
  }

  int Run() {
    if (auto done = OpenDevice()) return *done;
    if (auto done = SetUpBuffers()) return *done;
    if (auto done = InitNccl()) return *done;
    if (auto done = CheckAllReduce()) return *done;
    return MeasureBandwidth();
  }

 private:
  std::optional<int> Fail(FailureClass c, const std::string& reason) { return Emit(j_, c, reason); }
  std::optional<int> Abort(FailureClass c, const std::string& reason) {
    nc_->CommAbort(comm_);
    return Fail(c, reason);
  }
  int NoGpu(const std::string& why) {
    if (c_.require) return Emit(j_, FailureClass::kHardware, "--require-gpus but no GPU: " + why);
    j_["skipped"] = true;
    return Emit(j_, FailureClass::kOk, "no GPU: preflight skipped (" + why + ")");
  }

  // Resolves the driver API entry points; false when one is missing.
  bool LoadCuda(void* lib) {
    auto sym = [lib](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, name));
      return fn != nullptr;
    };
    sym(cu_.uuid, "cuDeviceGetUuid_v2") || sym(cu_.uuid, "cuDeviceGetUuid");
    sym(cu_.error_name, "cuGetErrorName");
    return sym(cu_.init, "cuInit") && sym(cu_.device_get, "cuDeviceGet") &&
           sym(cu_.device_count, "cuDeviceGetCount") &&
           sym(cu_.ctx_retain, "cuDevicePrimaryCtxRetain") && sym(cu_.ctx_set, "cuCtxSetCurrent") &&
           sym(cu_.mem_alloc, "cuMemAlloc_v2") && sym(cu_.mem_free, "cuMemFree_v2") &&
           sym(cu_.htod, "cuMemcpyHtoD_v2") && sym(cu_.dtoh, "cuMemcpyDtoH_v2") &&
           sym(cu_.stream_create, "cuStreamCreate") && sym(cu_.stream_query, "cuStreamQuery");
  }

  // 1. The device: the driver, this local rank's GPU, its primary context.
  std::optional<int> OpenDevice() {
    const std::string libcuda = LibraryPath("TRAINLET_LIBCUDA", kDefaultLibCuda);
    void* lib = ::dlopen(libcuda.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = ::dlerror();
      return NoGpu(e != nullptr ? e : libcuda + " not found");
    }
    if (!LoadCuda(lib)) return Fail(FailureClass::kHardware, libcuda + " lacks a driver API entry point");
    if (int rc = cu_.init(0); rc != 0) {
      if (rc == 100) return NoGpu("cuInit: no CUDA-capable device");  // CUDA_ERROR_NO_DEVICE
      return Fail(FailureClass::kHardware, "cuInit failed: " + CuName(cu_, rc));
    }
    int count = 0;
    if (int rc = cu_.device_count(&count); rc != 0 || count == 0) {
      return NoGpu("cuDeviceGetCount: " + (rc != 0 ? CuName(cu_, rc) : std::string("0 devices")));
    }
    if (c_.local_rank >= count) {
      return Fail(FailureClass::kHardware, "local rank " + std::to_string(c_.local_rank) +
                                               " has no GPU: only " + std::to_string(count) + " visible");
    }
    int dev = 0;
    if (int rc = cu_.device_get(&dev, c_.local_rank); rc != 0) {
      return Fail(FailureClass::kHardware, "cuDeviceGet: " + CuName(cu_, rc));
    }
    if (unsigned char u[16]; cu_.uuid != nullptr && cu_.uuid(u, dev) == 0) {
      j_["gpu"] = FormatUuid(u);
    }
    void* ctx = nullptr;
    if (int rc = cu_.ctx_retain(&ctx, dev); rc != 0) {
      return Fail(FailureClass::kHardware, "cuDevicePrimaryCtxRetain: " + CuName(cu_, rc));
    }
    if (int rc = cu_.ctx_set(ctx); rc != 0) {
      return Fail(FailureClass::kHardware, "cuCtxSetCurrent: " + CuName(cu_, rc));
    }
    return std::nullopt;
  }

  // The all-reduce's buffers (every element rank + 1) and a stream.
  std::optional<int> SetUpBuffers() {
    n_ = c_.bytes / 4;
    std::vector<float> host(n_, static_cast<float>(c_.rank + 1));
    int rc = cu_.mem_alloc(&send_, c_.bytes);
    if (rc == 0) rc = cu_.mem_alloc(&recv_, c_.bytes);
    if (rc == 0) rc = cu_.htod(send_, host.data(), c_.bytes);
    if (rc == 0) rc = cu_.stream_create(&stream_, 0);
    if (rc != 0) return Fail(FailureClass::kHardware, "CUDA setup: " + CuName(cu_, rc));
    return std::nullopt;
  }

  // 2. NCCL: the leader's ids, the same library version, a non-blocking ncclCommInitRank.
  std::optional<int> InitNccl() {
    auto ids = ParseWorkerNcclEnv([](const char* k) { return Get(k); });
    if (!ids.ok()) return Fail(FailureClass::kConfig, ids.status().message());
    if (ids->empty()) {
      return Fail(FailureClass::kInfra,
                  "no NCCL unique id from the leader (is NCCL missing in the leader's image?)");
    }
    auto nccl = Nccl::Load(LibraryPath("TRAINLET_LIBNCCL", kDefaultLibNccl));
    if (!nccl.ok()) return Fail(FailureClass::kInfra, nccl.status().message());
    nc_ = *nccl;
    j_["nccl_version"] = nc_->version();
    if (nc_->version() != ids->nccl_version) {
      return Fail(FailureClass::kInfra, "NCCL version " + std::to_string(nc_->version()) +
                                            " differs from the leader's " +
                                            std::to_string(ids->nccl_version) +
                                            ": every pod needs the same NCCL");
    }
    NcclConfig config = MakeConfig(false);
    const auto t0 = Clock::now();
    int r = nc_->CommInitRank(&comm_, static_cast<int>(c_.world), ids->ids,
                              static_cast<int>(c_.rank), &config);
    if (r != kNcclSuccess && r != kNcclInProgress) {
      if (comm_ != nullptr) nc_->CommAbort(comm_);
      return Fail(r == kNcclUnhandledCudaError ? FailureClass::kHardware : FailureClass::kInfra,
                  "ncclCommInitRank failed: " + NcclResultName(r));
    }
    if (auto done = Wait("NCCL init", false)) return done;
    j_["init_ms"] = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    return std::nullopt;
  }

  // Waits for a non-blocking operation: polls the async error until it leaves ncclInProgress
  // (and, with `query`, the stream is done); aborts at the deadline.
  std::optional<int> Wait(const char* what, bool query) {
    for (;;) {
      int async = kNcclSuccess;
      if (int r = nc_->CommGetAsyncError(comm_, &async); r != kNcclSuccess) async = r;
      if (async != kNcclSuccess && async != kNcclInProgress) {
        return Abort(async == kNcclUnhandledCudaError ? FailureClass::kHardware : FailureClass::kInfra,
                     std::string(what) + " failed: " + NcclResultName(async));
      }
      if (async == kNcclSuccess) {
        if (!query) return std::nullopt;
        int q = cu_.stream_query(stream_);
        if (q == 0) return std::nullopt;
        if (q != 600) {  // CUDA_ERROR_NOT_READY
          return Abort(FailureClass::kHardware, std::string(what) + ": " + CuName(cu_, q));
        }
      }
      if (Clock::now() >= deadline_) {
        return Abort(FailureClass::kInfra,
                     std::string(what) + " timed out after " +
                         std::to_string(c_.timeout.count() / 1000.0).substr(0, 5) +
                         " s (ncclCommAbort); a peer did not join or the network is blocked");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  std::optional<int> AllReduce() {
    int r = nc_->AllReduceSumFloat(reinterpret_cast<void*>(send_), reinterpret_cast<void*>(recv_),
                                   n_, comm_, stream_);
    if (r != kNcclSuccess && r != kNcclInProgress) {
      return Abort(FailureClass::kInfra, "ncclAllReduce failed: " + NcclResultName(r));
    }
    return Wait("all-reduce", true);
  }

  // 3. Correctness: every element is 1 + 2 + ... + world.
  std::optional<int> CheckAllReduce() {
    if (auto done = AllReduce()) return done;
    std::vector<float> out(n_, 0.0f);
    if (int rc = cu_.dtoh(out.data(), recv_, c_.bytes); rc != 0) {
      return Abort(FailureClass::kHardware, "cuMemcpyDtoH: " + CuName(cu_, rc));
    }
    const double expected = static_cast<double>(c_.world) * (c_.world + 1) / 2;
    for (std::size_t i = 0; i < n_; ++i) {
      if (std::fabs(out[i] - expected) > 1e-3 * expected) {
        return Abort(FailureClass::kHardware, "all-reduce returned " + std::to_string(out[i]) +
                                                  " at element " + std::to_string(i) +
                                                  ", expected " + std::to_string(expected));
      }
    }
    return std::nullopt;
  }

  // 4. Bandwidth: nccl-tests' bus bandwidth for all-reduce, algbw * 2 (n - 1) / n
  // (NVIDIA/nccl-tests, doc/PERFORMANCE.md).
  int MeasureBandwidth() {
    constexpr int kIters = 5;
    const auto tb = Clock::now();
    for (int i = 0; i < kIters; ++i) {
      if (auto done = AllReduce()) return *done;
    }
    double secs = std::chrono::duration<double>(Clock::now() - tb).count() / kIters;
    double algbw = static_cast<double>(c_.bytes) / std::max(secs, 1e-9) / 1e9;
    double busbw = c_.world > 1 ? algbw * 2.0 * (c_.world - 1) / c_.world : algbw;
    j_["busbw_gbps"] = std::round(busbw * 100) / 100;
    nc_->CommDestroy(comm_);
    cu_.mem_free(send_);
    cu_.mem_free(recv_);
    if (c_.min_busbw > 0 && c_.world > 1 && busbw < c_.min_busbw) {
      return Emit(j_, FailureClass::kInfra,
                  "bus bandwidth " + std::to_string(busbw).substr(0, 6) + " GB/s is below " +
                      "--preflight-min-busbw " + std::to_string(c_.min_busbw).substr(0, 6) + " GB/s");
    }
    return Emit(j_, FailureClass::kOk, "ok");
  }

  const ChildConfig c_;
  const Clock::time_point deadline_;
  nlohmann::json j_;
  Cuda cu_;
  std::shared_ptr<const Nccl> nc_;
  Nccl::Comm comm_ = nullptr;
  void* stream_ = nullptr;
  unsigned long long send_ = 0, recv_ = 0;
  std::size_t n_ = 0;
};

}  // namespace

int PreflightChildMain() { return PreflightChild(ReadChildConfig()).Run(); }

bool ParsePreflightLine(const std::string& line, PreflightRank* out) {
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("class") || !j["class"].is_string()) {
    return false;
  }
  std::string c = j["class"];
  out->failure_class = c == "ok"         ? FailureClass::kOk
                       : c == "hardware" ? FailureClass::kHardware
                       : c == "config"   ? FailureClass::kConfig
                                         : FailureClass::kInfra;
  out->rank = j.value("rank", 0u);
  out->local_rank = j.value("local_rank", 0u);
  out->skipped = j.value("skipped", false);
  out->gpu = j.value("gpu", std::string());
  out->reason = j.value("reason", std::string());
  out->init_ms = j.value("init_ms", 0.0);
  out->busbw_gbps = j.value("busbw_gbps", 0.0);
  out->json = line;
  return true;
}

namespace {

// One `trainlet preflight` child as RunPreflight sees it.
struct Child {
  pid_t pid = -1;
  int fd = -1;        // read end of its stdout
  std::string out;
  int status = 0;     // waitpid's
  bool done = false;  // reaped
};

// Kills and reaps every child still running and closes their pipes.
void KillAll(std::vector<Child>& children) {
  for (auto& c : children) {
    if (c.pid > 0 && !c.done) ::kill(c.pid, SIGKILL);
  }
  for (auto& c : children) {
    if (c.pid > 0 && !c.done) ::waitpid(c.pid, &c.status, 0);
    if (c.fd >= 0) ::close(c.fd);
    c.done = true;
    c.fd = -1;
  }
}

// The child's environment: the agent's, its TRAINLET_PREFLIGHT_* settings and the ids.
std::vector<std::string> ChildEnv(const PreflightOptions& o, std::uint32_t local_rank) {
  std::map<std::string, std::string> env = o.env;
  env["TRAINLET_PREFLIGHT_RANK"] = std::to_string(o.rank_base + local_rank);
  env["TRAINLET_PREFLIGHT_LOCAL_RANK"] = std::to_string(local_rank);
  env["TRAINLET_PREFLIGHT_WORLD_SIZE"] = std::to_string(o.world_size);
  env["TRAINLET_PREFLIGHT_TIMEOUT_MS"] = std::to_string(o.timeout.count());
  env["TRAINLET_PREFLIGHT_MIN_BUSBW"] = std::to_string(o.min_busbw_gbps);
  env["TRAINLET_PREFLIGHT_REQUIRE_GPUS"] = o.require_gpus ? "1" : "0";
  env["TRAINLET_PREFLIGHT_BYTES"] = std::to_string(o.bytes);
  env.erase("TRAINLET_NCCL_UNIQUE_IDS");
  for (const auto& [k, v] : WorkerNcclEnv(o.ids)) env[k] = v;
  std::vector<std::string> kv;
  for (const auto& [k, v] : env) kv.push_back(k + "=" + v);
  return kv;
}

// Spawns `<self_exe> preflight` for `local_rank` with its stdout on a pipe, default signal
// mask and dispositions (posix_spawn(3): POSIX_SPAWN_SETSIGMASK, POSIX_SPAWN_SETSIGDEF).
Status SpawnChild(const PreflightOptions& o, std::uint32_t local_rank, Child* child) {
  std::vector<std::string> kv = ChildEnv(o, local_rank);
  std::vector<char*> envp;
  for (auto& s : kv) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string arg0 = o.self_exe, arg1 = "preflight";
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::Infra("preflight: pipe failed");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigset_t all;
  sigfillset(&all);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, o.self_exe.c_str(), &fa, &attr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return Status::Infra("preflight: cannot run " + o.self_exe + ": " + std::strerror(rc));
  }
  child->pid = pid;
  child->fd = fds[0];
  return Status::Ok();
}

// Reads the children's output until every pipe is closed, then reaps them. Ends early, with
// the status to report, on a pending SIGTERM/SIGINT (left pending), `cancel`, or the deadline.
Status Collect(const PreflightOptions& o, const std::string& pod, std::vector<Child>& children) {
  // The children enforce `timeout` themselves; this margin covers CUDA set-up
  // and a child that hangs outside NCCL (a wedged driver).
  const auto deadline = Clock::now() + o.timeout + std::chrono::seconds(15);
  for (;;) {
    std::vector<pollfd> pfds;
    for (auto& c : children) {
      if (c.fd >= 0) pfds.push_back({c.fd, POLLIN, 0});
    }
    if (pfds.empty()) break;
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGTERM) || sigismember(&pending, SIGINT) ||
        (o.cancel != nullptr && o.cancel->load())) {
      return Status(FailureClass::kTerminated, "stopped during the GPU preflight");
    }
    if (Clock::now() >= deadline) {
      return Status(FailureClass::kHardware, pod + ": GPU preflight children did not finish within " +
                                                 std::to_string(o.timeout.count() / 1000 + 15) +
                                                 " s (driver hung?)");
    }
    if (::poll(pfds.data(), pfds.size(), 100) <= 0) continue;
    for (auto& p : pfds) {
      if (p.revents == 0) continue;
      for (auto& c : children) {
        if (c.fd != p.fd) continue;
        char buf[4096];
        ssize_t nr = ::read(c.fd, buf, sizeof(buf));
        if (nr > 0) {
          c.out.append(buf, static_cast<std::size_t>(nr));
        } else if (nr == 0 || errno != EINTR) {
          ::close(c.fd);
          c.fd = -1;
        }
      }
    }
  }
  for (auto& c : children) {
    while (::waitpid(c.pid, &c.status, 0) < 0 && errno == EINTR) {
    }
    c.done = true;
  }
  return Status::Ok();
}

// A child's result line, or, when it printed none, hardware: a CUDA call crashed it.
PreflightRank RankOf(const PreflightOptions& o, std::uint32_t local_rank, const Child& c) {
  PreflightRank r;
  if (ParsePreflightLine(c.out.substr(0, c.out.find('\n')), &r)) return r;
  r.rank = o.rank_base + local_rank;
  r.local_rank = local_rank;
  r.gpu = "GPU " + std::to_string(local_rank);
  r.failure_class = FailureClass::kHardware;
  r.reason = WIFSIGNALED(c.status)
                 ? "preflight child died of signal " + std::to_string(WTERMSIG(c.status))
                 : "preflight child exited " + std::to_string(WEXITSTATUS(c.status)) +
                       " without a result";
  return r;
}

// Decides the pod's outcome from its ranks: hardware beats infra beats config; then the
// lowest rank. Fills status, summary and skipped.
void Decide(const PreflightOptions& o, const std::string& pod, PreflightReport& report) {
  auto weight = [](FailureClass c) {
    return c == FailureClass::kHardware ? 3 : c == FailureClass::kInfra ? 2 : c == FailureClass::kOk ? 0 : 1;
  };
  const PreflightRank* worst = nullptr;
  bool all_skipped = true;
  double min_bw = -1;
  for (const auto& r : report.ranks) {
    all_skipped = all_skipped && r.skipped;
    if (!r.skipped && r.failure_class == FailureClass::kOk) {
      min_bw = min_bw < 0 ? r.busbw_gbps : std::min(min_bw, r.busbw_gbps);
    }
    if (weight(r.failure_class) > (worst ? weight(worst->failure_class) : 0)) worst = &r;
  }
  if (worst != nullptr) {
    report.status = Status(worst->failure_class,
                           "GPU preflight failed on " + pod + ", rank " + std::to_string(worst->rank) +
                               " (local rank " + std::to_string(worst->local_rank) + ", " +
                               worst->gpu + "): " + worst->reason);
    report.summary = report.status.message();
    return;
  }
  report.skipped = all_skipped;
  if (all_skipped) {
    report.summary = report.ranks.empty() ? "no workers: preflight skipped"
                                          : report.ranks.front().reason;
    return;
  }
  char buf[160];
  std::snprintf(buf, sizeof(buf), "GPU preflight ok: %zu GPU(s), world %u, min busbw %.2f GB/s",
                report.ranks.size(), o.world_size, std::max(min_bw, 0.0));
  report.summary = buf;
}

}  // namespace

PreflightReport RunPreflight(const PreflightOptions& o) {
  PreflightReport report;
  std::vector<Child> children(o.nproc_per_node);
  const std::string pod = o.pod.empty() ? "this pod" : "pod " + o.pod;
  for (std::uint32_t lr = 0; lr < o.nproc_per_node; ++lr) {
    if (Status s = SpawnChild(o, lr, &children[lr]); !s.ok()) {
      KillAll(children);
      report.status = std::move(s);
      return report;
    }
  }
  if (Status s = Collect(o, pod, children); !s.ok()) {
    KillAll(children);
    report.status = std::move(s);
    return report;
  }
  for (std::uint32_t lr = 0; lr < children.size(); ++lr) {
    report.ranks.push_back(RankOf(o, lr, children[lr]));
  }
  Decide(o, pod, report);
  return report;
}

}  // namespace trainlet::gpu
