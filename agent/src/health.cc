#include "trainlet/agent/health.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>

#include "trainlet/agent/metrics.h"

namespace trainlet::agent {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {
constexpr int kMaxConnections = 16;
constexpr auto kDeadline = std::chrono::seconds(2);
}  // namespace

struct HealthServer::Impl : std::enable_shared_from_this<Impl> {
  explicit Impl(asio::any_io_executor ex) : acceptor(ex) {}
  tcp::acceptor acceptor;
  std::function<State()> state;
  std::function<std::string()> metrics;
  int connections = 0;
  bool closed = false;

  void Accept() {
    acceptor.async_accept([self = shared_from_this()](boost::system::error_code ec,
                                                      tcp::socket socket) {
      if (self->closed) return;
      if (!ec) {
        if (self->connections < kMaxConnections) {
          self->Serve(std::move(socket));
        }  // else: dropped (closed when `socket` goes out of scope)
      }
      self->Accept();
    });
  }

  void Serve(tcp::socket socket) {
    struct Conn {
      explicit Conn(tcp::socket s) : stream(std::move(s)) {}
      beast::tcp_stream stream;
      beast::flat_buffer buffer{4096};
      http::request<http::empty_body> request;
      http::response<http::string_body> response;
    };
    auto conn = std::make_shared<Conn>(std::move(socket));
    ++connections;
    conn->stream.expires_after(kDeadline);
    http::async_read(conn->stream, conn->buffer, conn->request,
                     [self = shared_from_this(), conn](beast::error_code ec, std::size_t) {
                       if (ec) {
                         --self->connections;
                         return;
                       }
                       auto target = conn->request.target();
                       if (target == "/metrics" && self->metrics) {
                         conn->response.version(11);
                         conn->response.result(http::status::ok);
                         conn->response.set(http::field::content_type, kMetricsContentType);
                         conn->response.body() = self->metrics();
                         self->Respond(conn);
                         return;
                       }
                       State s = self->state ? self->state() : State{};
                       bool ok = false;
                       http::status code = http::status::not_found;
                       if (target == "/readyz") {
                         ok = s.ready;
                         code = ok ? http::status::ok : http::status::service_unavailable;
                       } else if (target == "/livez" || target == "/healthz") {
                         ok = s.live;
                         code = ok ? http::status::ok : http::status::service_unavailable;
                       }
                       conn->response.version(11);
                       conn->response.result(code);
                       conn->response.set(http::field::content_type, "text/plain");
                       conn->response.body() = code == http::status::not_found
                                                   ? "not found\n"
                                                   : ok ? "ok\n"
                                                   : target == "/readyz" && s.spare
                                                       ? "spare\n"
                                                       : "not yet\n";
                       self->Respond(conn);
                     });
  }

  template <typename Conn>
  void Respond(const std::shared_ptr<Conn>& conn) {
    conn->response.keep_alive(false);
    conn->response.prepare_payload();
    http::async_write(conn->stream, conn->response,
                      [self = shared_from_this(), conn](beast::error_code, std::size_t) {
                        beast::error_code ignored;
                        conn->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
                        --self->connections;
                      });
  }
};

exitcodes::Result<std::unique_ptr<HealthServer>> HealthServer::Start(
    asio::any_io_executor executor, std::uint16_t port, std::function<State()> state,
    std::function<std::string()> metrics) {
  auto impl = std::make_shared<Impl>(executor);
  impl->state = std::move(state);
  impl->metrics = std::move(metrics);
  boost::system::error_code ec;
  tcp::endpoint ep(asio::ip::address_v4::any(), port);
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(64, ec);
  if (ec) {
    return exitcodes::Status::Config("--health-port " + std::to_string(port) +
                                     ": cannot listen: " + ec.message());
  }
  impl->Accept();
  return std::unique_ptr<HealthServer>(new HealthServer(impl));
}

HealthServer::~HealthServer() {
  impl_->closed = true;
  boost::system::error_code ignored;
  impl_->acceptor.close(ignored);
}

std::uint16_t HealthServer::port() const { return impl_->acceptor.local_endpoint().port(); }

int Probe(const std::string& what, std::uint16_t port, int timeout_ms) {
  asio::io_context io;
  beast::tcp_stream stream(io);
  stream.expires_after(std::chrono::milliseconds(timeout_ms));
  int result = 1;
  stream.async_connect(
      tcp::endpoint(asio::ip::address_v4::loopback(), port), [&](beast::error_code ec) {
        if (ec) return;
        auto req = std::make_shared<http::request<http::empty_body>>(
            http::verb::get,
            what == "live" ? "/livez" : what == "metrics" ? "/metrics" : "/readyz", 11);
        req->set(http::field::host, "127.0.0.1");
        http::async_write(stream, *req, [&, req](beast::error_code ec, std::size_t) {
          if (ec) return;
          auto buffer = std::make_shared<beast::flat_buffer>();
          auto res = std::make_shared<http::response<http::string_body>>();
          http::async_read(stream, *buffer, *res,
                           [&, buffer, res](beast::error_code ec, std::size_t) {
                             if (!ec && res->result() == http::status::ok) result = 0;
                             if (result == 0 && what == "metrics") {
                               std::fwrite(res->body().data(), 1, res->body().size(), stdout);
                             }
                           });
        });
      });
  io.run();
  return result;
}

}  // namespace trainlet::agent
