#include "trainlet/gpu/nccl.h"

#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <cstring>

namespace trainlet::gpu {

using exitcodes::Result;
using exitcodes::Status;

std::uint32_t RootsFor(std::uint32_t world_size) {
  std::uint32_t n = (world_size + kRanksPerRoot - 1) / kRanksPerRoot;
  return std::clamp<std::uint32_t>(n, 1, kMaxUniqueIds);
}

std::string ToHex(std::string_view bytes) {
  static const char* hex = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    s += hex[c >> 4];
    s += hex[c & 15];
  }
  return s;
}

Result<std::string> FromHex(std::string_view hex) {
  if (hex.size() % 2 != 0) {
    return Status::Config("hex string of odd length " + std::to_string(hex.size()));
  }
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(hex.size() / 2);
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    int hi = digit(hex[i]), lo = digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return Status::Config("not a hex digit at offset " + std::to_string(i));
    out += static_cast<char>(hi << 4 | lo);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> WorkerNcclEnv(const UniqueIds& ids) {
  std::vector<std::pair<std::string, std::string>> env;
  if (ids.ids.empty()) return env;
  env.emplace_back("TRAINLET_NCCL_UNIQUE_ID", ToHex(ids.ids.front()));
  if (ids.ids.size() > 1) {
    std::string all;
    for (const auto& id : ids.ids) {
      if (!all.empty()) all += ',';
      all += ToHex(id);
    }
    env.emplace_back("TRAINLET_NCCL_UNIQUE_IDS", all);
  }
  env.emplace_back("TRAINLET_NCCL_VERSION", std::to_string(ids.nccl_version));
  return env;
}

Result<UniqueIds> ParseWorkerNcclEnv(const std::function<const char*(const char*)>& get) {
  UniqueIds out;
  const char* version = get("TRAINLET_NCCL_VERSION");
  const char* one = get("TRAINLET_NCCL_UNIQUE_ID");
  const char* many = get("TRAINLET_NCCL_UNIQUE_IDS");
  if (one == nullptr && many == nullptr) return out;
  if (version == nullptr || *version == '\0' ||
      std::string_view(version).find_first_not_of("0123456789") != std::string_view::npos ||
      std::strlen(version) > 9) {
    return Status::Config("TRAINLET_NCCL_VERSION='" + std::string(version ? version : "") +
                          "' is not an NCCL version number");
  }
  out.nccl_version = static_cast<std::uint32_t>(std::stoul(version));
  std::string list = many != nullptr ? many : one;
  const char* name = many != nullptr ? "TRAINLET_NCCL_UNIQUE_IDS" : "TRAINLET_NCCL_UNIQUE_ID";
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    auto bytes = FromHex(std::string_view(list).substr(start, comma - start));
    if (!bytes.ok()) return Status::Config(std::string(name) + ": " + bytes.status().message());
    if (bytes->size() != kUniqueIdBytes) {
      return Status::Config(std::string(name) + ": an id of " + std::to_string(bytes->size()) +
                            " bytes, expected " + std::to_string(kUniqueIdBytes));
    }
    out.ids.push_back(std::move(bytes).value());
    if (out.ids.size() > kMaxUniqueIds) {
      return Status::Config(std::string(name) + ": more than " + std::to_string(kMaxUniqueIds) +
                            " ids");
    }
    start = comma + 1;
  }
  return out;
}

NcclConfig MakeConfig(bool blocking) {
  // NCCL_CONFIG_INITIALIZER of NCCL 2.14.3 (the first with this layout):
  // magic 0xcafebeef, version NCCL_VERSION(2,14,3), every attribute undefined.
  NcclConfig c{};
  c.size = sizeof(NcclConfig);
  c.magic = 0xcafebeef;
  c.version = 21403;
  c.blocking = blocking ? 1 : 0;
  c.cga_cluster_size = INT_MIN;
  c.min_ctas = INT_MIN;
  c.max_ctas = INT_MIN;
  c.net_name = nullptr;
  c.split_share = INT_MIN;
  return c;
}

std::string NcclResultName(int r) {
  switch (r) {
    case kNcclSuccess: return "ncclSuccess";
    case kNcclUnhandledCudaError: return "ncclUnhandledCudaError";
    case kNcclSystemError: return "ncclSystemError";
    case kNcclInternalError: return "ncclInternalError";
    case kNcclInvalidArgument: return "ncclInvalidArgument";
    case kNcclInvalidUsage: return "ncclInvalidUsage";
    case kNcclRemoteError: return "ncclRemoteError";
    case kNcclInProgress: return "ncclInProgress";
    default: return "ncclResult " + std::to_string(r);
  }
}

