#include "trainlet/gpu/netif.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

namespace trainlet::gpu {

using exitcodes::Result;
using exitcodes::Status;

namespace {

// 127.0.0.0/8 or ::1 (numeric); false for anything else, names included.
bool IsLoopbackLiteral(const std::string& ip) {
  in_addr v4{};
  in6_addr v6{};
  if (::inet_pton(AF_INET, ip.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  return ::inet_pton(AF_INET6, ip.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

std::string Numeric(const sockaddr* sa) {
  char host[NI_MAXHOST];
  socklen_t len = sa->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  if (::getnameinfo(sa, len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) return "";
  std::string s = host;
  // fe80::1%veth0 -> fe80::1: the scope is the interface itself.
  if (auto pct = s.find('%'); pct != std::string::npos) s.resize(pct);
  return s;
}

std::vector<std::string> SplitComma(const std::string& v) {
  std::vector<std::string> out;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

std::string Names(const std::vector<Interface>& interfaces) {
  std::string s;
  for (const auto& i : interfaces) s += (s.empty() ? "" : ", ") + i.name;
  return s.empty() ? "(none)" : s;
}

}  // namespace

Result<std::vector<Interface>> ListInterfaces() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) {
    return Status::Infra(std::string("getifaddrs failed: ") + std::strerror(errno));
  }
  std::vector<Interface> out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    Interface* it = nullptr;
    for (auto& i : out) {
      if (i.name == a->ifa_name) it = &i;
    }
    if (it == nullptr) {
      out.push_back({a->ifa_name, {}, false, false, false});
      it = &out.back();
    }
    it->up = it->up || (a->ifa_flags & IFF_UP) != 0;
    it->loopback = it->loopback || (a->ifa_flags & IFF_LOOPBACK) != 0;
    if (a->ifa_addr == nullptr) continue;
    int family = a->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    std::string addr = Numeric(a->ifa_addr);
    if (addr.empty()) continue;
    it->addresses.push_back(addr);
    if (family == AF_INET) {
      it->routable = true;
    } else {
      auto* sa6 = reinterpret_cast<const sockaddr_in6*>(a->ifa_addr);
      if (!IN6_IS_ADDR_LINKLOCAL(&sa6->sin6_addr)) it->routable = true;
    }
  }
  ::freeifaddrs(list);
  return out;
}

std::vector<std::string> MatchNcclIfname(const std::string& value,
                                         const std::vector<Interface>& interfaces) {
  std::string v = value;
  bool exclude = !v.empty() && v.front() == '^';
  if (exclude) v.erase(0, 1);
  bool exact = !v.empty() && v.front() == '=';
  if (exact) v.erase(0, 1);
  std::vector<std::string> prefixes;
  for (std::string p : SplitComma(v)) {
    if (auto colon = p.find(':'); colon != std::string::npos) p.resize(colon);  // "eth0:1234"
    if (!p.empty()) prefixes.push_back(p);
  }
  std::vector<std::string> out;
  for (const auto& i : interfaces) {
    if (!i.up || i.addresses.empty()) continue;
    bool match = false;
    for (const auto& p : prefixes) {
      match = match || (exact ? i.name == p : i.name.starts_with(p));
    }
    if (match != exclude) out.push_back(i.name);
  }
  return out;
}

Status ValidateSocketIfnames(const std::map<std::string, std::string>& env,
                             const std::vector<Interface>& interfaces) {
  if (auto it = env.find("NCCL_SOCKET_IFNAME"); it != env.end()) {
    if (MatchNcclIfname(it->second, interfaces).empty()) {
      return Status::Config("NCCL_SOCKET_IFNAME='" + it->second +
                            "': no interface matches; interfaces: " + Names(interfaces));
    }
  }
  if (auto it = env.find("GLOO_SOCKET_IFNAME"); it != env.end()) {
    const std::string& v = it->second;
    if (v.empty() || v.front() == '^' || v.front() == '=') {
      return Status::Config("GLOO_SOCKET_IFNAME='" + v +
                            "': Gloo needs concrete interface names (no NCCL '^'/'=' syntax); "
                            "interfaces: " + Names(interfaces));
    }
    for (const auto& name : SplitComma(v)) {
      bool found = false;
      for (const auto& i : interfaces) found = found || (i.name == name && i.up);
      if (!found) {
        return Status::Config("GLOO_SOCKET_IFNAME='" + v + "': no interface '" + name +
                              "' is up; interfaces: " + Names(interfaces));
      }
    }
  }
  return Status::Ok();
}

Result<std::string> LocalAddressToward(const std::string& ip) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (::inet_pton(AF_INET, ip.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(9);  // any port: connect(2) on UDP sends nothing
    len = sizeof(sockaddr_in);
  } else if (::inet_pton(AF_INET6, ip.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(9);
    len = sizeof(sockaddr_in6);
  } else {
    return Status::Infra("'" + ip + "' is not an IP address");
  }
  int fd = ::socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Infra(std::string("socket: ") + std::strerror(errno));
  std::string out;
  std::string err;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    err = "no route to " + ip + ": " + std::strerror(errno);
  } else {
    sockaddr_storage local{};
    socklen_t llen = sizeof(local);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0) {
      err = std::string("getsockname: ") + std::strerror(errno);
    } else {
      out = Numeric(reinterpret_cast<sockaddr*>(&local));
    }
  }
  ::close(fd);
  if (!err.empty()) return Status::Infra(err);
  return out;
}

std::string InterfaceWithAddress(const std::string& address,
                                 const std::vector<Interface>& interfaces) {
  for (const auto& i : interfaces) {
    for (const auto& a : i.addresses) {
      if (a == address) return i.name;
    }
  }
  return "";
}

Result<std::map<std::string, std::string>> SocketIfnameEnv(
    const std::map<std::string, std::string>& env, const std::string& leader_ip,
    std::uint32_t nnodes, const InterfaceLister& list_interfaces) {
  std::map<std::string, std::string> out;
  if (nnodes <= 1) return out;
  if (env.contains("NCCL_SOCKET_IFNAME") && env.contains("GLOO_SOCKET_IFNAME")) return out;
  if (IsLoopbackLiteral(leader_ip)) return out;
  auto local = LocalAddressToward(leader_ip);
  if (!local.ok()) return local.status();
  if (IsLoopbackLiteral(*local)) return out;
  auto interfaces = list_interfaces();
  if (!interfaces.ok()) return interfaces.status();
  std::string name = InterfaceWithAddress(*local, *interfaces);
  for (const auto& i : *interfaces) {
    if (i.name == name && i.loopback) name.clear();
  }
  if (name.empty()) return out;
  if (!env.contains("NCCL_SOCKET_IFNAME")) out["NCCL_SOCKET_IFNAME"] = name;
  if (!env.contains("GLOO_SOCKET_IFNAME")) out["GLOO_SOCKET_IFNAME"] = name;
  return out;
}

}  // namespace trainlet::gpu
