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

}  // namespace trainlet::rendezvous
