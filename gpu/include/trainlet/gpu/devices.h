// trainlet/gpu/devices.h — which GPUs this pod may use, without linking CUDA.
//
// The agent binary must start on machines with no GPU, driver or NCCL, so CUDA
// is only ever loaded with dlopen and every answer here can be "unavailable".
// Pure parsing functions are thread-safe; Probe() may be called from any thread
// but loads a shared library, so call it once at start-up.
#pragma once

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

}  // namespace trainlet::gpu
