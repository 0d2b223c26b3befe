#include "trainlet/session.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "trainlet/exitcodes/ports.h"
#include "trainlet/gpu/nccl.h"

namespace trainlet {

using Clock = std::chrono::steady_clock;

struct Session::Impl {
  SessionOptions options;
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  std::uint16_t master_port = 0;
  bool under_trainlet = false;
  std::string heartbeat_file, error_file;
  std::unique_ptr<StoreServer> server;
  std::unique_ptr<StoreClient> client;
  std::shared_ptr<const gpu::Nccl> nccl;
  bool trainlet_ids_used = false;
  int comms = 0;
  std::string nccl_id_source;
};

namespace {

// MASTER_PORT when a gang's environment lacks it: torch's default, as a trainer run by
// torchrun would use (trainlet/exitcodes/ports.h).
constexpr long kTorchMasterPort = exitcodes::ports::kTorchMaster;

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// A decimal in [min, max] from `name`, `fallback` when unset.
bool EnvInt(const char* name, long min, long max, long fallback, long* out, std::string* error) {
  const char* v = Env(name);
  if (v == nullptr) {
    *out = fallback;
    return true;
  }
  char* end = nullptr;
  errno = 0;
  long n = std::strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || n < min || n > max) {
    *error = std::string(name) + "='" + v + "' is not a number in [" + std::to_string(min) + ", " +
             std::to_string(max) + "]";
    return false;
  }
  *out = n;
  return true;
}

}  // namespace

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() {
  // Rank 0 hosts the store: let the other ranks read their last replies
  // (a barrier's release) before it goes, as they would otherwise see a reset.
  impl_->client.reset();
  if (impl_->server) impl_->server->WaitIdle(std::min(impl_->options.timeout, std::chrono::milliseconds(10'000)));
}

Expected<std::unique_ptr<Session>> Session::Create(SessionOptions options) {
  Expected<std::unique_ptr<Session>> out;
  auto im = std::make_unique<Impl>();
  im->options = options;
  im->under_trainlet = Env("RANK") != nullptr && Env("WORLD_SIZE") != nullptr;
  long world = 1, rank = 0, local = 0, local_world = 1, port = 0;
  if (!EnvInt("WORLD_SIZE", 1, 1 << 24, 1, &world, &out.error) ||
      !EnvInt("RANK", 0, world - 1, 0, &rank, &out.error) ||
      !EnvInt("LOCAL_RANK", 0, 1 << 16, 0, &local, &out.error) ||
      !EnvInt("LOCAL_WORLD_SIZE", 1, 1 << 16, 1, &local_world, &out.error) ||
      // A local run picks a free port; a gang needs the one trainlet gave.
      !EnvInt("MASTER_PORT", world > 1 ? 1 : 0, 65535, world > 1 ? kTorchMasterPort : 0, &port,
              &out.error)) {
    return out;
  }
  im->world_size = static_cast<int>(world);
  im->rank = static_cast<int>(rank);
  im->local_rank = static_cast<int>(local);
  im->local_world_size = static_cast<int>(local_world);
  if (const char* a = Env("MASTER_ADDR")) im->master_addr = a;
  if (const char* h = Env("TRAINLET_HEARTBEAT_FILE")) im->heartbeat_file = h;
  if (const char* e = Env("TORCHELASTIC_ERROR_FILE")) im->error_file = e;
  im->master_port = static_cast<std::uint16_t>(port);
  if (im->rank == 0) {
    StoreError err;
    im->server = StoreServer::Start(im->master_port, im->world_size, &err);
    if (!im->server) {
      out.error = "rank 0 cannot host the store: " + err.message;
      return out;
    }
    im->master_port = im->server->port();
  }
  im->client = std::make_unique<StoreClient>(im->rank == 0 ? "127.0.0.1" : im->master_addr,
                                             im->master_port, im->world_size);
  out.value = std::unique_ptr<Session>(new Session(std::move(im)));
  return out;
}

int Session::rank() const { return impl_->rank; }
int Session::world_size() const { return impl_->world_size; }
int Session::local_rank() const { return impl_->local_rank; }
int Session::local_world_size() const { return impl_->local_world_size; }
int Session::device() const { return impl_->local_rank; }
const std::string& Session::master_addr() const { return impl_->master_addr; }
std::uint16_t Session::master_port() const { return impl_->master_port; }
bool Session::under_trainlet() const { return impl_->under_trainlet; }
StoreClient& Session::store() { return *impl_->client; }
const std::string& Session::nccl_id_source() const { return impl_->nccl_id_source; }

void Session::Heartbeat() {
  if (impl_->heartbeat_file.empty()) return;
  if (::utimensat(AT_FDCWD, impl_->heartbeat_file.c_str(), nullptr, 0) != 0) {
    int fd = ::open(impl_->heartbeat_file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) ::close(fd);
  }
}

bool Session::ReportError(ErrorClass cls, const std::string& message) {
  const char* name = cls == ErrorClass::kHardware ? "hardware"
                     : cls == ErrorClass::kInfra  ? "infra"
                     : cls == ErrorClass::kOom    ? "oom"
                                                  : "bug";
  std::string text = std::string("[trainlet:") + name + "] " + message;
  if (impl_->error_file.empty()) {
    std::fprintf(stderr, "%s\n", text.c_str());
    return true;
  }
  // torchelastic's error file (torch/distributed/elastic/multiprocessing/errors).
  nlohmann::json j;
  j["message"] = {{"message", text},
                  {"extraInfo", {{"py_callstack", ""}, {"timestamp", std::to_string(std::time(nullptr))}}}};
  std::string tmp = impl_->error_file + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << j.dump();
    if (!f.flush()) return false;
  }
  return std::rename(tmp.c_str(), impl_->error_file.c_str()) == 0;
}

namespace {

// The failure of another Expected, as an Expected<T> without a value.
template <typename T, typename U>
Expected<T> Failed(const Expected<U>& from) {
  Expected<T> out;
  out.error = from.error;
  out.timed_out = from.timed_out;
  return out;
}

// libnccl, loaded once per session: options.nccl_library, else $TRAINLET_LIBNCCL, else the
// default soname (gpu/nccl.h).
Expected<std::shared_ptr<const gpu::Nccl>> LoadNccl(const SessionOptions& options) {
  Expected<std::shared_ptr<const gpu::Nccl>> out;
  std::string path = options.nccl_library;
  if (path.empty()) path = Env("TRAINLET_LIBNCCL") ? Env("TRAINLET_LIBNCCL") : gpu::kDefaultLibNccl;
  auto n = gpu::Nccl::Load(path);
  if (!n.ok()) {
    out.error = n.status().message();
  } else {
    out.value = std::move(n).value();
  }
  return out;
}

// Rank 0 makes the communicator's ids and publishes them under `key` as comma-separated hex.
Expected<std::vector<std::string>> PublishIds(const gpu::Nccl& nc, int world_size,
                                              StoreClient& client, const std::string& key,
                                              std::chrono::milliseconds timeout) {
  Expected<std::vector<std::string>> out;
  auto made = nc.MakeUniqueIds(gpu::RootsFor(static_cast<std::uint32_t>(world_size)));
  if (!made.ok()) {
    out.error = made.status().message();
    return out;
  }
  std::string joined;
  for (const auto& id : made->ids) {
    if (!joined.empty()) joined += ',';
    joined += gpu::ToHex(id);
  }
  StoreError err;
  if (!client.Set(key, joined, timeout, &err)) {
    out.error = err.message;
    out.timed_out = err.timed_out;
    return out;
  }
  out.value = made->ids;
  return out;
}

// Every other rank waits for rank 0's ids under `key`.
Expected<std::vector<std::string>> FetchIds(StoreClient& client, const std::string& key,
                                            std::chrono::milliseconds timeout) {
  Expected<std::vector<std::string>> out;
  StoreError err;
  auto joined = client.Get(key, timeout, &err);
  if (!joined) {
    out.error = "waiting for rank 0's NCCL unique id: " + err.message;
    out.timed_out = err.timed_out;
    return out;
  }
  std::vector<std::string> ids;
  std::size_t start = 0;
  while (start <= joined->size()) {
    std::size_t comma = std::min(joined->find(',', start), joined->size());
    auto bytes = gpu::FromHex(std::string_view(*joined).substr(start, comma - start));
    if (!bytes.ok() || bytes->size() != gpu::kUniqueIdBytes) {
      out.error = "malformed NCCL unique id in the store";
      return out;
    }
    ids.push_back(std::move(bytes).value());
    start = comma + 1;
  }
  out.value = std::move(ids);
  return out;
}

// ncclCommInitRank, non-blocking (gpu::MakeConfig(false)), polled with ncclCommGetAsyncError
// until it completes, fails or `deadline` passes (`timeout` names it in the message); the
// communicator is aborted on failure (NCCL user guide, "Communicators": a non-blocking init
// is polled with ncclCommGetAsyncError; ncclCommAbort ends one in error).
Expected<ncclComm_t> InitComm(const gpu::Nccl& nc, int world_size, int rank,
                              const std::vector<std::string>& ids, Clock::time_point deadline,
                              std::chrono::milliseconds timeout) {
  Expected<ncclComm_t> out;
  gpu::Nccl::Comm comm = nullptr;
  gpu::NcclConfig config = gpu::MakeConfig(false);
  int r = nc.CommInitRank(&comm, world_size, ids, rank, &config);
  if (r != gpu::kNcclSuccess && r != gpu::kNcclInProgress) {
    if (comm != nullptr) nc.CommAbort(comm);
    out.error = "ncclCommInitRank failed: " + gpu::NcclResultName(r);
    return out;
  }
  for (;;) {
    int async = gpu::kNcclSuccess;
    if (int q = nc.CommGetAsyncError(comm, &async); q != gpu::kNcclSuccess) async = q;
    if (async == gpu::kNcclSuccess) break;
    if (async != gpu::kNcclInProgress) {
      nc.CommAbort(comm);
      out.error = "NCCL init failed: " + gpu::NcclResultName(async);
      return out;
    }
    if (Clock::now() >= deadline) {
      nc.CommAbort(comm);
      out.error = "NCCL init did not complete within " + std::to_string(timeout.count()) +
                  " ms; aborted (a rank did not join?)";
      out.timed_out = true;
      return out;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  out.value = static_cast<ncclComm_t>(comm);
  return out;
}

}  // namespace

Expected<ncclComm_t> Session::NcclComm(std::chrono::milliseconds timeout) {
  Expected<ncclComm_t> out;
  Impl& im = *impl_;
  const auto deadline = Clock::now() + timeout;
  if (!im.nccl) {
    auto loaded = LoadNccl(im.options);
    if (!loaded) return Failed<ncclComm_t>(loaded);
    im.nccl = *loaded.value;
  }
  const gpu::Nccl& nc = *im.nccl;
  // The ids: trainlet's (once, same NCCL version), else rank 0's through the store.
  auto given = gpu::ParseWorkerNcclEnv([](const char* k) { return std::getenv(k); });
  if (!given.ok()) {
    out.error = given.status().message();
    return out;
  }
  const int comm_index = im.comms++;
  Expected<std::vector<std::string>> ids;
  if (!im.trainlet_ids_used && !given->empty() && given->nccl_version == nc.version()) {
    im.trainlet_ids_used = true;
    ids.value = given->ids;
    im.nccl_id_source = "trainlet";
  } else {
    const std::string key = "trainlet/nccl/" + std::to_string(comm_index);
    ids = im.rank == 0 ? PublishIds(nc, im.world_size, *im.client, key, timeout)
                       : FetchIds(*im.client, key, timeout);
    if (!ids) return Failed<ncclComm_t>(ids);
    im.nccl_id_source = "store";
  }
  return InitComm(nc, im.world_size, im.rank, *ids.value, deadline, timeout);
}

}  // namespace trainlet
