#include "trainlet/gpu/netif.h"

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

namespace trainlet::gpu {
namespace {

// The pod of NVIDIA/nccl#1837 and NVIDIA/nccl#913: lo, eth0 (routable), a link-local-only veth, docker0.
std::vector<Interface> Pod() {
  return {{"lo", {"127.0.0.1", "::1"}, true, true, true},
          {"eth0", {"10.0.0.11"}, true, false, true},
          {"veth-x", {"fe80::1"}, true, false, false},
          {"docker0", {"172.17.0.1"}, true, false, true},
          {"eth1", {}, false, false, false}};
}

TEST(MatchNcclIfnameTest, NcclSyntax) {
  using V = std::vector<std::string>;
  const std::vector<std::pair<std::string, V>> rows = {
      {"eth", {"eth0"}},                 // prefix; eth1 is down
      {"eth0", {"eth0"}},
      {"=eth0", {"eth0"}},               // exact
      {"=eth", {}},                      // exact: no interface is called "eth"
      {"eth2", {}},
      {"^lo,docker", {"eth0", "veth-x"}},
      {"^=lo", {"eth0", "veth-x", "docker0"}},
      {"eth0:5000,docker", {"eth0", "docker0"}},
  };
  for (const auto& [value, want] : rows) {
    EXPECT_EQ(MatchNcclIfname(value, Pod()), want) << value;
  }
}

TEST(ValidateSocketIfnamesTest, AMissingInterfaceIsNamed) {
  struct Row {
    std::map<std::string, std::string> env;
    bool ok;
    std::string message;
  };
  const std::vector<Row> rows = {
      {{}, true, ""},
      {{{"NCCL_SOCKET_IFNAME", "=eth0"}}, true, ""},
      {{{"NCCL_SOCKET_IFNAME", "^lo,docker"}}, true, ""},
      {{{"NCCL_SOCKET_IFNAME", "eth2"}}, false,
       "NCCL_SOCKET_IFNAME='eth2': no interface matches; interfaces: lo, eth0, veth-x, docker0, eth1"},
      {{{"GLOO_SOCKET_IFNAME", "eth0"}}, true, ""},
      {{{"GLOO_SOCKET_IFNAME", "^lo"}}, false, "GLOO_SOCKET_IFNAME='^lo': Gloo needs concrete"},
      {{{"GLOO_SOCKET_IFNAME", "eth"}}, false, "GLOO_SOCKET_IFNAME='eth': no interface 'eth' is up"},
      {{{"GLOO_SOCKET_IFNAME", "eth1"}}, false, "no interface 'eth1' is up"},
  };
  for (const Row& r : rows) {
    exitcodes::Status s = ValidateSocketIfnames(r.env, Pod());
    ASSERT_EQ(s.ok(), r.ok) << s.message();
    if (!r.ok) {
      EXPECT_EQ(s.failure_class(), exitcodes::FailureClass::kConfig);
      EXPECT_NE(s.message().find(r.message), std::string::npos) << s.message();
    }
  }
}

TEST(ListInterfacesTest, HasLoopback) {
  auto ifs = ListInterfaces();
  ASSERT_TRUE(ifs.ok()) << ifs.status().message();
  bool lo = false;
  for (const auto& i : *ifs) {
    if (i.loopback) {
      lo = true;
      EXPECT_EQ(InterfaceWithAddress("127.0.0.1", *ifs), i.name);
    }
  }
  EXPECT_TRUE(lo);
  // The real interfaces validate a real value.
  EXPECT_TRUE(ValidateSocketIfnames({{"NCCL_SOCKET_IFNAME", "lo"}}, *ifs).ok());
  EXPECT_FALSE(ValidateSocketIfnames({{"NCCL_SOCKET_IFNAME", "nosuchif"}}, *ifs).ok());
}

TEST(LocalAddressTowardTest, RealRoutes) {
  auto a = LocalAddressToward("127.0.0.1");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(*a, "127.0.0.1");
  EXPECT_FALSE(LocalAddressToward("leader.example").ok());
  auto ifs = ListInterfaces();
  ASSERT_TRUE(ifs.ok());
  // Over loopback (a single machine): nothing to export.
  auto env = SocketIfnameEnv({}, "127.0.0.1", 2, [&] { return *ifs; });
  ASSERT_TRUE(env.ok());
  EXPECT_TRUE(env->empty());
}

TEST(SocketIfnameEnvTest, ExportsTheInterfaceThatRoutesToTheLeader) {
  auto ifs = ListInterfaces();
  ASSERT_TRUE(ifs.ok());
  // 192.0.2.1 (TEST-NET-1, RFC 5737) goes out by the default route, if any.
  auto src = LocalAddressToward("192.0.2.1");
  if (!src.ok()) GTEST_SKIP() << "no default route here: " << src.status().message();
  std::string name = InterfaceWithAddress(*src, *ifs);
  ASSERT_FALSE(name.empty()) << *src;
  auto listed = [&] { return *ifs; };
  auto env = SocketIfnameEnv({}, "192.0.2.1", 2, listed);
  ASSERT_TRUE(env.ok()) << env.status().message();
  EXPECT_EQ(*env, (std::map<std::string, std::string>{{"NCCL_SOCKET_IFNAME", name},
                                                      {"GLOO_SOCKET_IFNAME", name}}));
  // A user's value is never overridden (it is validated instead).
  auto user = SocketIfnameEnv({{"NCCL_SOCKET_IFNAME", "x"}}, "192.0.2.1", 2, listed);
  ASSERT_TRUE(user.ok());
  EXPECT_EQ(*user, (std::map<std::string, std::string>{{"GLOO_SOCKET_IFNAME", name}}));
  // A single pod: nothing.
  auto single = SocketIfnameEnv({}, "192.0.2.1", 1, listed);
  ASSERT_TRUE(single.ok());
  EXPECT_TRUE(single->empty());
  // The lister's error is the result's.
  auto failed = SocketIfnameEnv({}, "192.0.2.1", 2, [] {
    return exitcodes::Result<std::vector<Interface>>(exitcodes::Status::Infra("netlink: EPERM"));
  });
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("EPERM"), std::string::npos);
}

// The interfaces are listed (a netlink dump) only where the answer depends on
// them: not for one pod, not when the user set both variables, not for a
// leader on loopback.
TEST(SocketIfnameEnvTest, ListsInterfacesOnlyWhenItMustChooseOne) {
  int calls = 0;
  auto counting = [&] {
    ++calls;
    return ListInterfaces();
  };
  const std::map<std::string, std::string> both = {{"NCCL_SOCKET_IFNAME", "eth0"},
                                                   {"GLOO_SOCKET_IFNAME", "eth0"}};
  for (auto [env, leader, nnodes] :
       {std::tuple{std::map<std::string, std::string>{}, "192.0.2.1", 1u},
        std::tuple{both, "192.0.2.1", 2u},
        std::tuple{std::map<std::string, std::string>{}, "127.0.0.1", 2u},
        std::tuple{std::map<std::string, std::string>{}, "127.3.4.5", 8u},
        std::tuple{std::map<std::string, std::string>{}, "::1", 2u}}) {
    auto r = SocketIfnameEnv(env, leader, nnodes, counting);
    ASSERT_TRUE(r.ok()) << leader << ": " << r.status().message();
    EXPECT_TRUE(r->empty()) << leader;
  }
  EXPECT_EQ(calls, 0);
  if (LocalAddressToward("192.0.2.1").ok()) {
    ASSERT_TRUE(SocketIfnameEnv({}, "192.0.2.1", 2, counting).ok());
    EXPECT_EQ(calls, 1);
  }
}

}  // namespace
}  // namespace trainlet::gpu
