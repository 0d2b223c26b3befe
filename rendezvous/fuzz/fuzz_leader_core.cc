// libFuzzer entry for the leader's sans-IO core (leader_core.h, leader_io.h):
// the input is a schedule of what a shell may pass in (connections accepted
// from a few addresses, any bytes from them, well-formed frames of every kind
// a member sends (hellos for any index, proofs, reports, heartbeats), ends of
// stream, writes done, timers firing at their deadline or stale, the time
// advancing, and the local calls: Reconsider, StartChannel, BroadcastStop,
// StopAdmitting, Fail, Close). Whatever the schedule, the core keeps what
// leader_core.h and leader_io.h promise its caller:
//  - connection ids ascend and are never reused;
//  - nothing is sent to, closed or timed for a connection the core closed
//    (it forgot it) or never gave out, and each is closed at most once;
//  - RoundDone comes at most once, MemberLost and MemberReport never before
//    StartChannel, StartAccepting at most once;
//  - after Close() nothing more is emitted, ever;
//  - connections mid-handshake stay within max_pending_handshakes, and each
//    call's actions are bounded by the connections it knows (no output grows
//    without input).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "trainlet/rendezvous/auth.h"
#include "trainlet/rendezvous/leader_core.h"

using namespace trainlet::rendezvous;
using namespace trainlet::rendezvous::leader_io;

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

const std::string kToken(32, 't');
const std::string kJob = "trainer-0";
constexpr std::size_t kMaxPending = 4;

wire::Hello HelloOf(std::uint32_t index, std::uint32_t nnodes, std::uint8_t arg, bool token) {
  wire::Hello h;
  h.job_id = (arg & 0x80) ? "other-job" : kJob;
  h.index = (arg & 0x40) ? wire::kNoIndex : index;
  h.nproc_per_node = 2;
  h.config = {{"nnodes", std::to_string(nnodes)}, {"nproc_per_node", "2"}, {"master_port", "29500"}};
  h.fingerprint = wire::Fingerprint(h.config);
  h.generation = (arg >> 4) & 1;
  h.attempt = (arg >> 5) & 1;
  if (token) h.nonce = std::string(kNonceBytes, static_cast<char>('m' + (arg & 3)));
  if (arg & 8) h.instance_id = std::string(wire::kInstanceIdBytes, static_cast<char>('i' + (arg & 3)));
  return h;
}

// Hot spares and elastic sizes (leader_options.h LeaderMembership): the first
// `active` pods joined get node ranks once `ready` (the input decides when),
// the rest wait as spares; leaves, replacements and losses as the input says.
class FuzzMembership : public LeaderMembership {
 public:
  std::optional<std::map<std::uint32_t, std::uint32_t>> Plan(
      const std::vector<std::uint32_t>& joined) override {
    if (!ready || joined.empty()) return std::nullopt;
    std::map<std::uint32_t, std::uint32_t> ranks;
    for (std::uint32_t i = 0; i < joined.size() && i < active; ++i) ranks[joined[i]] = i;
    return ranks;
  }
  bool AssignFirst(std::uint32_t index) override { return index % 2 == 1; }
  std::optional<wire::Replaced> ReplacedOf(std::uint32_t index) const override {
    if (index != replaced) return std::nullopt;
    return wire::Replaced{.spare = index + 1, .node_rank = 1, .generation = 1};
  }
  std::optional<std::uint32_t> LeftOf(std::uint32_t index) const override {
    return index == left ? std::optional<std::uint32_t>(1) : std::nullopt;
  }
  std::optional<std::uint32_t> LostSpareOf(std::uint32_t) const override { return std::nullopt; }
  void OnLeave(std::uint32_t index) override { leaves.push_back(index); }
  bool ready = false;
  std::uint32_t active = 2, replaced = 99, left = 99;
  std::vector<std::uint32_t> leaves;
};

class Driver {
 public:
  Driver(std::uint32_t nnodes, bool token, std::shared_ptr<FuzzMembership> membership,
         std::chrono::steady_clock::time_point t0)
      : now(t0), nnodes_(nnodes), token_(token), membership_(membership),
        core_(Options(nnodes, token, membership), [this] {
          return std::string(kNonceBytes, static_cast<char>('a' + (nonces_++ % 26)));
        }) {}

