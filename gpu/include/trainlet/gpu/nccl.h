// trainlet/gpu/nccl.h — NCCL loaded with dlopen: unique ids and a function table.
//
// The agent must run on images without NCCL, so libnccl.so.2 is never linked:
// Nccl::Load() opens it and resolves the few entry points trainlet uses into a
// table. Declarations mirror nccl.h (https://docs.nvidia.com/deeplearning/nccl/
// user-guide/docs/api.html) with our own opaque types, so this header never
// includes nccl.h. A loaded Nccl is immutable and thread-safe; the library stays
// loaded for the life of the process (NCCL keeps threads of its own).
//
// Unique ids (NVIDIA/nccl#1038): an id is single-use. It encodes the address of a bootstrap
// root that ncclGetUniqueId starts as a thread in the *calling* process, and
// that root serves one communicator creation. So the leader's agent makes fresh
// ids for every rendezvous generation and never hands one out twice; the
// workers learn which NCCL version made them (an id is only meaningful to the
// same NCCL protocol version).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trainlet/exitcodes/status.h"

namespace trainlet::gpu {

inline constexpr const char* kDefaultLibNccl = "libnccl.so.2";
inline constexpr std::size_t kUniqueIdBytes = 128;  // sizeof(ncclUniqueId)
// ncclCommInitRankScalable: NCCL's guidance is one bootstrap root per few
// hundred ranks; trainlet makes one id per <= 256 ranks.
inline constexpr std::uint32_t kRanksPerRoot = 256;
// At most this many ids travel in one assignment (256 x 64 = 16384 ranks; the
// wire's frame limit is 16 KiB).
inline constexpr std::uint32_t kMaxUniqueIds = 64;

// ids for one communicator, and the NCCL version (ncclGetVersion's
// 10000*major + 100*minor + patch, e.g. 22809 for 2.28.9) that made them.
struct UniqueIds {
  std::uint32_t nccl_version = 0;
  std::vector<std::string> ids;  // each exactly kUniqueIdBytes bytes, binary (0x00 allowed)
  bool empty() const { return ids.empty(); }
  bool operator==(const UniqueIds&) const = default;
};

// How many roots (ids) a communicator of `world_size` ranks gets: ceil(world /
// kRanksPerRoot), at least 1, at most kMaxUniqueIds.
std::uint32_t RootsFor(std::uint32_t world_size);

// Lower-case hex of `bytes` (2 characters per byte).
std::string ToHex(std::string_view bytes);
// The bytes of a hex string. Errors (class config): odd length, a non-hex digit.
[[nodiscard]] exitcodes::Result<std::string> FromHex(std::string_view hex);

// The environment a worker gets for `ids` (empty when `ids` is empty):
//   TRAINLET_NCCL_UNIQUE_ID   hex of the first id (256 hex digits)
//   TRAINLET_NCCL_UNIQUE_IDS  comma-separated hex of every id (only with several)
//   TRAINLET_NCCL_VERSION     the version that made them, e.g. "22809"
// A trainer must use the ids only when its own ncclGetVersion() is equal.
std::vector<std::pair<std::string, std::string>> WorkerNcclEnv(const UniqueIds& ids);
// Parses that environment back (the library for trainers, the preflight child).
// `get` returns a variable's value or nullptr. Errors (class config): malformed
// hex, an id that is not kUniqueIdBytes bytes, a non-numeric version.
[[nodiscard]] exitcodes::Result<UniqueIds> ParseWorkerNcclEnv(
    const std::function<const char*(const char*)>& get);

// The part of ncclConfig_t (nccl.h, NCCL >= 2.14) trainlet sets. NCCL reads a
// config according to its `version` field, so this older, shorter layout is
// accepted by newer libraries. Initialise with MakeConfig().
struct NcclConfig {
  std::size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cga_cluster_size;
  int min_ctas;
  int max_ctas;
  const char* net_name;
  int split_share;
};
NcclConfig MakeConfig(bool blocking);

// ncclResult_t values (nccl.h).
enum NcclResult : int {
  kNcclSuccess = 0,
  kNcclUnhandledCudaError = 1,
  kNcclSystemError = 2,
  kNcclInternalError = 3,
  kNcclInvalidArgument = 4,
  kNcclInvalidUsage = 5,
  kNcclRemoteError = 6,
  kNcclInProgress = 7,
};
// "ncclRemoteError", ... (for messages).
std::string NcclResultName(int result);

// The function table. Comm, stream and buffers are opaque pointers.
class Nccl {
 public:
  using Comm = void*;
  // dlopen(`path`) and dlsym of the entry points. Errors (class infra, one line
  // naming the path): the library cannot be loaded, or lacks ncclGetVersion,
  // ncclGetUniqueId, ncclCommInitRankConfig (NCCL < 2.14), ncclCommGetAsyncError,
  // ncclCommAbort or ncclAllReduce. ncclCommInitRankScalable (NCCL >= 2.23) is
  // optional: see has_scalable().
  [[nodiscard]] static exitcodes::Result<std::shared_ptr<const Nccl>> Load(
      const std::string& path = kDefaultLibNccl);

