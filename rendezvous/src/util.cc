#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <spdlog/spdlog.h>

#include "trainlet/rendezvous/leader.h"
#include "trainlet/rendezvous/tunables.h"

#include "logging.h"
#include "net_util.h"

namespace trainlet::rendezvous {

std::shared_ptr<spdlog::logger> Logger(const std::string& name) {
  if (auto existing = spdlog::get(name)) return existing;
  auto def = spdlog::default_logger();
  auto logger = std::make_shared<spdlog::logger>(name, def->sinks().begin(), def->sinks().end());
  logger->set_level(def->level());
  spdlog::register_logger(logger);
  return logger;
}

std::string AddressForPeers(const boost::asio::ip::address& address) {
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, address.to_v6())
        .to_string();
  }
  return address.to_string();
}

void EnableDeadPeerDetection(boost::asio::ip::tcp::socket& socket) {
  int fd = socket.native_handle();
  int on = 1, idle = 5, interval = 2, count = 3;
  unsigned int user_timeout_ms = 15000;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
  // The heartbeats are a thin stream (a frame in flight at a time): without
  // this, each retransmission of a frame lost in a link blip waits twice as
  // long as the last (200, 400, 800, 1,600 ms), so a blip healed well within
  // the heartbeat timeout still holds the next frame past it. With it the
  // first six retransmissions come every RTO (200 ms at least), and a healed
  // link carries a frame within one of them (tcp(7), TCP_THIN_LINEAR_TIMEOUTS;
  // no privilege needed).
  ::setsockopt(fd, IPPROTO_TCP, TCP_THIN_LINEAR_TIMEOUTS, &on, sizeof(on));
}

namespace asio = boost::asio;
using asio::ip::tcp;

// Opens `acceptor` dual stack (one socket serves IPv4 as v4-mapped and IPv6
// peers; IPv4 alone where IPv6 is off), with SO_REUSEADDR as a trainer's
// listener (PyTorch's TCPStore) has it, and binds it to `port` on every
// interface.
boost::system::error_code OpenAndBind(tcp::acceptor& acceptor, std::uint16_t port) {
  boost::system::error_code ec;
  tcp::endpoint ep(asio::ip::address_v6::any(), port);
  acceptor.open(tcp::v6(), ec);
  if (!ec) acceptor.set_option(asio::ip::v6_only(false), ec);
  if (ec) {
    boost::system::error_code ignored;
    acceptor.close(ignored);
    ep = tcp::endpoint(asio::ip::address_v4::any(), port);
    acceptor.open(tcp::v4(), ec);
  }
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(ep, ec);
  return ec;
}

// Opens, binds and listens `acceptor` on `port` (see Leader::Listen); on any
// error the acceptor is left closed.
boost::system::error_code BindAndListen(tcp::acceptor& acceptor, std::uint16_t port,
                                        int backlog) {
  boost::system::error_code ec = OpenAndBind(acceptor, port);
  if (!ec) acceptor.listen(backlog, ec);
  if (ec) {
    boost::system::error_code ignored;
    acceptor.close(ignored);
  }
  return ec;
}

// The backlog covers the whole gang arriving at once (PyTorch's TCPStore does
// the same; a small backlog turns a burst of joins into SYN retransmits).
int BacklogFor(std::uint32_t nnodes) {
  return static_cast<int>(std::min<std::size_t>(
      std::max<std::size_t>(nnodes + 64, tunables::kMinListenBacklog), 65535));
}

int ListenAhead(std::uint16_t port, std::uint32_t nnodes) {
  asio::io_context io;
  tcp::acceptor acceptor(io);
  boost::system::error_code ec = BindAndListen(acceptor, port, BacklogFor(nnodes));
  if (ec) return -1;
  const int fd = acceptor.release(ec);
  return ec ? -1 : fd;
}

}  // namespace trainlet::rendezvous
