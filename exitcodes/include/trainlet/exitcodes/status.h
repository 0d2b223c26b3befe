// trainlet/exitcodes/status.h — the failure vocabulary every module reports in.
//
// A `Status` is either OK or a failure class plus a one-line human message. A
// `Result<T>` is a value or a non-OK Status. Both are cheap value types with no
// thread affinity: a Status may be created on one thread and read on another.
//
// Which exit code each class maps to is decided in exit_code.h, never here.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace trainlet::exitcodes {

// The failure classes of trainlet's exit-code contract (README, "Exit codes").
enum class FailureClass {
  kOk = 0,
  kBug,         // software defect in the trainer: retrying cannot help.
  kConfig,      // trainlet's own input is invalid (env, flags, command).
  kInfra,       // retriable infrastructure fault: DNS, leader unreachable, timeouts.
  kHardware,    // GPU or driver fault.
  kPeerFailed,  // this pod stopped because another pod of the gang failed.
  kOom,         // a worker was killed by the memory cgroup's OOM killer.
  kTerminated,  // trainlet was asked to stop (SIGTERM/SIGINT).
  kWorker,      // a worker failed with no further evidence: its own code is used.
};

// Stable lower-case name ("config", "infra", ...), used in logs and messages.
std::string_view ClassName(FailureClass c);

class [[nodiscard]] Status {
 public:
  // OK.
  Status() = default;
  Status(FailureClass c, std::string message) : class_(c), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  static Status Config(std::string m) { return {FailureClass::kConfig, std::move(m)}; }
  static Status Infra(std::string m) { return {FailureClass::kInfra, std::move(m)}; }

  bool ok() const { return class_ == FailureClass::kOk; }
  FailureClass failure_class() const { return class_; }
  const std::string& message() const { return message_; }
  // "<class>: <message>", or "ok".
  std::string ToString() const;

 private:
  FailureClass class_ = FailureClass::kOk;
  std::string message_;
};

// A T or a failure. Accessing value() of a failed Result is a broken invariant (asserts).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    assert(!status_.ok() && "a Result built from a Status must carry a failure");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { assert(ok()); return *value_; }
  const T& value() const& { assert(ok()); return *value_; }
  T&& value() && { assert(ok()); return std::move(*value_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace trainlet::exitcodes
