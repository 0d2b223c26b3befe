#include "trainlet/agent/front/local.h"

#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <map>
#include <random>

#include <boost/asio/io_context.hpp>
#include <spdlog/spdlog.h>

#include "base/output.h"
#include "trainlet/agent/spec/identity.h"
#include "trainlet/agent/run/signals.h"
#include "trainlet/agent/run/supervisor.h"
#include "trainlet/exitcodes/exit_code.h"

extern char** environ;

namespace trainlet::agent {

namespace {

// How many ports below the kernel's ephemeral range FreeLoopbackPorts draws from.
constexpr int kPortWindow = 16384;
constexpr int kPortTries = 256;  // candidates tried before giving up (each a bind(2))

// The low end of the kernel's ephemeral port range (ip(7): ip_local_port_range; Linux's
// default is 32768), or 0 when it cannot be read.
int EphemeralLow() {
  std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0, high = 0;
  return f >> low >> high ? low : 0;
}

// A socket bound to 127.0.0.1:`port` (0: the kernel's choice), or -1; *bound is its port.
int BindLoopback(std::uint16_t port, std::uint16_t* bound) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  socklen_t len = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    return -1;
  }
  *bound = ntohs(a.sin_port);
  return fd;
}

}  // namespace

std::vector<std::uint16_t> FreeLoopbackPorts(std::size_t n) {
  // Below the ephemeral range: the kernel never gives those ports to an outgoing connection
  // or a port-0 bind, so one found free here stays free until an agent binds it (from inside
  // the range, a busy machine's connections took a chosen rendezvous port for minutes).
  // All held at once, so the n ports differ.
  const int low = EphemeralLow();
  const int first = std::max(1024, low - kPortWindow);
  std::mt19937 random{std::random_device{}()};
  std::vector<int> fds;
  std::vector<std::uint16_t> ports;
  const bool below = low - first >= static_cast<int>(n);  // room for n ports below the range
  for (int tries = 0; ports.size() < n && tries < kPortTries; ++tries) {
    const auto port = below ? static_cast<std::uint16_t>(
                                  std::uniform_int_distribution<int>(first, low - 1)(random))
                            : std::uint16_t{0};
    std::uint16_t bound = 0;
    int fd = BindLoopback(port, &bound);
    if (fd < 0) continue;
    fds.push_back(fd);
    ports.push_back(bound);
  }
  for (int fd : fds) ::close(fd);
  if (ports.size() != n) ports.clear();
  return ports;
}

namespace {

// The agents' environment: ours, without the per-pod inputs that would
// contradict their flags (AgentArgv), and with kLocalGangVariable = job_id.
std::vector<std::string> AgentEnvironment(const std::string& job_id) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    std::string name = kv.substr(0, kv.find('='));
    if (name == "JOB_COMPLETION_INDEX" || name == "MASTER_ADDR" || name.starts_with("PET_") ||
        (name.starts_with("TRAINLET_") && !name.starts_with("TRAINLET_LIB"))) {
      continue;  // TRAINLET_LIBCUDA/LIBNCCL/LIBNVML (gpu/devices.h) are not per pod
    }
    env.push_back(kv);
  }
  // Every agent's leader is 127.0.0.1 in this one pod (identity.h: a loopback
  // leader is refused only where the gang spans pods).
  env.push_back(std::string(kLocalGangVariable) + "=" + job_id);
  return env;
}

// Agent i's command line: the gang's identity and ports, then what every agent gets.
// `ports`: rendezvous, MASTER_PORT, JAX coordinator.
std::vector<std::string> AgentArgv(const LocalOptions& o, std::uint32_t i,
                                   const std::vector<std::uint16_t>& ports,
                                   const std::string& job_id) {
  std::vector<std::string> argv = {
      o.self_exe,          "--nnodes",       std::to_string(o.nnodes),
      "--nproc-per-node",  std::to_string(o.nproc_per_node),
      "--node-rank",       std::to_string(i),
      "--master-addr",     "127.0.0.1",
      "--rdzv-port",       std::to_string(ports[0]),
      "--master-port",     std::to_string(ports[1]),
      "--jax-port",        std::to_string(ports[2]),
      "--job-id",          job_id,
      "--grace-period",    std::to_string(o.grace.count() / 1000.0),
      "--rdzv-timeout",    std::to_string(o.rdzv_timeout.count() / 1000.0),
      "--log-level",       o.log_level};
  argv.insert(argv.end(), o.pass_through.begin(), o.pass_through.end());
  if (o.health_port != 0) argv.insert(argv.end(), {"--health-port", std::to_string(o.health_port + i)});
  argv.push_back("--");
  argv.insert(argv.end(), o.command.begin(), o.command.end());
  return argv;
}

