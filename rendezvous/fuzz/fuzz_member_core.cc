// libFuzzer entry for the member's sans-IO core (member_core.h): the input is a
// schedule of what a driver may pass in (resolutions, connects, closes, any
// bytes from the leader, well-formed frames of every kind, timers, the time
// advancing, StartChannel, reports, Close). Whatever the schedule, the core
// keeps its driver's contract: a connection id is asked for once and given up
// at most once, nothing is sent on a connection given up, Done comes at most
// once, and until Done the deadline stays armed at options.deadline.
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>

#include "trainlet/rendezvous/auth.h"
#include "trainlet/rendezvous/member_core.h"

using namespace trainlet::rendezvous;
using Clock = std::chrono::steady_clock;

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

const std::string kToken(32, 't');
const std::string kLeaderNonce(kNonceBytes, 'L');

class Driver {
 public:
  Driver(bool token, Clock::time_point t0)
      : now(t0), deadline(Options(token, t0).deadline), core(Options(token, t0)) {}

  static MemberCoreOptions Options(bool token, Clock::time_point t0) {
    MemberCoreOptions o;
    o.leader_host = "leader.svc";
    o.hello.job_id = "job";
    o.hello.index = 1;
    o.hello.nproc_per_node = 1;
    o.deadline = t0 + std::chrono::seconds(30);
    if (token) o.token = kToken;
    o.nonce_source = [] { return std::string(kNonceBytes, 'n'); };
    return o;
  }

  void Take(MemberCore::Actions actions) {
    for (const auto& a : actions) {
      if (const auto* r = std::get_if<member::ResolveName>(&a)) resolve = r->id;
      if (const auto* c = std::get_if<member::Connect>(&a)) {
        Check(open.insert(c->conn).second);
        conn = c->conn;
      }
      if (const auto* d = std::get_if<member::Disconnect>(&a)) Check(open.erase(d->conn) == 1);
      if (const auto* s = std::get_if<member::Send>(&a)) Check(open.contains(s->conn));
      if (const auto* t = std::get_if<member::ArmTimer>(&a)) armed[t->timer] = t->at;
      if (const auto* t = std::get_if<member::CancelTimer>(&a)) armed.erase(t->timer);
      if (std::holds_alternative<member::Done>(a)) Check(++done == 1);
    }
    const auto phase = core.phase();
    if (phase != MemberCore::Phase::kJoined && phase != MemberCore::Phase::kClosed &&
        phase != MemberCore::Phase::kIdle) {
      Check(armed.contains(MemberTimer::kDeadline) &&
            armed.at(MemberTimer::kDeadline) == deadline);
    }
  }

  // A well-formed frame of kind `k` (the leader's side of the protocol).
  wire::Message Frame(std::uint8_t k) {
    wire::Assignment a{.nnodes = 2, .world_size = 2, .rank_base = 1, .master_addr = "10.0.0.10",
                       .master_port = 29500, .job_id = "job"};
    switch (k % 8) {
      case 0: return wire::Heartbeat{};
      case 1: return wire::Challenge{kLeaderNonce,
                                     LeaderProof(kToken, "job", std::string(kNonceBytes, 'n'),
                                                 kLeaderNonce)};
      case 2: return wire::Reject{"index", "held", true};
      case 3: return wire::Reject{wire::kReplacedField, "replaced", false, wire::Replaced{2, 1, 1}};
      case 4: return wire::Reject{wire::kNextGenerationField, "next", true, std::nullopt, 3u};
      case 5: return wire::Stop{.failed_index = 0, .reason = "x", .restart = true};
      case 6: a.attempt = 9; return a;  // a stale leader
      default: return a;
    }
  }

  Clock::time_point now;
  Clock::time_point deadline;
  MemberCore core;
  std::uint64_t resolve = 0, conn = 0;
  std::set<std::uint64_t> open;
  std::map<MemberTimer, Clock::time_point> armed;
  int done = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const Clock::time_point t0 = Clock::time_point{} + std::chrono::hours(1);
  Driver d(data[0] & 1, t0);
  d.Take(d.core.Start(d.now));
  std::size_t i = 1;
  while (i + 1 < size) {
    const std::uint8_t op = data[i++], arg = data[i++];
    d.now += std::chrono::milliseconds(arg * 4);
    switch (op % 12) {
      case 0: d.Take(d.core.OnResolved(d.resolve, {{"10.0.0.10", "10.0.0.11"}, {}, ""}, d.now)); break;
      case 1: d.Take(d.core.OnResolved(d.resolve, {{}, ResolveError::kNotFound, ""}, d.now)); break;
      case 2: d.Take(d.core.OnConnected(d.conn, d.now)); break;
      case 3: d.Take(d.core.OnConnectFailed(d.conn, "refused", d.now)); break;
      case 4: d.Take(d.core.OnClosed(d.conn, "End of file", d.now)); break;
      case 5: {  // raw bytes from the input, as they come
        const std::size_t n = std::min<std::size_t>(arg, size - i);
        d.Take(d.core.OnReceived(d.conn, std::span(data + i, n), d.now));
        i += n;
        break;
      }
      case 6: d.Take(d.core.OnReceived(d.conn, wire::Encode(d.Frame(arg)), d.now)); break;
      case 7: {  // the earliest armed timer fires
        if (d.armed.empty()) break;
        auto next = d.armed.begin();
        for (auto it = d.armed.begin(); it != d.armed.end(); ++it) {
          if (it->second < next->second) next = it;
        }
        const MemberTimer t = next->first;
        d.now = std::max(d.now, next->second);
        d.armed.erase(next);
        d.Take(d.core.OnTimer(t, d.now));
        break;
      }
      case 8: d.Take(d.core.OnTimer(static_cast<MemberTimer>(arg % kMemberTimers), d.now)); break;
      case 9: d.Take(d.core.StartChannel(std::chrono::milliseconds(400), 6, d.now)); break;
      case 10: d.Take(d.core.Report(wire::Report{.index = 1, .ok = (arg & 1) != 0,
                                                 .leaving = (arg & 2) != 0},
                                    arg, d.now));
        break;
      default: d.Take(d.core.Close()); break;
    }
  }
  return 0;
}
