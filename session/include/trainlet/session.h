// trainlet/session.h — what a C++ trainer needs from trainlet, in one object.
//
//   auto s = trainlet::Session::Create();          // reads the environment
//   cudaSetDevice(s->device());                     // LOCAL_RANK, as under torchrun
//   ncclComm_t comm = s->NcclComm(...).value;       // bounded, abortable init
//   for (...) { step(); s->Heartbeat(); }
//   // on a fault the trainer can classify: s->ReportError(ErrorClass::kHardware, "...")
//
// Under trainlet (or torchrun) a worker gets RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TRAINLET_HEARTBEAT_FILE,
// TORCHELASTIC_ERROR_FILE and the NCCL unique ids of the generation
// (TRAINLET_NCCL_UNIQUE_ID[S], TRAINLET_NCCL_VERSION). Without them (a local
// run) a Session is rank 0 of 1 with a store on a free loopback port.
// Rank 0's Session hosts the key-value store (store.h) on MASTER_PORT; every
// rank's Session is a client of it.
//
// NCCL is loaded with dlopen (libnccl.so.2, or TRAINLET_LIBNCCL), so linking
// this library never pulls CUDA in; the trainer itself links CUDA as it likes.
// Thread rules: a Session is not thread-safe; create it once per process.
// This header needs only the C++17 standard library; errors are returned,
// never thrown.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "trainlet/store.h"

// nccl.h declares the same type; both may be included together.
struct ncclComm;
typedef struct ncclComm* ncclComm_t;

namespace trainlet {

// The failure classes a trainer may report (trainlet's exit-code contract:
// `trainlet exit-codes`): hardware 74, infra 75, bug 42, oom 77.
enum class ErrorClass { kBug, kInfra, kHardware, kOom };

// A value or an error message (one line).
template <typename T>
struct Expected {
  std::optional<T> value;
  std::string error;  // empty on success
  bool timed_out = false;
  explicit operator bool() const { return value.has_value(); }
};

struct SessionOptions {
  // Bound on creating the store connection and on each NCCL step (ms).
  std::chrono::milliseconds timeout{300'000};
  // NCCL to load; empty: $TRAINLET_LIBNCCL, else "libnccl.so.2".
  std::string nccl_library;
};

class Session {
 public:
  // Reads the environment (malformed values are an error naming the variable),
  // and on rank 0 starts the store server on MASTER_PORT. Errors: a bad
  // variable, the store port in use.
  static Expected<std::unique_ptr<Session>> Create(SessionOptions options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  int rank() const;
  int world_size() const;
  int local_rank() const;
  int local_world_size() const;
  // The CUDA device index this worker should use: LOCAL_RANK (trainlet, like
  // torchrun, leaves CUDA_VISIBLE_DEVICES unchanged for every worker).
  int device() const;
  const std::string& master_addr() const;
  std::uint16_t master_port() const;  // the store's port (the real one in a local run)
  bool under_trainlet() const;        // RANK and WORLD_SIZE came from a launcher

  // The key-value store shared by all ranks.
  StoreClient& store();

  // A ready NCCL communicator over all ranks, on the device current in the
  // calling thread (call cudaSetDevice(device()) first). The unique id is
  // trainlet's for this generation when TRAINLET_NCCL_VERSION equals the
  // loaded NCCL's version (and it was not used yet: an id is single-use);
  // otherwise rank 0 makes one and shares it through the store. Init is
  // non-blocking, polled with ncclCommGetAsyncError, and aborted
  // (ncclCommAbort) when `timeout` passes: then timed_out is true. The caller
  // owns the communicator (ncclCommDestroy / ncclCommAbort).
  Expected<ncclComm_t> NcclComm(std::chrono::milliseconds timeout);
  // Where NcclComm's last id came from: "trainlet" or "store" (for logs, tests).
  const std::string& nccl_id_source() const;

  // Shows progress to trainlet's hang detection: touches
  // $TRAINLET_HEARTBEAT_FILE (its mtime). Cheap; a no-op without the variable.
  void Heartbeat();

  // Writes $TORCHELASTIC_ERROR_FILE (torchelastic's format, with a
  // "[trainlet:<class>]" marker the agent classifies by) so the pod exits with
  // `cls`'s code once this worker exits non-zero. Without the variable the
  // line goes to stderr. Returns false when the file cannot be written.
  bool ReportError(ErrorClass cls, const std::string& message);

 private:
  struct Impl;
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainlet
