// Runs the built binary (TRAINLET_BIN) as a parent does, for the tests that
// need the real process: cli_test (exit codes, --help, signals) and
// agent_binary_test (what only workers running under it show). What the
// front end decides is front_end_test's, in process.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <algorithm>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

namespace trainlet_test {

using Clock = std::chrono::steady_clock;

// Bad input exits at once: never a hang, never the rendezvous or grace
// timeouts (minutes). The bound, in seconds, is a hang guard, not a speed
// target: it allows for a sanitizer build (TSan runs the agent several times
// slower) on a machine under stress-ng, where starting a process can take
// seconds. How fast it really exits is bench/startup.py's to measure.
constexpr double kPromptExitSeconds = 20.0;

struct Outcome {
  int code;
  std::string out;  // stdout and stderr together
  double seconds;
};

inline Outcome Trainlet(const std::string& env, const std::string& args) {
  // `env -i` keeps the host's MASTER_ADDR/JOB_COMPLETION_INDEX out of the test, and
  // TRAINLET_LIBNCCL its NCCL (hermetic: the outcome must not depend on whether
  // this machine has libnccl.so.2, which under TSan also takes ~1 s to load).
  std::string cmd = "env -i PATH=/usr/bin:/bin HOSTNAME=x TRAINLET_LIBNCCL=/nonexistent/libnccl.so.2 " +
                    env + " " + TRAINLET_BIN + " " +
                    args + " 2>&1";
  auto t0 = Clock::now();
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  int status = ::pclose(p);
  return {WEXITSTATUS(status), out,
          std::chrono::duration<double>(Clock::now() - t0).count()};
}

// A TCP port free on loopback now (bound to 0, then closed).
inline std::string FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return std::to_string(ntohs(a.sin_port));
}

// Whether a TCP port on loopback can be bound now (closed again at once).
inline bool CanBind(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

// PORT such that PORT and PORT+1 are free on loopback now, below the kernel's
// ephemeral range (ip(7), ip_local_port_range): FreePort's port is in that
// range, where its neighbour may be any process's outgoing connection (the
// second `trainlet local` agent's --health-port once was: exit 78).
inline std::string FreePortPair() {
  int low = 32768, high = 60999;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low >> high;
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> pick(10000, std::max(10001, low - 2));
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int port = pick(rng);
    if (CanBind(port) && CanBind(port + 1)) return std::to_string(port);
  }
  return FreePort();
}

// A file's content ("" when missing).
inline std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace trainlet_test
