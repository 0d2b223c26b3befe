// trainlet/agent/pod/roster.h — the leader's roster across generations: which
// pods it knows, their last node ranks, who was lost or must leave, and every
// replacement. A pure value over the pure policies: formation_policy.h says
// when a round forms (torch's last call), membership_policy.h who is active
// on which node rank. No sockets, no timers, no clock reads: every time comes
// in as an argument (steady_clock time points, the caller's clock), and the
// roster says when it wants to be asked again (ReconsiderAt). Not
// thread-safe; copyable.
//
// Ownership: the leader's membership machine holds the one roster
// (membership.h: Membership::roster(); GangPolicy::roster() for the wiring)
// and applies its own word to it (lost, leaving, joined). The pod's wiring
// (src/pod/roster_membership.h) answers the rendezvous leader's
// LeaderMembership with it and owns the timer that calls Plan again at
// ReconsiderAt. A simulator may hold a Roster of its own the same way.
//
// A round, step by step:
//   StartRound(now, config)           the round begins (the last call forgotten)
//   OnAdmitted(key, hello)            each pod admitted, before Plan sees it
//   Plan(joined, now) -> nullopt      wait: ask again at a join, or at ReconsiderAt()
//   Plan(joined, now) -> ranks        the round forms; NewlyActive() for its writes
//   Adopt(generation)                 the round's assignment came: the roster is the plan
// and while the generation runs: AddJoined, MarkLost, MarkLeaving,
// PlannedReplacement (the Stop's replacement).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "trainlet/agent/base/metrics.h"
#include "trainlet/agent/pod/formation_policy.h"
#include "trainlet/agent/pod/membership_policy.h"
#include "trainlet/rendezvous/wire.h"

namespace trainlet::agent {

class Roster {
 public:
  using Clock = std::chrono::steady_clock;
  using TimePoint = Clock::time_point;
  // Node rank by pod key (the pod's index), as LeaderMembership::Plan answers.
  using Ranks = std::map<std::uint32_t, std::uint32_t>;

  // The pods the next round waits for: every pod of the roster not lost and
  // not leaving; empty (all indices) before the first generation.
  std::set<std::uint32_t> Expected() const;

  // A rendezvous round starts at `now` (the round's start: its deadline is
  // `now + config.timeout`) under `config`: the last call is forgotten and
  // ReconsiderAt() is nullopt until a Plan waits. Any earlier round is over.
  void StartRound(TimePoint now, const FormationConfig& config);

  // The round with `joined` (pod keys, any order), asked at `now` (never
  // before the round's start; the caller's clock, monotonic across calls):
  // whether it forms now (DecideFormation: the gang whole, every pod still
  // alive back, or the last call over at `now`), then their last node ranks
  // and those not in the round (lost, leaving, gone while the gang restarted)
  // through PlanGeneration. Returns node rank by key, or nullopt to wait on.
  // A wait sets ReconsiderAt() to when the decision may change without a
  // join (the last call's end, the form-before-deadline point, or the
  // deadline); a round that forms, or gives up (below MIN at the deadline:
  // the caller's rendezvous deadline reports it), clears it. The plan formed
  // is kept for NewlyActive and Adopt.
  std::optional<Ranks> Plan(const std::vector<std::uint32_t>& joined, TimePoint now);

  // When the round must be asked again (Plan with the same pods) if no pod
  // joins before: the time the last waiting decision named, in the caller's
  // clock. nullopt: nothing to reconsider (no round started, no wait yet, or
  // the round formed or gave up). Each Plan that waits moves it (the latest
  // word stands, as a timer re-armed).
  std::optional<TimePoint> ReconsiderAt() const { return reconsider_at_; }

  // The round ended without adopting (it failed, the pod stops): no
  // reconsideration is due. The roster itself is unchanged.
  void EndRound() { reconsider_at_.reset(); }

  // Pod `key` was admitted with `hello` (LeaderMembership::OnAdmitted): the
  // node rank it says it held (membership.h M16), used while the roster
  // knows no generation (a replaced leader's first round).
  void OnAdmitted(std::uint32_t key, const rendezvous::wire::Hello& hello);

