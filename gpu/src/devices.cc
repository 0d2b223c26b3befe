#include "trainlet/gpu/devices.h"

#include <unistd.h>

#include <algorithm>

#include "child.h"
#include "trainlet/exitcodes/user_file.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

namespace trainlet::gpu {

using exitcodes::Result;
using exitcodes::Status;

Result<VisibleDevices> ParseVisibleDevices(const std::string& name,
                                           const std::optional<std::string>& value) {
  VisibleDevices v;
  if (!value) return v;
  if (*value == "all") {
    v.kind = VisibleDevices::Kind::kAll;
    return v;
  }
  if (value->empty() || *value == "none" || *value == "void" || *value == "NoDevFiles") {
    v.kind = VisibleDevices::Kind::kNone;
    return v;
  }
  v.kind = VisibleDevices::Kind::kList;
  std::set<std::string> seen;
  std::stringstream ss(*value + ",");
  std::string entry;
  while (std::getline(ss, entry, ',')) {
    if (entry.empty()) {
      return Status::Config(name + "='" + *value + "' has an empty entry");
    }
    bool digits = entry.find_first_not_of("0123456789") == std::string::npos;
    bool uuid = entry.starts_with("GPU-") || entry.starts_with("MIG-");
    if (!digits && !uuid) {
      return Status::Config(name + "='" + *value + "': '" + entry +
                            "' is neither a device index nor a GPU-/MIG- UUID");
    }
    if (!seen.insert(entry).second) {
      return Status::Config(name + "='" + *value + "' lists '" + entry + "' twice");
    }
    v.entries.push_back(entry);
  }
  return v;
}

Availability Probe() {
  Availability a;
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = ::dlerror();
    a.detail = e != nullptr ? e : "libcuda.so.1 not found";
    return a;
  }
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int*);
  auto init = reinterpret_cast<InitFn>(::dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<CountFn>(::dlsym(lib, "cuDeviceGetCount"));
  if (init == nullptr || count == nullptr) {
    a.detail = "libcuda.so.1 lacks cuInit/cuDeviceGetCount";
  } else if (int rc = init(0); rc != 0) {
    a.detail = "cuInit failed with CUresult " + std::to_string(rc);
  } else if (int rc2 = count(&a.device_count); rc2 != 0) {
    a.detail = "cuDeviceGetCount failed with CUresult " + std::to_string(rc2);
  } else {
    a.available = a.device_count > 0;
    a.detail = std::to_string(a.device_count) + " device(s)";
  }
  ::dlclose(lib);
  return a;
}

bool NvidiaDriverPresent() {
  struct stat st{};
  return ::stat("/proc/driver/nvidia/version", &st) == 0 || ::stat("/dev/nvidiactl", &st) == 0;
}

