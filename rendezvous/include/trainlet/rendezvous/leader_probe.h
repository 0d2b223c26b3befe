// trainlet/rendezvous/leader_probe.h — does another pod act as this gang's leader?
//
// Two pods launched as index 0 (both with --node-rank=0 and the leader's name)
// both listen and each waits for the other's index until --rdzv-timeout. The
// leader therefore takes the addresses of the name its members dial (from the
// name check's lookups, name_check.h: one DNS query serves both; an IP literal
// itself, every `interval`) and, for every address that is not its own
// (IsOwnAddress), says hello there as index 0 with its own
// job, attempt and launch configuration. Another trainlet leader of the same
// job and attempt refuses that for good (Reject, not retriable: leader.h) and
// stops itself; this probe then reports the clash. Addresses of a stale pod
// (another attempt or job: a retriable refusal), of no trainlet at all, or
// that do not answer, are no clash: the probe tries again every `interval`
// (DNS lags: the name check, name_check.h, waits for it on purpose).
//
// Thread rules: create, use and destroy on the executor's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/address.hpp>

#include "trainlet/exitcodes/status.h"
#include "trainlet/rendezvous/tunables.h"
#include "trainlet/rendezvous/wire.h"

namespace trainlet::rendezvous {

struct LeaderProbeOptions {
  std::string name;      // the leader's name (or IP literal) as the members dial it
  std::uint16_t port = tunables::kRendezvousPort;  // the rendezvous port
  wire::Hello hello;     // this leader's own hello (index 0), leader_id set
  std::string token;     // shared token (auth.h); empty: none
  std::chrono::milliseconds interval = tunables::kLeaderCheckInterval;  // between rounds (IP literal)
  std::chrono::milliseconds timeout = tunables::kConnectTimeout;     // per address: connect + reply
  // This pod's addresses; unset: every interface's (LocalAddresses()).
  std::function<std::vector<boost::asio::ip::address>()> local_addresses;
};

class LeaderProbe : public std::enable_shared_from_this<LeaderProbe> {
 public:
  // Starts probing. `clash` runs at most once, on the executor, with one line
  // naming the other leader's address and its refusal (which names both pods).
  // Never after Cancel(). An IP literal name is probed every `interval`; a DNS
  // name waits for Probe(). Does not fail.
  static std::shared_ptr<LeaderProbe> Start(boost::asio::any_io_executor executor,
                                            LeaderProbeOptions options,
                                            std::function<void(const std::string&)> clash);
  ~LeaderProbe();
  // Probes the addresses of one lookup of the name that are not this pod's;
  // ignored while a round is under way.
  void Probe(const std::vector<boost::asio::ip::address>& addresses);
  void Cancel();

 private:
  struct Impl;
  LeaderProbe() = default;
  void Round();
  void Next();
  void Ask(const boost::asio::ip::address& address);
  void Read();
  void Later();
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainlet::rendezvous
