// libFuzzer entry for the health server's requests: each input is sent as is to
// a real HealthServer (Boost.Beast) over loopback, then the write side is shut.
// Whatever the bytes, the server answers with one of its statuses (200, 400,
// 404, 405, 431, 503; health_policy.h) or closes the connection, within its
// deadline; it never crashes, and a later well-formed probe still gets its
// answer.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include "trainlet/agent/observe/health.h"

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

struct Server {
  Server() {
    spdlog::set_level(spdlog::level::off);
    auto s = trainlet::agent::HealthServer::Start(
        io.get_executor(), 0,
        [] { return trainlet::agent::HealthServer::State{.ready = true, .live = false}; },
        [] { return std::string("trainlet_up 1\n"); });
    if (!s.ok()) abort();
    server = std::move(s).value();
  }
  // Sends `request`, returns what came back before the server closed.
  std::string Exchange(const std::string& request) {
    tcp::socket c(io);
    c.connect({asio::ip::address_v4::loopback(), server->port()});
    std::string reply;
    bool done = false;
    asio::async_write(c, asio::buffer(request), [&](boost::system::error_code, std::size_t) {
      boost::system::error_code ignored;
      c.shutdown(tcp::socket::shutdown_send, ignored);
      asio::async_read(c, asio::dynamic_buffer(reply),
                       [&](boost::system::error_code, std::size_t) { done = true; });
    });
    io.restart();
    while (!done) io.run_one_for(std::chrono::seconds(5));
    return reply;
  }
  asio::io_context io;
  std::unique_ptr<trainlet::agent::HealthServer> server;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Server* s = new Server();
  std::string reply = s->Exchange(std::string(reinterpret_cast<const char*>(data), size));
  if (!reply.empty()) {
    if (reply.rfind("HTTP/1.1 ", 0) != 0) abort();
    static const std::set<std::string> kStatuses = {"200", "400", "404", "405", "431", "503"};
    if (!kStatuses.contains(reply.substr(9, 3))) abort();
  }
  if (size % 64 == 0) {  // now and then: the server still serves a real probe
    std::string ok = s->Exchange("GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n");
    if (ok.rfind("HTTP/1.1 200", 0) != 0) abort();
  }
  return 0;
}
