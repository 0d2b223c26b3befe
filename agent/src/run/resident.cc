#include "run/resident.h"

#include <malloc.h>
#include <sys/mman.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "base/file_util.h"

namespace trainlet::agent {

namespace {

// The code mappings of every file this process maps (start, length), from
// /proc/self/maps (proc(5)): "start-end perms offset dev inode path".
std::vector<std::pair<std::uintptr_t, std::size_t>> CodeMappings() {
  std::vector<std::pair<std::uintptr_t, std::size_t>> out;
  auto maps = ReadSmallFile("/proc/self/maps", 1 << 20);
  if (!maps) return out;
  std::istringstream lines(*maps);
  std::string line;
  while (std::getline(lines, line)) {
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
    if (end > start) out.emplace_back(start, end - start);
  }
  return out;
}

}  // namespace

std::size_t ReleaseStartupCode() {
  // Everything but the madvise loop runs first: code that ran after its pages
  // were dropped would fault them back (the parser's iostreams and locale
  // pages, ~250 KiB of text, when the maps were parsed line by line between
  // the calls; malloc_trim's).
  ::malloc_trim(0);  // the free pages inside the heap, not only its top
  const auto code = CodeMappings();
  std::size_t released = 0;
  for (const auto& [start, length] : code) {
    if (::madvise(reinterpret_cast<void*>(start), length, MADV_DONTNEED) == 0) released += length;
  }
  return released;
}

}  // namespace trainlet::agent