  // With a membership: elastic sizes or spares, late pods admitted while the
  // generation runs, survivors' ids kept (leader_options.h).
  static LeaderOptions Options(std::uint32_t nnodes, bool token,
                               std::shared_ptr<FuzzMembership> membership) {
    LeaderOptions o;
    o.nnodes = nnodes;
    o.run_id = kJob;
    o.max_pending_handshakes = kMaxPending;
    o.max_generation = 1;
    if (token) o.token = kToken;
    if (membership) {
      o.membership = membership;
      o.admit_late = true;
      o.max_generation = std::nullopt;
      o.restarts = 1;
      o.kept_ids = {{1, std::string(wire::kInstanceIdBytes, 'i')}};
      o.keep_until = std::chrono::steady_clock::time_point{} + std::chrono::hours(1) +
                     std::chrono::seconds(5);
    }
    return o;
  }

  // Takes every action queued, checks each against the contract, and answers
  // the writes that asked for it when `complete` (else they stay pending).
  void Take(bool complete = true) {
    for (int rounds = 0;; ++rounds) {
      Check(rounds < 64);  // Written answers cannot ping-pong forever
      auto actions = core_.TakeActions();
      if (actions.empty()) return;
      Check(!closed_core_);
      Check(actions.size() <= 8 * (known_.size() + accepted_) + 16);
      std::vector<ConnId> written;
      for (const auto& a : actions) Apply(a, written);
      if (!complete) return;
      for (ConnId c : written) core_.Written(c, now);
    }
  }

  void Apply(const Action& a, std::vector<ConnId>& written) {
    if (const auto* s = std::get_if<Send>(&a)) {
      Check(known_.contains(s->conn) && !s->frame.empty());
      if (s->notify) {
        if (pending_writes_.size() < 256) pending_writes_.push_back(s->conn);
        written.push_back(s->conn);
      }
    } else if (const auto* c = std::get_if<Close>(&a)) {
      Check(known_.erase(c->conn) == 1);
      armed_.erase(TimerId{TimerId::Kind::kHandshake, c->conn});
    } else if (const auto* t = std::get_if<ArmTimer>(&a)) {
      if (t->id.kind == TimerId::Kind::kHandshake) Check(known_.contains(t->id.conn));
      armed_[t->id] = t->deadline;
    } else if (const auto* t = std::get_if<CancelTimer>(&a)) {
      armed_.erase(t->id);
    } else if (std::holds_alternative<StartAccepting>(a)) {
      Check(++accepting_ == 1);
    } else if (const auto* r = std::get_if<RoundDone>(&a)) {
      Check(r->result != nullptr && ++round_done_ == 1);
    } else if (std::holds_alternative<MemberLost>(a) || std::holds_alternative<MemberReport>(a)) {
      Check(channel_);
    }
  }

  void Accept(std::uint8_t arg) {
    if (closed_core_) return;
    const ConnId id = core_.Accepted({.peer_address = "10.0.0." + std::to_string(2 + arg % 4),
                                      .peer_port = static_cast<std::uint16_t>(40000 + arg),
                                      .local_address = "10.0.0.1",
                                      .local_port = 29400,
                                      .local_loopback = false},
                                     now);
    Check(id > last_id_);  // ascending, never reused
    last_id_ = id;
    known_.insert(id);
    ++accepted_;
    Take();
    Check(core_.pending() <= kMaxPending);
  }

  // A connection the core knows (or a closed or unknown id, which it ignores).
  ConnId Pick(std::uint8_t arg) const {
    if (known_.empty() || arg % 8 == 7) return last_id_ + 1 + arg % 3;
    auto it = known_.begin();
    std::advance(it, arg % known_.size());
    return *it;
  }

  void Say(std::uint8_t arg, const wire::Message& m) {
    if (closed_core_) return;
    core_.Received(Pick(arg), wire::Encode(m), now);
    Take();
  }

  // A member's frame of kind `k` (its side of the protocol).
  wire::Message Frame(std::uint8_t k, std::uint8_t arg) const {
    const std::uint32_t index = 1 + arg % nnodes_;  // nnodes itself: beyond the gang
    switch (k % 6) {
      case 0: return HelloOf(index, nnodes_, arg, token_);
      case 1: {  // the proof over the core's latest challenge nonce (one of 'a'..)
        const std::string leader_nonce(kNonceBytes, static_cast<char>('a' + (arg % 26)));
        return wire::Proof{MemberProof(kToken, kJob, leader_nonce,
                                       std::string(kNonceBytes, static_cast<char>('m' + (arg & 3))))};
      }
      case 2: return wire::Report{.index = index, .ok = (arg & 1) != 0, .reason = "x",
                                  .leaving = (arg & 2) != 0};
      case 3: return wire::Heartbeat{.sent_us = arg, .echo_us = arg};
      case 4: return wire::Stop{.failed_index = index, .reason = "x", .restart = true};
      default: return wire::Reject{"index", "held", true};
    }
  }

