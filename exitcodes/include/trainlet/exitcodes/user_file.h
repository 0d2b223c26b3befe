// trainlet/exitcodes/user_file.h — reading a file the user named, and the
// start-up's view of a pending stop signal. Here, in the dependency-free base,
// so that every module reads user files the same way (rendezvous: the token
// file; agent: the downward-API files, --podinfo-file).
//
// A file a flag or variable points at may be anything: a FIFO with no writer
// (open(2) without O_NONBLOCK blocks forever), /dev/zero (endless), a
// directory, a 100 MB Secret. ReadUserFile follows symlinks (a mounted Secret's
// files are symlinks into ..data/), refuses anything that is not a regular file
// before opening it, opens with O_NONBLOCK and checks again with fstat(2) on
// the descriptor, and never reads more than the cap it is given. It never
// blocks on anything but the disk, never throws, and its errors name the
// file and what it is.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "trainlet/exitcodes/status.h"

namespace trainlet::exitcodes {

// A Kubernetes Secret (and a ConfigMap) holds at most 1 MiB of data
// (kubernetes.io/docs/concepts/configuration/secret/#restriction-data-size).
inline constexpr std::size_t kSecretMaxBytes = 1 << 20;

// The file at `path` (symlinks followed), of at most `max_bytes` bytes.
// ok(nullopt): there is no such file (ENOENT, or a path component is not a
// folder: ENOTDIR). Errors, class config, one line "<what> '<path>' ...":
// it is a directory, a FIFO, a character or block device or a socket; it is
// larger than `max_bytes` (its size given, FormatBytes); it cannot be opened
// or read (strerror). `what` is how the user named it ("--token-file",
// "the downward-API file"). Blocking: only on the disk (O_NONBLOCK; a
// non-regular file is never read).
[[nodiscard]] Result<std::optional<std::string>> ReadUserFile(const std::string& path,
                                                              const std::string& what,
                                                              std::size_t max_bytes);

// "a directory", "a FIFO", "a character device", "a block device", "a socket",
// "a regular file" or "an unknown kind of file", from stat(2)'s st_mode.
std::string FileKind(mode_t mode);

// A size that never rounds to zero: "512 bytes", "256 KiB", "1.5 MiB",
// "64 MiB", "2.5 GiB" (binary units; one decimal when not whole).
std::string FormatBytes(std::uint64_t bytes);

// SIGTERM or SIGINT when one is pending for this process or thread (the agent
// blocks them from main's first line, signals.h), else 0. Start-up work that
// takes time (GPU discovery, resolving) checks it so that a stop during start
// ends the agent at once instead of waiting for the event loop. Never blocks.
int PendingStopSignal();

}  // namespace trainlet::exitcodes
