// A fake NCCL (libnccl.so.2) for tests. Each communicator lives in one process;
// the all-reduce assumes every other rank r contributed r+1, as trainlet's
// preflight does, so a correct run gives the true sum. Behaviour by env:
//   FAKE_NCCL_VERSION  ncclGetVersion's answer (default 22809)
//   FAKE_NCCL_MODE     ok (default) | init_hang (init never completes) |
//                      async_error (init fails with ncclRemoteError) |
//                      cuda_error (ncclUnhandledCudaError) | wrong_result |
//                      slow (each all-reduce takes 50 ms)
//   FAKE_NCCL_TRACE    a file the fake appends each call's name to
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {
struct Comm {
  int nranks;
  int rank;
  int nids;
  std::chrono::steady_clock::time_point start;
};
std::string Mode() {
  const char* m = std::getenv("FAKE_NCCL_MODE");
  return m != nullptr ? m : "ok";
}
void Trace(const char* what) {
  if (const char* f = std::getenv("FAKE_NCCL_TRACE")) {
    if (FILE* fp = std::fopen(f, "a")) {
      std::fprintf(fp, "%s\n", what);
      std::fclose(fp);
    }
  }
}
std::atomic<unsigned> counter{0};
}  // namespace

extern "C" {
int ncclGetVersion(int* v) {
  const char* e = std::getenv("FAKE_NCCL_VERSION");
  *v = e != nullptr ? std::atoi(e) : 22809;
  return 0;
}
int ncclGetUniqueId(void* id) {
  Trace("ncclGetUniqueId");
  auto* b = static_cast<unsigned char*>(id);
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::read(fd, b, 128) != 128) return 2;
  ::close(fd);
  // Like a real id: binary, with NUL bytes (NVIDIA/nccl#1038), and never twice the same.
  b[0] = 0x00;
  b[1] = 0x02;
  b[2] = 0xff;
  unsigned c = counter++;
  std::memcpy(b + 124, &c, 4);
  return 0;
}
struct IdV {
  char internal[128];
};
int ncclCommInitRankConfig(void** comm, int nranks, IdV, int rank, int* config) {
  Trace("ncclCommInitRankConfig");
  // config: size_t size; unsigned magic; unsigned version; int blocking; ...
  auto* cfg = reinterpret_cast<unsigned char*>(config);
  unsigned magic;
  int blocking;
  std::memcpy(&magic, cfg + sizeof(std::size_t), 4);
  std::memcpy(&blocking, cfg + sizeof(std::size_t) + 8, 4);
  if (magic != 0xcafebeef) return 4;
  if (rank < 0 || rank >= nranks) return 4;
  *comm = new Comm{nranks, rank, 1, std::chrono::steady_clock::now()};
  if (Mode() == "cuda_error" && blocking != 0) return 1;
  return blocking == 0 ? 7 : 0;  // non-blocking: ncclInProgress
}
int ncclCommInitRankScalable(void** comm, int nranks, int rank, int nids, void*, int* config) {
  Trace("ncclCommInitRankScalable");
  IdV id{};
  int r = ncclCommInitRankConfig(comm, nranks, id, rank, config);
  if (*comm != nullptr) static_cast<Comm*>(*comm)->nids = nids;
  return r;
}
int ncclCommGetAsyncError(void* comm, int* result) {
  auto* c = static_cast<Comm*>(comm);
  std::string m = Mode();
  auto age = std::chrono::steady_clock::now() - c->start;
  if (m == "init_hang") {
    *result = 7;
  } else if (age < std::chrono::milliseconds(20)) {
    *result = 7;
  } else if (m == "async_error") {
    *result = 6;
  } else if (m == "cuda_error") {
    *result = 1;
  } else {
    *result = 0;
  }
  return 0;
}
int ncclCommAbort(void* comm) {
  Trace("ncclCommAbort");
  delete static_cast<Comm*>(comm);
  return 0;
}
int ncclCommDestroy(void* comm) {
  Trace("ncclCommDestroy");
  delete static_cast<Comm*>(comm);
  return 0;
}
int ncclCommFinalize(void*) { return 0; }
int ncclAllReduce(const void* send, void* recv, std::size_t count, int type, int op, void* comm,
                  void*) {
  Trace("ncclAllReduce");
  auto* c = static_cast<Comm*>(comm);
  if (type != 7 || op != 0) return 4;
  const auto* in = static_cast<const float*>(send);
  auto* out = static_cast<float*>(recv);
  float others = static_cast<float>(c->nranks) * (c->nranks + 1) / 2 - (c->rank + 1);
  bool wrong = Mode() == "wrong_result";
  for (std::size_t i = 0; i < count; ++i) out[i] = wrong && i == count / 2 ? in[i] : in[i] + others;
  if (Mode() == "slow") std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return 0;
}
}
