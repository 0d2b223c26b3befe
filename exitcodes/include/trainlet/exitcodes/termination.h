// trainlet/exitcodes/termination.h — the termination message.
//
// Kubernetes shows the content of a container's terminationMessagePath
// (default /dev/termination-log, at most 4096 bytes) in the pod's status
// (https://kubernetes.io/docs/tasks/debug/debug-application/determine-reason-pod-failure/).
// trainlet writes there a one-line JSON summary of every non-zero exit. Pure
// formatting here; the caller writes the file. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "trainlet/exitcodes/classify.h"

namespace trainlet::exitcodes {

inline constexpr std::size_t kTerminationMessageLimit = 4096;  // bytes, the kubelet's limit

// Hot spares (--spares): the waiting spare that the leader gave this pod's
// node rank when this pod left the gang (wire::Stop::replacement).
struct Handover {
  std::uint32_t spare = 0;       // the spare's pod index
  std::uint32_t node_rank = 0;   // this pod's node rank, now the spare's
  std::uint32_t generation = 0;  // the generation the spare runs it in
  bool operator==(const Handover&) const = default;
};

struct TerminationInfo {
  Verdict verdict;
  std::optional<WorkerFailure> first_failure;  // for rank, local rank, pid-free details
  std::uint32_t pod_index = 0;
  std::uint32_t attempt = 0;
  std::string node_name;                            // NODE_NAME from the downward API, if set
  std::map<std::string, double> phase_ms;           // "rendezvous" -> 3.1, "run" -> 1234.5
  std::optional<Handover> replaced_by;              // hot spares: who took this pod's place
};

// The JSON summary, at most `limit` bytes: {"class", "code", "reason",
// "evidence", "pod_index", "attempt", "node", "first_failure": {"local_rank",
// "rank", "exit"}, "replaced_by": {"spare", "node_rank", "generation"},
// "phases_ms", "stderr_tail"}. When too long, the stderr tail is
// cut from the front (its end is what explains a failure) on a UTF-8 character
// boundary, then the reason; the result is always valid JSON and valid UTF-8
// (invalid input bytes are replaced).
std::string TerminationMessage(const TerminationInfo& info,
                               std::size_t limit = kTerminationMessageLimit);

// The last `max_bytes` of `text`, starting on a UTF-8 character boundary.
std::string Utf8Tail(const std::string& text, std::size_t max_bytes);
// The first `max_bytes` of `text`, ending on a UTF-8 character boundary.
std::string Utf8Head(const std::string& text, std::size_t max_bytes);

}  // namespace trainlet::exitcodes
