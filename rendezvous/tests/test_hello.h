// Tests' hellos: a pod of job "trainer-0" (unless `job` says otherwise) in a
// gang of `nnodes` pods with `nproc` workers each, its fingerprint set.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "trainlet/rendezvous/wire.h"

namespace trainlet::rendezvous {

inline wire::Hello HelloFor(std::uint32_t index, std::uint32_t nnodes, std::uint32_t nproc = 2,
                            std::string job = "trainer-0") {
  wire::Hello h;
  h.job_id = std::move(job);
  h.index = index;
  h.nproc_per_node = nproc;
  h.config = {{"nnodes", std::to_string(nnodes)},
              {"nproc_per_node", std::to_string(nproc)},
              {"master_port", "29500"}};
  h.fingerprint = wire::Fingerprint(h.config);
  return h;
}

}  // namespace trainlet::rendezvous
