// Stands in for `trainlet preflight` in the preflight tests.
#include <cstring>

#include "trainlet/gpu/preflight.h"

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "preflight") == 0) {
    return trainlet::gpu::PreflightChildMain();
  }
  return 2;
}
