// A fake NVML (libnvml.so.1) for tests. Two GPUs; GPU FAKE_NVML_BAD (if set)
// reports FAKE_NVML_ECC uncorrected ECC errors (default 3), recovery action
// FAKE_NVML_ACTION (default 2, node reboot), and delivers Xid FAKE_NVML_XID (if
// set) once an event set is registered. FAKE_NVML_BAD_FILE: see Bad().
#include <cstdlib>
#include <cstring>
#include <cstdio>

namespace {
int Bad() {
  const char* v = std::getenv("FAKE_NVML_BAD");
  if (v != nullptr) return std::atoi(v);
  // FAKE_NVML_BAD_FILE: the bad GPU's index, once a test writes it there (a
  // fault that appears while the workers run).
  if (const char* f = std::getenv("FAKE_NVML_BAD_FILE")) {
    if (FILE* fp = std::fopen(f, "r")) {
      int i = -1;
      if (std::fscanf(fp, "%d", &i) != 1) i = -1;
      std::fclose(fp);
      return i;
    }
  }
  return -1;
}
int Env(const char* n, int d) {
  const char* v = std::getenv(n);
  return v != nullptr ? std::atoi(v) : d;
}
int devices[2];
bool delivered = false;
struct FieldValue {
  unsigned field_id;
  unsigned scope_id;
  long long timestamp;
  long long latency_usec;
  int value_type;
  int nvml_return;
  unsigned long long value;
};
struct EventData {
  void* device;
  unsigned long long event_type;
  unsigned long long event_data;
  unsigned a, b;
};
int Index(void* d) { return d == &devices[1] ? 1 : 0; }
}  // namespace

extern "C" {
int nvmlInit_v2() { return 0; }
int nvmlShutdown() { return 0; }
int nvmlDeviceGetCount_v2(unsigned* n) {
  *n = 2;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** d) {
  if (i > 1) return 2;
  *d = &devices[i];
  return 0;
}
int nvmlDeviceGetUUID(void* d, char* buf, unsigned len) {
  std::snprintf(buf, len, "GPU-00000000-0000-0000-0000-00000000000%d", Index(d));
  return 0;
}
int nvmlDeviceGetTotalEccErrors(void* d, int type, int counter, unsigned long long* n) {
  if (type != 1 || counter != 0) return 2;
  *n = Index(d) == Bad() ? static_cast<unsigned long long>(Env("FAKE_NVML_ECC", 3)) : 0;
  return 0;
}
int nvmlDeviceGetRetiredPagesPendingStatus(void*, int* p) {
  *p = 0;
  return 0;
}
int nvmlDeviceGetFieldValues(void* d, int n, FieldValue* v) {
  for (int i = 0; i < n; ++i) {
    v[i].nvml_return = v[i].field_id == 230 ? 0 : 2;
    v[i].value = Index(d) == Bad() ? static_cast<unsigned long long>(Env("FAKE_NVML_ACTION", 2)) : 0;
  }
  return 0;
}
int nvmlEventSetCreate(void** set) {
  *set = &delivered;
  return 0;
}
int nvmlDeviceRegisterEvents(void*, unsigned long long, void*) { return 0; }
int nvmlEventSetWait_v2(void*, EventData* ev, unsigned) {
  if (delivered || std::getenv("FAKE_NVML_XID") == nullptr || Bad() < 0) return 10;  // timeout
  delivered = true;
  ev->device = &devices[Bad()];
  ev->event_type = 0x8;
  ev->event_data = static_cast<unsigned long long>(Env("FAKE_NVML_XID", 79));
  return 0;
}
int nvmlEventSetFree(void*) { return 0; }
}
