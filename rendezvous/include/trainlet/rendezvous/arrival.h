// trainlet/rendezvous/arrival.h — who leads a gang whose pods have no index.
//
// Outside Kubernetes nothing numbers the pods (no Job completion index, no
// JobSet, no --node-rank): torchrun's c10d backend then lets the process on
// the endpoint's host serve the rendezvous and ranks the others as they come
// (torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py,
// _create_tcp_store: is_host from utils.py _matches_machine_hostname; when
// that bind fails, as with several agents on one host, it "falls back" to a
// client). trainlet does the same: the agent whose own address is the
// endpoint's host binds the rendezvous port and leads (node rank 0); if the
// port is taken (another agent of the host bound it first) or the host is
// not its own, it joins as a member and the leader numbers it (admission.h).
// Blocking (a name lookup, a bind): called once at start-up, before the event
// loop. Thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <boost/asio/ip/address.hpp>

namespace trainlet::rendezvous {

// Whether `host` names this machine, as torchrun's _matches_machine_hostname
// decides: "localhost", this machine's `hostname`, or an address (given, or
// one `resolve` returns for a name) that IsOwnAddress (name_check.h) accepts:
// loopback or one of `ours`.
bool IsOwnHost(const std::string& host, const std::string& hostname,
               const std::vector<boost::asio::ip::address>& ours,
               const std::function<std::vector<boost::asio::ip::address>(const std::string&)>&
                   resolve);

struct EndpointClaim {
  bool lead = false;  // this agent leads: `fd` is bound to the port and listening
  int fd = -1;        // the caller owns it (LeaderOptions::listening_fd); -1 unless lead
  std::string how;    // one phrase for the start line: why this agent leads or joins
};

// Decides the role: IsOwnHost(host) with this machine's hostname, addresses
// (LocalAddresses) and getaddrinfo(3); if so, binds `port` on every interface
// and listens (a backlog for `nnodes` pods, so members that come before the
// event loop runs wait in it). Any failure to bind (EADDRINUSE: another agent
// of this host leads) makes this agent a member, as torchrun's fallback does.
// Never fails.
EndpointClaim ClaimEndpoint(const std::string& host, std::uint16_t port, std::uint32_t nnodes);

}  // namespace trainlet::rendezvous
