// trainlet/exitcodes/ports.h — the default TCP ports, written once for every module.
//
// They are part of the contract with torchrun and torch, like the exit codes:
// a pod started with torchrun's flags must listen and dial where torchrun's
// would. exitcodes/ depends on nothing and every module may include it
// (docs/ARCHITECTURE.md, "Modules, and who may include whom"), so the
// rendezvous, the agent and the session library (which may not include
// rendezvous/) read the same numbers. Header-only; constants only.
#pragma once

#include <cstdint>

namespace trainlet::exitcodes::ports {

// The leader's rendezvous port when none is given: torchrun's default for an
// --rdzv-endpoint without a port (torch/distributed/elastic/rendezvous/utils.py
// parse_rendezvous_endpoint, default_port=29400; c10d_rendezvous_backend.py).
inline constexpr std::uint16_t kRendezvous = 29400;

// The trainers' store (MASTER_PORT) when a gang's environment lacks one:
// torch's default (torch/distributed/run.py --master-port 29500).
inline constexpr std::uint16_t kTorchMaster = 29500;

// The JAX coordinator port handed to the workers (JAX_COORDINATOR_ADDRESS):
// one hundred above torch's MASTER_PORT, so the two never meet.
inline constexpr std::uint16_t kJaxCoordinator = kTorchMaster + 100;

}  // namespace trainlet::exitcodes::ports
