#include "trainlet/exitcodes/user_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

namespace trainlet::exitcodes {
namespace {

std::string Named(const std::string& what, const std::string& path) {
  return what + " '" + path + "'";
}

Status NotRegular(const std::string& what, const std::string& path, mode_t mode) {
  return Status::Config(Named(what, path) + " is " + FileKind(mode) + ", not a regular file");
}

// `size`: what fstat(2) said; nullopt when the file grew past the cap while read.
Status TooLarge(const std::string& what, const std::string& path,
                std::optional<std::uint64_t> size, std::size_t max_bytes) {
  const std::string is = size ? "is " + std::to_string(*size) + " bytes (" + FormatBytes(*size) +
                                    "), more than"
                              : "grew past";
  return Status::Config(Named(what, path) + " " + is + " the " + FormatBytes(max_bytes) +
                        " such a file may hold");
}

Status CannotRead(const std::string& what, const std::string& path, int err) {
  return Status::Config(Named(what, path) + " cannot be read: " + std::strerror(err));
}

}  // namespace

std::string FileKind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "an unknown kind of file";
}

std::string FormatBytes(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + (bytes == 1 ? " byte" : " bytes");
  std::uint64_t unit = 1024;
  std::size_t i = 0;
  while (i + 1 < std::size(kUnits) && bytes >= unit * 1024) unit *= 1024, ++i;
  char buf[48];
  if (bytes % unit == 0) {
    std::snprintf(buf, sizeof buf, "%llu %s", static_cast<unsigned long long>(bytes / unit),
                  kUnits[i]);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", static_cast<double>(bytes) / unit, kUnits[i]);
  }
  return buf;
}

Result<std::optional<std::string>> ReadUserFile(const std::string& path, const std::string& what,
                                                std::size_t max_bytes) {
  // stat first: a device is never opened (opening one can act: a tape rewinds,
  // a watchdog arms), a FIFO never waited on.
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return std::optional<std::string>();
    return CannotRead(what, path, errno);
  }
  if (!S_ISREG(st.st_mode)) return NotRegular(what, path, st.st_mode);
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    return TooLarge(what, path, static_cast<std::uint64_t>(st.st_size), max_bytes);
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return std::optional<std::string>();
    return CannotRead(what, path, errno);
  }
  // The path may have been replaced between stat and open: the descriptor decides.
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    ::close(fd);
    if (!S_ISREG(st.st_mode)) return NotRegular(what, path, st.st_mode);
    return CannotRead(what, path, err);
  }
  std::string out;
  char buf[16384];
  // One byte past the cap tells a file that grew since fstat from one that fits.
  while (out.size() <= max_bytes) {
    ssize_t n = ::read(fd, buf, std::min(sizeof(buf), max_bytes + 1 - out.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return CannotRead(what, path, err);
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  if (out.size() > max_bytes) return TooLarge(what, path, std::nullopt, max_bytes);
  return std::optional<std::string>(std::move(out));
}

int PendingStopSignal() {
  sigset_t pending;
  sigemptyset(&pending);
  if (::sigpending(&pending) != 0) return 0;
  if (sigismember(&pending, SIGTERM) == 1) return SIGTERM;
  if (sigismember(&pending, SIGINT) == 1) return SIGINT;
  return 0;
}

}  // namespace trainlet::exitcodes
