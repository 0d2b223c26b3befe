// Private: small address helpers shared by the leader and member sides.
#pragma once

#include <string>

#include <boost/asio/ip/address.hpp>

namespace trainlet::rendezvous {

// The textual form peers should dial: IPv4-mapped IPv6 addresses (what a
// dual-stack socket reports for IPv4 peers) are unwrapped to plain IPv4.
std::string AddressForPeers(const boost::asio::ip::address& address);

}  // namespace trainlet::rendezvous
