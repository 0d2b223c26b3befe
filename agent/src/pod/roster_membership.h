// pod/roster_membership.h — the wiring between the leader's pure Roster
// (trainlet/agent/pod/roster.h) and the rendezvous leader: the
// LeaderMembership the leader asks (rendezvous/leader_options.h), forwarding
// each question to the roster with the clock read here, and the timer that
// asks the round again at the roster's ReconsiderAt (Leader::Reconsider).
// One event-loop thread (the leader's pod): every method, and `reconsider`,
// run on it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "trainlet/agent/pod/roster.h"
#include "trainlet/rendezvous/leader_options.h"

namespace trainlet::agent {

class RosterMembership final : public rendezvous::LeaderMembership {
 public:
  // The timer runs on `executor` (the pod's loop, which must outlive this).
  explicit RosterMembership(boost::asio::any_io_executor executor) : timer_(std::move(executor)) {}

  // A rendezvous round starts at `now` under `config` over `roster` (not
  // owned: it must outlive the round, or Cancel come first): `reconsider`
  // (Leader::Reconsider) runs on the executor when the roster says the round
  // is due to be decided again without a join (Roster::ReconsiderAt).
  void StartRound(Roster& roster, Roster::TimePoint now, const FormationConfig& config,
                  std::function<void()> reconsider);
  // Stops the round's timer (the round formed or failed, the pod stops).
  void Cancel();

  // LeaderMembership, each forwarded to the roster: Plan at Clock::now()
  // (then the timer follows ReconsiderAt), NewlyActive, LastReplacementOf,
  // LeftIn, LostSpareIn, MarkLeaving, OnAdmitted.
  std::optional<std::map<std::uint32_t, std::uint32_t>> Plan(
      const std::vector<std::uint32_t>& joined) override;
  bool AssignFirst(std::uint32_t index) override;
  std::optional<rendezvous::wire::Replaced> ReplacedOf(std::uint32_t index) const override;
  std::optional<std::uint32_t> LeftOf(std::uint32_t index) const override;
  std::optional<std::uint32_t> LostSpareOf(std::uint32_t index) const override;
  void OnLeave(std::uint32_t index) override;
  void OnAdmitted(std::uint32_t index, const rendezvous::wire::Hello& hello) override;

 private:
  // The timer follows the roster's word: armed for ReconsiderAt, else stopped.
  void Arm();
  Roster* roster_ = nullptr;  // the round's roster (StartRound); not owned
  boost::asio::steady_timer timer_;
  std::function<void()> reconsider_;
};

}  // namespace trainlet::agent
