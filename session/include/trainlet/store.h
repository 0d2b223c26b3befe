// trainlet/store.h — a small key-value store for the ranks of one job.
//
// Rank 0 hosts a StoreServer on MASTER_ADDR:MASTER_PORT; every rank (rank 0
// too) talks to it with a StoreClient: Set, Get (which waits until the key
// exists), Add (an atomic counter), Wait and Barrier, each with a deadline.
// Values are bytes (NULs allowed), at most kMaxStoreValue bytes; keys at most
// kMaxStoreKey. The protocol is private to this library (length-prefixed
// frames, big-endian, limits checked before allocating).
//
// Thread rules: a StoreServer serves from its own thread and may be destroyed
// from any thread. A StoreClient is not thread-safe: use one per thread.
// This header needs only the C++17 standard library.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace trainlet {

inline constexpr std::size_t kMaxStoreKey = 4096;            // bytes
inline constexpr std::size_t kMaxStoreValue = 8 * 1024 * 1024;  // bytes

// Why a call failed: one line, and whether it was its deadline.
struct StoreError {
  std::string message;
  bool timed_out = false;
};

class StoreServer {
 public:
  // Listens on `port` of every interface (IPv6 dual-stack, or IPv4 where IPv6 is
  // off; SO_REUSEADDR; backlog sized to `world_size`) and serves on a thread.
  // Port 0 picks a free port (see port()). Returns nullptr and sets `error`
  // when the port cannot be bound.
  static std::unique_ptr<StoreServer> Start(std::uint16_t port, int world_size,
                                            StoreError* error);
  // Stops the thread and closes every connection.
  ~StoreServer();
  std::uint16_t port() const;
  // Waits until no client is connected (the other ranks have read their last
  // replies and closed), at most `timeout`. False at the deadline.
  bool WaitIdle(std::chrono::milliseconds timeout);

  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

 private:
  struct Impl;
  explicit StoreServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class StoreClient {
 public:
  // `host` (a name or address) and `port` of the server. Connects lazily, with
  // capped, jittered exponential backoff (rank 0 may not be listening yet),
  // within each call's own deadline. `world_size` is what Barrier waits for.
  StoreClient(std::string host, std::uint16_t port, int world_size);
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  // Each returns false / nullopt on failure and sets `error` (may be null).
  // `timeout` bounds the whole call, connecting included (milliseconds).
  bool Set(const std::string& key, const std::string& value, std::chrono::milliseconds timeout,
           StoreError* error = nullptr);
  // The value, waiting until some rank sets it.
  std::optional<std::string> Get(const std::string& key, std::chrono::milliseconds timeout,
                                 StoreError* error = nullptr);
  // Adds `delta` to the decimal counter at `key` (absent: 0) and returns the new value.
  std::optional<std::int64_t> Add(const std::string& key, std::int64_t delta,
                                  std::chrono::milliseconds timeout, StoreError* error = nullptr);
  // Waits until every key exists.
  bool Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
            StoreError* error = nullptr);
  // Returns when all `world_size` ranks have called Barrier(name) the same
  // number of times (reusable). A rank that never comes: the deadline.
  bool Barrier(const std::string& name, std::chrono::milliseconds timeout,
               StoreError* error = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainlet
