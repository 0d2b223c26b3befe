// Private: giving back the pages only start-up used.
#pragma once

#include <cstddef>

namespace trainlet::agent {

// Drops this process's page-table entries for the code of every file it maps
// (the "r-xp" file mappings in /proc/self/maps: trainlet, libc, libm, the
// loader) with madvise(MADV_DONTNEED) (madvise(2)). Code is never written (no text
// relocations), so nothing is lost. The pages stay in the
// page cache; what the steady-state loop runs is faulted back in on first use. So
// the resident set is what a long-running agent touches (heartbeats, reaping,
// output), not all the code start-up ran once (flag parsing, identity, DNS
// setup): bench/RESULTS.md, memory. Data mappings are never touched; the heap's
// free pages that start-up left (the rendezvous's, the spawn's) go back too
// (malloc_trim(3)).
// Returns the bytes of mappings advised; 0 when /proc is unreadable. Never fails.
std::size_t ReleaseStartupCode();

}  // namespace trainlet::agent
