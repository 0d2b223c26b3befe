// trainlet/exitcodes/xid.h — what an NVIDIA Xid number says about a failure.
//
// The NVIDIA driver reports GPU errors as numbered "Xid" events (the kernel
// log's "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.",
// NVML's nvmlEventTypeXidCriticalError). NVIDIA's Xid catalogue
// (https://docs.nvidia.com/deploy/xid-errors/) says, per number, whether the
// GPU or board is at fault or the application that ran on it: an MMU fault
// (Xid 31) is almost always a bug in the program, a GPU that fell off the bus
// (Xid 79) is the node's. One table, pure functions, callable from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace trainlet::exitcodes {

// Whom the catalogue blames.
enum class XidCause {
  kHardware,     // the GPU, its memory, its board or link, or the driver/firmware
  kApplication,  // the program that ran on the GPU (a code bug): class worker
  kUnknown,      // not in trainlet's table: treated as hardware, as before the table
};

struct XidInfo {
  XidCause cause = XidCause::kUnknown;
  std::string_view meaning;  // the catalogue's short description; "" when unknown
};

// The catalogue's entry for Xid `xid`.
XidInfo LookUpXid(std::uint64_t xid);

// The Xid number in a log line: the digits after "Xid", skipping spaces, a
// "(PCI:...)" group and a ':' ("NVRM: Xid (PCI:0000:3b:00): 79, ..." and
// "Xid 79" both give 79). nullopt when "Xid" is absent or no number follows.
std::optional<std::uint64_t> ParseXid(std::string_view line);

}  // namespace trainlet::exitcodes