  std::uint32_t version() const { return version_; }
  const std::string& path() const { return path_; }
  bool has_scalable() const { return init_scalable_ != nullptr; }

  // `count` fresh ids (ncclGetUniqueId each), tagged with version(). Starts
  // `count` bootstrap-root threads in this process (see the file comment).
  // Errors (class infra): ncclGetUniqueId failed (names the ncclResult_t).
  [[nodiscard]] exitcodes::Result<UniqueIds> MakeUniqueIds(std::uint32_t count) const;

  // The entry points, as in nccl.h. Non-blocking init: pass MakeConfig(false),
  // then poll CommGetAsyncError until it is no longer kNcclInProgress.
  int CommInitRankConfig(Comm* comm, int nranks, const std::string& id, int rank,
                         NcclConfig* config) const;
  // With several ids: ncclCommInitRankScalable when present; with one id, or
  // when absent and ids.size() == 1, ncclCommInitRankConfig.
  int CommInitRank(Comm* comm, int nranks, const std::vector<std::string>& ids, int rank,
                   NcclConfig* config) const;
  int CommGetAsyncError(Comm comm, int* result) const { return async_error_(comm, result); }
  int CommAbort(Comm comm) const { return abort_(comm); }
  // ncclCommFinalize when present (then poll CommGetAsyncError), else success.
  int CommFinalize(Comm comm) const { return finalize_ ? finalize_(comm) : 0; }
  int CommDestroy(Comm comm) const { return destroy_ ? destroy_(comm) : abort_(comm); }
  // Sum of `count` floats (ncclFloat32, ncclSum) on `stream`.
  int AllReduceSumFloat(const void* send, void* recv, std::size_t count, Comm comm,
                        void* stream) const;

 private:
  Nccl() = default;
  std::string path_;
  std::uint32_t version_ = 0;
  int (*get_unique_id_)(void*) = nullptr;
  // ncclUniqueId is passed by value: a 128-byte struct. Declared with a
  // by-value struct so the ABI matches (nccl.h: ncclUniqueId commId).
  struct IdValue {
    char internal[kUniqueIdBytes];
  };
  int (*init_config_byval_)(Comm*, int, IdValue, int, NcclConfig*) = nullptr;
  int (*init_scalable_)(Comm*, int, int, int, void*, NcclConfig*) = nullptr;
  int (*async_error_)(Comm, int*) = nullptr;
  int (*abort_)(Comm) = nullptr;
  int (*finalize_)(Comm) = nullptr;
  int (*destroy_)(Comm) = nullptr;
  int (*all_reduce_)(const void*, void*, std::size_t, int, int, Comm, void*) = nullptr;
};

}  // namespace trainlet::gpu
