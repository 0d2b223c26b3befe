#include "trainlet/agent/observe/heartbeat_watch.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>

#include <spdlog/spdlog.h>

namespace trainlet::agent {

namespace {
// A heartbeat file's mtime until its worker first touches it (seconds since
// the epoch: 1970-01-01T00:00:01Z, a time no touch can produce).
constexpr time_t kNeverTouched = 1;
// With step rates, the longest wait between two looks.
constexpr std::chrono::milliseconds kStepLookInterval{250};
}  // namespace

std::string HeartbeatWatch::CreateFile(const std::string& dir, std::uint32_t local_rank) {
  std::string path = dir + "/heartbeat-" + std::to_string(local_rank);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return "";
  // Its mtime starts at kNeverTouched: any touch, even one within the file
  // system's coarse clock tick of this creation, moves it.
  const timespec times[2] = {{0, UTIME_OMIT}, {kNeverTouched, 0}};
  ::futimens(fd, times);
  ::close(fd);
  return path;
}

HeartbeatWatch::HeartbeatWatch(boost::asio::any_io_executor executor, HangOptions hang,
                               std::vector<std::string> files, Callbacks callbacks)
    : options_(hang),
      files_(std::move(files)),
      callbacks_(std::move(callbacks)),
      timer_(std::move(executor)) {}

HeartbeatWatch::~HeartbeatWatch() { Stop(); }

void HeartbeatWatch::Start() {
  started_ = std::filesystem::file_time_type::clock::now();
  step_meter_ = StepMeter::Create(timer_.get_executor(), files_);
  policy_.emplace(options_, static_cast<int>(files_.size()));
  Arm();
}

void HeartbeatWatch::Stop() {
  stopped_ = true;
  timer_.cancel();
  step_meter_.reset();
}

void HeartbeatWatch::Arm() {
  timer_.expires_after(step_meter_ ? std::min(policy_->PollInterval(), kStepLookInterval)
                                   : policy_->PollInterval());
  // A look already queued when the watch goes must not touch it: `alive` says.
  timer_.async_wait([this, alive = std::weak_ptr<void>(alive_)](boost::system::error_code ec) {
    if (ec || alive.expired() || stopped_ || hang_ || !callbacks_.watching()) return;
    Look();
  });
}

void HeartbeatWatch::Look() {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  auto now = std::filesystem::file_time_type::clock::now();
  timespec wall{};
  ::clock_gettime(CLOCK_REALTIME, &wall);  // the clock file times are in
  std::vector<HeartbeatSample> samples;
  for (std::size_t lr = 0; lr < files_.size(); ++lr) {
    HeartbeatSample& s = samples.emplace_back();
    s.running = callbacks_.running(static_cast<int>(lr));
    struct stat st {};
    if (::stat(files_[lr].c_str(), &st) != 0) {
      s.running = false;  // the file is gone: nothing to judge it by
    } else if (st.st_mtim.tv_sec != kNeverTouched) {
      s.since_touch = milliseconds((wall.tv_sec - st.st_mtim.tv_sec) * 1000 +
                                   (wall.tv_nsec - st.st_mtim.tv_nsec) / 1'000'000);
    }
  }
  HangCheck check = policy_->Check(duration_cast<milliseconds>(now - started_), samples);
  if (!check.note.empty()) spdlog::info("hang detection: {}", check.note);
  if (check.hung.empty()) {
    callbacks_.on_look();
    if (!stopped_) Arm();
    return;
  }
  hang_ = check.hung;
  callbacks_.on_hang(check.hung);
}

std::map<std::uint32_t, double> HeartbeatWatch::Ages() const {
  std::map<std::uint32_t, double> ages;
  const auto now = std::filesystem::file_time_type::clock::now();
  for (std::size_t lr = 0; lr < files_.size(); ++lr) {
    std::error_code ec;
    auto mtime = std::filesystem::last_write_time(files_[lr], ec);
    if (ec) continue;
    ages[static_cast<std::uint32_t>(lr)] =
        std::chrono::duration<double>(now - std::max(mtime, started_)).count();
  }
  return ages;
}

std::optional<std::pair<double, std::uint32_t>> HeartbeatWatch::Slowest(
    const std::vector<bool>& running) const {
  if (!step_meter_) return std::nullopt;
  return step_meter_->Slowest(running, StepClock::now());
}

}  // namespace trainlet::agent
