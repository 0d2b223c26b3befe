// Private: reading small files (procfs, sysfs, downward-API volumes) with plain
// POSIX calls. libstdc++'s filebuf throws std::ios_base::failure when read(2)
// fails, which /proc/<pid>/* does (ESRCH) when the process exits mid-read.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace trainlet::agent {

// At most `max` bytes of the file; nullopt when it cannot be opened or is not
// a regular file (opened with O_NONBLOCK: never blocks on a FIFO). A read
// error ends the content early. Never throws. For the files the system
// provides; a file the user names goes through exitcodes::ReadUserFile.
std::optional<std::string> ReadSmallFile(const std::string& path, std::size_t max = 64 * 1024);

}  // namespace trainlet::agent
