#include "trainlet/agent/evidence.h"

#include "file_util.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

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

}  // namespace

std::optional<std::uint64_t> ReadOomKillCount(const std::string& proc_self_cgroup,
                                              const std::string& root) {
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

std::string SmallSharedMemoryWarning(std::optional<std::uint64_t> shm_bytes, std::uint32_t workers,
                                     bool gpus) {
  if (!shm_bytes || *shm_bytes >= kSmallSharedMemory || (workers <= 1 && !gpus)) return "";
  return "/dev/shm is only " + std::to_string(*shm_bytes >> 20) +
         " MiB: DataLoader workers and NCCL use it, and a job that runs out fails the same way "
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
