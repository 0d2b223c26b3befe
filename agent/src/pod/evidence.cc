#include "trainlet/agent/pod/evidence.h"

#include "base/file_util.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "trainlet/exitcodes/user_file.h"

namespace trainlet::agent {
namespace {

// The value of "<key> <n>" in a flat-keyed file such as memory.events.
std::optional<std::uint64_t> KeyedValue(const std::string& content, const std::string& key) {
  std::istringstream is(content);
  std::string k;
  std::uint64_t v;
  while (is >> k >> v) {
    if (k == key) return v;
  }
  return std::nullopt;
}

std::optional<std::uint64_t> CounterIn(const std::string& dir, const std::string& root,
                                       const std::string& file) {
  for (const std::string& d : {dir, root}) {
    if (auto content = ReadSmallFile(d + "/" + file)) {
      if (auto v = KeyedValue(*content, "oom_kill")) return v;
    }
  }
  return std::nullopt;
}

// The memory cgroup's paths in a /proc/self/cgroup text: the v1 memory
// controller's and the v2 unified one's (cgroups(7)).
struct CgroupPaths {
  std::optional<std::string> v1, v2;
};

CgroupPaths MemoryCgroupPaths(const std::string& proc_self_cgroup) {
  std::istringstream is(proc_self_cgroup);
  std::string line;
  std::optional<std::string> v1, v2;
  while (std::getline(is, line)) {
    auto a = line.find(':');
    auto b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) v2 = path;
    std::istringstream cs(controllers);
    std::string c;
    while (std::getline(cs, c, ',')) {
      if (c == "memory") v1 = path;
    }
  }
  return {v1, v2};
}

// The lowest `file` limit in `top` + `path` and its ancestors up to `top` (a
// child cgroup never gets more than its parents allow).
std::optional<std::uint64_t> LowestLimit(const std::string& top, const std::string& path,
                                         const std::string& file) {
  // v1 reports "no limit" as LONG_MAX rounded down to the page size.
  constexpr std::uint64_t kUnlimited = std::uint64_t{1} << 62;
  std::optional<std::uint64_t> lowest;
  std::filesystem::path rel = std::filesystem::path(path).lexically_normal().relative_path();
  for (;;) {
    if (auto content = ReadSmallFile(top + "/" + (rel / file).string())) {
      char* end = nullptr;
      const unsigned long long v = std::strtoull(content->c_str(), &end, 10);
      if (end != content->c_str() && v < kUnlimited && (!lowest || v < *lowest)) lowest = v;
    }
    if (rel.empty()) break;
    rel = rel.has_filename() ? rel.parent_path() : rel.parent_path().parent_path();
  }
  return lowest;
}

}  // namespace

MemoryCgroup ReadMemoryCgroup(const std::string& proc_self_cgroup, const std::string& root) {
  const CgroupPaths paths = MemoryCgroupPaths(proc_self_cgroup);
  MemoryCgroup m;
  if (paths.v1) {
    m.limit = LowestLimit(root + "/memory", *paths.v1, "memory.limit_in_bytes");
  } else if (paths.v2) {
    m.v2 = true;
    const std::string dir = root + *paths.v2;
    m.limit = LowestLimit(root, *paths.v2, "memory.max");
    for (const std::string& d : {dir, root}) {
      if (auto g = ReadSmallFile(d + "/memory.oom.group")) {
        m.oom_group = g->rfind("1", 0) == 0;
        break;
      }
    }
  }
  return m;
}

MemoryCgroup ReadMemoryCgroup() {
  auto self = ReadSmallFile("/proc/self/cgroup");
  return self ? ReadMemoryCgroup(*self) : MemoryCgroup{};
}

std::optional<std::uint64_t> ReadOomKillCount(const std::string& proc_self_cgroup,
                                              const std::string& root) {
  const auto [v1, v2] = MemoryCgroupPaths(proc_self_cgroup);
  if (v1) {
    if (auto n = CounterIn(root + "/memory" + *v1, root + "/memory", "memory.oom_control")) {
      return n;
    }
  }
  if (v2) return CounterIn(root + *v2, root, "memory.events");
  return std::nullopt;
}

std::optional<std::uint64_t> ReadOomKillCount() {
  auto self = ReadSmallFile("/proc/self/cgroup");
  if (!self) return std::nullopt;
  return ReadOomKillCount(*self);
}

std::string ReadErrorFileMessage(const std::string& path) {
  auto content = ReadSmallFile(path);
  if (!content || content->empty()) return "";
  return ErrorFileMessage(*content);
}

std::string ErrorFileMessage(const std::string& content) {
  auto j = nlohmann::json::parse(content, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("message")) return "";
  const auto& m = j["message"];
  if (m.is_string()) return m.get<std::string>();
  if (m.is_object() && m.contains("message") && m["message"].is_string()) {
    std::string text = m["message"].get<std::string>();
    if (m.contains("extraInfo") && m["extraInfo"].is_object() &&
        m["extraInfo"].contains("py_callstack") && m["extraInfo"]["py_callstack"].is_string()) {
      text += "\n" + m["extraInfo"]["py_callstack"].get<std::string>();
    }
    return text;
  }
  return "";
}

std::optional<std::uint64_t> SharedMemoryBytes(const std::string& path) {
  struct statvfs st{};
  if (::statvfs(path.c_str(), &st) != 0) return std::nullopt;
  return static_cast<std::uint64_t>(st.f_blocks) * st.f_frsize;
}

std::optional<std::uint64_t> SharedMemoryFree(const std::string& path) {
  struct statvfs st{};
  if (::statvfs(path.c_str(), &st) != 0) return std::nullopt;
  return static_cast<std::uint64_t>(st.f_bavail) * st.f_frsize;
}

std::string SmallSharedMemoryWarning(std::optional<std::uint64_t> shm_bytes, std::uint32_t workers,
                                     bool gpus) {
  if (!shm_bytes || *shm_bytes >= kSmallSharedMemory || (workers <= 1 && !gpus)) return "";
  return "/dev/shm is only " + exitcodes::FormatBytes(*shm_bytes) +
         ": DataLoader workers and NCCL use it, and a job that runs out fails the same way "
         "on every retry (exit 78); mount an emptyDir with medium: Memory at /dev/shm";
}

void WriteTerminationLog(const std::string& path, const std::string& summary) {
  std::string target = path;
  if (target.empty()) {
    target = "/dev/termination-log";
    if (::access(target.c_str(), W_OK) != 0) return;
  }
  std::ofstream f(target, std::ios::trunc);
  f << summary;
  f.flush();
  if (!f) spdlog::warn("cannot write the termination message to {}", target);
}

}  // namespace trainlet::agent
