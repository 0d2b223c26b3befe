// LeaderCore: connections until they are admitted or refused — the pending
// slots and their eviction, the hello, the token's challenge and proof
// (auth.h), the admission decision (admission.h) and how it is applied.
#include <algorithm>
#include <utility>

#include "leader_core_state.h"
#include "trainlet/rendezvous/admission.h"
#include "trainlet/rendezvous/auth.h"

namespace trainlet::rendezvous {

using Clock = leader_io::Clock;
using ConnId = leader_io::ConnId;
using leader_io::TimerId;

void LeaderCoreState::OnAccepted(ConnId id, Clock::time_point now) {
  CoreConn& c = conns.at(id);
  if (decided() && !late) {
    Warn(c, "leader: dropping connection from " + c.peer + ": rendezvous already complete", now);
    Emit(leader_io::Close{id});
    conns.erase(id);
    return;
  }
  // Evicting may drop this connection itself (every other slot holds a
  // refused one whose Reject is being written): then it is closed and gone.
  if (pending >= options.max_pending_handshakes && !EvictPending(id, now)) return;
  ++pending;
  ++pending_by_address[c.address];
  Emit(leader_io::ArmTimer{{TimerId::Kind::kHandshake, id}, now + options.handshake_timeout});
}

void LeaderCoreState::HandshakeExpired(ConnId id, Clock::time_point now) {
  CoreConn* c = Find(id);
  if (c == nullptr || c->closing || c->index) return;
  Warn(*c, "leader: " + c->peer + " sent no valid hello within " +
               std::to_string(options.handshake_timeout.count()) + " ms; dropped", now);
  Drop(id);
}

// All pending slots taken: the oldest pending connection of the address
// holding the most pending slots goes, not the new one. Whatever holds the
// slots (idle sockets, reopened as soon as they are dropped), a member that
// sends its hello at once gets in, and one from an address of its own (every
// pod has its own IP) keeps its slot while it sends its hello, however fast a
// flood from other addresses reopens. The new connection `newest` (not yet
// counted) is never the victim while another is; when every slot is held by
// a refused connection whose Reject is being written, `newest` itself goes
// (the bound holds): false then, and `newest` is closed and forgotten.
bool LeaderCoreState::EvictPending(ConnId newest, Clock::time_point now) {
  auto most = std::max_element(pending_by_address.begin(), pending_by_address.end(),
                               [](const auto& a, const auto& b) { return a.second < b.second; });
  if (most == pending_by_address.end()) return true;
  const std::string& address = most->first;
  // Of that address, one whose hello came and who is answering the token's
  // challenge (a round trip) goes only when none that sent nothing is left.
  auto from = [&](const auto& c) {
    return c.first != newest && !c.second.index && !c.second.closing &&
           c.second.address == address;
  };
  auto oldest = std::find_if(conns.begin(), conns.end(),
                             [&](const auto& c) { return from(c) && !c.second.auth; });
  if (oldest == conns.end()) oldest = std::find_if(conns.begin(), conns.end(), from);
  if (oldest == conns.end()) {  // all of them refused, their Reject being written
    oldest = std::find_if(conns.begin(), conns.end(), [newest](const auto& c) {
      return c.first != newest && !c.second.index && !c.second.closing;
    });
  }
  if (oldest == conns.end()) {
    Warn(conns.at(newest), "leader: dropping " + conns.at(newest).peer + ": " +
                               std::to_string(pending) +
                               " connections are mid-handshake, each refused and closing", now);
    Emit(leader_io::Close{newest});
    conns.erase(newest);
    return false;
  }
  const ConnId victim = oldest->first;
  Warn(oldest->second,
       "leader: dropping " + oldest->second.peer + ": no valid hello yet, and " +
           std::to_string(pending) + " connections are mid-handshake (" +
           std::to_string(most->second) + " from " + address + "; its oldest goes)",
       now);
  Drop(victim);
  return true;
}

void LeaderCoreState::OnHello(ConnId id, wire::Hello hello, Clock::time_point now) {
  CoreConn& c = conns.at(id);
  std::string who = "pod " + std::to_string(hello.index) + " (" + c.peer + ")";
  const std::string& token = options.token;
  if (token.empty() && !hello.nonce.empty()) {
    Refuse(id, {"token", who + " authenticates with a token, but this leader has no --token-file"},
           now);
    return;
  }
  if (!token.empty()) {
    if (hello.nonce.size() != kNonceBytes) {
      Refuse(id, {"token", who + " did not authenticate: this leader requires the shared "
                                 "token (--token-file)"}, now);
      return;
    }
    // Prove we hold the token; the member proves it back (OnProof) before
    // anything about the gang is decided or sent.
    std::string leader_nonce = nonce();
    wire::Challenge challenge{.nonce = leader_nonce,
                              .proof = LeaderProof(token, hello.job_id, hello.nonce,
                                                   leader_nonce)};
    c.auth = std::make_unique<CoreConn::Auth>(
        CoreConn::Auth{std::move(hello), std::move(leader_nonce)});
    Emit(leader_io::Send{id, wire::Encode(challenge)});
    return;
  }
  Admit(id, std::move(hello), now);
}

void LeaderCoreState::OnProof(ConnId id, const wire::Proof& proof, Clock::time_point now) {
  CoreConn& c = conns.at(id);
  const std::unique_ptr<CoreConn::Auth> auth = std::move(c.auth);
  wire::Hello hello = std::move(auth->hello);
  std::string expected =
      MemberProof(options.token, hello.job_id, auth->leader_nonce, hello.nonce);
  if (!ProofsEqual(proof.proof, expected)) {
    Refuse(id, {"token", "pod " + std::to_string(hello.index) + " (" + c.peer +
                             ") failed authentication: its token differs from the leader's"},
           now);
    return;
  }
  Admit(id, std::move(hello), now);
}

std::optional<IndexHolder> LeaderCoreState::HolderOf(std::uint32_t index, Clock::time_point now) {
  auto it = members.find(index);
  if (it == members.end()) return std::nullopt;
  const CoreConn& h = conns.at(it->second);
  return IndexHolder{.peer = h.peer,
                     .live = now - h.peer_state.last_rx() <= options.holder_liveness,
                     .job_name = h.job_name,
                     .job_restart_attempt = h.job_restart_attempt,
                     .instance_id = h.instance_id};
}

// The decision is Admit (admission.h); this applies it.
void LeaderCoreState::Admit(ConnId id, wire::Hello hello, Clock::time_point now) {
  CoreConn& c = conns.at(id);
  // Only a hello without an index needs it: O(nnodes) per hello (12,500 pods: O(n^2), ~3 s).
  std::optional<std::uint32_t> free_index;
  if (hello.index == wire::kNoIndex) {
    free_index = LowestFreeIndex(
        options.nnodes,
        [this](std::uint32_t i) { return members.contains(i) || given_late.contains(i); },
        options.expected);
  }
  const LeaderMembership* m = options.membership.get();
  const Admission decided = rendezvous::Admit(
      AdmissionState{.own = *own,
                     .nnodes = options.nnodes,
                     .max_generation = options.max_generation,
                     .leader_id = options.leader_id,
                     .job_attempts = job_attempts,
                     .holder = HolderOf(hello.index, now),
                     .replaced = m ? m->ReplacedOf(hello.index) : std::nullopt,
                     .left = m ? m->LeftOf(hello.index) : std::nullopt,
                     .lost_spare = m ? m->LostSpareOf(hello.index) : std::nullopt,
                     .free_index = free_index,
                     .token = !options.token.empty(),
                     .kept_id = KeptId(hello.index, now),
                     .peer = c.peer,
                     .address = c.address,
                     .local = c.local_address.empty()
                                  ? "?"
                                  : c.local_address + ":" + std::to_string(c.local_port)},
      hello);
  if (decided.record_job_attempt) job_attempts[hello.job_name] = *decided.record_job_attempt;
  if (decided.drop_older_of_job) DropOlderOfJob(hello);
  if (decided.verdict != Admission::Verdict::kAdmit) {
    // A rival leader must stop too: it gets a final refusal, this leader
    // fails config once that refusal is written.
    Refuse(id, decided.reject, now, decided.verdict == Admission::Verdict::kRivalLeader);
    return;
  }
  const std::uint32_t index = decided.index;
  node_names[index] = hello.node_name;  // node_name(): kept after the pod is gone
  if (options.membership) options.membership->OnAdmitted(index, hello);
  c.instance_id = hello.instance_id;
  if (decided.replace_holder) ReplaceHolder(id, index, now);
  if (this->decided()) {
    AdmitLate(id, index, hello.index == wire::kNoIndex, now);
    return;
  }
  c.index = index;
  c.generation = hello.generation;
  c.restarts = hello.restarts;
  c.job_name = hello.job_name;
  c.job_restart_attempt = hello.job_restart_attempt;
  Emit(leader_io::CancelTimer{{TimerId::Kind::kHandshake, id}});
  NotPending(c);
  members[index] = id;
  log->debug("leader: pod {} joined from {} ({}/{}){}", index, c.peer, admitted(), options.nnodes,
             hello.index == wire::kNoIndex ? " by arrival" : "");
  MaybeAssign();
}

// The instance id of the survivor the round keeps `index` for
// (LeaderOptions::kept_ids), while it keeps it; empty: none.
std::string LeaderCoreState::KeptId(std::uint32_t index, Clock::time_point now) const {
  if (decided() || now >= options.keep_until) return {};
  auto it = options.kept_ids.find(index);
  return it == options.kept_ids.end() ? std::string() : it->second;
}

// The holder of `index` gives way to `id` (admission.h: replace_holder): it
// went silent, it is `id`'s own pod on an old connection, or another pod
// took the index the round kept for `id`.
void LeaderCoreState::ReplaceHolder(ConnId id, std::uint32_t index, Clock::time_point now) {
  const CoreConn& c = conns.at(id);
  const ConnId holder_id = members.at(index);
  CoreConn& holder = conns.at(holder_id);
  if (decided() && !holder.settled) {  // an active pod or a spare: lost
    holder.settled = true;
    Lost(index, "a new pod (" + c.peer + ") claims its index");
  }
  const auto silent =
      std::chrono::duration_cast<std::chrono::milliseconds>(now - holder.peer_state.last_rx());
  std::string why;
  if (!holder.instance_id.empty() && holder.instance_id == c.instance_id) {
    why = "the same pod held it on an older connection, from " + holder.peer;
  } else if (silent > options.holder_liveness) {
    why = "its holder " + holder.peer + " has been silent for " + std::to_string(silent.count()) +
          " ms";
  } else {
    why = "it is kept for that pod (it ran the index in the last generation); " + holder.peer +
          " held it";
  }
  Warn(c, fmt::format("leader: index {} claimed again from {}; {}: replacing it", index, c.peer,
                      why),
       now);
  Drop(holder_id);
}

// A pod of a recreated Job (admission.h, rule 4): the old Job's pods still
// admitted are stale.
void LeaderCoreState::DropOlderOfJob(const wire::Hello& hello) {
  const std::uint32_t jra = *hello.job_restart_attempt;
  auto snapshot = members;
  for (const auto& [index, id] : snapshot) {
    const CoreConn* old = Find(id);
    if (old == nullptr || old->job_name != hello.job_name ||
        old->job_restart_attempt.value_or(0) >= jra) {
      continue;
    }
    log->info("leader: Job '{}' was recreated (job-restart-attempt {}): dropping pod {} ({}) "
              "of its attempt {}",
              hello.job_name, jra, index, old->peer, old->job_restart_attempt.value_or(0));
    Drop(id);
  }
}

// Writes `reject` and then closes `id` (Written); nothing more is read from
// it meanwhile. `rival`: the round fails config once it is written.
void LeaderCoreState::Refuse(ConnId id, wire::Reject reject, Clock::time_point now, bool rival) {
  CoreConn& c = conns.at(id);
  Warn(c, "leader: refused " + c.peer + ": " + reject.reason, now);
  Emit(leader_io::CancelTimer{{TimerId::Kind::kHandshake, id}});
  Emit(leader_io::Send{id, wire::Encode(reject), /*notify=*/true});
  c.closing = true;
  if (rival) rivals[id] = reject.reason;
}

}  // namespace trainlet::rendezvous
