#include "trainlet/gpu/devices.h"

#include <dlfcn.h>

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

}  // namespace trainlet::gpu
