// trainlet/agent/base/address.h — the one parser for every leader address a
// user or the cluster gives: --master-addr, --rdzv-endpoint, --local-addr,
// MASTER_ADDR, PET_MASTER_ADDR, PET_RDZV_ENDPOINT, their TRAINLET_* forms and
// JobSet's coordinator annotation. Every input goes through ParseHostAddress
// with its PortRule, so one address written in any form ("fd00::10",
// "[fd00::10]", "FD00:0::10") is the same value everywhere after it: the
// rendezvous dials it, workers get it (MASTER_ADDR bare, JAX_COORDINATOR_ADDRESS
// bracketed), the job id is derived from it. Pure functions, no I/O, no name
// resolution; every error is class config, one line naming `what` and the value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <boost/asio/ip/address.hpp>

#include "trainlet/exitcodes/status.h"

namespace trainlet::agent {

// Whether a port may follow the host in an input.
enum class PortRule {
  // HOST alone (torchrun's --master-addr, MASTER_ADDR, PET_MASTER_ADDR,
  // --local-addr, JobSet's coordinator): an IPv6 address bare or in brackets;
  // "host:port" and "[v6]:port" are refused (the port has its own setting).
  kNone,
  // HOST[:PORT] (--rdzv-endpoint, PET_RDZV_ENDPOINT, as torch's
  // parse_rendezvous_endpoint): an IPv6 address must be in brackets,
  // "[fd00::1]:29400" (RFC 3986 3.2.2): "fd00::1:2940" could be either.
  kOptional,
};

enum class HostKind { kName, kIPv4, kIPv6 };

struct HostAddress {
  // A DNS name as given (a trailing dot kept: absolute), or an IP address in
  // its canonical text (inet_ntop(3); for IPv6 RFC 5952: lower case, the
  // longest run of zeros compressed). Never in brackets.
  std::string host;
  HostKind kind = HostKind::kName;
  // kOptional: the port when one was given (0 kept: torch's "a free port").
  std::optional<std::uint16_t> port;

  bool is_ip() const { return kind != HostKind::kName; }
};

// Parses one address. Accepted: a DNS name (ValidateDnsName, values.h), a
// dotted-quad IPv4 address, an IPv6 address (bare only under kNone), any of
// them in brackets, and under kOptional a ":PORT" (0-65535) after the host or
// the closing bracket. Refused (class config, naming the form and the fix):
// empty; an unexpanded Kubernetes "$(VAR)"; a zone id ("fe80::1%eth0": it
// names an interface of one host, which other pods cannot use); a port under
// kNone; an unbracketed IPv6 address under kOptional; something that looks like
// an IPv4 address but is not one ("10.0.0", "10.0.0.256": resolvers read those
// as inet_aton(3) numbers, RFC 1123 2.1 says a host name never has that form);
// an unclosed or misplaced bracket; a host that is neither name nor address.
[[nodiscard]] exitcodes::Result<HostAddress> ParseHostAddress(const std::string& what,
                                                              const std::string& value,
                                                              PortRule rule);

// True when `host` (bare, as HostAddress::host) is an IPv4 or IPv6 address.
bool IsIpAddress(const std::string& host);

// "host:port", with an IPv6 address in brackets ("[fd00::1]:1234"): the form
// HOST:PORT settings such as JAX_COORDINATOR_ADDRESS need (RFC 3986 3.2.2).
std::string JoinHostPort(const std::string& host, std::uint16_t port);

// "HOST", "HOST:PORT", "[v6]:PORT", "[v6]": HOST and PORT (default_port when
// absent), by ParseHostAddress (address.h) with PortRule::kOptional: HOST is a
// DNS name or an IP address in canonical form, never bracketed. PORT 0 is kept
// (torch's parse_rendezvous_endpoint takes it: a free port); the caller refuses
// it where other pods would have to know the port. Refused, as torch refuses
// them: a port above 65535, an empty port ("host:"), more than one ':' outside
// brackets ("a:b:c"; an IPv6 address is written "[fd00::1]:PORT", RFC 3986
// 3.2.2); and what ParseHostAddress refuses (zone ids, bad names).
struct Endpoint {
  std::string host;
  std::uint16_t port = 0;
  bool port_given = false;  // PORT was written (else default_port)
};
[[nodiscard]] exitcodes::Result<Endpoint> ParseEndpoint(const std::string& what,
                                                        const std::string& value,
                                                        std::uint16_t default_port);

// A peer's address as logs and per-address limits name it: an IPv4 peer of a
// dual-stack socket (IPv4-mapped, "::ffff:10.0.0.7", RFC 4291 2.5.5.2) as its
// IPv4 address "10.0.0.7", so a peer has one name whichever socket took it.
std::string PeerAddressText(const boost::asio::ip::address& address);

}  // namespace trainlet::agent
