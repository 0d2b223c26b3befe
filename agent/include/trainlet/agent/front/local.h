// trainlet/agent/front/local.h — `trainlet local`: a whole gang on one machine.
//
// Starts `nnodes` trainlet agents as child processes (this same binary), with
// indices 0..nnodes-1, the leader on 127.0.0.1 and free ports, so the pods'
// code paths (rendezvous over TCP, supervision, exit codes) run unchanged. It
// supervises the agents like workers: the first agent to fail stops the others,
// SIGTERM is forwarded, and its exit code is the first failing agent's.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "trainlet/agent/base/tunables.h"

namespace trainlet::agent {

struct LocalOptions {
  std::uint32_t nnodes = 1;
  std::uint32_t nproc_per_node = 1;
  std::vector<std::string> command;
  std::chrono::milliseconds grace{kDefaultGrace};
  std::chrono::milliseconds rdzv_timeout{kLocalRdzvTimeout};
  std::string log_level = "info";
  std::string self_exe;  // path of the trainlet binary (/proc/self/exe)
  std::vector<std::string> pass_through;  // flags every agent gets (--exit-code, --marker, ...)
  std::uint16_t health_port = 0;  // agent i gets --health-port health_port+i; 0: none
  bool json_logs = false;         // --log-format json: local's own lines too
  std::string interpreter;        // said in the start line (PodOptions::interpreter)
};

// Blocks until every agent is gone; returns the exit code.
int RunLocal(const LocalOptions& options);

// n different TCP ports free on loopback now, or none when fewer could be had:
// drawn at random from the 16,384 ports below the kernel's ephemeral range
// (ip(7), ip_local_port_range), which no outgoing connection or port-0 bind
// takes, bound all at once, then closed (the kernel's choice where the range
// leaves no room below it). Non-blocking. Another process may still bind one
// explicitly before the caller does: for local runs and --standalone only.
std::vector<std::uint16_t> FreeLoopbackPorts(std::size_t n);

}  // namespace trainlet::agent