  void FireEarliest() {
    if (closed_core_ || armed_.empty()) return;
    auto next = std::min_element(armed_.begin(), armed_.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
    const TimerId id = next->first;
    now = std::max(now, next->second);
    armed_.erase(next);
    core_.TimerFired(id, now);
    Take();
  }

  std::chrono::steady_clock::time_point now;
  std::uint32_t nnodes_;
  bool token_;
  std::shared_ptr<FuzzMembership> membership_;
  int nonces_ = 0;
  LeaderCore core_;
  std::set<ConnId> known_;
  ConnId last_id_ = 0;
  std::size_t accepted_ = 0;
  std::map<TimerId, std::chrono::steady_clock::time_point> armed_;
  std::vector<ConnId> pending_writes_;
  int accepting_ = 0, round_done_ = 0;
  bool channel_ = false, closed_core_ = false;
};

void Step(Driver& d, std::uint8_t op, std::uint8_t arg, const std::uint8_t* rest, std::size_t n) {
  switch (op % 14) {
    case 0: d.Accept(arg); break;
    case 1: d.Say(arg, d.Frame(0, arg)); break;
    case 2: d.Say(arg, d.Frame(arg >> 3, arg)); break;
    case 3:  // raw bytes from the input, as they come
      if (!d.closed_core_) d.core_.Received(d.Pick(arg), std::span(rest, n), d.now), d.Take();
      break;
    case 4:
      if (!d.closed_core_) d.core_.Closed(d.Pick(arg), "End of file", d.now), d.Take();
      break;
    case 5: d.FireEarliest(); break;
    case 6:  // a stale or never armed timer
      if (!d.closed_core_) {
        d.core_.TimerFired(TimerId{static_cast<TimerId::Kind>(arg % 4), d.Pick(arg)}, d.now);
        d.Take();
      }
      break;
    case 7: d.now += std::chrono::milliseconds(arg) * 40; break;
    case 8:
      if (!d.closed_core_) d.core_.Reconsider(d.now), d.Take();
      break;
    case 9:
      if (!d.closed_core_ && d.core_.formed()) {
        d.channel_ = true;
        d.core_.StartChannel([arg](std::uint32_t) { return (arg & 1) != 0; },
                             std::chrono::milliseconds(100 + arg), 1 + arg % 4, d.now);
        d.Take();
      }
      break;
    case 10:
      if (!d.closed_core_) d.core_.BroadcastStop({.failed_index = arg, .reason = "y", .restart = (arg & 1) != 0}), d.Take();
      break;
    case 11:
      if (!d.closed_core_) d.core_.StopAdmitting(), d.Take();
      break;
    case 12:  // a write held back (Take without answering Written), then answered late
      if (!d.closed_core_ && !d.pending_writes_.empty()) {
        d.core_.Written(d.pending_writes_[arg % d.pending_writes_.size()], d.now);
        d.Take(arg & 1);
      }
      break;
    default:
      if (d.membership_ && arg % 16 >= 2 && arg % 16 < 8) {  // the membership changes its mind
        d.membership_->ready = (arg & 0x10) != 0 || arg % 16 == 2;
        d.membership_->active = 1 + arg % 3;
        if (arg % 16 == 5) d.membership_->replaced = 1 + (arg >> 5) % 3;
        if (arg % 16 == 6) d.membership_->left = 1 + (arg >> 5) % 3;
      } else if (arg % 16 == 0 && !d.closed_core_) {
        d.core_.Close();
        d.closed_core_ = true;
        d.Take();
      } else if (arg % 16 == 1 && !d.closed_core_) {
        d.core_.Fail(trainlet::exitcodes::Status::Infra("port taken"));
        d.Take();
      }
      break;
  }
}

}  // namespace

// The core's log lines (every refusal, every drop) would drown libFuzzer's own.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint32_t nnodes = 1 + data[0] % 4;
  const auto t0 = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  auto membership = (data[0] & 0x40) ? std::make_shared<FuzzMembership>() : nullptr;
  Driver d(nnodes, (data[0] & 0x10) != 0, membership, t0);
  d.core_.Start(HelloOf(0, nnodes, 0, d.token_), d.now);
  d.Take();
  if ((data[0] & 0x20) == 0) {
    d.core_.Listening(29500, d.now);
    d.Take();
  }
  std::size_t i = 1;
  while (i + 1 < size) {
    const std::uint8_t op = data[i++], arg = data[i++];
    const std::size_t n = std::min<std::size_t>(arg, size - i);
    Step(d, op, arg, data + i, n);
    if (op % 14 == 3) i += n;
  }
  return 0;
}
