#include "trainlet/gpu/health.h"

#include "trainlet/exitcodes/xid.h"

#include <dlfcn.h>

#include <optional>

#include <nlohmann/json.hpp>

#include "child.h"

namespace trainlet::gpu {

namespace {

// nvml.h declarations we need (NVML API reference), without the header.
using Device = void*;
struct FieldValue {  // nvmlFieldValue_t
  unsigned field_id;
  unsigned scope_id;
  long long timestamp;
  long long latency_usec;
  int value_type;
  int nvml_return;
  unsigned long long value;  // nvmlValue_t, a union of 8 bytes
};
struct EventData {  // nvmlEventData_t
  Device device;
  unsigned long long event_type;
  unsigned long long event_data;  // the Xid
  unsigned gpu_instance_id;
  unsigned compute_instance_id;
};
constexpr unsigned kFieldRecoveryAction = 230;  // NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
constexpr unsigned long long kEventXidCritical = 0x8;  // nvmlEventTypeXidCriticalError

const char* ActionName(int a) {
  switch (a) {
    case 1: return "GPU reset";
    case 2: return "node reboot";
    case 3: return "drain P2P";
    case 4: return "drain and reset";
    default: return "none";
  }
}

// The NVML entry points CheckHealth uses, loaded with dlopen/dlsym into one
// table (as NCCL's src/misc/nvmlwrap.cc does). The first three are required;
// any other may be missing (older drivers): its check is skipped.
struct Nvml {
  void* lib = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*count)(unsigned*) = nullptr;
  int (*handle)(unsigned, Device*) = nullptr;
  int (*uuid)(Device, char*, unsigned) = nullptr;
  int (*ecc)(Device, int, int, unsigned long long*) = nullptr;
  int (*retired_pending)(Device, int*) = nullptr;
  int (*remapped)(Device, unsigned*, unsigned*, unsigned*, unsigned*) = nullptr;
  int (*fields)(Device, int, FieldValue*) = nullptr;
  int (*set_create)(void**) = nullptr;
  int (*register_events)(Device, unsigned long long, void*) = nullptr;
  int (*set_wait)(void*, EventData*, unsigned) = nullptr;
  int (*set_free)(void*) = nullptr;
};

// Opens `libnvml` and initializes NVML; on failure nullopt, with why in *detail.
std::optional<Nvml> LoadNvml(const std::string& libnvml, std::string* detail) {
  Nvml n;
  n.lib = ::dlopen(libnvml.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (n.lib == nullptr) {
    const char* e = ::dlerror();
    *detail = "NVML unavailable: " + std::string(e != nullptr ? e : libnvml);
    return std::nullopt;
  }
  auto sym = [lib = n.lib](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, name));
    return fn != nullptr;
  };
  if (!(sym(n.init, "nvmlInit_v2") && sym(n.count, "nvmlDeviceGetCount_v2") &&
        sym(n.handle, "nvmlDeviceGetHandleByIndex_v2"))) {
    *detail = libnvml + " lacks nvmlInit_v2/nvmlDeviceGetCount_v2";
    ::dlclose(n.lib);
    return std::nullopt;
  }
  sym(n.shutdown, "nvmlShutdown");
  sym(n.uuid, "nvmlDeviceGetUUID");
  sym(n.ecc, "nvmlDeviceGetTotalEccErrors");
  sym(n.retired_pending, "nvmlDeviceGetRetiredPagesPendingStatus");
  sym(n.remapped, "nvmlDeviceGetRemappedRows");
  sym(n.fields, "nvmlDeviceGetFieldValues");
  sym(n.set_create, "nvmlEventSetCreate");
  sym(n.register_events, "nvmlDeviceRegisterEvents");
  sym(n.set_wait, "nvmlEventSetWait_v2");
  sym(n.set_free, "nvmlEventSetFree");
  if (int rc = n.init(); rc != 0) {
    *detail = "nvmlInit failed with nvmlReturn " + std::to_string(rc);
    ::dlclose(n.lib);
    return std::nullopt;
  }
  return n;
}

// One GPU's counters and flags, as far as the driver offers them.
GpuHealth ReadGpu(const Nvml& nv, unsigned index, Device d) {
  GpuHealth g;
  g.index = static_cast<int>(index);
  char buf[96] = {};
  if (nv.uuid != nullptr && nv.uuid(d, buf, sizeof(buf) - 1) == 0) g.uuid = buf;
  unsigned long long e = 0;
  // NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1, NVML_VOLATILE_ECC = 0.
  if (nv.ecc != nullptr && nv.ecc(d, 1, 0, &e) == 0) g.ecc_uncorrected = e;
  int pending = 0;
  if (nv.retired_pending != nullptr && nv.retired_pending(d, &pending) == 0) {
    g.retired_pages_pending = pending != 0;
  }
  unsigned corr = 0, unc = 0, is_pending = 0, failed = 0;
  if (nv.remapped != nullptr && nv.remapped(d, &corr, &unc, &is_pending, &failed) == 0) {
    g.row_remap_pending = is_pending != 0;
    g.row_remap_failed = failed != 0;
  }
  FieldValue fv{};
  fv.field_id = kFieldRecoveryAction;
  if (nv.fields != nullptr && nv.fields(d, 1, &fv) == 0 && fv.nvml_return == 0) {
    g.recovery_action = static_cast<int>(fv.value & 0xffffffffu);
  }
  return g;
}

