#include "invariants.h"

#include <array>
#include <utility>

namespace trainlet::invariants {

namespace {
constexpr std::array<std::pair<Record::Kind, std::string_view>, 9> kNames{{
    {Record::Kind::kStart, "start"},
    {Record::Kind::kJoin, "join"},
    {Record::Kind::kForm, "form"},
    {Record::Kind::kGen, "gen"},
    {Record::Kind::kFault, "fault"},
    {Record::Kind::kSignal, "signal"},
    {Record::Kind::kLeave, "leave"},
    {Record::Kind::kLost, "lost"},
    {Record::Kind::kExit, "exit"},
}};

// README "Exit codes": the classes' codes, a worker's own code, 137 from outside.
bool ContractCode(int code) { return code >= 0 && code <= 255; }
bool Counted(int code) { return code != 0 && code != 76 && code != 143; }
}  // namespace

std::string_view KindName(Record::Kind k) {
  for (const auto& [kind, name] : kNames) {
    if (kind == k) return name;
  }
  return "?";
}

std::optional<Record::Kind> KindFromName(std::string_view name) {
  for (const auto& [kind, n] : kNames) {
    if (n == name) return kind;
  }
  return std::nullopt;
}

std::string Describe(const Record& r) {
  std::string s = "t=" + std::to_string(r.t_ms) + " " + std::string(KindName(r.kind)) +
                  " pod=" + std::to_string(r.pod) + " inst=" + std::to_string(r.inst);
  switch (r.kind) {
    case Record::Kind::kForm: {
      s += " generation=" + std::to_string(r.generation) + " world=" + std::to_string(r.world) +
           " restarts=" + std::to_string(r.restarts) + " ranks=";
      for (std::size_t i = 0; i < r.ranks.size(); ++i) {
        s += (i != 0 ? "," : "") + std::to_string(r.ranks[i]);
      }
      break;
    }
    case Record::Kind::kGen:
      s += " generation=" + std::to_string(r.generation) + " rank=" +
           (r.rank == kSpareRank ? std::string("spare") : std::to_string(r.rank)) +
           " world=" + std::to_string(r.world) + " restarts=" + std::to_string(r.restarts);
      break;
    case Record::Kind::kExit:
      s += " code=" + std::to_string(r.code);
      break;
    case Record::Kind::kStart:
      if (r.stranger) s += " stranger";
      break;
    default:
      break;
  }
  if (!r.what.empty()) s += " " + r.what;
  return s;
}

void Checker::Violation(std::string_view rule, const Record* r, const std::string& what) {
  violations_.push_back(std::string(rule) + ": " + what + (r ? " [" + Describe(*r) + "]" : ""));
}

void Checker::On(const Record& r) {
  CheckDeadlines(r.t_ms);
  switch (r.kind) {
    case Record::Kind::kStart: {
      Inst& i = I(r.inst);
      i.pod = r.pod;
      i.stranger = r.stranger;
      i.joining_since = r.t_ms;
      if (!r.stranger && r.pod != kNoIndex) current_[r.pod] = r.inst;
      break;
    }
    case Record::Kind::kJoin: {
      Inst& i = I(r.inst);
      i.joining_since = r.t_ms;
      if (!i.stranger && r.pod != i.pod) {  // ranks by arrival: the index the leader gave it
        i.pod = r.pod;
        current_[r.pod] = r.inst;
      }
      break;
    }
    case Record::Kind::kForm:
      OnForm(r);
      break;
    case Record::Kind::kGen:
      OnGen(r);
      break;
    case Record::Kind::kFault:
      ++faults_;
      if (auto it = insts_.find(r.inst); it != insts_.end()) ++it->second.faults;  // its target
      if (r.what == "kill") ++kills_;
      if (r.what == "cut" || r.what == "reset") ++cuts_;  // README: a cut link, every pod 76
      break;
    case Record::Kind::kSignal: {
      Inst& i = I(r.inst);
      ++signals_;
      if (!i.term_at) i.term_at = r.t_ms;
      // No failure in its generation yet, none of its own ever (a frozen pod's signal waits).
      if (faults_ == faults_at_form_.back() && i.faults == 0 && !i.exited) i.expect_143 = true;
      break;
    }
    case Record::Kind::kLeave:
      I(r.inst).left = true;
      break;
    case Record::Kind::kLost:
      // Only a pod that ran can miss a generation (admission.h rule 8); a fixed
      // gang without spares restarts in place on the same pods, lost ones included.
      if (c_.spares == 0 && c_.min_nodes == c_.max_nodes) break;
      if (r.what == "leaving") I(r.inst).out = I(r.inst).ran;
      else I(r.inst).lost = I(r.inst).ran;
      break;
    case Record::Kind::kExit:
      OnExit(r);
      break;
  }
}

void Checker::OnForm(const Record& r) {
  // A replaced leader whose round has no pod that ran before cannot know the
  // count (membership.h M15 needs a member's hello): the gang starts over.
  bool carried = false;
  for (std::uint32_t key : r.ranks) {
    const auto cur = current_.find(key);
    carried = carried || (cur != current_.end() && insts_[cur->second].ran);
  }
  const bool replaced = last_leader_ && *last_leader_ != r.inst;
  if (replaced) {
    // A replaced leader knows nothing of its predecessor's losses (only the
    // generation and the count come back, in the members' hellos: M15), and
    // continues from what they ran: a generation its predecessor formed
    // without them may be numbered again.
    for (auto& [id, i] : insts_) i.lost = i.out = false;
    if (last_generation_ && r.generation == *last_generation_) {
      gens_.erase(r.generation);
      if (r.generation == 0) last_generation_.reset();
      else last_generation_ = r.generation - 1;
    }
  }
  last_leader_ = r.inst;
  if (!carried && last_generation_) {
    gens_.clear();
    last_generation_.reset();
    last_restarts_ = 0;
  }
  Gen& g = gens_[r.generation];
  if (g.form) Violation("I4", &r, "generation " + std::to_string(r.generation) + " formed twice");
  g.form = r;
  if (last_generation_ && r.generation <= *last_generation_) {
    Violation("I4", &r, "generation after " + std::to_string(*last_generation_));
  }
  if (last_generation_ && r.restarts < last_restarts_) {
    Violation("I4", &r, "restarts fell from " + std::to_string(last_restarts_));
  }
  if (r.restarts > c_.max_restarts) Violation("I4", &r, "restarts beyond --max-restarts");
  // I5: no fault since the generation before the last formed: nothing to count.
  if (last_generation_ && r.restarts > last_restarts_ && faults_ == faults_at_form_.front()) {
    Violation("I5", &r, "a restart counted with no failure (a join or a leave only)");
  }
  if (r.ranks.size() != r.world) Violation("I2", &r, "plan size differs from WORLD_SIZE");
  std::set<std::uint32_t> seen;
  for (std::uint32_t key : r.ranks) {
    if (!seen.insert(key).second) Violation("I1", &r, "pod " + std::to_string(key) + " twice");
    const auto cur = current_.find(key);
    if (cur == current_.end()) {
      Violation("I6", &r, "pod " + std::to_string(key) + " never started");
      continue;
    }
    // What the leader knows: a pod it declared lost or leaving after it ran (a
    // death or a leave still in flight cannot be known yet).
    const Inst& i = insts_[cur->second];
    if (i.out) Violation("I6", &r, "pod " + std::to_string(key) + " leaves, the leader was told");
    if (i.lost) Violation("I6", &r, "pod " + std::to_string(key) + " was declared lost");
  }
  last_generation_ = r.generation;
  last_restarts_ = r.restarts;
  faults_at_form_ = {faults_at_form_.back(), faults_};
}

void Checker::OnGen(const Record& r) {
  Inst& i = I(r.inst);
  i.joining_since.reset();
  i.ran = true;
  if (i.stranger) Violation("I13", &r, "a stranger got a rank");
  if (i.lost) Violation("I7", &r, "a pod declared lost runs again");
  if (i.exited) Violation("I6", &r, "a pod that exited runs");
  Gen& g = gens_[r.generation];
  if (!g.form) {  // a trace without the leader's plans (the soak's): the first pod's numbers
    g.form = r;
    g.form->ranks.clear();
  }
  if (r.world != g.form->world) Violation("I3", &r, "WORLD_SIZE differs from the leader's plan");
  if (r.restarts != g.form->restarts) Violation("I3", &r, "restart count differs from the plan");
  if (r.rank == kSpareRank) return;
  if (r.rank >= r.world) Violation("I2", &r, "rank beyond WORLD_SIZE");
  if (r.rank < g.form->ranks.size() && g.form->ranks[r.rank] != i.pod) {
    Violation("I1", &r, "rank belongs to pod " + std::to_string(g.form->ranks[r.rank]));
  }
  const auto [it, fresh] = g.rank_of.emplace(r.rank, r.inst);
  if (!fresh && it->second != r.inst) {
    Violation("I1", &r, "rank already held by inst " + std::to_string(it->second));
  }
}

void Checker::OnExit(const Record& r) {
  Inst& i = I(r.inst);
  if (i.exited) Violation("I8", &r, "exited twice");
  i.exited = true;
  i.code = r.code;
  i.rdzv_timeout = r.what == "rdzv_timeout";
  i.joining_since.reset();
  if (!ContractCode(r.code)) Violation("I8", &r, "not a code of the contract");
  if (r.code == 137) return;  // killed from outside: no code of its own
  if (i.expect_143 && r.code != 143) {
    Violation("I11", &r, "SIGTERM before any failure, yet not 143");
  }
  if (i.left && r.code != 143) Violation("I11", &r, "a leaver exits other than 143");
  if (i.term_at && r.t_ms > *i.term_at + c_.grace_ms + c_.slack_ms) {
    Violation("I12", &r, "exited past the grace period after SIGTERM");
  }
}

void Checker::CheckDeadlines(std::int64_t now) {
  for (auto& [id, i] : insts_) {
    if (i.exited || i.faults > 0) continue;  // a frozen or cut-off pod cannot keep time
    if (i.joining_since && now > *i.joining_since + c_.rdzv_timeout_ms + c_.slack_ms) {
      violations_.push_back("I12: inst " + std::to_string(id) + " (pod " + std::to_string(i.pod) +
                            ") waits in a round past --rdzv-timeout (since t=" +
                            std::to_string(*i.joining_since) + ", now t=" + std::to_string(now) +
                            ")");
      i.joining_since.reset();
    }
    if (i.term_at && now > *i.term_at + c_.grace_ms + c_.slack_ms) {
      violations_.push_back("I12: inst " + std::to_string(id) + " (pod " + std::to_string(i.pod) +
                            ") still runs past the grace period after SIGTERM");
      i.term_at.reset();
    }
  }
}

void Checker::Finish(std::int64_t end_ms) {
  CheckDeadlines(end_ms);
  int counted = 0, timeouts = 0;
  bool peer_failed = false, terminated = false;
  for (const auto& [id, i] : insts_) {
    if (!i.exited) {
      violations_.push_back("I8: inst " + std::to_string(id) + " (pod " + std::to_string(i.pod) +
                            ") never exited");
      continue;
    }
    // 137 counts: a worker's own code (README "worker: its code", 128 + SIGKILL), or the
    // agent SIGKILLed from outside, which the Job counts too (and its kill is a fault).
    if (i.stranger) continue;
    if (i.rdzv_timeout) {  // README: below MIN the gang waits up to --rdzv-timeout, then 75
      ++timeouts;
      continue;
    }
    if (Counted(*i.code)) ++counted;
    peer_failed = peer_failed || *i.code == 76;
    terminated = terminated || *i.code == 143;
  }
  if (counted > faults_) {
    violations_.push_back("I9: " + std::to_string(counted) + " counted exits for " +
                          std::to_string(faults_) + " faults that can count");
  }
  if (peer_failed && counted == 0 && timeouts == 0 && kills_ == 0 && cuts_ == 0 && signals_ == 0 &&
      !terminated) {
    violations_.push_back("I10: the gang stopped for a failure (76) with no counted exit");
  }
}

}  // namespace trainlet::invariants
