#include "trainlet/rendezvous/wire.h"

#include <algorithm>
#include <cstring>
#include <string_view>

namespace trainlet::rendezvous::wire {
namespace {

using exitcodes::Result;
using exitcodes::Status;

Status WireError(std::string what) { return Status::Infra("wire: " + std::move(what)); }

class Writer {
 public:
  void U16(std::uint16_t v) { Bytes({std::uint8_t(v >> 8), std::uint8_t(v)}); }
  void U32(std::uint32_t v) { U16(std::uint16_t(v >> 16)); U16(std::uint16_t(v)); }
  void U64(std::uint64_t v) { U32(std::uint32_t(v >> 32)); U32(std::uint32_t(v)); }
  void Str(std::string_view s) {
    // Encoding more than the decoder accepts is a programming error upstream;
    // truncate rather than emit a frame every peer would refuse.
    std::size_t n = std::min(s.size(), kMaxString);
    U16(std::uint16_t(n));
    out_.insert(out_.end(), s.begin(), s.begin() + static_cast<std::ptrdiff_t>(n));
  }
  void Bytes(std::initializer_list<std::uint8_t> b) { out_.insert(out_.end(), b); }
  std::vector<std::uint8_t>& out() { return out_; }

 private:
  std::vector<std::uint8_t> out_;
};

// Reads fields from one payload; the first short read poisons it.
class Reader {
 public:
  explicit Reader(std::span<const std::uint8_t> in) : in_(in) {}
  bool U16(std::uint16_t* v) {
    if (!Need(2)) return false;
    *v = std::uint16_t(in_[pos_] << 8 | in_[pos_ + 1]);
    pos_ += 2;
    return true;
  }
  bool U32(std::uint32_t* v) {
    std::uint16_t hi, lo;
    if (!U16(&hi) || !U16(&lo)) return false;
    *v = std::uint32_t(hi) << 16 | lo;
    return true;
  }
  bool U64(std::uint64_t* v) {
    std::uint32_t hi, lo;
    if (!U32(&hi) || !U32(&lo)) return false;
    *v = std::uint64_t(hi) << 32 | lo;
    return true;
  }
  bool Str(std::string* s, const char* field) {
    std::uint16_t n;
    if (!U16(&n)) return false;
    if (n > kMaxString) {
      error_ = std::string("field ") + field + " is " + std::to_string(n) + " bytes, limit " +
               std::to_string(kMaxString);
      return false;
    }
    if (!Need(n)) return false;
    s->assign(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  bool AtEnd() const { return pos_ == in_.size(); }
  bool Fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
    return false;
  }
  const std::string& error() const { return error_; }

 private:
  bool Need(std::size_t n) {
    if (in_.size() - pos_ >= n) return true;
    if (error_.empty()) error_ = "payload truncated";
    return false;
  }
  std::span<const std::uint8_t> in_;
  std::size_t pos_ = 0;
  std::string error_;
};

void EncodePayload(Writer& w, const Hello& m) {
  w.Str(m.job_id);
  w.U32(m.attempt);
  w.U32(m.index);
  w.U32(m.nproc_per_node);
  w.U64(m.fingerprint);
  std::size_t n = std::min(m.config.size(), kMaxConfigEntries);
  w.U16(std::uint16_t(n));
  for (std::size_t i = 0; i < n; ++i) {
    w.Str(m.config[i].first);
    w.Str(m.config[i].second);
  }
  w.Str(m.nonce);
  w.U32(m.generation);
  w.Str(m.job_name);
  w.U32(m.job_restart_attempt.value_or(0));
  w.U16(static_cast<std::uint16_t>((m.job_restart_attempt ? 1 : 0) | (m.restarts ? 2 : 0) |
                                   (m.instance_id.empty() ? 0 : 4) |
                                   (m.node_name.empty() ? 0 : 8) | (m.node_rank ? 16 : 0)));
  w.Str(m.leader_id);
  if (m.restarts) w.U32(*m.restarts);
  if (!m.instance_id.empty()) w.Str(m.instance_id);
  if (!m.node_name.empty()) w.Str(m.node_name);
  if (m.node_rank) w.U32(*m.node_rank);
}

void EncodePayload(Writer& w, const Challenge& m) {
  w.Str(m.nonce);
  w.Str(m.proof);
}

void EncodePayload(Writer& w, const Proof& m) { w.Str(m.proof); }

MessageType TypeOf(const Challenge&) { return MessageType::kChallenge; }
MessageType TypeOf(const Proof&) { return MessageType::kProof; }

void EncodePayload(Writer& w, const Assignment& m) {
  w.U32(m.generation);
  w.U32(m.nnodes);
  w.U32(m.world_size);
  w.U32(m.rank_base);
  w.Str(m.master_addr);
  w.U16(m.master_port);
  w.Str(m.run_id);
  w.Str(m.job_id);
  w.U32(m.attempt);
  w.U32(m.nccl_version);
  std::size_t n = std::min(m.nccl_ids.size(), kMaxNcclIds);
  w.U16(std::uint16_t(n));
  for (std::size_t i = 0; i < n; ++i) w.Str(m.nccl_ids[i]);
  w.U16(m.jax_port);
  w.U32(m.node_rank.value_or(0));
  w.U16(static_cast<std::uint16_t>((m.node_rank ? 1 : 0) | (m.spare ? 2 : 0) |
                                   (m.restarts ? 4 : 0) | (m.index ? 8 : 0)));
  if (m.restarts) w.U32(*m.restarts);
  if (m.index) w.U32(*m.index);
}

void EncodePayload(Writer& w, const Reject& m) {
  w.Str(m.field);
  w.Str(m.reason);
  w.U16(static_cast<std::uint16_t>((m.retriable ? 1 : 0) | (m.replaced ? 2 : 0) |
                                   (m.index ? 4 : 0)));
  if (m.replaced) {
    w.U32(m.replaced->spare);
    w.U32(m.replaced->node_rank);
    w.U32(m.replaced->generation);
  }
  if (m.index) w.U32(*m.index);
}

void EncodePayload(Writer& w, const Heartbeat& m) {
  w.U64(m.sent_us);
  w.U64(m.echo_us);
  w.U32(m.echo_held_us);
  w.U32(m.step_rate_milli);
  w.U32(m.slowest_rank);
}

void EncodePayload(Writer& w, const Report& m) {
  w.U32(m.index);
  w.U16(static_cast<std::uint16_t>((m.ok ? 1 : 0) | (m.hang ? 2 : 0) | (m.leaving ? 4 : 0)));
  w.U16(m.failure_class);
  w.Str(m.reason);
}

void EncodePayload(Writer& w, const Stop& m) {
  w.U32(m.failed_index);
  w.Str(m.reason);
  w.U16(m.diagnostics_signal);
  w.U16(m.restart ? 1 : 0);
  w.U32(m.next_generation);
  w.U16(m.failure_class);
  // Only when set: a stop without one stays byte for byte what an older
  // member decodes (it refuses trailing bytes).
  if (m.replacement) {
    w.U16(1);
    w.U32(*m.replacement);
  }
}

MessageType TypeOf(const Heartbeat&) { return MessageType::kHeartbeat; }
MessageType TypeOf(const Report&) { return MessageType::kReport; }
MessageType TypeOf(const Stop&) { return MessageType::kStop; }
MessageType TypeOf(const Hello&) { return MessageType::kHello; }
MessageType TypeOf(const Assignment&) { return MessageType::kAssignment; }
MessageType TypeOf(const Reject&) { return MessageType::kReject; }

bool DecodePayload(Reader& r, Hello* m) {
  std::uint16_t n;
  if (!(r.Str(&m->job_id, "job_id") && r.U32(&m->attempt) && r.U32(&m->index) &&
        r.U32(&m->nproc_per_node) && r.U64(&m->fingerprint) && r.U16(&n))) {
    return false;
  }
  if (n > kMaxConfigEntries) return false;
  m->config.resize(n);
  for (auto& [k, v] : m->config) {
    if (!r.Str(&k, "config key") || !r.Str(&v, "config value")) return false;
  }
  if (!(r.Str(&m->nonce, "nonce") && r.U32(&m->generation))) return false;
  if (r.AtEnd()) return true;  // an older peer's hello
  std::uint32_t job_restart_attempt = 0;
  std::uint16_t flags = 0;
  if (!(r.Str(&m->job_name, "job_name") && r.U32(&job_restart_attempt) && r.U16(&flags) &&
        r.Str(&m->leader_id, "leader_id"))) {
    return false;
  }
  if ((flags & 1) != 0) m->job_restart_attempt = job_restart_attempt;
  if ((flags & 2) != 0) {  // elastic sizes: the restarts counted (wire.h)
    std::uint32_t restarts = 0;
    if (!r.U32(&restarts)) return false;
    m->restarts = restarts;
  }
  if ((flags & 4) != 0) {  // who the pod is beyond its index (wire.h)
    if (!r.Str(&m->instance_id, "instance_id")) return false;
    if (m->instance_id.empty()) return r.Fail("instance_id flagged but empty");
  }
  if ((flags & 8) != 0 && !r.Str(&m->node_name, "node_name")) return false;  // wire.h
  if ((flags & 16) != 0) {  // the node rank a survivor held (wire.h)
    std::uint32_t node_rank = 0;
    if (!r.U32(&node_rank)) return false;
    m->node_rank = node_rank;
  }
  return true;
}

bool DecodePayload(Reader& r, Challenge* m) {
  return r.Str(&m->nonce, "nonce") && r.Str(&m->proof, "proof");
}

bool DecodePayload(Reader& r, Proof* m) { return r.Str(&m->proof, "proof"); }

bool DecodeNcclIds(Reader& r, Assignment* m) {
  std::uint16_t n;
  if (!r.U32(&m->nccl_version) || !r.U16(&n)) return false;
  if (n > kMaxNcclIds) return r.Fail("nccl_ids has " + std::to_string(n) + " ids, limit " +
                                     std::to_string(kMaxNcclIds));
  m->nccl_ids.resize(n);
  for (auto& id : m->nccl_ids) {
    if (!r.Str(&id, "nccl_id")) return false;
    if (id.size() != kNcclIdBytes) {
      return r.Fail("nccl_id is " + std::to_string(id.size()) + " bytes, expected " +
                    std::to_string(kNcclIdBytes));
    }
  }
  return true;
}

// The fields appended for hot spares and elastic sizes; absent from an older leader.
bool DecodeMembership(Reader& r, Assignment* m) {
  if (r.AtEnd()) return true;
  std::uint32_t node_rank = 0;
  std::uint16_t flags = 0;
  if (!(r.U32(&node_rank) && r.U16(&flags))) return false;
  if ((flags & 1) != 0) m->node_rank = node_rank;
  m->spare = (flags & 2) != 0;
  if ((flags & 4) != 0) {  // elastic sizes: the restarts counted (a join is none)
    std::uint32_t restarts = 0;
    if (!r.U32(&restarts)) return false;
    m->restarts = restarts;
  }
  if ((flags & 8) != 0) {  // ranks by arrival: the index the leader gave this pod
    std::uint32_t index = 0;
    if (!r.U32(&index)) return false;
    m->index = index;
  }
  return true;
}

bool DecodePayload(Reader& r, Assignment* m) {
  return r.U32(&m->generation) && r.U32(&m->nnodes) && r.U32(&m->world_size) &&
         r.U32(&m->rank_base) && r.Str(&m->master_addr, "master_addr") &&
         r.U16(&m->master_port) && r.Str(&m->run_id, "run_id") && r.Str(&m->job_id, "job_id") &&
         r.U32(&m->attempt) && DecodeNcclIds(r, m) && r.U16(&m->jax_port) &&
         DecodeMembership(r, m);
}

bool DecodePayload(Reader& r, Reject* m) {
  std::uint16_t flags = 0;
  if (!(r.Str(&m->field, "field") && r.Str(&m->reason, "reason") && r.U16(&flags))) return false;
  m->retriable = (flags & 1) != 0;
  if ((flags & 2) != 0) {
    Replaced by;
    if (!(r.U32(&by.spare) && r.U32(&by.node_rank) && r.U32(&by.generation))) return false;
    m->replaced = by;
  }
  if ((flags & 4) != 0) {  // ranks by arrival: the index given for the next generation
    std::uint32_t index = 0;
    if (!r.U32(&index)) return false;
    m->index = index;
  }
  return true;
}

bool DecodePayload(Reader& r, Heartbeat* m) {
  if (r.AtEnd()) return true;  // an older peer's empty heartbeat
  return r.U64(&m->sent_us) && r.U64(&m->echo_us) && r.U32(&m->echo_held_us) &&
         r.U32(&m->step_rate_milli) && r.U32(&m->slowest_rank);
}

bool DecodePayload(Reader& r, Report* m) {
  std::uint16_t ok = 0;
  if (!(r.U32(&m->index) && r.U16(&ok) && r.U16(&m->failure_class) &&
        r.Str(&m->reason, "reason"))) {
    return false;
  }
  m->ok = (ok & 1) != 0;
  m->hang = (ok & 2) != 0;
  m->leaving = (ok & 4) != 0;
  return true;
}

bool DecodePayload(Reader& r, Stop* m) {
  std::uint16_t flags = 0;
  if (!(r.U32(&m->failed_index) && r.Str(&m->reason, "reason") &&
        r.U16(&m->diagnostics_signal) && r.U16(&flags) && r.U32(&m->next_generation) &&
        r.U16(&m->failure_class))) {
    return false;
  }
  m->restart = (flags & 1) != 0;
  if (r.AtEnd()) return true;  // an older leader's stop: no replacement named
  std::uint16_t more = 0;
  if (!r.U16(&more)) return false;
  if ((more & 1) != 0) {
    std::uint32_t replacement = 0;
    if (!r.U32(&replacement)) return false;
    m->replacement = replacement;
  }
  return true;
}

template <typename T>
Result<std::optional<Message>> DecodeAs(std::span<const std::uint8_t> payload) {
  T m;
  Reader r(payload);
  if (!DecodePayload(r, &m)) {
    return WireError(r.error().empty() ? "too many config entries" : r.error());
  }
  if (!r.AtEnd()) return WireError("trailing bytes after message");
  return std::optional<Message>(std::move(m));
}

std::uint32_t ReadU32(const std::uint8_t* p) {
  return std::uint32_t(p[0]) << 24 | std::uint32_t(p[1]) << 16 | std::uint32_t(p[2]) << 8 | p[3];
}

}  // namespace

std::uint64_t Fingerprint(const LaunchConfig& config) {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a 64 offset basis
  auto mix = [&h](std::string_view s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 0x100000001b3ULL;  // FNV prime
    }
    h ^= 0xff;  // separator, so ("ab","c") != ("a","bc")
    h *= 0x100000001b3ULL;
  };
  for (const auto& [k, v] : config) {
    mix(k);
    mix(v);
  }
  return h;
}

std::vector<std::uint8_t> Encode(const Message& message) {
  Writer w;
  w.U32(kMagic);
  w.U16(kVersion);
  std::visit([&w](const auto& m) { w.U16(static_cast<std::uint16_t>(TypeOf(m))); }, message);
  w.U32(0);  // payload length, patched below
  std::visit([&w](const auto& m) { EncodePayload(w, m); }, message);
  std::vector<std::uint8_t>& out = w.out();
  std::uint32_t len = std::uint32_t(out.size() - kHeaderSize);
  out[8] = std::uint8_t(len >> 24);
  out[9] = std::uint8_t(len >> 16);
  out[10] = std::uint8_t(len >> 8);
  out[11] = std::uint8_t(len);
  return std::move(out);
}

exitcodes::Status Decoder::Feed(std::span<const std::uint8_t> bytes) {
  if (failed_) return *failed_;
  // Drop what Next() consumed before appending, so the buffer holds at most one
  // partial frame plus the new bytes, whatever the frames' alignment in the
  // stream (a frame split across reads leaves a partial one behind every time).
  if (consumed_ > 0) {
    buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(consumed_));
    consumed_ = 0;
  }
  if (buffer_.size() + bytes.size() > kMaxBuffered) {
    failed_ = WireError("peer sent more than " + std::to_string(kMaxBuffered) +
                        " bytes without a complete frame being consumed");
    buffer_ = {};
    return *failed_;
  }
  // Grow to the bound at most, never by doubling past it.
  if (buffer_.capacity() < buffer_.size() + bytes.size()) {
    buffer_.reserve(std::min(kMaxBuffered, std::max(2 * buffer_.capacity(),
                                                    buffer_.size() + bytes.size())));
  }
  buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
  return Status::Ok();
}

