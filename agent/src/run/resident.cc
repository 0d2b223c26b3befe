#include "run/resident.h"

#include <malloc.h>
#include <sys/mman.h>

#include <cstdint>
#include <sstream>
#include <string>

#include "base/file_util.h"

namespace trainlet::agent {

std::size_t ReleaseStartupCode() {
  auto maps = ReadSmallFile("/proc/self/maps", 1 << 20);
  if (!maps) return 0;
  std::size_t released = 0;
  std::istringstream lines(*maps);
  std::string line;
  while (std::getline(lines, line)) {
    // "start-end perms offset dev inode path"
    std::istringstream f(line);
    std::string range, perms, offset, dev, inode, path;
    if (!(f >> range >> perms >> offset >> dev >> inode >> path)) continue;
    // Code only ("r-xp"): never written, so dropping it loses nothing. Read-only
    // data is not safe to drop: RELRO pages (.data.rel.ro, the GOT) were written
    // by the dynamic loader before it made them read-only.
    // Every file's code (ours, libc, libm, the loader); not [vdso] and the like.
    if (path.empty() || path[0] != '/' || perms != "r-xp") continue;
    auto dash = range.find('-');
    if (dash == std::string::npos) continue;
    std::uintptr_t start = std::stoull(range.substr(0, dash), nullptr, 16);
    std::uintptr_t end = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (end <= start) continue;
    if (::madvise(reinterpret_cast<void*>(start), end - start, MADV_DONTNEED) == 0) {
      released += end - start;
    }
  }
  ::malloc_trim(0);  // the free pages inside the heap, not only its top
  return released;
}

}  // namespace trainlet::agent
