#include "pod/roster_membership.h"

#include <utility>

namespace trainlet::agent {

void RosterMembership::StartRound(Roster& roster, Roster::TimePoint now,
                                  const FormationConfig& config, std::function<void()> reconsider) {
  Cancel();
  roster_ = &roster;
  roster_->StartRound(now, config);
  reconsider_ = std::move(reconsider);
}

void RosterMembership::Cancel() {
  timer_.cancel();
  if (roster_) roster_->EndRound();
}

// As a timer re-armed at each waiting decision: the latest word stands.
void RosterMembership::Arm() {
  const std::optional<Roster::TimePoint> at = roster_->ReconsiderAt();
  if (!at) {
    timer_.cancel();
    return;
  }
  timer_.expires_at(*at);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec && reconsider_) reconsider_();
  });
}

std::optional<std::map<std::uint32_t, std::uint32_t>> RosterMembership::Plan(
    const std::vector<std::uint32_t>& joined) {
  auto ranks = roster_->Plan(joined, Roster::Clock::now());
  Arm();
  return ranks;
}

bool RosterMembership::AssignFirst(std::uint32_t index) { return roster_->NewlyActive(index); }

std::optional<rendezvous::wire::Replaced> RosterMembership::ReplacedOf(std::uint32_t index) const {
  return roster_->LastReplacementOf(index);
}

std::optional<std::uint32_t> RosterMembership::LeftOf(std::uint32_t index) const {
  return roster_->LeftIn(index);
}

std::optional<std::uint32_t> RosterMembership::LostSpareOf(std::uint32_t index) const {
  return roster_->LostSpareIn(index);
}

void RosterMembership::OnLeave(std::uint32_t index) { roster_->MarkLeaving(index); }

void RosterMembership::OnAdmitted(std::uint32_t index, const rendezvous::wire::Hello& hello) {
  roster_->OnAdmitted(index, hello);
}

}  // namespace trainlet::agent