std::string LibraryPath(const char* env_name, const char* fallback) {
  const char* v = std::getenv(env_name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

namespace {

// CUDA driver API signatures (cuda.h), declared here so nothing includes it.
using CuInit = int (*)(unsigned);
using CuDeviceGetCount = int (*)(int*);
using CuDeviceGet = int (*)(int*, int);
using CuDeviceGetUuid = int (*)(unsigned char*, int);  // CUuuid is 16 bytes
using CuDeviceGetPciBusId = int (*)(char*, int, int);


}  // namespace

std::string FormatUuid(const unsigned char* b) {
  // nvidia-smi's form: GPU-8-4-4-4-12 hex digits.
  static const char* hex = "0123456789abcdef";
  std::string s = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += hex[b[i] >> 4];
    s += hex[b[i] & 15];
  }
  return s;
}

Discovery Discover(const std::string& libcuda) {
  Discovery d;
  void* lib = ::dlopen(libcuda.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = ::dlerror();
    d.detail = "no CUDA driver: " + std::string(e != nullptr ? e : libcuda + " not found");
    return d;
  }
  auto init = reinterpret_cast<CuInit>(::dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<CuDeviceGetCount>(::dlsym(lib, "cuDeviceGetCount"));
  auto get = reinterpret_cast<CuDeviceGet>(::dlsym(lib, "cuDeviceGet"));
  auto uuid = reinterpret_cast<CuDeviceGetUuid>(::dlsym(lib, "cuDeviceGetUuid_v2"));
  if (uuid == nullptr) uuid = reinterpret_cast<CuDeviceGetUuid>(::dlsym(lib, "cuDeviceGetUuid"));
  auto pci = reinterpret_cast<CuDeviceGetPciBusId>(::dlsym(lib, "cuDeviceGetPCIBusId"));
  int n = 0;
  if (init == nullptr || count == nullptr || get == nullptr) {
    d.detail = libcuda + " lacks cuInit/cuDeviceGetCount/cuDeviceGet";
  } else if (int rc = init(0); rc != 0) {
    // 100 = CUDA_ERROR_NO_DEVICE: a driver but no (visible) GPU.
    d.detail = "cuInit failed with CUresult " + std::to_string(rc) +
               (rc == 100 ? " (no CUDA-capable device)" : "");
  } else if (int rc2 = count(&n); rc2 != 0) {
    d.detail = "cuDeviceGetCount failed with CUresult " + std::to_string(rc2);
  } else {
    for (int i = 0; i < n; ++i) {
      GpuInfo g;
      g.index = i;
      int dev = 0;
      if (get(&dev, i) != 0) continue;
      unsigned char u[16];
      if (uuid != nullptr && uuid(u, dev) == 0) g.uuid = FormatUuid(u);
      char bus[64] = {};
      if (pci != nullptr && pci(bus, sizeof(bus) - 1, dev) == 0) g.pci_bus_id = bus;
      d.gpus.push_back(g);
    }
    d.available = !d.gpus.empty();
    d.detail = std::to_string(d.gpus.size()) + " GPU(s)";
  }
  ::dlclose(lib);
  return d;
}

Discovery DiscoverInChild(const std::string& libcuda, std::chrono::milliseconds timeout) {
  Discovery d;
  std::string why;
  auto text = internal::RunInChild(
      [&libcuda] {
        // One line "available\tdetail", then one line per GPU.
        Discovery c = Discover(libcuda);
        std::string out = (c.available ? "1\t" : "0\t") + c.detail + "\n";
        for (const GpuInfo& g : c.gpus) {
          out += std::to_string(g.index) + "\t" + g.uuid + "\t" + g.pci_bus_id + "\n";
        }
        return out;
      },
      timeout, &why);
  std::stringstream ss(text.value_or(""));
  std::string line;
  if (!text || !std::getline(ss, line) || line.size() < 2) {
    d.detail = "GPU discovery: " + (why.empty() ? std::string("no answer") : why);
    return d;
  }
  d.available = line[0] == '1';
  d.detail = line.substr(2);
  while (std::getline(ss, line)) {
    std::stringstream ls(line);
    std::string idx, uuid, bus;
    std::getline(ls, idx, '\t');
    std::getline(ls, uuid, '\t');
    std::getline(ls, bus, '\t');
    d.gpus.push_back({std::atoi(idx.c_str()), uuid, bus});
  }
  return d;
}

namespace internal {

// How often the wait for a child's answer looks for a pending stop signal.
constexpr long kStopCheckMs = 100;

std::optional<std::string> RunInChild(const std::function<std::string()>& fn,
                                      std::chrono::milliseconds timeout, std::string* why) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    *why = "pipe failed";
    return std::nullopt;
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    *why = "fork failed";
    return std::nullopt;
  }
  if (pid == 0) {
    ::close(fds[0]);
    std::string out = fn() + "\n.\n";  // the end marker: a complete answer
    const char* p = out.data();
    std::size_t left = out.size();
    while (left > 0) {
      ssize_t w = ::write(fds[1], p, left);
      if (w <= 0) break;
      p += w;
      left -= static_cast<std::size_t>(w);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string text;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  bool timed_out = false, stopped = false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    // A SIGTERM/SIGINT while the agent starts (blocked, so it stays pending):
    // the answer no longer matters, the stop does (user_file.h).
    if (exitcodes::PendingStopSignal() != 0) {
      stopped = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::min<long>(left.count(), kStopCheckMs)));
    if (r <= 0) continue;
    char buf[4096];
    ssize_t n = ::read(fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  if (timed_out || stopped) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (stopped) {
    *why = "stopped: a stop signal arrived first";
    return std::nullopt;
  }
  if (timed_out) {
    *why = "no answer within " + std::to_string(timeout.count()) + " ms (driver hung?)";
    return std::nullopt;
  }
  if (!text.ends_with("\n.\n")) {
    *why = WIFSIGNALED(status) ? "child died of signal " + std::to_string(WTERMSIG(status))
                               : "child gave no answer";
    return std::nullopt;
  }
  text.resize(text.size() - 3);
  return text;
}

}  // namespace internal

bool NeedsDiscovery(const std::string& v) { return v == "auto" || v == "gpu"; }

Result<std::string> ResolveWorkersPerPod(const std::string& source, const std::string& value,
                                         const Discovery& discovery) {
  if (!NeedsDiscovery(value)) return value;
  if (discovery.available && !discovery.gpus.empty()) {
    return std::to_string(discovery.gpus.size());
  }
  // torchrun: os.cpu_count() without an accelerator.
  if (value == "auto") return std::to_string(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  return Status::Config(source + "='gpu' but no GPU is visible: " + discovery.detail);
}

}  // namespace trainlet::gpu
