// Private: small address helpers shared by the leader and member sides.
#pragma once

#include <string>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace trainlet::rendezvous {

// The textual form peers should dial: IPv4-mapped IPv6 addresses (what a
// dual-stack socket reports for IPv4 peers) are unwrapped to plain IPv4.
std::string AddressForPeers(const boost::asio::ip::address& address);

// TCP keepalive (first probe after 5 s idle, then every 2 s, 3 probes) and
// TCP_USER_TIMEOUT (15 s of unacknowledged data), so a peer whose node vanished
// without a FIN is noticed in seconds, not the kernel's default two hours
// (tcp(7)). Best effort: failures are ignored.
void EnableDeadPeerDetection(boost::asio::ip::tcp::socket& socket);

}  // namespace trainlet::rendezvous