// Critical Xids of `handles` (index = r->gpus' index) within `window`, into r.
void CollectXids(const Nvml& nv, const std::vector<Device>& handles,
                 std::chrono::milliseconds window, HealthReport* r) {
  if (window.count() <= 0 || nv.set_create == nullptr || nv.register_events == nullptr ||
      nv.set_wait == nullptr) {
    return;
  }
  void* set = nullptr;
  if (nv.set_create(&set) != 0) return;
  for (Device d : handles) nv.register_events(d, kEventXidCritical, set);
  auto deadline = std::chrono::steady_clock::now() + window;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    EventData ev{};
    if (nv.set_wait(set, &ev, static_cast<unsigned>(left.count())) != 0) break;  // timeout
    for (std::size_t i = 0; i < handles.size(); ++i) {
      if (handles[i] == ev.device) r->gpus[i].xids.push_back(ev.event_data);
    }
  }
  if (nv.set_free != nullptr) nv.set_free(set);
}

}  // namespace

HealthReport CheckHealth(const std::string& libnvml, std::chrono::milliseconds xid_window) {
  HealthReport r;
  std::optional<Nvml> nv = LoadNvml(libnvml, &r.detail);
  if (!nv) return r;
  unsigned n = 0;
  nv->count(&n);
  std::vector<Device> handles;
  for (unsigned i = 0; i < n; ++i) {
    Device d = nullptr;
    if (nv->handle(i, &d) != 0) continue;
    r.gpus.push_back(ReadGpu(*nv, i, d));
    handles.push_back(d);
  }
  CollectXids(*nv, handles, xid_window, &r);
  if (nv->shutdown != nullptr) nv->shutdown();
  ::dlclose(nv->lib);
  r.available = true;
  r.detail = std::to_string(r.gpus.size()) + " GPU(s)";
  return r;
}

std::optional<std::string> HardwareEvidence(const HealthReport& report) {
  std::string out;
  for (const GpuHealth& g : report.gpus) {
    std::string what;
    auto add = [&what](const std::string& s) { what += (what.empty() ? "" : ", ") + s; };
    if (g.ecc_uncorrected > 0) add(std::to_string(g.ecc_uncorrected) + " uncorrected ECC errors");
    if (g.row_remap_failed) add("row remapping failed");
    if (g.row_remap_pending) add("row remap pending a reset");
    if (g.retired_pages_pending) add("page retirement pending a reset");
    // By number, from NVIDIA's Xid catalogue (exitcodes/xid.h,
    // https://docs.nvidia.com/deploy/xid-errors/): an application's Xid (31,
    // an MMU fault) is no fault of the GPU; the ECC counters above decide.
    for (auto x : g.xids) {
      if (exitcodes::LookUpXid(x).cause != exitcodes::XidCause::kApplication) {
        add("Xid " + std::to_string(x));
      }
    }
    if (g.recovery_action != 0) add(std::string("recovery action: ") + ActionName(g.recovery_action));
    if (what.empty()) continue;
    out += (out.empty() ? "" : "; ") + ("GPU " + std::to_string(g.index)) +
           (g.uuid.empty() ? "" : " (" + g.uuid + ")") + ": " + what;
  }
  if (out.empty()) return std::nullopt;
  return out;
}

std::string SerializeHealth(const HealthReport& r) {
  nlohmann::json j;
  j["available"] = r.available;
  j["detail"] = r.detail;
  j["gpus"] = nlohmann::json::array();
  for (const auto& g : r.gpus) {
    j["gpus"].push_back({{"index", g.index},
                         {"uuid", g.uuid},
                         {"ecc_uncorrected", g.ecc_uncorrected},
                         {"retired_pages_pending", g.retired_pages_pending},
                         {"row_remap_pending", g.row_remap_pending},
                         {"row_remap_failed", g.row_remap_failed},
                         {"recovery_action", g.recovery_action},
                         {"xids", g.xids}});
  }
  return j.dump();
}

HealthReport ParseHealth(const std::string& text) {
  HealthReport r;
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    r.detail = "NVML check gave no readable answer";
    return r;
  }
  r.available = j.value("available", false);
  r.detail = j.value("detail", std::string());
  if (j.contains("gpus") && j["gpus"].is_array()) {
    for (const auto& g : j["gpus"]) {
      GpuHealth h;
      h.index = g.value("index", 0);
      h.uuid = g.value("uuid", std::string());
      h.ecc_uncorrected = g.value("ecc_uncorrected", 0ull);
      h.retired_pages_pending = g.value("retired_pages_pending", false);
      h.row_remap_pending = g.value("row_remap_pending", false);
      h.row_remap_failed = g.value("row_remap_failed", false);
      h.recovery_action = g.value("recovery_action", 0);
      if (g.contains("xids")) h.xids = g["xids"].get<std::vector<std::uint64_t>>();
      r.gpus.push_back(h);
    }
  }
  return r;
}

HealthReport CheckHealthInChild(const std::string& libnvml, std::chrono::milliseconds xid_window,
                                std::chrono::milliseconds timeout) {
  std::string why;
  auto text = internal::RunInChild(
      [&] { return SerializeHealth(CheckHealth(libnvml, xid_window)); }, timeout + xid_window,
      &why);
  if (!text) {
    HealthReport r;
    r.detail = "NVML check: " + why;
    return r;
  }
  return ParseHealth(*text);
}

}  // namespace trainlet::gpu
