// The control channel's heartbeat bookkeeping (src/channel_core.h), with
// injected times: echo, round trip, silence, step rate, pacing.
#include "../src/channel_core.h"

#include <gtest/gtest.h>

namespace trainlet::rendezvous {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const Clock::time_point kT0 = Clock::time_point{} + 1000s;

wire::Heartbeat Hb(std::uint64_t sent_us, std::uint64_t echo_us = 0, std::uint32_t held_us = 0) {
  wire::Heartbeat hb;
  hb.sent_us = sent_us;
  hb.echo_us = echo_us;
  hb.echo_held_us = held_us;
  return hb;
}

TEST(ChannelPeerTest, EchoesThePeersClockWithHowLongItWasHeld) {
  ChannelPeer peer(kT0);
  EXPECT_EQ(peer.Make(kT0).echo_us, 0u) << "nothing to echo yet";
  EXPECT_EQ(peer.Make(kT0).sent_us, ChannelPeer::Micros(kT0));
  peer.OnHeartbeat(Hb(777), kT0);
  wire::Heartbeat hb = peer.Make(kT0 + 250ms);
  EXPECT_EQ(hb.echo_us, 777u);
  EXPECT_EQ(hb.echo_held_us, 250'000u);
  EXPECT_EQ(hb.sent_us, ChannelPeer::Micros(kT0 + 250ms));
}

TEST(ChannelPeerTest, TheRoundTripLeavesOutThePeersHold) {
  ChannelPeer a(kT0), b(kT0);
  wire::Heartbeat from_a = a.Make(kT0);  // a -> b takes 10 ms
  b.OnHeartbeat(from_a, kT0 + 10ms);
  wire::Heartbeat from_b = b.Make(kT0 + 310ms);  // b holds it 300 ms, b -> a 20 ms
  a.OnHeartbeat(from_b, kT0 + 330ms);
  ASSERT_TRUE(a.rtt_seconds());
  EXPECT_NEAR(*a.rtt_seconds(), 0.030, 1e-9);
  EXPECT_FALSE(b.rtt_seconds()) << "a had nothing to echo";
}

TEST(ChannelPeerTest, AnEchoFromTheFutureOrWithAnAbsurdHoldIsIgnored) {
  ChannelPeer a(kT0);
  a.OnHeartbeat(Hb(1, ChannelPeer::Micros(kT0 + 1s)), kT0);
  EXPECT_FALSE(a.rtt_seconds());
  a.OnHeartbeat(Hb(1, ChannelPeer::Micros(kT0 - 1ms), 5000), kT0);
  EXPECT_FALSE(a.rtt_seconds());
}

TEST(ChannelPeerTest, KeepsTheStepRateTheMemberReports) {
  ChannelPeer a(kT0);
  wire::Heartbeat hb = Hb(1);
  hb.step_rate_milli = 2500;
  hb.slowest_rank = 7;
  a.OnHeartbeat(hb, kT0);
  EXPECT_EQ(a.step_rate_milli(), 2500u);
  EXPECT_EQ(a.slowest_rank(), 7u);
}

TEST(ChannelPeerTest, SilentOnlyPastIntervalTimesMisses) {
  ChannelPeer a(kT0);
  EXPECT_FALSE(a.Silent(kT0 + 2400ms, 800ms, 3));
  EXPECT_TRUE(a.Silent(kT0 + 2401ms, 800ms, 3));
  a.Heard(kT0 + 2000ms);
  EXPECT_FALSE(a.Silent(kT0 + 4000ms, 800ms, 3));
  EXPECT_EQ(a.last_rx(), kT0 + 2000ms);
}

TEST(ChannelPacerTest, DueOncePerIntervalAndRemembersTheLongestGap) {
  ChannelPacer p;
  EXPECT_EQ(p.Silence(kT0), Clock::duration{}) << "nothing sent yet";
  EXPECT_TRUE(p.Due(kT0, 800ms));
  EXPECT_FALSE(p.Due(kT0 + 799ms, 800ms));
  EXPECT_TRUE(p.Due(kT0 + 800ms, 800ms));
  EXPECT_TRUE(p.Due(kT0 + 3800ms, 800ms));  // a 3 s stall
  EXPECT_TRUE(p.Due(kT0 + 4600ms, 800ms));
  EXPECT_EQ(p.Silence(kT0 + 4700ms), Clock::duration(3000ms));
  EXPECT_EQ(p.Silence(kT0 + 9000ms), Clock::duration(4400ms)) << "the gap still open counts";
}

}  // namespace
}  // namespace trainlet::rendezvous