Result<std::shared_ptr<const Nccl>> Nccl::Load(const std::string& path) {
  // RTLD_NODELETE: NCCL's own threads (bootstrap roots, proxies) outlive any handle.
  void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (lib == nullptr) {
    const char* e = ::dlerror();
    return Status::Infra("NCCL unavailable: " + std::string(e != nullptr ? e : path));
  }
  std::shared_ptr<Nccl> n(new Nccl());
  n->path_ = path;
  auto sym = [lib](const char* name) { return ::dlsym(lib, name); };
  auto get_version = reinterpret_cast<int (*)(int*)>(sym("ncclGetVersion"));
  n->get_unique_id_ = reinterpret_cast<int (*)(void*)>(sym("ncclGetUniqueId"));
  n->init_config_byval_ =
      reinterpret_cast<int (*)(Comm*, int, IdValue, int, NcclConfig*)>(sym("ncclCommInitRankConfig"));
  n->init_scalable_ =
      reinterpret_cast<int (*)(Comm*, int, int, int, void*, NcclConfig*)>(sym("ncclCommInitRankScalable"));
  n->async_error_ = reinterpret_cast<int (*)(Comm, int*)>(sym("ncclCommGetAsyncError"));
  n->abort_ = reinterpret_cast<int (*)(Comm)>(sym("ncclCommAbort"));
  n->finalize_ = reinterpret_cast<int (*)(Comm)>(sym("ncclCommFinalize"));
  n->destroy_ = reinterpret_cast<int (*)(Comm)>(sym("ncclCommDestroy"));
  n->all_reduce_ = reinterpret_cast<int (*)(const void*, void*, std::size_t, int, int, Comm, void*)>(
      sym("ncclAllReduce"));
  const char* missing = get_version == nullptr              ? "ncclGetVersion"
                        : n->get_unique_id_ == nullptr      ? "ncclGetUniqueId"
                        : n->init_config_byval_ == nullptr  ? "ncclCommInitRankConfig (NCCL >= 2.14)"
                        : n->async_error_ == nullptr        ? "ncclCommGetAsyncError"
                        : n->abort_ == nullptr              ? "ncclCommAbort"
                        : n->all_reduce_ == nullptr         ? "ncclAllReduce"
                                                            : nullptr;
  if (missing != nullptr) return Status::Infra(path + " lacks " + missing);
  int v = 0;
  if (int r = get_version(&v); r != kNcclSuccess || v <= 0) {
    return Status::Infra(path + ": ncclGetVersion failed: " + NcclResultName(r));
  }
  n->version_ = static_cast<std::uint32_t>(v);
  return std::shared_ptr<const Nccl>(std::move(n));
}

Result<UniqueIds> Nccl::MakeUniqueIds(std::uint32_t count) const {
  UniqueIds out;
  out.nccl_version = version_;
  for (std::uint32_t i = 0; i < count; ++i) {
    IdValue id{};
    if (int r = get_unique_id_(&id); r != kNcclSuccess) {
      return Status::Infra("ncclGetUniqueId failed: " + NcclResultName(r));
    }
    out.ids.emplace_back(id.internal, kUniqueIdBytes);
  }
  return out;
}

int Nccl::CommInitRankConfig(Comm* comm, int nranks, const std::string& id, int rank,
                             NcclConfig* config) const {
  if (id.size() != kUniqueIdBytes) return kNcclInvalidArgument;
  IdValue v;
  std::memcpy(v.internal, id.data(), kUniqueIdBytes);
  return init_config_byval_(comm, nranks, v, rank, config);
}

int Nccl::CommInitRank(Comm* comm, int nranks, const std::vector<std::string>& ids, int rank,
                       NcclConfig* config) const {
  if (ids.empty()) return kNcclInvalidArgument;
  if (ids.size() == 1 || init_scalable_ == nullptr) {
    if (ids.size() > 1) return kNcclInvalidUsage;  // several roots need NCCL >= 2.23
    return CommInitRankConfig(comm, nranks, ids.front(), rank, config);
  }
  std::vector<IdValue> v(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i].size() != kUniqueIdBytes) return kNcclInvalidArgument;
    std::memcpy(v[i].internal, ids[i].data(), kUniqueIdBytes);
  }
  return init_scalable_(comm, nranks, rank, static_cast<int>(v.size()), v.data(), config);
}

int Nccl::AllReduceSumFloat(const void* send, void* recv, std::size_t count, Comm comm,
                            void* stream) const {
  // ncclFloat32 = 7, ncclSum = 0 (nccl.h ncclDataType_t / ncclRedOp_t).
  return all_reduce_(send, recv, count, 7, 0, comm, stream);
}

}  // namespace trainlet::gpu