  // Generation `generation` formed as last planned: the roster is the plan;
  // who replaced whom is recorded (replacements()) and logged. No plan formed
  // since the last Adopt: nothing changes. Ends the round (EndRound).
  void Adopt(std::uint32_t generation);

  // Pod `key` was admitted while a generation runs (LeaderOptions::admit_late):
  // the next round counts it alive (it waits for it, as for the survivors).
  // Whether it waits as a spare now is the membership machine's word, kept
  // there alone (membership.h M13). A key lost or leaving before (a recreated
  // pod) starts over, with no node rank; one counted alive keeps its node
  // rank (it rejoined early, while the generation ended).
  void AddJoined(std::uint32_t key);
  // Pod `key` was lost (silent, or its connection closed); unknown keys are
  // ignored. `waiting_spare`: it waited as a spare (the membership machine's
  // word, MembershipActions::lost_spares): LostSpareIn records it.
  void MarkLost(std::uint32_t key, bool waiting_spare = false);
  // Pod `key` failed with a class that points at its node, or left: it leaves.
  void MarkLeaving(std::uint32_t key);

  // The pods the roster counts alive without a node rank: right after Adopt,
  // the plan's waiting spares (the membership machine takes them from there
  // at member_event::Formed); later also the pods admitted since (AddJoined).
  std::set<std::uint32_t> Unranked() const;
  // Every replacement so far, oldest first.
  const std::vector<Replacement>& replacements() const { return replacements_; }
  // The latest replacement of pod `key` (LeaderMembership::ReplacedOf); nullopt: none.
  std::optional<rendezvous::wire::Replaced> LastReplacementOf(std::uint32_t key) const;
  // The generation that goes on without pod `key`, declared lost while
  // active (LeaderMembership::LeftOf; admission.h rule 8 refuses it for
  // good): the next one while that is still to form (the restart's or the
  // resize's round), else the latest adopted without it (elastic: the gang
  // shrank); nullopt: none since it was last active or admitted again.
  std::optional<std::uint32_t> LeftIn(std::uint32_t key) const;
  // Hot spares: the generation adopted last when pod `key`, waiting as a
  // spare, was declared lost (LeaderMembership::LostSpareOf); nullopt: none
  // since it was last admitted (AddJoined, or a plan that counts it).
  std::optional<std::uint32_t> LostSpareIn(std::uint32_t key) const;

  // Whether the round being formed (the last Plan that formed) makes pod
  // `key` active although the generation adopted last did not: a spare taking
  // a node rank, a pod that joined, every pod of the first generation. Their
  // assignments are written first (LeaderMembership::AssignFirst): their
  // workers start from nothing.
  bool NewlyActive(std::uint32_t key) const;

  // The waiting spare the next generation would give `key`'s node rank if
  // every other pod the roster counts alive came back (PlanGeneration over the
  // roster as it stands: call after MarkLost/MarkLeaving of `key`). nullopt:
  // `key` keeps its rank (not lost, not leaving), was not active, or no spare
  // waits. The Stop names it (wire::Stop::replacement).
  std::optional<std::uint32_t> PlannedReplacement(std::uint32_t key) const;

 private:
  bool Forms(const std::vector<std::uint32_t>& joined, TimePoint now);
  // Adopt: the pods declared lost while active that generation `generation`
  // formed without (no spare took their node rank) go to left_.
  void RecordLeft(std::uint32_t generation);
  std::map<std::uint32_t, MemberState> pods_;  // by key: the last generation's
  std::optional<GenerationPlan> planned_;      // the round being formed
  std::vector<Replacement> replacements_;
  std::map<std::uint32_t, std::uint32_t> left_;  // LeftIn: key -> generation
  std::map<std::uint32_t, std::uint32_t> lost_spares_;  // LostSpareIn: key -> generation
  std::uint32_t adopted_ = 0;  // the generation adopted last
  std::map<std::uint32_t, std::uint32_t> held_;  // OnAdmitted: key -> node rank held (M16)
  // The round being formed: its formation settings, start, when MIN pods were
  // in, and when its last wait asked to be decided again.
  FormationConfig formation_{};
  TimePoint round_started_{};
  std::optional<TimePoint> min_reached_at_;
  std::optional<TimePoint> reconsider_at_;
};

}  // namespace trainlet::agent
