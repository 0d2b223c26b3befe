// pod/roster.h — the leader's roster across generations: which pods it knows,
// their last node ranks, who was lost or must leave, and every replacement.
// The wiring around FormationPolicy and PlanGeneration (formation_policy.h
// says when a round forms: torch's last call; membership_policy.h says who is
// active on which node rank): each rendezvous round starts with StartRound,
// asks Plan() with the pods that joined (at every join, and when its timer
// says so through `reconsider`), and the round that forms adopts its plan.
// One event-loop thread (the leader's pod); `reconsider` runs on it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "trainlet/agent/base/metrics.h"
#include "trainlet/agent/pod/formation_policy.h"
#include "trainlet/agent/pod/membership_policy.h"
#include "trainlet/rendezvous/leader.h"
#include "trainlet/rendezvous/wire.h"

namespace trainlet::agent {

// The leader's LeaderMembership (rendezvous/leader.h): the one interface its
// rendezvous asks (Plan, AssignFirst, ReplacedOf, LeftOf, OnLeave).
class Roster final : public rendezvous::LeaderMembership {
 public:
  // The pods the next round waits for: every pod of the roster not lost and
  // not leaving; empty (all indices) before the first generation.
  std::set<std::uint32_t> Expected() const;

  using Clock = std::chrono::steady_clock;
  // A rendezvous round starts at `now` under `config`: the last call is
  // forgotten; `reconsider` (Leader::Reconsider) runs on `executor` when the
  // round is due to be decided again without a join.
  void StartRound(boost::asio::any_io_executor executor, Clock::time_point now,
                  const FormationConfig& config, std::function<void()> reconsider);
  // Stops the round's timer (the round formed or failed, the pod stops).
  void Cancel();

  // The round with `joined` (pod keys): whether it forms now (DecideFormation:
  // the gang whole, every pod still alive back, or the last call over), then
  // their last node ranks and those not in the round (lost, leaving, gone
  // while the gang restarted) through PlanGeneration; node rank by key, or
  // nullopt to wait on (the timer reconsiders when the last call ends). The
  // plan is kept for Adopt.
  std::optional<std::map<std::uint32_t, std::uint32_t>> Plan(
      const std::vector<std::uint32_t>& joined) override;
  // LeaderMembership: NewlyActive, LastReplacementOf, LeftIn, LostSpareIn, MarkLeaving.
  bool AssignFirst(std::uint32_t index) override { return NewlyActive(index); }
  std::optional<rendezvous::wire::Replaced> ReplacedOf(std::uint32_t index) const override {
    return LastReplacementOf(index);
  }
  std::optional<std::uint32_t> LeftOf(std::uint32_t index) const override { return LeftIn(index); }
  std::optional<std::uint32_t> LostSpareOf(std::uint32_t index) const override {
    return LostSpareIn(index);
  }
  void OnLeave(std::uint32_t index) override { MarkLeaving(index); }
  // LeaderMembership: the node rank pod `index` says it held (M16), used
  // while the roster knows no generation (a replaced leader's first round).
  void OnAdmitted(std::uint32_t index, const rendezvous::wire::Hello& hello) override;

  // Generation `generation` formed as last planned: the roster is the plan;
  // who replaced whom is logged. No plan: nothing changes.
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
  // Pod `key` failed with a class that points at its node: it leaves.
  void MarkLeaving(std::uint32_t key);

  // The pods the roster counts alive without a node rank: right after Adopt,
  // the plan's waiting spares (the membership machine takes them from there:
  // gang::Assigned::spares); later also the pods admitted since (AddJoined).
  std::set<std::uint32_t> Unranked() const;
  // Every replacement so far, oldest first.
  const std::vector<Replacement>& replacements() const { return replacements_; }
  // The latest replacement of pod `key` (LeaderMembership::ReplacedOf); nullopt: none.
  std::optional<rendezvous::wire::Replaced> LastReplacementOf(std::uint32_t key) const;
  // Elastic: the latest generation adopted without pod `key` after it was
  // declared lost while active (the gang shrank; LeaderMembership::LeftOf);
  // nullopt: none since it was last active.
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
  bool Forms(const std::vector<std::uint32_t>& joined);
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
  // in, and the timer that reconsiders it.
  FormationConfig formation_{};
  Clock::time_point round_started_{};
  std::optional<Clock::time_point> min_reached_at_;
  std::unique_ptr<boost::asio::steady_timer> timer_;
  std::function<void()> reconsider_;
};

}  // namespace trainlet::agent
