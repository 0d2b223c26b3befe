#include "trainlet/agent/base/address.h"

#include <algorithm>

#include <boost/asio/ip/address.hpp>

#include "trainlet/agent/base/values.h"

namespace trainlet::agent {

using exitcodes::Result;
using exitcodes::Status;

namespace {

std::string Quote(const std::string& v) { return "'" + v + "'"; }

// The host and the port text as written, brackets taken off.
struct Split {
  std::string host;
  std::optional<std::string> port;
};

Status NoPortHere(const std::string& said) {
  return Status::Config(said + ": no port may follow the host here (it has its own setting: "
                        "--master-port / MASTER_PORT for the trainers' store, --rdzv-port for "
                        "the rendezvous); give the host alone");
}

Result<Split> SplitBracketed(const std::string& said, const std::string& value, PortRule rule) {
  const auto close = value.find(']');
  if (close == std::string::npos) return Status::Config(said + ": '[' without ']'");
  Split s{value.substr(1, close - 1), std::nullopt};
  const std::string after = value.substr(close + 1);
  if (after.empty()) return s;
  if (after.front() != ':') {
    return Status::Config(said + " is not [HOST] or [HOST]:PORT: " + Quote(after) +
                          " follows ']'");
  }
  if (rule == PortRule::kNone) return NoPortHere(said);
  s.port = after.substr(1);
  return s;
}

Result<Split> SplitPlain(const std::string& said, const std::string& value, PortRule rule) {
  const auto colons = std::count(value.begin(), value.end(), ':');
  if (colons == 0) return Split{value, std::nullopt};
  boost::system::error_code ec;
  const auto v6 = boost::asio::ip::make_address_v6(value, ec);
  if (rule == PortRule::kNone) {
    if (!ec || value.find('%') != std::string::npos) return Split{value, std::nullopt};
    if (colons == 1) return NoPortHere(said);
    return Status::Config(said + " is not a host name or address: " + Quote(value) +
                          " is not an IPv6 address");
  }
  if (colons > 1) {
    const std::string example = ec ? std::string("fd00::1") : v6.to_string();
    return Status::Config(said + " is not HOST[:PORT]: it has more than one ':' (an IPv6 "
                          "address goes in brackets: [" + example + "]:PORT, RFC 3986 3.2.2)");
  }
  const auto colon = value.find(':');
  return Split{value.substr(0, colon), value.substr(colon + 1)};
}

// "10.0.0", "1.2.3.4.5", "10.0.0.256": digits and dots only, yet no IPv4
// address (inet_aton(3) would read some of them as numbers).
bool LooksNumeric(std::string h) {
  if (!h.empty() && h.back() == '.') h.pop_back();
  return !h.empty() && h.find_first_not_of("0123456789.") == std::string::npos;
}

Result<HostAddress> ClassifyHost(const std::string& what, const std::string& said,
                                 const std::string& host) {
  if (auto pct = host.find('%'); pct != std::string::npos) {
    return Status::Config(said + ": the zone id " + Quote(host.substr(pct)) +
                          " names a network interface of one host, which other pods cannot "
                          "use: give the leader's routable (not link-local) address or its name");
  }
  HostAddress out;
  boost::system::error_code ec;
  auto a = boost::asio::ip::make_address(host, ec);
  if (!ec && a.is_v6() && a.to_v6().is_v4_mapped()) {
    a = boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, a.to_v6());
  }
  if (!ec) {
    out.host = a.to_string();
    out.kind = a.is_v6() ? HostKind::kIPv6 : HostKind::kIPv4;
    return out;
  }
  if (host.find(':') != std::string::npos) {
    return Status::Config(said + ": " + Quote(host) + " is not an IPv6 address");
  }
  if (LooksNumeric(host)) {
    return Status::Config(said + ": " + Quote(host) + " looks like an IPv4 address but is not "
                          "one (four decimal numbers 0-255, no leading zeros; RFC 1123 2.1: a "
                          "host name never has this form)");
  }
  if (auto s = ValidateDnsName(what, host); !s.ok()) return s;
  out.host = host;
  return out;
}

}  // namespace

Result<HostAddress> ParseHostAddress(const std::string& what, const std::string& value,
                                     PortRule rule) {
  const std::string said = what + "=" + Quote(value);
  if (value.empty()) return Status::Config(said + " is empty: give a host name or an IP address");
  if (value.find("$(") != std::string::npos) {
    return Status::Config(said + " is not a host name or address: it is an unexpanded "
                          "Kubernetes $(VAR) reference (the kubelet expands only variables "
                          "defined earlier in the env list)");
  }
  if (value.find_first_of(" \t\r\n/") != std::string::npos) {
    return Status::Config(said + " is not a host name or address");
  }
  auto split = value.front() == '[' ? SplitBracketed(said, value, rule)
                                    : SplitPlain(said, value, rule);
  if (!split.ok()) return split.status();
  if (split->host.empty()) return Status::Config(said + " has no host");
  auto out = ClassifyHost(what, said, split->host);
  if (!out.ok() || !split->port) return out;
  if (split->port->empty()) return Status::Config(said + ": the port after ':' is empty");
  auto n = ParseCount(what, *split->port, 65535);
  if (!n.ok()) {
    return Status::Config(said + ": " + Quote(*split->port) +
                          " is not a port (0-65535, 0: a free one)");
  }
  out->port = static_cast<std::uint16_t>(*n);
  return out;
}

Result<Endpoint> ParseEndpoint(const std::string& what, const std::string& value,
                               std::uint16_t default_port) {
  auto a = ParseHostAddress(what, value, PortRule::kOptional);
  if (!a.ok()) return a.status();
  return Endpoint{.host = a->host, .port = a->port.value_or(default_port),
                  .port_given = a->port.has_value()};
}

bool IsIpAddress(const std::string& host) {
  boost::system::error_code ec;
  boost::asio::ip::make_address(host, ec);
  return !ec && host.find('%') == std::string::npos;
}

std::string PeerAddressText(const boost::asio::ip::address& address) {
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, address.to_v6())
        .to_string();
  }
  return address.to_string();
}

std::string JoinHostPort(const std::string& host, std::uint16_t port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace trainlet::agent
