// ParseHostAddress (address.h): every leader address input, one parser. The
// table is the contract: what each form gives under each PortRule, and the
// one-line refusal (class config) naming the form and the fix.
#include "trainlet/agent/base/address.h"

#include <gtest/gtest.h>

namespace trainlet::agent {
namespace {

constexpr PortRule kNone = PortRule::kNone;
constexpr PortRule kOpt = PortRule::kOptional;

struct Ok {
  const char* value;
  PortRule rule;
  const char* host;
  HostKind kind;
  int port;  // -1: none given
};

TEST(ParseHostAddress, AcceptedForms) {
  const Ok rows[] = {
      // Names, as given (a trailing dot kept: absolute).
      {"trainer-0.trainer", kNone, "trainer-0.trainer", HostKind::kName, -1},
      {"trainer-0.trainer.ns.svc.cluster.local.", kNone,
       "trainer-0.trainer.ns.svc.cluster.local.", HostKind::kName, -1},
      {"leader.svc:1234", kOpt, "leader.svc", HostKind::kName, 1234},
      {"localhost", kOpt, "localhost", HostKind::kName, -1},
      // IPv4.
      {"10.0.0.10", kNone, "10.0.0.10", HostKind::kIPv4, -1},
      {"10.0.0.10:29400", kOpt, "10.0.0.10", HostKind::kIPv4, 29400},
      {"[10.0.0.10]:29400", kOpt, "10.0.0.10", HostKind::kIPv4, 29400},
      // IPv6 where no port may follow: bare or in brackets, one canonical text
      // (RFC 5952) whichever way it was written.
      {"fd00::10", kNone, "fd00::10", HostKind::kIPv6, -1},
      {"[fd00::10]", kNone, "fd00::10", HostKind::kIPv6, -1},
      {"FD00:0:0::10", kNone, "fd00::10", HostKind::kIPv6, -1},
      {"[FD00:0000::0010]", kNone, "fd00::10", HostKind::kIPv6, -1},
      {"::1", kNone, "::1", HostKind::kIPv6, -1},
      // A v4-mapped address is the IPv4 address it maps.
      {"::ffff:10.0.0.10", kNone, "10.0.0.10", HostKind::kIPv4, -1},
      // Endpoint forms: IPv6 in brackets, the port after them.
      {"[fd00::10]:29400", kOpt, "fd00::10", HostKind::kIPv6, 29400},
      {"[fd00::10]", kOpt, "fd00::10", HostKind::kIPv6, -1},
      {"[::1]:0", kOpt, "::1", HostKind::kIPv6, 0},
  };
  for (const Ok& r : rows) {
    auto a = ParseHostAddress("--x", r.value, r.rule);
    ASSERT_TRUE(a.ok()) << r.value << ": " << a.status().message();
    EXPECT_EQ(a->host, r.host) << r.value;
    EXPECT_EQ(a->kind, r.kind) << r.value;
    EXPECT_EQ(a->port ? int(*a->port) : -1, r.port) << r.value;
  }
}

struct Bad {
  const char* value;
  PortRule rule;
  const char* message;  // a part of the one-line refusal
};

TEST(ParseHostAddress, RefusedFormsNameTheFix) {
  const Bad rows[] = {
      {"", kNone, "--x='' is empty"},
      {"$(LEADER)", kNone, "unexpanded Kubernetes $(VAR) reference"},
      {"a b", kNone, "is not a host name or address"},
      // A port where none may follow: the port has its own setting.
      {"10.0.0.10:29500", kNone, "no port may follow the host here"},
      {"[fd00::10]:29500", kNone, "no port may follow the host here"},
      {"trainer-0.trainer:29500", kNone, "no port may follow the host here"},
      // An unbracketed IPv6 address in an endpoint: ambiguous.
      {"fd00::1:2940", kOpt, "an IPv6 address goes in brackets: [fd00::1:2940]:PORT"},
      {"a:b:c", kOpt, "it has more than one ':'"},
      // Zone ids: an interface of one host.
      {"fe80::1%eth0", kNone, "the zone id '%eth0' names a network interface of one host"},
      {"[fe80::1%eth0]", kNone, "the zone id '%eth0'"},
      {"[fe80::1%25eth0]:29400", kOpt, "the zone id '%25eth0'"},
      // Brackets.
      {"[fd00::1", kNone, "'[' without ']'"},
      {"[::1]x", kOpt, "'x' follows ']'"},
      {"[]", kNone, "has no host"},
      {"[fd00::zz]", kNone, "'fd00::zz' is not an IPv6 address"},
      {"fd00::zz", kNone, "'fd00::zz' is not an IPv6 address"},
      // Numbers that are no IPv4 address.
      {"10.0.0", kNone, "looks like an IPv4 address but is not one"},
      {"10.0.0.256", kNone, "looks like an IPv4 address but is not one"},
      {"010.0.0.1", kNone, "looks like an IPv4 address but is not one"},
      // Names.
      {"bad_name.svc", kNone, "is not a DNS label"},
      {"-x.svc", kNone, "is not a DNS label"},
      // Ports.
      {"h:", kOpt, "the port after ':' is empty"},
      {"[::1]:", kOpt, "the port after ':' is empty"},
      {"h:65536", kOpt, "'65536' is not a port (0-65535"},
      {"h:x", kOpt, "'x' is not a port"},
      {":1", kOpt, "has no host"},
  };
  for (const Bad& r : rows) {
    auto a = ParseHostAddress("--x", r.value, r.rule);
    ASSERT_FALSE(a.ok()) << r.value << " gave " << a->host;
    EXPECT_EQ(a.status().failure_class(), exitcodes::FailureClass::kConfig) << r.value;
    EXPECT_NE(a.status().message().find(r.message), std::string::npos)
        << r.value << ": " << a.status().message();
    EXPECT_EQ(a.status().message().find('\n'), std::string::npos) << r.value;
  }
}

TEST(ParseHostAddress, JoinHostPortBracketsIPv6Only) {
  EXPECT_EQ(JoinHostPort("fd00::10", 1234), "[fd00::10]:1234");
  EXPECT_EQ(JoinHostPort("10.0.0.10", 1234), "10.0.0.10:1234");
  EXPECT_EQ(JoinHostPort("trainer-0.trainer", 1234), "trainer-0.trainer:1234");
  EXPECT_TRUE(IsIpAddress("fd00::10"));
  EXPECT_TRUE(IsIpAddress("10.0.0.10"));
  EXPECT_FALSE(IsIpAddress("[fd00::10]"));
  EXPECT_FALSE(IsIpAddress("trainer-0"));
  EXPECT_FALSE(IsIpAddress("fe80::1%eth0"));
}

}  // namespace
}  // namespace trainlet::agent
