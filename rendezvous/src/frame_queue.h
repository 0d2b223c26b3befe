// Private: frames written one at a time, in order, on one socket. Asio allows a
// single async_write in flight per socket; both sides of the control channel
// queue heartbeats, reports and stops behind each other here.
#pragma once

#include <cstdint>
#include <list>
#include <functional>
#include <memory>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

namespace trainlet::rendezvous {

class FrameQueue {
 public:
  // Queues `frame` for `socket`; `sent` (optional) runs once it is written or
  // the write failed. `owner` keeps the socket and this queue alive while a
  // write is in flight. On a write error every queued frame is dropped (its
  // `sent` still runs); the reading side notices the broken connection.
  void Send(boost::asio::ip::tcp::socket& socket, std::shared_ptr<void> owner,
            std::vector<std::uint8_t> frame, std::function<void()> sent = {}) {
    bool idle = queue_.empty();
    queue_.push_back({std::move(frame), std::move(sent)});
    if (idle) WriteFront(socket, std::move(owner));
  }

 private:
  void WriteFront(boost::asio::ip::tcp::socket& socket, std::shared_ptr<void> owner) {
    boost::asio::async_write(
        socket, boost::asio::buffer(queue_.front().first),
        [this, &socket, owner](boost::system::error_code ec, std::size_t) {
          auto sent = std::move(queue_.front().second);
          queue_.pop_front();
          if (sent) sent();
          if (ec) {
            auto dropped = std::move(queue_);
            queue_.clear();
            for (auto& [frame, cb] : dropped) {
              if (cb) cb();
            }
            return;
          }
          if (!queue_.empty()) WriteFront(socket, owner);
        });
  }

  // A list, not a deque: an empty std::deque already holds a 512-byte block, and
  // the leader keeps one queue per pod (bench/HISTORY.md: memory at scale).
  std::list<std::pair<std::vector<std::uint8_t>, std::function<void()>>> queue_;
};

}  // namespace trainlet::rendezvous
