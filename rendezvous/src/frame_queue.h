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

#include "trainlet/rendezvous/tunables.h"

namespace trainlet::rendezvous {

class FrameQueue {
 public:
  // Queues `frame` for `socket`; `sent` (optional) runs once it is written or
  // the write failed. `owner` keeps the socket and this queue alive while a
  // write is in flight. On a write error every queued frame is dropped (its
  // `sent` still runs); the reading side notices the broken connection.
  // A peer that stops reading cannot make the queue grow without bound: past
  // `limit` bytes queued the frame is dropped (`sent` runs), the socket is shut
  // down and its operations cancelled (the stuck write fails, the owner's read
  // ends with an error and drops the peer) and false is returned.
  bool Send(boost::asio::ip::tcp::socket& socket, std::shared_ptr<void> owner,
            std::vector<std::uint8_t> frame, std::function<void()> sent = {},
            std::size_t limit = tunables::kMaxQueuedFrameBytes) {
    if (queued_bytes_ + frame.size() > limit) {
      boost::system::error_code ignored;
      socket.shutdown(boost::asio::ip::tcp::socket::shutdown_both, ignored);
      socket.cancel(ignored);  // the stuck write and the pending read end now
      if (sent) sent();
      return false;
    }
    bool idle = queue_.empty();
    queued_bytes_ += frame.size();
    queue_.push_back({std::move(frame), std::move(sent)});
    if (idle) WriteFront(socket, std::move(owner));
    return true;
  }
  std::size_t queued_bytes() const { return queued_bytes_; }

 private:
  void WriteFront(boost::asio::ip::tcp::socket& socket, std::shared_ptr<void> owner) {
    boost::asio::async_write(
        socket, boost::asio::buffer(queue_.front().first),
        [this, &socket, owner](boost::system::error_code ec, std::size_t) {
          auto sent = std::move(queue_.front().second);
          queued_bytes_ -= queue_.front().first.size();
          queue_.pop_front();
          if (sent) sent();
          if (ec) {
            auto dropped = std::move(queue_);
            queue_.clear();
            queued_bytes_ = 0;
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
  std::size_t queued_bytes_ = 0;
};

}  // namespace trainlet::rendezvous