// The agents are supervised like workers, with these differences.
SupervisorOptions AgentSupervision(const LocalOptions& o) {
  SupervisorOptions so;
  so.capture_output = false;  // the agents prefix their workers' lines already
  so.noun = "pod agent";
  // An agent that exits peer_failed was stopped by the culprit's failure: wait
  // for the culprit's own code.
  so.collateral_exit_code = exitcodes::kExitPeerFailed;
  // The agents need their own grace period to stop their workers first.
  so.grace = o.grace + kLocalAgentExtraGrace;
  // Each agent stops its own workers: we tell only our children.
  so.stop_every_process = false;
  // Killed ourselves (SIGKILL, an OOM kill), the agents get SIGTERM and stop
  // their workers as for any stop request, instead of running on unsupervised.
  so.parent_death_signal = SIGTERM;
  return so;
}

}  // namespace

int RunLocal(const LocalOptions& o) {
  if (::getpid() != 1) ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  // JAX's coordinator gets one too: two local runs on one machine never share a port.
  const std::vector<std::uint16_t> ports = FreeLoopbackPorts(3);
  if (ports.empty()) {
    spdlog::error("exit {}: no free loopback port", exitcodes::kExitInfra);
    return exitcodes::kExitInfra;
  }
  const std::string job_id = "local-" + std::to_string(::getpid());
  const std::vector<std::string> env = AgentEnvironment(job_id);
  std::vector<WorkerSpec> agents;
  for (std::uint32_t i = 0; i < o.nnodes; ++i) agents.push_back({AgentArgv(o, i, ports, job_id), env, ""});
  // JSON lines keep the formatter ConfigureLogging set (log_format.h).
  if (!o.json_logs) spdlog::set_pattern("[trainlet local %Y-%m-%dT%H:%M:%S.%e %l] %v");
  spdlog::info("local: {} pod(s) x {} worker(s), rendezvous on 127.0.0.1:{}{}{}", o.nnodes,
               o.nproc_per_node, ports[0],
               o.interpreter.empty() ? "" : ", python " + o.interpreter,
               o.health_port == 0 ? ""
                                  : ", health ports " + std::to_string(o.health_port) + ".." +
                                        std::to_string(o.health_port + o.nnodes - 1) +
                                        " (agent i on " + std::to_string(o.health_port) + "+i)");

  boost::asio::io_context io;
  ScopedOutputSinks sinks(io);
  int exit_code = 0;
  Supervisor supervisor(io.get_executor(), AgentSupervision(o), [&](SupervisorResult r) {
    exit_code = r.exit_code;
    io.stop();
  });
  auto signals = SignalSource::Create(io.get_executor(), [&](int signo) {
    if (signo == SIGCHLD) {
      supervisor.Reap();
    } else {
      supervisor.OnSignal(signo);
    }
  });
  if (!signals.ok()) {
    spdlog::error("exit {}: {}", exitcodes::kExitInfra, signals.status().ToString());
    return exitcodes::kExitInfra;
  }
  if (auto s = supervisor.Start(std::move(agents)); !s.ok()) {
    spdlog::error("exit {}: {}", exitcodes::DefaultExitCode(s.failure_class()), s.ToString());
    return exitcodes::DefaultExitCode(s.failure_class());
  }
  io.run();
  spdlog::info("local: exit {}", exit_code);
  return exit_code;
}

}  // namespace trainlet::agent
