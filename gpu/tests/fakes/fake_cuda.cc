// A fake CUDA driver (libcuda.so.1) for tests: the entry points trainlet
// resolves, with host memory standing in for device memory. Behaviour by env:
//   FAKE_CUDA_DEVICES  number of devices (default 2; 0: cuInit returns 100)
//   FAKE_CUDA_INIT_RC  cuInit's result (default 0)
//   FAKE_CUDA_HANG     non-empty: cuInit never returns (a wedged driver)
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {
int Devices() {
  const char* v = std::getenv("FAKE_CUDA_DEVICES");
  return v != nullptr ? std::atoi(v) : 2;
}
}  // namespace

extern "C" {
int cuInit(unsigned) {
  if (std::getenv("FAKE_CUDA_HANG") != nullptr) {
    for (;;) ::pause();
  }
  if (const char* rc = std::getenv("FAKE_CUDA_INIT_RC")) return std::atoi(rc);
  return Devices() == 0 ? 100 : 0;
}
int cuDeviceGetCount(int* n) {
  *n = Devices();
  return 0;
}
int cuDeviceGet(int* d, int ordinal) {
  if (ordinal < 0 || ordinal >= Devices()) return 101;  // CUDA_ERROR_INVALID_DEVICE
  *d = ordinal;
  return 0;
}
int cuDeviceGetUuid_v2(unsigned char* u, int d) {
  for (int i = 0; i < 16; ++i) u[i] = static_cast<unsigned char>(0x10 * d + i);
  return 0;
}
int cuDeviceGetPCIBusId(char* bus, int len, int d) {
  std::snprintf(bus, static_cast<std::size_t>(len), "0000:%02x:00.0", 0x19 + d);
  return 0;
}
int cuGetErrorName(int rc, const char** name) {
  *name = rc == 214 ? "CUDA_ERROR_ECC_UNCORRECTABLE" : "CUDA_ERROR_FAKE";
  return 0;
}
int cuDevicePrimaryCtxRetain(void** ctx, int d) {
  *ctx = reinterpret_cast<void*>(static_cast<long>(d) + 1);
  return 0;
}
int cuCtxSetCurrent(void*) { return 0; }
int cuMemAlloc_v2(unsigned long long* p, std::size_t n) {
  if (const char* rc = std::getenv("FAKE_CUDA_ALLOC_RC")) return std::atoi(rc);
  *p = reinterpret_cast<unsigned long long>(std::malloc(n));
  return *p != 0 ? 0 : 2;
}
int cuMemFree_v2(unsigned long long p) {
  std::free(reinterpret_cast<void*>(p));
  return 0;
}
int cuMemcpyHtoD_v2(unsigned long long d, const void* h, std::size_t n) {
  std::memcpy(reinterpret_cast<void*>(d), h, n);
  return 0;
}
int cuMemcpyDtoH_v2(void* h, unsigned long long d, std::size_t n) {
  std::memcpy(h, reinterpret_cast<void*>(d), n);
  return 0;
}
int cuStreamCreate(void** s, unsigned) {
  *s = reinterpret_cast<void*>(0x5);
  return 0;
}
int cuStreamQuery(void*) { return 0; }
}
