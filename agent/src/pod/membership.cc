#include "trainlet/agent/pod/membership.h"

#include <string>

#include "trainlet/agent/pod/rule_hits.h"

namespace trainlet::agent {

using exitcodes::FailureClass;
using End = MembershipActions::End;

namespace {
std::string Pod(std::uint32_t key) { return "pod " + std::to_string(key); }
}  // namespace

bool RestartableClass(FailureClass c) {
  return c == FailureClass::kWorker || c == FailureClass::kInfra || c == FailureClass::kOom ||
         c == FailureClass::kPeerFailed;
}

bool RestartAllowed(FailureClass c, std::uint32_t restarts, std::uint32_t max_restarts,
                    bool stopped) {
  rule_hits::M(1);
  return !stopped && restarts < max_restarts && RestartableClass(c);  // M1
}

MembershipActions Membership::Decide(MembershipActions a, End end) {
  a.end = end;
  end_ = end;
  a.next_restarts = restarts_ + (end == End::kRestart ? 1 : 0);  // M2
  rule_hits::M(2);
  return a;
}

MembershipActions Membership::OnFailed(const member_event::Failed& f) {
  MembershipActions a;
  if (end_ != End::kNone) {  // M12: collateral of the end decided
    rule_hits::M(12);
    return a;
  }
  settling_ = false;  // the failure decides; the leavers stay marked
  a.subject = f.key;
  const bool spare_waits = spares_.size() > leaving_.size();
  if (f.failure_class == FailureClass::kHardware && f.key != settings_.leader && spare_waits &&
      !f.stopped && restarts_ < settings_.max_restarts && !f.succeeded) {
    a.leaving.push_back(f.key);  // M4: a spare takes its node rank
    roster_.MarkLeaving(f.key);
    a.why = Pod(f.key) + " leaves (its node is at fault); a spare takes its node rank";
    rule_hits::M(4);
    return Decide(std::move(a), End::kRestart);
  }
  if (CanRestart(f.failure_class, f.stopped) && !f.succeeded) {
    rule_hits::M(3);
    return Decide(std::move(a), End::kRestart);  // M3
  }
  rule_hits::M(5);
  return Decide(std::move(a), End::kStop);  // M5
}

MembershipActions Membership::OnLost(const member_event::Lost& l) {
  MembershipActions a;
  if (spares_.erase(l.key) > 0) {  // M6
    rule_hits::M(6);
    if (end_ == End::kNone) {
      a.lost.push_back(l.key);
      a.lost_spares.push_back(l.key);
      roster_.MarkLost(l.key, /*waiting_spare=*/true);
    }
    return a;
  }
  // M14; a leaver closing after its word; a gang that stops plans no next generation.
  if (end_ != End::kNone || leaving_.contains(l.key)) {
    rule_hits::M(14);
    return a;
  }
  a.lost.push_back(l.key);  // M3: never active again; the failure path decides the end
  roster_.MarkLost(l.key);
  return a;
}

MembershipActions Membership::OnLeaving(const member_event::Leaving& l) {
  MembershipActions a;
  a.leaving.push_back(l.key);
  roster_.MarkLeaving(l.key);
  if (spares_.erase(l.key) > 0 || decided()) return a;  // a spare, or the next generation decided
  leaving_.insert(l.key);
  if (!first_leaver_) first_leaver_ = l.key;
  if (!settings_.elastic() && settings_.spares == 0) {  // M10: nothing could go on: no window
    a.subject = l.key;
    a.why = Pod(l.key) + " leaves: a fixed gang without spares stops";
    rule_hits::M(10);
    return Decide(std::move(a), End::kStop);
  }
  if (!settling_) {  // M7
    settling_ = true;
    rule_hits::M(7);
    a.arm_settle = true;
  }
  return a;
}

MembershipActions Membership::DecideLeaves() {
  MembershipActions a;
  if (!settling_ || end_ != End::kNone) return a;
  settling_ = false;
  a.subject = first_leaver_;
  const auto n = static_cast<std::uint32_t>(leaving_.size());
  std::string who;
  for (std::uint32_t k : leaving_) who += (who.empty() ? "pod " : ", ") + std::to_string(k);
  who += n == 1 ? " leaves" : " leave";
  if (spares_.size() >= n) {  // M8
    a.why = who + "; a spare takes each node rank (no restart)";
    rule_hits::M(8);
    return Decide(std::move(a), End::kSwap);
  }
  const std::uint32_t staying = active() - n + static_cast<std::uint32_t>(spares_.size());
  if (settings_.elastic() && staying >= settings_.min_nodes) {  // M9
    a.why = who + "; the gang goes on with " + std::to_string(staying) + " pods (no restart)";
    rule_hits::M(9);
    return Decide(std::move(a), End::kResize);
  }
  a.why = who + "; " + std::to_string(staying) + " would stay, " +
          std::to_string(settings_.min_nodes) + " needed: the gang stops";  // M10
  rule_hits::M(10);
  return Decide(std::move(a), End::kStop);
}

MembershipActions Membership::OnLeaderLeaving() {
  MembershipActions a;
  if (decided()) return a;
  settling_ = false;
  a.subject = settings_.leader;
  if (settings_.elastic() || settings_.spares > 0) {  // M11
    a.why = "the leader (pod " + std::to_string(settings_.leader) +
            ") leaves; the members wait for its replacement (no restart)";
    rule_hits::M(11);
    return Decide(std::move(a), End::kRejoin);
  }
  a.why = "the leader (pod " + std::to_string(settings_.leader) + ") leaves: the gang stops";
  rule_hits::M(10);
  return Decide(std::move(a), End::kStop);  // M10
}

// The roster counts the joiner for the next round either way (Roster::AddJoined).
MembershipActions Membership::OnJoined(const member_event::Joined& j) {
  roster_.AddJoined(j.key);
  MembershipActions a;
  a.subject = j.key;
  if (active() < settings_.max_nodes && j.open && end_ == End::kNone && !settling_) {  // M13
    a.why = Pod(j.key) + " joined: the gang grows";
    rule_hits::M(13);
    return Decide(std::move(a), End::kResize);
  }
  if (!decided()) {
    spares_.insert(j.key);
    a.joins_as_spare = true;
    rule_hits::M(13);
  }
  return a;
}

MembershipActions Membership::On(const MembershipEvent& e) {
  if (const auto* f = std::get_if<member_event::Formed>(&e)) {
    generation_ = f->generation;
    active_ = f->active;
    spares_ = roster_.Unranked();
    restarts_ = f->restarts;  // M15: the assignment's count, a replaced leader's too
    rule_hits::M(15);
    leaving_.clear();
    first_leaver_.reset();
    settling_ = false;
    end_ = End::kNone;
    return {};
  }
  if (const auto* f = std::get_if<member_event::Failed>(&e)) return OnFailed(*f);
  if (const auto* l = std::get_if<member_event::Lost>(&e)) return OnLost(*l);
  if (const auto* l = std::get_if<member_event::Leaving>(&e)) return OnLeaving(*l);
  if (std::holds_alternative<member_event::SettleEnded>(e)) return DecideLeaves();
  if (std::holds_alternative<member_event::LeaderLeaving>(e)) return OnLeaderLeaving();
  if (const auto* j = std::get_if<member_event::Joined>(&e)) return OnJoined(*j);
  return {};
}

}  // namespace trainlet::agent
