#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <spdlog/spdlog.h>

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
}

}  // namespace trainlet::rendezvous
