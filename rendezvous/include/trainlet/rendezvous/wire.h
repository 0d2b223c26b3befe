// trainlet/rendezvous/wire.h — the rendezvous protocol's messages and framing.
//
// Sans-IO: bytes in, messages (or an error) out, and messages to bytes. No
// sockets, no clocks, no allocation beyond the limits below. Every frame is
//
//   magic u32 | version u16 | type u16 | payload length u32 | payload
//
// in network byte order (RFC 1700 big-endian). Strings are a u16 length then
// bytes; lists a u16 count then entries. Limits are checked before anything is
// allocated, so a peer cannot make the agent reserve more than kMaxPayload.
// Objects are not thread-safe; use one Decoder per connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "trainlet/exitcodes/status.h"

namespace trainlet::rendezvous::wire {

inline constexpr std::uint32_t kMagic = 0x544C4E54;  // "TLNT"
inline constexpr std::uint16_t kVersion = 2;  // 2: generations, restarts, NCCL ids
inline constexpr std::size_t kHeaderSize = 12;
inline constexpr std::size_t kMaxPayload = 16 * 1024;  // bytes
inline constexpr std::size_t kMaxString = 1024;        // bytes per string field
inline constexpr std::size_t kMaxConfigEntries = 64;
inline constexpr std::size_t kNcclIdBytes = 128;  // sizeof(ncclUniqueId)
inline constexpr std::size_t kMaxNcclIds = 64;    // one per <= 256 ranks (gpu/nccl.h)

enum class MessageType : std::uint16_t {
  kHello = 1,       // member -> leader: who I am and how I was launched
  kAssignment = 2,  // leader -> member: your ranks; start your trainers
  kReject = 3,      // leader -> member: you are not admitted, and why
  // After the assignment the connection stays open as the gang's control channel:
  kHeartbeat = 4,   // both ways, every second: "I am alive"
  kReport = 5,      // member -> leader: my workers finished, or failed
  kStop = 6,        // leader -> members: the gang stops; names the pod that failed first
  // With a shared token (--token-file), between Hello and admission:
  kChallenge = 7,   // leader -> member: its nonce and its proof of the token
  kProof = 8,       // member -> leader: the member's proof of the token
};

// The launch settings every pod of a gang must agree on, as ordered key/value
// pairs ("nnodes" -> "3"). Compared field by field so an error can name a field.
using LaunchConfig = std::vector<std::pair<std::string, std::string>>;

// FNV-1a 64 over the keys and values: equal configs give equal fingerprints.
std::uint64_t Fingerprint(const LaunchConfig& config);

// Hello::index of a pod that has no index (ranks by arrival, launch.h): the
// leader gives it one, the lowest free, and says which in Assignment::node_rank.
inline constexpr std::uint32_t kNoIndex = 0xFFFFFFFF;

struct Hello {
  std::string job_id;              // the Job (or JobSet) this pod belongs to
  std::uint32_t attempt = 0;       // restart attempt of the Job/JobSet
  std::uint32_t index = 0;         // completion index of the sending pod; kNoIndex: none yet
  std::uint32_t nproc_per_node = 0;
  std::uint64_t fingerprint = 0;   // Fingerprint(config)
  LaunchConfig config;
  std::string nonce;               // 32 random bytes when this pod has a token, else empty
  // The rendezvous generation this pod asks to join: 0 for a pod that has not
  // trained yet, the last generation it ran + 1 after an in-place restart. The
  // leader runs max(its own, every member's), so a replaced leader (a fresh pod
  // at 0) continues the gang's count instead of starting over.
  std::uint32_t generation = 0;
  // Appended after `generation` (an older peer's hello ends before them and
  // decodes with them empty): who this pod is beyond its index.
  // Its Job within a JobSet (the Job's name), and JobSet's per-Job restart
  // count of that Job (label jobset.sigs.k8s.io/job-restart-attempt), when known.
  std::string job_name{};
  std::optional<std::uint32_t> job_restart_attempt{};
  // Set only by a leader probing whether another address answers as a leader
  // of its job (leader_probe.h): its random instance id, so that a leader
  // reached through its own Service never takes itself for a rival.
  std::string leader_id{};
  // Elastic sizes: the restarts this pod counts for the generation it asks to
  // join (TORCHELASTIC_RESTART_COUNT, against --max-restarts), which a join's
  // generation does not raise, so `generation` cannot say it. A replaced leader
  // (a fresh pod at 0) runs max(its own, every member's), as for `generation`,
  // so the gang's count and budget do not start over. Unset: not elastic, or
  // an older peer. Encoded after leader_id, flag bit 2.
  std::optional<std::uint32_t> restarts{};
  // Who this pod is beyond its index: kInstanceIdBytes random bytes drawn once
  // when the agent starts (NewNonce, auth.h), the same in every generation it
  // joins, sent only to the leader (never in a LeaderProbe's hello), never
  // logged. The leader tells a survivor rejoining a restart from another pod
  // claiming its index by it (admission.h, MatchIdentity). Empty: an older
  // peer (matched by index alone). Encoded after `restarts`, flag bit 4.
  std::string instance_id{};
  // The Kubernetes node the pod runs on (NODE_NAME from the downward API's
  // spec.nodeName), so the leader's metrics can name the node of a pod that
  // failed or was lost after that pod is gone. Empty: unknown. Encoded after
  // `instance_id`, flag bit 8.
  std::string node_name{};
  // Hot spares and elastic sizes: the node rank this pod held in the last
  // generation it ran workers in (a survivor rejoining); unset for a pod that
  // held none (a waiting spare, a new or recreated pod) and from an older
  // peer. A replaced leader's first round keeps each survivor on it
  // (agent/pod/membership.h, rule M16), so that a survivor's node rank does
  // not move because the leader's pod was replaced. Encoded after
  // `node_name`, flag bit 16.
  std::optional<std::uint32_t> node_rank{};
  bool operator==(const Hello&) const = default;
};

// Hello::instance_id's size: 128 bits, as many as a random UUID's.
inline constexpr std::size_t kInstanceIdBytes = 16;

struct Assignment {
  std::uint32_t generation = 0;   // rendezvous round = restarts so far (TORCHELASTIC_RESTART_COUNT)
  std::uint32_t nnodes = 0;       // pods in the gang
  std::uint32_t world_size = 0;   // workers in the gang
  std::uint32_t rank_base = 0;    // global rank of this pod's local rank 0
  std::string master_addr;        // where rank 0's store listens (MASTER_ADDR)
  std::uint16_t master_port = 0;  // MASTER_PORT
  std::string run_id;             // TORCHELASTIC_RUN_ID
  std::string job_id;             // the leader's job and attempt: a member checks them,
  std::uint32_t attempt = 0;      // so a stale leader is never followed
  // NCCL unique ids made by the leader for this generation (gpu/nccl.h), each
  // exactly kNcclIdBytes binary bytes, and the ncclGetVersion() that made them;
  // empty and 0 without NCCL. With --preflight the trainer's ids are followed by
  // as many for the preflight communicator.
  std::uint32_t nccl_version = 0;
  std::vector<std::string> nccl_ids{};
  // The JAX coordinator's port on master_addr (JAX_COORDINATOR_ADDRESS); 0 = none.
  std::uint16_t jax_port = 0;
  // Appended after jax_port (an older leader's assignment ends before them:
  // node rank = the index, no spare). Hot spares and elastic sizes: the pod's
  // node rank in this generation (GROUP_RANK; rank_base = node_rank x
  // nproc_per_node), and whether it waits as a spare (no workers; nnodes and
  // world_size are the active gang's).
  std::optional<std::uint32_t> node_rank{};
  bool spare = false;
  // Elastic sizes: the restarts counted so far (TORCHELASTIC_RESTART_COUNT,
  // against --max-restarts), when it differs from `generation` because a
  // generation that only took in a joining pod is no restart (torch's agent
  // restarts its workers for num_nodes_waiting() without spending one:
  // torch/distributed/elastic/agent/server/api.py). Absent: `generation`.
  std::optional<std::uint32_t> restarts{};
  // Ranks by arrival (launch.h): the index the leader gave this pod (it says
  // hello with it from then on). It differs from node_rank once the gang's
  // size changed (elastic sizes: ranks are dense over the active indices).
  // Absent: the pod has an index of its own (or an older leader: node_rank).
  std::optional<std::uint32_t> index{};
  bool operator==(const Assignment&) const = default;
};

// Reject::field of a pod admitted while a generation runs that joins the
// leader's next round (elastic sizes: the gang grows for it): retriable, and
// retried at once (a rejoining pod's backoff), not after a cold start's.
inline constexpr const char* kNextGenerationField = "next_generation";

// Reject::field of a pod the leader declared lost (silent past the heartbeat
// timeout, or its connection closed) whose node rank a hot spare took, coming
// back to the next round (a frozen pod resumed, a cut link restored): it
// leaves with its own failure, as issue 22 asks of a replaced pod, so the Job
// counts and recreates its index (the recreated pod joins as a spare). Not
// retriable; Reject::replaced says who took its place.
inline constexpr const char* kReplacedField = "replaced";

// Reject::field of a pod the leader declared lost, that an elastic gang
// (--nnodes MIN:MAX) went on without (the next generation formed with the
// rest, at least MIN), coming back to a generation it missed (a frozen pod
// resumed, a cut link restored): as with kReplacedField it leaves with its own
// failure (infra), the one counted culprit of the loss, instead of joining
// again as if nothing had happened. Not retriable. A recreated pod (generation
// 0) joins as a new one.
inline constexpr const char* kLeftField = "left";

// Who took a replaced pod's place (Reject field kReplacedField).
struct Replaced {
  std::uint32_t spare = 0;       // the spare's index
  std::uint32_t node_rank = 0;   // the node rank it took
  std::uint32_t generation = 0;  // the generation it took it in
  bool operator==(const Replaced&) const = default;
};

struct Reject {
  std::string field;   // the field that disagreed ("job_id", "nnodes", "index", ...)
  std::string reason;  // one human line, names both values and pods
  // True when trying again later may succeed (the index is held by a connection
  // that may be stale); false when this pod can never join this leader.
  bool retriable = false;
  // Appended after the flags (an older leader's reject ends there): field kReplacedField.
  std::optional<Replaced> replaced{};
  // Appended after `replaced`: field kNextGenerationField for a pod without an
  // index (ranks by arrival, launch.h): the index the leader gave it for the
  // next generation, which it says hello with from then on.
  std::optional<std::uint32_t> index{};
  bool operator==(const Reject&) const = default;
};

// Fields appended to version 2's empty heartbeat: a heartbeat without them
// (an older peer) decodes with all zero.
struct Heartbeat {
  // The sender's steady clock when it sent this, in microseconds (an opaque
  // value for the receiver, which only echoes it).
  std::uint64_t sent_us = 0;
  // The last sent_us received from the peer (0: none yet), and how long, in
  // microseconds, the sender held it before this heartbeat: the peer's round
  // trip is its own clock now - echo_us - echo_held_us.
  std::uint64_t echo_us = 0;
  std::uint32_t echo_held_us = 0;
  // Member -> leader: the step rate of the pod's slowest worker, in heartbeat-file
  // touches per 1000 s (0: not known, no heartbeat files or no touch yet), and
  // that worker's global rank.
  std::uint32_t step_rate_milli = 0;
  std::uint32_t slowest_rank = 0;
  bool operator==(const Heartbeat&) const = default;
};

struct Report {
  std::uint32_t index = 0;     // the reporting pod
  bool ok = false;             // true: every worker finished; false: a failure
  std::uint16_t failure_class = 0;  // exitcodes::FailureClass of the failure
  std::string reason;          // one line
  // The failure is a hang found on that pod (the leader asks every pod for
  // stack dumps first). Encoded as bit 1 of the `ok` flag word.
  bool hang = false;
  // The pod leaves the gang: its own stop signal (SIGTERM, SIGINT: a
  // scale-down, a deleted pod, a drained node), not a failure; class
  // terminated. The leader may go on without it (agent/pod/membership.h,
  // rules M7-M10). Bit 2 of the `ok` flag word: an older leader reads a
  // terminated report, as before. Sent before the assignment too (a pod
  // stopped while it waits in a round), where the leader frees its index.
  bool leaving = false;
  bool operator==(const Report&) const = default;
};

struct Stop {
  std::uint32_t failed_index = 0;  // the pod whose failure the leader heard of first
  std::string reason;
  // Non-zero: send this signal to the workers first (a hang: stack dumps from
  // every rank), then stop them a moment later.
  std::uint16_t diagnostics_signal = 0;
  // True: the gang restarts in place (--max-restarts): every agent stops its
  // workers, then joins the rendezvous again for generation `next_generation`.
  // False: the gang is over; every agent exits.
  bool restart = false;
  std::uint32_t next_generation = 0;
  // exitcodes::FailureClass of that pod's failure (kTerminated: a stop signal,
  // so a pod being stopped too is preempted, not collateral). Never parsed
  // from `reason`.
  std::uint16_t failure_class = 0;
  // Appended after failure_class (an older leader's stop ends before it: none).
  // Hot spares: with `restart`, the waiting spare the leader's membership
  // plan gives failed_index's node rank in generation next_generation (the
  // lowest waiting index: membership_policy.h), so the pod that leaves can
  // name it in its termination message; nullopt when that pod keeps its rank
  // (an in-place restart) or no spare waits. A plan made at the stop: a spare
  // lost before the next generation forms leaves the rank to the next one
  // (the leader's log and metrics say who took it).
  std::optional<std::uint32_t> replacement{};
  bool operator==(const Stop&) const = default;
};

struct Challenge {
  std::string nonce;  // the leader's 32 random bytes
  std::string proof;  // HMAC-SHA256(token, "leader" | job | member nonce | leader nonce)
  bool operator==(const Challenge&) const = default;
};

struct Proof {
  std::string proof;  // HMAC-SHA256(token, "member" | job | leader nonce | member nonce)
  bool operator==(const Proof&) const = default;
};

using Message =
    std::variant<Hello, Assignment, Reject, Heartbeat, Report, Stop, Challenge, Proof>;

// One complete frame (header and payload) for `message`.
std::vector<std::uint8_t> Encode(const Message& message);

// Splits a byte stream into messages. Feed() bytes as they arrive, then call
// Next() until it returns an empty optional. After any error the decoder stays
// failed (the connection should be closed): every later call returns that error.
class Decoder {
 public:
  // Most bytes a Decoder ever holds: two maximal frames (one partial frame
  // left from the last read plus one read of up to a frame).
  static constexpr std::size_t kMaxBuffered = 2 * (kHeaderSize + kMaxPayload);
  // Appends bytes, first dropping what Next() consumed. Fails (class infra,
  // "wire: ...") when the unconsumed bytes would exceed kMaxBuffered, i.e. the
  // caller is not draining or feeds more than a frame at once.
  [[nodiscard]] exitcodes::Status Feed(std::span<const std::uint8_t> bytes);
  // The next complete message, nullopt when more bytes are needed, or an error
  // naming what was wrong: bad magic, unsupported version, unknown type,
  // payload over kMaxPayload, a field over its limit, truncated or trailing bytes.
  [[nodiscard]] exitcodes::Result<std::optional<Message>> Next();
  // Version announced by the last header seen (0 if none), for error replies.
  std::uint16_t peer_version() const { return peer_version_; }
  std::size_t buffered() const { return buffer_.size() - consumed_; }
  // Bytes of memory the buffer holds (its capacity): never above kMaxBuffered,
  // however long the stream (fuzz/fuzz_wire_stream.cc checks it).
  std::size_t held() const { return buffer_.capacity(); }

 private:
  std::vector<std::uint8_t> buffer_;
  std::size_t consumed_ = 0;
  std::uint16_t peer_version_ = 0;
  std::optional<exitcodes::Status> failed_;
};

}  // namespace trainlet::rendezvous::wire