exitcodes::Result<std::optional<Message>> Decoder::Next() {
  if (failed_) return *failed_;
  auto fail = [this](Status s) -> Result<std::optional<Message>> {
    failed_ = s;
    return s;
  };
  if (buffered() < kHeaderSize) return std::optional<Message>();
  const std::uint8_t* h = buffer_.data() + consumed_;
  std::uint32_t magic = ReadU32(h);
  if (magic != kMagic) return fail(WireError("bad magic (not a trainlet peer)"));
  std::uint16_t version = std::uint16_t(h[4] << 8 | h[5]);
  peer_version_ = version;
  if (version != kVersion) {
    return fail(WireError("protocol version " + std::to_string(version) + ", this trainlet speaks " +
                          std::to_string(kVersion)));
  }
  std::uint16_t type = std::uint16_t(h[6] << 8 | h[7]);
  std::uint32_t len = ReadU32(h + 8);
  if (len > kMaxPayload) {
    return fail(WireError("payload of " + std::to_string(len) + " bytes exceeds the limit of " +
                          std::to_string(kMaxPayload)));
  }
  if (type < 1 || type > 8) return fail(WireError("unknown message type " + std::to_string(type)));
  if (buffered() < kHeaderSize + len) return std::optional<Message>();
  std::span<const std::uint8_t> payload(h + kHeaderSize, len);
  consumed_ += kHeaderSize + len;
  Result<std::optional<Message>> r = std::optional<Message>();
  switch (static_cast<MessageType>(type)) {
    case MessageType::kHello: r = DecodeAs<Hello>(payload); break;
    case MessageType::kAssignment: r = DecodeAs<Assignment>(payload); break;
    case MessageType::kReject: r = DecodeAs<Reject>(payload); break;
    case MessageType::kHeartbeat: r = DecodeAs<Heartbeat>(payload); break;
    case MessageType::kReport: r = DecodeAs<Report>(payload); break;
    case MessageType::kStop: r = DecodeAs<Stop>(payload); break;
    case MessageType::kChallenge: r = DecodeAs<Challenge>(payload); break;
    case MessageType::kProof: r = DecodeAs<Proof>(payload); break;
  }
  if (!r.ok()) return fail(r.status());
  return r;
}

}  // namespace trainlet::rendezvous::wire
