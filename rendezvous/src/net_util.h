// Private: small address helpers shared by the leader and member sides.
#pragma once

#include <cstdint>
#include <string>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace trainlet::rendezvous {

// The textual form peers should dial: IPv4-mapped IPv6 addresses (what a
// dual-stack socket reports for IPv4 peers) are unwrapped to plain IPv4.
std::string AddressForPeers(const boost::asio::ip::address& address);

// TCP keepalive (first probe after 5 s idle, then every 2 s, 3 probes) and
// TCP_USER_TIMEOUT (15 s of unacknowledged data), so a peer whose node vanished
// without a FIN is noticed in seconds, not the kernel's default two hours; and
// TCP_THIN_LINEAR_TIMEOUTS, so the heartbeats lost in a link blip shorter than
// the heartbeat timeout are retransmitted at a steady pace, not backed off
// past it (tcp(7)). The heartbeats (tunables.h), not TCP_USER_TIMEOUT, decide
// a loss: it only closes a connection long after. Best effort: failures are
// ignored.
void EnableDeadPeerDetection(boost::asio::ip::tcp::socket& socket);

// Opens `acceptor` dual stack (one socket serves IPv4 as v4-mapped and IPv6
// peers; IPv4 alone where IPv6 is off), with SO_REUSEADDR, and binds it to
// `port` on every interface. Another listener on the port: address_in_use.
boost::system::error_code OpenAndBind(boost::asio::ip::tcp::acceptor& acceptor,
                                      std::uint16_t port);

// Opens, binds and listens `acceptor` on `port` (Leader::Listen); on any error
// the acceptor is left closed.
boost::system::error_code BindAndListen(boost::asio::ip::tcp::acceptor& acceptor,
                                        std::uint16_t port, int backlog);

// The listen backlog for a gang of `nnodes` pods: all of them arriving at once.
int BacklogFor(std::uint32_t nnodes);

}  // namespace trainlet::rendezvous
