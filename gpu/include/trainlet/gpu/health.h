// trainlet/gpu/health.h — GPU health from NVML, as evidence for the classifier.
//
// A GPU fault often looks like a user crash: a segfault, "CUDA error: unknown
// error", exit 1 (microsoft/pai#4314). NVML (libnvml.so.1, loaded with dlopen into a function
// table as NCCL's nvmlwrap.cc does) still knows: uncorrected ECC errors,
// retired pages or remapped rows pending, the driver's recommended recovery
// action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, R550+), and Xid critical-error
// events. trainlet checks at start and after a worker failure; a fault found
// then becomes Evidence::gpu_fault and the pod exits HARDWARE (74), naming the
// GPU. Xid events are only seen while an event set is registered: the check
// listens for `xid_window`; Xids that happened before are visible only through
// the counters above (or the kernel log, which a pod usually cannot read).
// Functions are thread-compatible; CheckHealthInChild keeps NVML out of PID 1.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trainlet::gpu {

inline constexpr const char* kDefaultLibNvml = "libnvml.so.1";

struct GpuHealth {
  int index = 0;
  std::string uuid;
  std::uint64_t ecc_uncorrected = 0;  // volatile (since driver load) uncorrected ECC errors
  bool retired_pages_pending = false;  // a page retirement waits for a GPU reset
  bool row_remap_pending = false;      // remapped rows wait for a reset (A100 and later)
  bool row_remap_failed = false;       // a row could not be remapped: the GPU needs service
  int recovery_action = 0;  // 0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset
  std::vector<std::uint64_t> xids;  // Xid critical errors seen during the window
};

struct HealthReport {
  bool available = false;  // NVML loaded and initialised
  std::string detail;      // why not, or "2 GPU(s)"
  std::vector<GpuHealth> gpus;
};

// Loads `libnvml`, reads every GPU's counters, and waits up to `xid_window` for
// Xid critical-error events (0: do not wait). Never fails hard: a missing
// library gives available=false and `detail`; a query a GPU does not support
// leaves its field at the default.
HealthReport CheckHealth(const std::string& libnvml = kDefaultLibNvml,
                         std::chrono::milliseconds xid_window = std::chrono::milliseconds(0));

// CheckHealth in a forked child (see devices.h DiscoverInChild), at most
// `timeout` plus the window.
HealthReport CheckHealthInChild(const std::string& libnvml = kDefaultLibNvml,
                                std::chrono::milliseconds xid_window = std::chrono::milliseconds(0),
                                std::chrono::milliseconds timeout = std::chrono::seconds(20));

// One line naming each faulty GPU and its evidence ("GPU 1 (GPU-...): 3
// uncorrected ECC errors, Xid 79, recovery action: node reboot"), or nullopt when
// every GPU is healthy (or NVML is unavailable). Faults: uncorrected ECC
// errors, a failed row remap, a pending retirement/remap, an Xid that NVIDIA's
// catalogue does not put on the application (exitcodes/xid.h: Xid 13, 31, 43
// and 45 are left out), a recovery action other than none. Pure.
std::optional<std::string> HardwareEvidence(const HealthReport& report);

// A report as text and back (the child's answer; also handy in logs).
std::string SerializeHealth(const HealthReport& report);
HealthReport ParseHealth(const std::string& text);

}  // namespace trainlet::gpu
