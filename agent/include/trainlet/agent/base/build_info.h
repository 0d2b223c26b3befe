#pragma once
// What this binary is: the release version (the repository's VERSION file, the
// one place it is set) and the git commit it was built from (short hash, with
// "-dirty" when the tree had uncommitted changes, "unknown" outside a checkout).
// Both are generated at build time by cmake/BuildInfo.cmake.

namespace trainlet {

extern const char kVersion[];
extern const char kCommit[];

}  // namespace trainlet
