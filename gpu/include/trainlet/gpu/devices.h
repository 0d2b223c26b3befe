// trainlet/gpu/devices.h — which GPUs this pod may use, without linking CUDA.
//
// The agent binary must start on machines with no GPU, driver or NCCL, so CUDA
// is only ever loaded with dlopen and every answer here can be "unavailable".
// Pure parsing functions are thread-safe; Probe() may be called from any thread
// but loads a shared library, so call it once at start-up.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "trainlet/exitcodes/status.h"

namespace trainlet::gpu {

// What a *_VISIBLE_DEVICES variable says.
struct VisibleDevices {
  enum class Kind {
    kUnset,  // variable absent: every device the driver reports
    kAll,    // "all" (NVIDIA container toolkit)
    kNone,   // "none", "void" or "" (no GPU)
    kList,   // explicit indices or UUIDs
  };
  Kind kind = Kind::kUnset;
  std::vector<std::string> entries;  // for kList: "0", "3", "GPU-8f6c...", "MIG-..."
};

// Parses CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES syntax
// (https://docs.nvidia.com/cuda/cuda-c-programming-guide/#env-vars and the NVIDIA
// container toolkit's docs): a comma list of indices or UUIDs, "all", "none",
// "void". Errors (class config): an empty entry ("0,,1"), an entry that is
// neither a decimal index nor a GPU-/MIG- UUID, a duplicate. `name` is the
// variable's name, for the message.
[[nodiscard]] exitcodes::Result<VisibleDevices> ParseVisibleDevices(
    const std::string& name, const std::optional<std::string>& value);

// Whether the CUDA driver can be loaded and how many devices it reports.
struct Availability {
  bool available = false;
  int device_count = 0;
  std::string detail;  // why not, e.g. "libcuda.so.1: cannot open shared object file"
};

// dlopen("libcuda.so.1") and cuInit/cuDeviceGetCount through function pointers.
// Never fails hard: a missing library or driver is reported in `detail`.
// Note: this initialises the driver in the calling process; the agent calls it
// only from a short-lived child or for logging before any worker starts.
Availability Probe();

// One GPU the driver reports, in the order CUDA numbers them (after the driver
// applied CUDA_VISIBLE_DEVICES): `index` is what cudaSetDevice/LOCAL_RANK use.
struct GpuInfo {
  int index = 0;
  std::string uuid;        // "GPU-8f6c1e2a-...", as nvidia-smi -L prints it
  std::string pci_bus_id;  // "0000:19:00.0" (cuDeviceGetPCIBusId)
};

// What discovery found. `available` false means no usable driver or no device;
// `detail` then says why in one line ("libcuda.so.1: cannot open shared object
// file", "cuInit failed with CUresult 100 (no device)").
struct Discovery {
  bool available = false;
  std::vector<GpuInfo> gpus;
  std::string detail;
};

// Default library names; tests point these at fakes. The agent reads the
// overrides TRAINLET_LIBCUDA / TRAINLET_LIBNCCL / TRAINLET_LIBNVML.
inline constexpr const char* kDefaultLibCuda = "libcuda.so.1";

// The library path to load: the value of `env_name` when set and non-empty,
// else `fallback`.
std::string LibraryPath(const char* env_name, const char* fallback);

// A 16-byte GPU UUID (cuDeviceGetUuid, NVML) in nvidia-smi's form:
// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx". `bytes` must hold 16 bytes.
std::string FormatUuid(const unsigned char* bytes);

// Whether the NVIDIA kernel driver is loaded on this node: /proc/driver/nvidia/version
// or /dev/nvidiactl exists (the driver creates both; a container with GPUs gets them
// from the NVIDIA container toolkit). Two stat(2) calls, no library loaded: the
// agent asks this before it loads NVML or NCCL, so a CPU-only pod pays nothing.
bool NvidiaDriverPresent();

// Loads the CUDA driver API from `libcuda` with dlopen and lists the devices
// (cuInit, cuDeviceGetCount, cuDeviceGet, cuDeviceGetUuid, cuDeviceGetPCIBusId).
// Never fails hard: an absent library, symbol or device gives available=false.
// Initialises the driver in the calling process: the agent uses
// DiscoverInChild instead. Blocking; thread-compatible.
Discovery Discover(const std::string& libcuda = kDefaultLibCuda);

// Discover() in a forked child, its answer sent back over a pipe, so the calling
// process (PID 1) never initialises the driver. A child that has not answered
// within `timeout` (a wedged driver) is SIGKILLed and reported unavailable.
// Call before any thread is started (fork). Blocking, at most `timeout`.
Discovery DiscoverInChild(const std::string& libcuda = kDefaultLibCuda,
                          std::chrono::milliseconds timeout = std::chrono::seconds(20));

// Workers per pod for `--nproc-per-node auto|gpu` (torchrun's values):
//  - "gpu": one worker per visible GPU; no GPU is an error (class config,
//    naming the flag and `discovery.detail`);
//  - "auto": one worker per visible GPU, or as torchrun, one per online CPU
//    (os.cpu_count()) when there is none.
// As torchrun does, every worker keeps CUDA_VISIBLE_DEVICES unchanged and picks
// its device by LOCAL_RANK (torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))).
// Any other value is returned unchanged (it is then parsed as a number).
// `source` names the flag or variable for the message.
[[nodiscard]] exitcodes::Result<std::string> ResolveWorkersPerPod(const std::string& source,
                                                                  const std::string& value,
                                                                  const Discovery& discovery);

// True for "auto" and "gpu", the values that need discovery.
bool NeedsDiscovery(const std::string& nproc_per_node);

}  // namespace trainlet::gpu
