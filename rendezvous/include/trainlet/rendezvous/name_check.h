// trainlet/rendezvous/name_check.h — does the leader's own name lead to it?
//
// Members dial the leader by the name its headless Service publishes
// (<job>-0.<subdomain>.<ns>.svc.cluster.local). When that record is missing (the
// Service's selector does not match the pod, the pod's subdomain names another
// Service, or publishNotReadyAddresses is off, so a pod that is not Ready, as a
// leader waiting for its gang is not, has no record), every member times out
// after the whole --rdzv-timeout with no hint. The leader checks the name
// through the cluster DNS (c-ares, never /etc/hosts, where the kubelet writes
// the pod's own FQDN) and says what to fix
// (https://kubernetes.io/docs/concepts/services-networking/dns-pod-service/).
//
// Thread rules: create, use and destroy on the executor's thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/address.hpp>

#include "trainlet/exitcodes/status.h"
#include "trainlet/rendezvous/resolver.h"
#include "trainlet/rendezvous/tunables.h"

namespace trainlet::rendezvous {

struct NameCheckOptions {
  std::string name;          // the leader's name as the members dial it
  ResolverOptions resolver;  // hosts_file is forced off
  // A missing or foreign record is re-checked every `interval` and reported
  // once it has lasted `patience` (records appear a moment after the pod's IP;
  // negative answers are cached for a few seconds).
  std::chrono::milliseconds patience = tunables::kLeaderNameCheckPatience;
  std::chrono::milliseconds interval = tunables::kLeaderCheckInterval;
  // This pod's addresses; unset: every interface's (getifaddrs(3)).
  std::function<std::vector<boost::asio::ip::address>()> local_addresses;
  // Each successful lookup's addresses (the leader probe, leader_probe.h, tries
  // them: one query serves both). Unset: none.
  std::function<void(const std::vector<boost::asio::ip::address>&)> on_resolved;
};

class LeaderNameCheck : public std::enable_shared_from_this<LeaderNameCheck> {
 public:
  // Starts checking. `report` runs at most once, on the executor, with one line:
  // what the name resolves to (or the DNS error) and what to fix. It never runs
  // when the name resolves to one of this pod's addresses, nor after Cancel().
  // An IP literal is not checked. Errors: Resolver::Create's (class infra/config).
  [[nodiscard]] static exitcodes::Result<std::shared_ptr<LeaderNameCheck>> Start(
      boost::asio::any_io_executor executor, NameCheckOptions options,
      std::function<void(const std::string&)> report);
  ~LeaderNameCheck();
  void Cancel();

 private:
  struct Impl;
  LeaderNameCheck() = default;
  void Check();
  std::unique_ptr<Impl> impl_;
};

// Every address of this host's interfaces that are up (getifaddrs(3)).
std::vector<boost::asio::ip::address> LocalAddresses();

// Whether `address` is this pod's own: loopback, or one of `ours` (usually
// LocalAddresses()); an IPv4-mapped IPv6 address counts as its IPv4 address.
// The one own-address test of the name check, the leader probe
// (leader_probe.h) and the choice of leader by address.
bool IsOwnAddress(const boost::asio::ip::address& address,
                  const std::vector<boost::asio::ip::address>& ours);

}  // namespace trainlet::rendezvous
