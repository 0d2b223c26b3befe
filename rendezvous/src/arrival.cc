#include "trainlet/rendezvous/arrival.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "net_util.h"
#include "trainlet/rendezvous/name_check.h"

namespace trainlet::rendezvous {

namespace asio = boost::asio;

namespace {

// getaddrinfo(3) of `name`, every address; none when it does not resolve.
std::vector<asio::ip::address> ResolveBlocking(const std::string& name) {
  std::vector<asio::ip::address> out;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (::getaddrinfo(name.c_str(), nullptr, &hints, &list) != 0) return out;
  for (addrinfo* i = list; i != nullptr; i = i->ai_next) {
    char text[NI_MAXHOST];
    if (::getnameinfo(i->ai_addr, i->ai_addrlen, text, sizeof(text), nullptr, 0,
                      NI_NUMERICHOST) != 0) {
      continue;
    }
    boost::system::error_code ec;
    auto a = asio::ip::make_address(text, ec);
    if (!ec) out.push_back(a);
  }
  ::freeaddrinfo(list);
  return out;
}

std::string Hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

}  // namespace

bool IsOwnHost(const std::string& host, const std::string& hostname,
               const std::vector<asio::ip::address>& ours,
               const std::function<std::vector<asio::ip::address>(const std::string&)>& resolve) {
  if (host == "localhost" || (!hostname.empty() && host == hostname)) return true;
  boost::system::error_code ec;
  auto literal = asio::ip::make_address(host, ec);
  if (!ec) return IsOwnAddress(literal, ours);
  for (const auto& a : resolve(host)) {
    if (IsOwnAddress(a, ours)) return true;
  }
  return false;
}

EndpointClaim ClaimEndpoint(const std::string& host, std::uint16_t port, std::uint32_t nnodes) {
  if (!IsOwnHost(host, Hostname(), LocalAddresses(), ResolveBlocking)) {
    return {false, -1, "the endpoint's host " + host + " is another machine"};
  }
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io);
  boost::system::error_code ec = BindAndListen(acceptor, port, BacklogFor(nnodes));
  if (ec) {
    return {false, -1,
            "the endpoint's host " + host + " is this machine, but port " + std::to_string(port) +
                " is taken (" + ec.message() + "): another agent here leads"};
  }
  return {true, acceptor.release(ec),
          "the endpoint's host " + host + " is this machine and it bound port " +
              std::to_string(port) + " first"};
}

}  // namespace trainlet::rendezvous
