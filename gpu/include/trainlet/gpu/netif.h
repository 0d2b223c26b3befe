// trainlet/gpu/netif.h — the pod's network interfaces and NCCL/Gloo's choice of one.
//
// NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME are often set cluster-wide and
// name an interface a node image does not have (NVIDIA/nccl#1837), and NCCL's default pick
// can be a veth or link-local interface peers cannot reach (NVIDIA/nccl#913). trainlet
// checks a given value against the pod's real interfaces before anything
// starts, and when none is given, exports the interface that routes to the
// leader. Pure functions plus two thin syscall wrappers; all thread-safe.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "trainlet/exitcodes/status.h"

namespace trainlet::gpu {

struct Interface {
  std::string name;                    // "eth0"
  std::vector<std::string> addresses;  // numeric, "10.0.0.11", "fd00::5"
  bool up = false;                     // IFF_UP
  bool loopback = false;               // IFF_LOOPBACK
  // True when it has an IPv4 address or an IPv6 address that is not link-local
  // (fe80::/10): one NCCL's socket transport can use across pods.
  bool routable = false;
};

// getifaddrs(3), one entry per interface name with all its addresses, in the
// kernel's order. Errors (class infra): getifaddrs failed (names errno).
[[nodiscard]] exitcodes::Result<std::vector<Interface>> ListInterfaces();

// NCCL's NCCL_SOCKET_IFNAME rule (NCCL env docs, src/misc/socket.cc matchIfList):
// a comma list of name prefixes ("eth,ib"); a leading '^' excludes the listed
// prefixes instead; a leading '=' (after any '^') makes them exact names;
// an entry may carry ":port", which is ignored here. Returns the names of the
// interfaces (up, with a usable address) NCCL would consider, in order.
std::vector<std::string> MatchNcclIfname(const std::string& value,
                                         const std::vector<Interface>& interfaces);

// Checks NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME in `env` (absent: fine).
//  - NCCL_SOCKET_IFNAME: NCCL's syntax above; it must match at least one
//    interface.
//  - GLOO_SOCKET_IFNAME: Gloo takes concrete names only (a comma list of
//    exact names, PyTorch docs "Choosing the network interface to use"): '^',
//    '=' or a name that does not exist are refused.
// Errors (class config, one line): "NCCL_SOCKET_IFNAME='eth2': no interface
// matches; interfaces: lo, eth0". Returns OK otherwise.
[[nodiscard]] exitcodes::Status ValidateSocketIfnames(const std::map<std::string, std::string>& env,
                                                      const std::vector<Interface>& interfaces);

// The local address the kernel would use to reach `ip` (IPv4 or IPv6 literal):
// connect(2) of a UDP socket (no packet is sent), then getsockname(2).
// Errors (class infra): not an IP literal, no route (names errno).
[[nodiscard]] exitcodes::Result<std::string> LocalAddressToward(const std::string& ip);

// The interface holding `address` (numeric), or "" if none does.
std::string InterfaceWithAddress(const std::string& address,
                                 const std::vector<Interface>& interfaces);

// Lists the pod's interfaces when SocketIfnameEnv needs them (ListInterfaces,
// or a fixed list in tests).
using InterfaceLister = std::function<exitcodes::Result<std::vector<Interface>>()>;

// What the workers get when the user set neither variable: for a gang of more
// than one pod, the interface that routes to `leader_ip`, as
// {NCCL_SOCKET_IFNAME=<name>, GLOO_SOCKET_IFNAME=<name>}; each variable the
// user did set in `env` is left out (it was validated instead). Empty for a
// single pod, when the user set both, when the leader or the route to it is
// loopback, or when no interface holds the source address. `list_interfaces`
// is called only past those first checks (a netlink dump in every pod of a
// 4096-pod gang at once is not free), at most once. Errors (class infra): as
// LocalAddressToward, or the lister's.
[[nodiscard]] exitcodes::Result<std::map<std::string, std::string>> SocketIfnameEnv(
    const std::map<std::string, std::string>& env, const std::string& leader_ip,
    std::uint32_t nnodes, const InterfaceLister& list_interfaces);

}  // namespace trainlet::gpu
