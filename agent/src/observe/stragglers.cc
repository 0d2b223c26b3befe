#include "trainlet/agent/observe/stragglers.h"

#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <array>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <spdlog/spdlog.h>

#include "trainlet/agent/base/log_format.h"

namespace trainlet::agent {

namespace asio = boost::asio;

double StepRate(const std::deque<StepClock::time_point>& touches, StepClock::time_point now) {
  if (touches.size() < 2) return 0;
  const double span = std::chrono::duration<double>(touches.back() - touches.front()).count();
  if (span <= 0) return 0;
  const double n = static_cast<double>(touches.size());
  const double mean_interval = span / (n - 1);
  const double quiet = std::chrono::duration<double>(now - touches.back()).count();
  // Quiet for longer than a step: the step in progress counts as one, so the
  // rate falls as the quiet grows, smoothly (one slow step among the window's
  // does not halve it).
  return quiet > mean_interval ? n / (span + quiet) : (n - 1) / span;
}

double MedianRate(const std::map<std::uint32_t, double>& rates) {
  if (rates.empty()) return 0;
  std::vector<double> v;
  v.reserve(rates.size());
  for (const auto& [pod, r] : rates) v.push_back(r);
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::set<std::uint32_t> FindStragglers(const std::map<std::uint32_t, double>& rates,
                                       double factor, const std::set<std::uint32_t>& previous) {
  std::set<std::uint32_t> out;
  if (rates.size() < 2 || factor <= 1) return out;
  const double median = MedianRate(rates);
  for (const auto& [pod, rate] : rates) {
    const bool was = previous.contains(pod);
    if (was ? rate * factor * 0.75 < median : rate * factor < median) out.insert(pod);
  }
  return out;
}

struct StepMeter::Impl : std::enable_shared_from_this<Impl> {
  explicit Impl(asio::any_io_executor ex) : stream(ex) {}
  asio::posix::stream_descriptor stream;
  std::map<int, std::size_t> by_wd;  // inotify watch -> local rank
  std::vector<std::deque<StepClock::time_point>> touches;
  // inotify(7): a buffer for at least one event with a name (none here).
  alignas(inotify_event) std::array<char, 4096> buf{};

  void Read() {
    stream.async_read_some(asio::buffer(buf), [self = shared_from_this()](
                                                  boost::system::error_code ec, std::size_t n) {
      if (ec) return;  // closed, or the fd failed: rates stay as they are
      const auto now = StepClock::now();
      for (std::size_t off = 0; off + sizeof(inotify_event) <= n;) {
        const auto* e = reinterpret_cast<const inotify_event*>(self->buf.data() + off);
        off += sizeof(inotify_event) + e->len;
        auto it = self->by_wd.find(e->wd);
        if (it == self->by_wd.end()) continue;
        auto& t = self->touches[it->second];
        // One touch can be several events (a write then a close, or an
        // O_TRUNC and a write): those within 5 ms count once.
        if (!t.empty() && now - t.back() < std::chrono::milliseconds(5)) continue;
        t.push_back(now);
        if (t.size() > kWindow) t.pop_front();
      }
      self->Read();
    });
  }
};

std::unique_ptr<StepMeter> StepMeter::Create(asio::any_io_executor executor,
                                             const std::vector<std::string>& files) {
  const int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) return nullptr;
  auto impl = std::make_shared<Impl>(executor);
  impl->stream.assign(fd);
  impl->touches.resize(files.size());
  for (std::size_t lr = 0; lr < files.size(); ++lr) {
    const int wd = ::inotify_add_watch(fd, files[lr].c_str(), IN_ATTRIB | IN_MODIFY);
    if (wd >= 0) impl->by_wd[wd] = lr;
  }
  impl->Read();
  return std::unique_ptr<StepMeter>(new StepMeter(impl));
}

StepMeter::~StepMeter() {
  boost::system::error_code ignored;
  impl_->stream.close(ignored);  // the pending read ends with operation_aborted
}

std::optional<std::pair<double, std::uint32_t>> StepMeter::Slowest(
    const std::vector<bool>& running, StepClock::time_point now) const {
  std::optional<std::pair<double, std::uint32_t>> out;
  for (std::size_t lr = 0; lr < impl_->touches.size(); ++lr) {
    if (lr >= running.size() || !running[lr]) continue;
    const double r = StepRate(impl_->touches[lr], now);
    if (r <= 0) return std::nullopt;
    if (!out || r < out->first) out = {{r, static_cast<std::uint32_t>(lr)}};
  }
  return out;
}

void StragglerBoard::Look(const std::map<std::uint32_t, double>& rates,
                          const std::map<std::uint32_t, std::uint32_t>& slowest_ranks) {
  rates_ = rates;
  if (factor_ <= 0) return;
  auto now = FindStragglers(rates, factor_, stragglers_);
  const double median = MedianRate(rates);
  for (std::uint32_t pod : now) {
    if (stragglers_.contains(pod)) continue;
    const std::uint32_t rank = slowest_ranks.contains(pod) ? slowest_ranks.at(pod) : 0;
    LogFields lf;
    lf.pod = pod;
    lf.rank = static_cast<int>(rank);
    ScopedLogFields fields(std::move(lf));
    spdlog::warn("straggler: pod {} (rank {}) at {:.2f} steps/s, {:.1f}x behind the gang's "
                 "median of {:.2f} steps/s",
                 pod, rank, rates.at(pod), median / rates.at(pod), median);
  }
  for (std::uint32_t pod : stragglers_) {
    if (now.contains(pod)) continue;
    LogFields lf;
    lf.pod = pod;
    ScopedLogFields fields(std::move(lf));
    if (rates.contains(pod)) {
      spdlog::info("straggler: pod {} caught up ({:.2f} steps/s, median {:.2f})", pod,
                   rates.at(pod), median);
    } else {
      spdlog::info("straggler: pod {} no longer reports a step rate (its workers finished)", pod);
    }
  }
  stragglers_ = std::move(now);
}

}  // namespace trainlet::agent
