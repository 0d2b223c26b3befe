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

struct Outcome {
  nlohmann::json j;
  int code = 0;
};

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

}  // namespace

int PreflightChildMain() {
  nlohmann::json j;
  const std::uint32_t rank = static_cast<std::uint32_t>(EnvU64("TRAINLET_PREFLIGHT_RANK", 0));
  const int local_rank = static_cast<int>(EnvU64("TRAINLET_PREFLIGHT_LOCAL_RANK", 0));
  const std::uint32_t world = static_cast<std::uint32_t>(EnvU64("TRAINLET_PREFLIGHT_WORLD_SIZE", 1));
  const auto timeout = std::chrono::milliseconds(EnvU64("TRAINLET_PREFLIGHT_TIMEOUT_MS", 60'000));
  const bool require = EnvU64("TRAINLET_PREFLIGHT_REQUIRE_GPUS", 0) != 0;
  const std::size_t bytes = std::max<std::size_t>(
      4, static_cast<std::size_t>(EnvU64("TRAINLET_PREFLIGHT_BYTES", 64 << 20)) / 4 * 4);
  const char* min_busbw_s = Get("TRAINLET_PREFLIGHT_MIN_BUSBW");
  const double min_busbw = min_busbw_s != nullptr ? std::atof(min_busbw_s) : 0.0;
  const auto deadline = Clock::now() + timeout;
  j["rank"] = rank;
  j["local_rank"] = local_rank;
  j["gpu"] = "GPU " + std::to_string(local_rank);

  // 1. The device.
  std::string libcuda = LibraryPath("TRAINLET_LIBCUDA", kDefaultLibCuda);
  void* lib = ::dlopen(libcuda.c_str(), RTLD_NOW | RTLD_LOCAL);
  auto no_gpu = [&](const std::string& why) {
    if (require) return Emit(j, FailureClass::kHardware, "--require-gpus but no GPU: " + why);
    j["skipped"] = true;
    return Emit(j, FailureClass::kOk, "no GPU: preflight skipped (" + why + ")");
  };
  if (lib == nullptr) {
    const char* e = ::dlerror();
    return no_gpu(e != nullptr ? e : libcuda + " not found");
  }
  Cuda cu;
  auto sym = [lib](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, name));
    return fn != nullptr;
  };
  sym(cu.uuid, "cuDeviceGetUuid_v2") || sym(cu.uuid, "cuDeviceGetUuid");
  sym(cu.error_name, "cuGetErrorName");
  if (!(sym(cu.init, "cuInit") && sym(cu.device_get, "cuDeviceGet") &&
        sym(cu.device_count, "cuDeviceGetCount") &&
        sym(cu.ctx_retain, "cuDevicePrimaryCtxRetain") && sym(cu.ctx_set, "cuCtxSetCurrent") &&
        sym(cu.mem_alloc, "cuMemAlloc_v2") && sym(cu.mem_free, "cuMemFree_v2") &&
        sym(cu.htod, "cuMemcpyHtoD_v2") && sym(cu.dtoh, "cuMemcpyDtoH_v2") &&
        sym(cu.stream_create, "cuStreamCreate") && sym(cu.stream_query, "cuStreamQuery"))) {
    return Emit(j, FailureClass::kHardware, libcuda + " lacks a driver API entry point");
  }
  if (int rc = cu.init(0); rc != 0) {
    if (rc == 100) return no_gpu("cuInit: no CUDA-capable device");  // CUDA_ERROR_NO_DEVICE
    return Emit(j, FailureClass::kHardware, "cuInit failed: " + CuName(cu, rc));
  }
  int count = 0;
  if (int rc = cu.device_count(&count); rc != 0 || count == 0) {
    return no_gpu("cuDeviceGetCount: " + (rc != 0 ? CuName(cu, rc) : std::string("0 devices")));
  }
  int dev = 0;
  if (local_rank >= count) {
    return Emit(j, FailureClass::kHardware,
                "local rank " + std::to_string(local_rank) + " has no GPU: only " +
                    std::to_string(count) + " visible");
  }
  if (int rc = cu.device_get(&dev, local_rank); rc != 0) {
    return Emit(j, FailureClass::kHardware, "cuDeviceGet: " + CuName(cu, rc));
  }
  if (unsigned char u[16]; cu.uuid != nullptr && cu.uuid(u, dev) == 0) {
    static const char* hex = "0123456789abcdef";
    std::string s = "GPU-";
    for (int i = 0; i < 16; ++i) {
      if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
      s += hex[u[i] >> 4];
      s += hex[u[i] & 15];
    }
    j["gpu"] = s;
  }
  void* ctx = nullptr;
  void* stream = nullptr;
  unsigned long long send = 0, recv = 0;
  if (int rc = cu.ctx_retain(&ctx, dev); rc != 0) {
    return Emit(j, FailureClass::kHardware, "cuDevicePrimaryCtxRetain: " + CuName(cu, rc));
  }
  if (int rc = cu.ctx_set(ctx); rc != 0) {
    return Emit(j, FailureClass::kHardware, "cuCtxSetCurrent: " + CuName(cu, rc));
  }
  const std::size_t n = bytes / 4;
  std::vector<float> host(n, static_cast<float>(rank + 1));
  int rc = cu.mem_alloc(&send, bytes);
  if (rc == 0) rc = cu.mem_alloc(&recv, bytes);
  if (rc == 0) rc = cu.htod(send, host.data(), bytes);
  if (rc == 0) rc = cu.stream_create(&stream, 0);
  if (rc != 0) return Emit(j, FailureClass::kHardware, "CUDA setup: " + CuName(cu, rc));

  // 2. NCCL.
  auto ids = ParseWorkerNcclEnv([](const char* k) { return Get(k); });
  if (!ids.ok()) return Emit(j, FailureClass::kConfig, ids.status().message());
  if (ids->empty()) {
    return Emit(j, FailureClass::kInfra,
                "no NCCL unique id from the leader (is NCCL missing in the leader's image?)");
  }
  auto nccl = Nccl::Load(LibraryPath("TRAINLET_LIBNCCL", kDefaultLibNccl));
  if (!nccl.ok()) return Emit(j, FailureClass::kInfra, nccl.status().message());
  const Nccl& nc = **nccl;
  j["nccl_version"] = nc.version();
  if (nc.version() != ids->nccl_version) {
    return Emit(j, FailureClass::kInfra,
                "NCCL version " + std::to_string(nc.version()) + " differs from the leader's " +
                    std::to_string(ids->nccl_version) + ": every pod needs the same NCCL");
  }
  Nccl::Comm comm = nullptr;
  NcclConfig config = MakeConfig(false);
  auto t0 = Clock::now();
  // Waits for a non-blocking operation: polls the async error until it leaves
  // ncclInProgress (and, with `query`, the stream is done); aborts at the deadline.
  auto wait = [&](const char* what, bool query) -> std::optional<int> {
    for (;;) {
      int async = kNcclSuccess;
      int r = nc.CommGetAsyncError(comm, &async);
      if (r != kNcclSuccess) async = r;
      if (async != kNcclSuccess && async != kNcclInProgress) {
        nc.CommAbort(comm);
        return Emit(j, async == kNcclUnhandledCudaError ? FailureClass::kHardware : FailureClass::kInfra,
                    std::string(what) + " failed: " + NcclResultName(async));
      }
      if (async == kNcclSuccess) {
        if (!query) return std::nullopt;
        int q = cu.stream_query(stream);
        if (q == 0) return std::nullopt;
        if (q != 600) {  // CUDA_ERROR_NOT_READY
          nc.CommAbort(comm);
          return Emit(j, FailureClass::kHardware, std::string(what) + ": " + CuName(cu, q));
        }
      }
      if (Clock::now() >= deadline) {
        nc.CommAbort(comm);
        return Emit(j, FailureClass::kInfra,
                    std::string(what) + " timed out after " + std::to_string(timeout.count() / 1000.0).substr(0, 5) +
                        " s (ncclCommAbort); a peer did not join or the network is blocked");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  };
  int r = nc.CommInitRank(&comm, static_cast<int>(world), ids->ids, static_cast<int>(rank), &config);
  if (r != kNcclSuccess && r != kNcclInProgress) {
    if (comm != nullptr) nc.CommAbort(comm);
    return Emit(j, r == kNcclUnhandledCudaError ? FailureClass::kHardware : FailureClass::kInfra,
                "ncclCommInitRank failed: " + NcclResultName(r));
  }
  if (auto done = wait("NCCL init", false)) return *done;
  j["init_ms"] = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();

  // 3. Correctness, then bandwidth.
  auto all_reduce = [&]() -> std::optional<int> {
    int rr = nc.AllReduceSumFloat(reinterpret_cast<void*>(send), reinterpret_cast<void*>(recv), n,
                                  comm, stream);
    if (rr != kNcclSuccess && rr != kNcclInProgress) {
      nc.CommAbort(comm);
      return Emit(j, FailureClass::kInfra, "ncclAllReduce failed: " + NcclResultName(rr));
    }
    return wait("all-reduce", true);
  };
  if (auto done = all_reduce()) return *done;
  std::vector<float> out(n, 0.0f);
  if (int rc = cu.dtoh(out.data(), recv, bytes); rc != 0) {
    nc.CommAbort(comm);
    return Emit(j, FailureClass::kHardware, "cuMemcpyDtoH: " + CuName(cu, rc));
  }
  const double expected = static_cast<double>(world) * (world + 1) / 2;
  for (std::size_t i = 0; i < n; ++i) {
    if (std::fabs(out[i] - expected) > 1e-3 * expected) {
      nc.CommAbort(comm);
      return Emit(j, FailureClass::kHardware,
                  "all-reduce returned " + std::to_string(out[i]) + " at element " +
                      std::to_string(i) + ", expected " + std::to_string(expected));
    }
  }
  constexpr int kIters = 5;
  auto tb = Clock::now();
  for (int i = 0; i < kIters; ++i) {
    if (auto done = all_reduce()) return *done;
  }
  double secs = std::chrono::duration<double>(Clock::now() - tb).count() / kIters;
  double algbw = static_cast<double>(bytes) / std::max(secs, 1e-9) / 1e9;
  double busbw = world > 1 ? algbw * 2.0 * (world - 1) / world : algbw;
  j["busbw_gbps"] = std::round(busbw * 100) / 100;
  nc.CommDestroy(comm);
  cu.mem_free(send);
  cu.mem_free(recv);
  if (min_busbw > 0 && world > 1 && busbw < min_busbw) {
    return Emit(j, FailureClass::kInfra,
                "bus bandwidth " + std::to_string(busbw).substr(0, 6) + " GB/s is below " +
                    "--preflight-min-busbw " + std::to_string(min_busbw).substr(0, 6) + " GB/s");
  }
  return Emit(j, FailureClass::kOk, "ok");
}

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

PreflightReport RunPreflight(const PreflightOptions& o) {
  PreflightReport report;
  struct Child {
    pid_t pid = -1;
    int fd = -1;
    std::string out;
    int status = 0;
    bool done = false;
  };
  std::vector<Child> children(o.nproc_per_node);
  const std::string pod = o.pod.empty() ? "this pod" : "pod " + o.pod;
  auto fail_all = [&](Status s) {
    for (auto& c : children) {
      if (c.pid > 0 && !c.done) ::kill(c.pid, SIGKILL);
    }
    for (auto& c : children) {
      if (c.pid > 0 && !c.done) ::waitpid(c.pid, &c.status, 0);
      if (c.fd >= 0) ::close(c.fd);
    }
    report.status = std::move(s);
    return report;
  };
  for (std::uint32_t lr = 0; lr < o.nproc_per_node; ++lr) {
    std::map<std::string, std::string> env = o.env;
    env["TRAINLET_PREFLIGHT_RANK"] = std::to_string(o.rank_base + lr);
    env["TRAINLET_PREFLIGHT_LOCAL_RANK"] = std::to_string(lr);
    env["TRAINLET_PREFLIGHT_WORLD_SIZE"] = std::to_string(o.world_size);
    env["TRAINLET_PREFLIGHT_TIMEOUT_MS"] = std::to_string(o.timeout.count());
    env["TRAINLET_PREFLIGHT_MIN_BUSBW"] = std::to_string(o.min_busbw_gbps);
    env["TRAINLET_PREFLIGHT_REQUIRE_GPUS"] = o.require_gpus ? "1" : "0";
    env["TRAINLET_PREFLIGHT_BYTES"] = std::to_string(o.bytes);
    env.erase("TRAINLET_NCCL_UNIQUE_IDS");
    for (const auto& [k, v] : WorkerNcclEnv(o.ids)) env[k] = v;
    std::vector<std::string> kv;
    for (const auto& [k, v] : env) kv.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& s : kv) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string arg0 = o.self_exe, arg1 = "preflight";
    char* argv[] = {arg0.data(), arg1.data(), nullptr};
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return fail_all(Status::Infra("preflight: pipe failed"));
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
      return fail_all(Status::Infra("preflight: cannot run " + o.self_exe + ": " + std::strerror(rc)));
    }
    children[lr].pid = pid;
    children[lr].fd = fds[0];
  }
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
      return fail_all(Status(FailureClass::kTerminated, "stopped during the GPU preflight"));
    }
    if (Clock::now() >= deadline) {
      return fail_all(Status(FailureClass::kHardware,
                             pod + ": GPU preflight children did not finish within " +
                                 std::to_string(o.timeout.count() / 1000 + 15) +
                                 " s (driver hung?)"));
    }
    int pr = ::poll(pfds.data(), pfds.size(), 100);
    if (pr <= 0) continue;
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
  // Decide: hardware beats infra beats config; then the lowest rank.
  const PreflightRank* worst = nullptr;
  auto weight = [](FailureClass c) {
    return c == FailureClass::kHardware ? 3 : c == FailureClass::kInfra ? 2 : c == FailureClass::kOk ? 0 : 1;
  };
  bool all_skipped = true;
  double min_bw = -1;
  for (std::uint32_t lr = 0; lr < children.size(); ++lr) {
    const Child& c = children[lr];
    PreflightRank r;
    std::string line = c.out.substr(0, c.out.find('\n'));
    if (!ParsePreflightLine(line, &r)) {
      r.rank = o.rank_base + lr;
      r.local_rank = lr;
      r.gpu = "GPU " + std::to_string(lr);
      r.failure_class = FailureClass::kHardware;  // a CUDA call that crashed the process
      r.reason = WIFSIGNALED(c.status)
                     ? "preflight child died of signal " + std::to_string(WTERMSIG(c.status))
                     : "preflight child exited " + std::to_string(WEXITSTATUS(c.status)) +
                           " without a result";
    }
    all_skipped = all_skipped && r.skipped;
    if (!r.skipped && r.failure_class == FailureClass::kOk) {
      min_bw = min_bw < 0 ? r.busbw_gbps : std::min(min_bw, r.busbw_gbps);
    }
    report.ranks.push_back(r);
  }
  for (const auto& r : report.ranks) {
    if (weight(r.failure_class) > (worst ? weight(worst->failure_class) : 0)) worst = &r;
  }
  if (worst != nullptr) {
    report.status = Status(worst->failure_class,
                           "GPU preflight failed on " + pod + ", rank " + std::to_string(worst->rank) +
                               " (local rank " + std::to_string(worst->local_rank) + ", " +
                               worst->gpu + "): " + worst->reason);
    report.summary = report.status.message();
    return report;
  }
  report.skipped = all_skipped;
  if (all_skipped) {
    report.summary = report.ranks.empty() ? "no workers: preflight skipped"
                                          : report.ranks.front().reason;
  } else {
    char buf[160];
    std::snprintf(buf, sizeof(buf), "GPU preflight ok: %zu GPU(s), world %u, min busbw %.2f GB/s",
                  report.ranks.size(), o.world_size, std::max(min_bw, 0.0));
    report.summary = buf;
  }
  return report;
}

}  // namespace trainlet::gpu
