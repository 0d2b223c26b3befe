// trainlet/agent/pod/evidence.h — reading the evidence the classifier weighs:
// the memory cgroup's OOM-kill counter and the torchelastic error file.
//
// Plain file reads with injectable roots, so tests can use a fake tree. Never
// throw; missing files mean "no evidence". Callable from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace trainlet::agent {

// The OOM kills counted by this process's memory cgroup:
//  - cgroup v2: `oom_kill` in <root>/<path>/memory.events, where <path> is the
//    "0::<path>" line of /proc/self/cgroup;
//  - cgroup v1: `oom_kill` in <root>/memory/<path>/memory.oom_control, where
//    <path> is the "N:memory:<path>" line.
// With a cgroup namespace the path is "/" and the file sits at the root. Falls
// back to the root file when the path does not exist under `root` (the
// container sees only its own cgroup). nullopt when no counter can be read.
// (Documentation/admin-guide/cgroup-v2.rst "memory.events";
//  Documentation/admin-guide/cgroup-v1/memory.rst "oom_control".)
std::optional<std::uint64_t> ReadOomKillCount(const std::string& proc_self_cgroup,
                                              const std::string& root = "/sys/fs/cgroup");

// Same, reading /proc/self/cgroup.
std::optional<std::uint64_t> ReadOomKillCount();

// What the memory cgroup this process runs in says about its memory.
struct MemoryCgroup {
  // Bytes: the lowest limit of this cgroup and the ancestors visible under
  // `root` (v2 memory.max, v1 memory.limit_in_bytes); nullopt when there is
  // none ("max", or v1's "unlimited", a value at or above 2^62) or none is
  // readable.
  std::optional<std::uint64_t> limit;
  // cgroup v2 memory.oom.group is 1: at an OOM the kernel kills every process
  // of the cgroup together, the agent too (Documentation/admin-guide/
  // cgroup-v2.rst "memory.oom.group"; the kubelet sets it unless
  // singleProcessOOMKill, Kubernetes >= 1.28 on cgroup v2).
  bool oom_group = false;
  bool v2 = false;  // found through the "0::" line
};

// Reads MemoryCgroup with the same lookup as ReadOomKillCount (v1's memory
// controller first, else v2). Never throws; a missing file is "no limit".
MemoryCgroup ReadMemoryCgroup(const std::string& proc_self_cgroup,
                              const std::string& root = "/sys/fs/cgroup");

// Same, reading /proc/self/cgroup.
MemoryCgroup ReadMemoryCgroup();

// The message of a torchelastic error file, as `@record` trainers write it to
// TORCHELASTIC_ERROR_FILE: {"message": {"message": "...", "extraInfo": {...}}}
// or {"message": "..."}. Empty when absent or unparsable. Reads at most 64 KiB.
std::string ReadErrorFileMessage(const std::string& path);

// The same, from the file's content (agent/fuzz/fuzz_error_file.cc). Never throws.
std::string ErrorFileMessage(const std::string& content);

// The size of the shared-memory file system at `path` in bytes (statvfs(3):
// f_blocks * f_frsize), nullopt when it cannot be read. A container's
// /dev/shm is 64 MiB unless the pod mounts an emptyDir with medium: Memory.
std::optional<std::uint64_t> SharedMemoryBytes(const std::string& path = "/dev/shm");
// The bytes an unprivileged writer may still use there (statvfs(3): f_bavail
// * f_frsize), nullopt when it cannot be read. Read at a worker's failure: a
// full /dev/shm makes a SIGBUS a config failure (exitcodes, WorkerFailureRules).
std::optional<std::uint64_t> SharedMemoryFree(const std::string& path = "/dev/shm");

// Below this, /dev/shm is worth a warning at start (torch's DataLoader
// workers pass batches through it, NCCL its intra-node buffers).
inline constexpr std::uint64_t kSmallSharedMemory = 1ULL << 30;

// A one-line warning when /dev/shm (`shm_bytes`) is under kSmallSharedMemory
// and the pod runs more than one worker or has a GPU, naming its size and the
// fix; "" otherwise (also when the size is unknown). Pure.
std::string SmallSharedMemoryWarning(std::optional<std::uint64_t> shm_bytes, std::uint32_t workers,
                                     bool gpus);

// Writes the termination message (see exitcodes/termination.h) to `path`, or,
// when `path` is empty, to /dev/termination-log if it exists and is writable
// (Kubernetes mounts it into every container; elsewhere nothing is created
// under /dev). Logs a warning when the write fails.
void WriteTerminationLog(const std::string& path, const std::string& summary);

}  // namespace trainlet::agent
