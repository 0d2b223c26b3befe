#include "trainlet/agent/cli.h"

#include <string.h>
#include <malloc.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include <CLI/CLI.hpp>
#include <spdlog/cfg/env.h>
#include <spdlog/spdlog.h>

#include "file_util.h"
#include "output.h"
#include "trainlet/agent/build_info.h"
#include "trainlet/agent/evidence.h"
#include "trainlet/agent/gpu_setup.h"
#include "trainlet/agent/health.h"
#include "trainlet/agent/identity.h"
#include "trainlet/agent/local.h"
#include "trainlet/agent/pod.h"
#include "trainlet/exitcodes/exit_code.h"
#include "trainlet/rendezvous/auth.h"
#include "trainlet/exitcodes/policy.h"
#include "trainlet/exitcodes/termination.h"
#include "trainlet/gpu/devices.h"
#include "trainlet/gpu/health.h"
#include "trainlet/gpu/netif.h"
#include "trainlet/gpu/preflight.h"

extern char** environ;

namespace trainlet::agent {
namespace {

using exitcodes::kExitConfig;

std::map<std::string, std::string> Environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

std::optional<std::string> ReadFile(const std::string& path) {
  return ReadSmallFile(path, 1 << 20);
}

// Every flag of the pod agent, as strings until validated.
struct Flags {
  std::string node_rank, nnodes, nproc_per_node, master_addr, job_id, attempt, gang;
  std::string podinfo_file, podinfo_dir = "/etc/podinfo";
  std::string rdzv_port = "29400", master_port = "29500";
  std::string rdzv_timeout = "600", grace_period = "25";
  std::string log_level;
  std::vector<std::string> exit_codes, markers;
  std::string fatal_exit_codes;
  std::string termination_log;
  std::string hang_timeout = "0", hang_start_timeout = "0", hang_signal = "SIGUSR1";
  std::string health_port = "0";
  std::string max_restarts = "0";
  std::string token_file;
  bool preflight = false, require_gpus = false;
  std::string preflight_timeout = "60", preflight_min_busbw = "0";
  std::string nccl_ids = "on", gpu_health = "on";
  std::vector<std::string> command;
  std::map<std::string, CLI::Option*> opts;
};

// Adds --<name> with TRAINLET_<NAME> as its environment variable.
template <typename T>
CLI::Option* AddFlag(CLI::App& app, Flags& f, const std::string& name, T* target,
                     const std::string& help) {
  std::string env = "TRAINLET_";
  for (char c : name) env += c == '-' ? '_' : static_cast<char>(std::toupper(c));
  CLI::Option* o = app.add_option("--" + name, *target, help)->envname(env);
  f.opts[name] = o;
  return o;
}

void AddAgentFlags(CLI::App& app, Flags& f, bool local) {
  AddFlag(app, f, "nnodes", &f.nnodes,
          "number of pods in the gang (the Job's completions); also PET_NNODES");
  AddFlag(app, f, "nproc-per-node", &f.nproc_per_node,
          "workers per pod, or auto|gpu: one per visible GPU (auto: 1 without a GPU); each "
          "worker picks its GPU by LOCAL_RANK, as under torchrun; also PET_NPROC_PER_NODE "
          "(default 1)");
  f.opts["preflight"] =
      app.add_flag("--preflight", f.preflight,
                   "before the trainer, check NCCL across every GPU of the gang (init, a checked "
                   "all-reduce, bus bandwidth); a failure exits 74 (hardware) or 75 (infra)")
          ->envname("TRAINLET_PREFLIGHT");
  AddFlag(app, f, "preflight-timeout", &f.preflight_timeout,
          "seconds for the preflight's NCCL init and all-reduces (default 60)");
  AddFlag(app, f, "preflight-min-busbw", &f.preflight_min_busbw,
          "GB/s: a preflight bus bandwidth below this exits 75 (default 0: no floor)");
  f.opts["require-gpus"] =
      app.add_flag("--require-gpus", f.require_gpus,
                   "with --preflight: a pod without a usable GPU exits 74 instead of skipping")
          ->envname("TRAINLET_REQUIRE_GPUS");
  AddFlag(app, f, "nccl-ids", &f.nccl_ids,
          "on|off: the leader makes fresh NCCL unique ids each generation for the workers "
          "(TRAINLET_NCCL_UNIQUE_ID, TRAINLET_NCCL_VERSION) (default on)")
      ->check(CLI::IsMember({"on", "off"}));
  AddFlag(app, f, "gpu-health", &f.gpu_health,
          "on|off: NVML checks (ECC, Xid, recovery action) at start and after a worker failure; "
          "a fault exits 74 (default on)")
      ->check(CLI::IsMember({"on", "off"}));
  AddFlag(app, f, "grace-period", &f.grace_period,
          "seconds between forwarding SIGTERM and SIGKILL; set it a few seconds below the "
          "pod's terminationGracePeriodSeconds (default 25, for Kubernetes' default 30)");
  AddFlag(app, f, "rdzv-timeout", &f.rdzv_timeout,
          "seconds to find the leader and form the gang before exiting 75 (default 600)");
  AddFlag(app, f, "max-restarts", &f.max_restarts,
          "restart the whole gang in place up to this many times after a retriable failure "
          "(worker, infra, oom, a lost pod): new rendezvous generation, pods keep running; "
          "never after bug, config or hardware; also PET_MAX_RESTARTS (default 0)");
  AddFlag(app, f, "log-level", &f.log_level,
          "trace|debug|info|warn|error|off (default info, or SPDLOG_LEVEL)");
  AddFlag(app, f, "exit-code", &f.exit_codes,
          "CLASS=CODE, repeatable or comma-separated: change a class's exit code "
          "(`trainlet exit-codes`)")
      ->delimiter(',');
  AddFlag(app, f, "fatal-exit-codes", &f.fatal_exit_codes,
          "comma list of worker exit codes that mean a software defect (default 42)");
  AddFlag(app, f, "marker", &f.markers,
          "CLASS=TEXT, repeatable: stderr text that classifies a worker failure (bug, infra, "
          "hardware, oom), checked before the built-in table");
  AddFlag(app, f, "hang-timeout", &f.hang_timeout,
          "seconds a worker may go without touching $TRAINLET_HEARTBEAT_FILE before the gang "
          "is stopped as hung (exit 75); 0 = off (default)");
  AddFlag(app, f, "hang-start-timeout", &f.hang_start_timeout,
          "seconds until a worker's first heartbeat (model loading, compilation); default: "
          "--hang-timeout");
  AddFlag(app, f, "hang-signal", &f.hang_signal,
          "signal sent to the workers when a hang is found, for stack dumps (default SIGUSR1)");
  AddFlag(app, f, "termination-log", &f.termination_log,
          "file for the JSON summary of a non-zero exit (default /dev/termination-log when "
          "writable)");
  if (local) return;
  AddFlag(app, f, "node-rank", &f.node_rank,
          "this pod's completion index; else JOB_COMPLETION_INDEX, PET_NODE_RANK, or the "
          "--podinfo-file annotation");
  AddFlag(app, f, "master-addr", &f.master_addr,
          "the leader's (index 0) host name; also PET_MASTER_ADDR, MASTER_ADDR; default: "
          "derived from this pod's FQDN (<prefix>-0.<subdomain>...)");
  AddFlag(app, f, "rdzv-port", &f.rdzv_port, "the leader's rendezvous port (default 29400)");
  AddFlag(app, f, "master-port", &f.master_port,
          "MASTER_PORT for the trainers' own store; also PET_MASTER_PORT (default 29500)");
  AddFlag(app, f, "job-id", &f.job_id,
          "the job's identity; pods of other jobs are refused (default: the leader's host "
          "label)");
  AddFlag(app, f, "health-port", &f.health_port,
          "serve /readyz (the gang has formed) and /livez (no hang) over HTTP on this port; "
          "0 = off (default); see also `trainlet probe`");
  AddFlag(app, f, "token-file", &f.token_file,
          "file holding a shared secret (e.g. a mounted Secret): leader and members prove it "
          "to each other by HMAC-SHA256; it never crosses the wire or reaches a log");
  AddFlag(app, f, "attempt", &f.attempt,
          "the job's restart attempt; pods of other attempts are refused (default: JobSet's "
          "restart-attempt annotation, else 0)");
  AddFlag(app, f, "podinfo-dir", &f.podinfo_dir,
          "downward-API volume folder with the pod's `labels` and `annotations` files "
          "(default /etc/podinfo)");
  AddFlag(app, f, "podinfo-file", &f.podinfo_file,
          "the downward-API annotations file alone (default <podinfo-dir>/annotations)");
  AddFlag(app, f, "gang", &f.gang,
          "one gang across a JobSet's replicated Jobs, in their order: NAME=PODS or "
          "NAME=REPLICASxPODS, comma-separated (e.g. leader=1,workers=4); the pod's role and "
          "job index come from JobSet's labels in --podinfo-dir or its hostname; implies "
          "--nnodes; workers get ROLE_NAME/ROLE_RANK/ROLE_WORLD_SIZE per role");
}

// --flag, else TRAINLET_FLAG (both through CLI11), else PET_FLAG.
std::optional<std::string> Given(const Flags& f, const std::string& name,
                                 const std::map<std::string, std::string>& env,
                                 const std::string* value, const char* pet = nullptr) {
  if (f.opts.at(name)->count() > 0) return *value;
  if (pet != nullptr) {
    if (auto it = env.find(pet); it != env.end()) return it->second;
  }
  return std::nullopt;
}

exitcodes::Result<std::uint16_t> ParsePort(const std::string& what, const std::string& v) {
  auto n = ParseCount(what, v, 65535);
  if (!n.ok()) return n.status();
  if (*n == 0) return exitcodes::Status::Config(what + "='0' is not a port peers can reach");
  return static_cast<std::uint16_t>(*n);
}

// "SIGUSR1", "USR1" or "10".
exitcodes::Result<int> ParseSignal(const std::string& what, const std::string& v) {
  std::string name = v.starts_with("SIG") ? v.substr(3) : v;
  for (int s = 1; s < 32; ++s) {
    const char* abbrev = sigabbrev_np(s);
    if ((abbrev != nullptr && name == abbrev) || v == std::to_string(s)) {
      if (s == SIGKILL || s == SIGSTOP) break;
      return s;
    }
  }
  return exitcodes::Status::Config(what + "='" + v + "' is not a signal that can be sent for "
                                   "diagnostics (e.g. SIGUSR1, SIGQUIT)");
}

// Plain decimal seconds, 0 allowed (a feature switched off).
exitcodes::Result<std::chrono::milliseconds> ParseSecondsOrZero(const std::string& what,
                                                                const std::string& v);

exitcodes::Result<std::chrono::milliseconds> ParseSeconds(const std::string& what,
                                                          const std::string& v) {
  // Plain decimal seconds ("25", "0.5"): no signs, exponents, hex or spaces.
  bool plain = !v.empty() && v.find_first_not_of("0123456789.") == std::string::npos &&
               std::count(v.begin(), v.end(), '.') <= 1 && v.front() != '.' && v.back() != '.';
  double s = plain ? std::strtod(v.c_str(), nullptr) : -1;
  if (!plain || s < 0.001 || s > 1e7) {
    return exitcodes::Status::Config(what + "='" + v +
                                     "' is not a number of seconds between 0.001 and 10000000");
  }
  return std::chrono::milliseconds(static_cast<long long>(std::llround(s * 1000)));
}

exitcodes::Result<std::chrono::milliseconds> ParseSecondsOrZero(const std::string& what,
                                                                const std::string& v) {
  if (v == "0") return std::chrono::milliseconds(0);
  return ParseSeconds(what, v);
}

void ConfigureLogging(const std::string& level_flag) {
  auto logger = std::make_shared<spdlog::logger>("trainlet", MakeLogSink());
  logger->set_pattern("[trainlet %Y-%m-%dT%H:%M:%S.%e %l] %v");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::info);
  spdlog::cfg::load_env_levels();  // SPDLOG_LEVEL
  if (!level_flag.empty()) spdlog::set_level(spdlog::level::from_str(level_flag));
}

// A failure before the pod starts: one line on stderr, the termination
// message, the class's code. Bad input is class config (ConfigError).
int StartupError(exitcodes::FailureClass c, const std::string& message,
                 const exitcodes::ExitCodeTable& codes = {}, const std::string& termination_log = "",
                 std::uint32_t pod_index = 0) {
  int code = codes.CodeFor(c);
  exitcodes::TerminationInfo info;
  info.verdict = {c, code, message, "phase"};
  info.pod_index = pod_index;
  std::string summary = exitcodes::TerminationMessage(info);
  WriteTerminationLog(termination_log, summary);
  // The human line, then the same summary as every non-zero exit ends with.
  std::fprintf(stderr, "trainlet: %s (exit %d; see trainlet --help)\n%s\n", message.c_str(), code,
               summary.c_str());
  return code;
}

int ConfigError(const std::string& message, const exitcodes::ExitCodeTable& codes = {},
                const std::string& termination_log = "", std::uint32_t pod_index = 0) {
  return StartupError(exitcodes::FailureClass::kConfig, message, codes, termination_log, pod_index);
}

// "0", "12.5": a non-negative decimal.
exitcodes::Result<double> ParseRate(const std::string& what, const std::string& v) {
  bool plain = !v.empty() && v.find_first_not_of("0123456789.") == std::string::npos &&
               std::count(v.begin(), v.end(), '.') <= 1 && v.front() != '.' && v.back() != '.';
  if (!plain) return exitcodes::Status::Config(what + "='" + v + "' is not a number like 12.5");
  return std::strtod(v.c_str(), nullptr);
}

void PrintExitCodes() {
  std::printf("%-12s %-5s %s\n", "class", "code", "meaning");
  for (const auto& row : exitcodes::ContractTable()) {
    std::string code = row.code < 0 ? "*" : std::to_string(row.code);
    std::printf("%-12s %-5s %s\n", std::string(exitcodes::ClassName(row.failure_class)).c_str(),
                code.c_str(), std::string(row.meaning).c_str());
  }
}

std::string SelfExe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "trainlet";
}

}  // namespace

namespace {

// Parses flags and environment. Returns the exit code of everything handled
// here (help, version, `trainlet local`, config errors), or fills *pod and
// returns 0: the pod then runs after the parser (and its memory) is gone.
int ParseFlags(int argc, char** argv, std::optional<PodOptions>* pod) {
  CLI::App app{
      "trainlet: the in-pod launcher for distributed training on Kubernetes.\n"
      "Runs as the container entrypoint (PID 1): finds the gang's leader, forms the gang,\n"
      "starts the trainer with torchrun's environment, supervises it, and exits with a code\n"
      "the Job's podFailurePolicy understands (`trainlet exit-codes`).",
      "trainlet"};
  app.set_version_flag("--version", std::string("trainlet ") + kVersion + " (commit " + kCommit + ")");
  app.footer(
      "Every flag is also TRAINLET_<FLAG> in the environment (e.g. TRAINLET_NNODES).\n"
      "Examples:\n"
      "  trainlet --nnodes 4 --nproc-per-node 8 -- python3 train.py\n"
      "  trainlet local --nnodes 2 --nproc-per-node 2 -- python3 train.py\n"
      "  trainlet exit-codes");
  Flags flags, local_flags;
  AddAgentFlags(app, flags, false);
  app.add_option("command", flags.command, "the trainer command, after --");

  CLI::App* local = app.add_subcommand(
      "local", "run a whole gang on this machine: N agents over loopback, same code paths");
  // Its flags are the agent's again, declared only when `local` is on the
  // command line: CLI11 spends as long declaring ~50 options as the rest of an
  // agent's start-up (bench/HISTORY.md: launch overhead).
  bool local_requested = false;
  for (int i = 1; i < argc && std::string_view(argv[i]) != "--"; ++i) {
    local_requested = local_requested || std::string_view(argv[i]) == "local";
  }
  if (local_requested) {
    AddAgentFlags(*local, local_flags, true);
    local->add_option("command", local_flags.command, "the trainer command, after --");
  }
  CLI::App* exit_codes = app.add_subcommand("exit-codes", "print the exit-code contract");
  // Internal: the agent's short-lived GPU preflight child (gpu/preflight.h).
  CLI::App* preflight_child = app.add_subcommand("preflight", "")->group("");
  std::string probe_what, probe_port = "0";
  CLI::App* probe = app.add_subcommand(
      "probe", "exec probe: exit 0 when the local agent is ready / live (needs --health-port)");
  probe->add_option("what", probe_what, "ready or live")->required()->check(
      CLI::IsMember({"ready", "live"}));
  probe->add_option("--health-port", probe_port, "the agent's --health-port")
      ->envname("TRAINLET_HEALTH_PORT");
  exitcodes::PolicyOptions policy_options;
  std::vector<std::string> policy_codes;
  CLI::App* policy = app.add_subcommand(
      "policy", "print the Job podFailurePolicy (and JobSet failurePolicy) for the contract");
  policy->add_option("--container", policy_options.container,
                     "containerName the exit-code rules match (default trainer; '' for any)");
  policy->add_flag("--per-index", policy_options.per_index,
                   "FailIndex instead of FailJob, for backoffLimitPerIndex");
  policy->add_flag("--jobset", policy_options.jobset, "also print a JobSet failurePolicy");
  policy->add_option("--max-restarts", policy_options.max_restarts,
                     "JobSet failurePolicy.maxRestarts (default 3)");
  policy->add_option("--backoff-limit-per-index", policy_options.backoff_limit_per_index,
                     "with --per-index: the Job's backoffLimitPerIndex (default 2)");
  policy->add_option("--exit-code", policy_codes, "CLASS=CODE, as for the agent")
      ->envname("TRAINLET_EXIT_CODE")
      ->delimiter(',');

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --version
  } catch (const CLI::ParseError& e) {
    return ConfigError(e.what());
  }

  if (preflight_child->parsed()) return gpu::PreflightChildMain();
  if (exit_codes->parsed()) {
    PrintExitCodes();
    return 0;
  }
  if (probe->parsed()) {
    auto port = ParsePort("--health-port/TRAINLET_HEALTH_PORT", probe_port);
    if (!port.ok()) return ConfigError(port.status().message());
    return Probe(probe_what, *port);
  }
  if (policy->parsed()) {
    auto codes = exitcodes::ExitCodeTable::FromFlags(policy_codes, "");
    if (!codes.ok()) return ConfigError(codes.status().message());
    std::fputs(exitcodes::GeneratePolicy(*codes, policy_options).c_str(), stdout);
    return 0;
  }
  const auto env = Environment();
  const bool is_local = local->parsed();
  Flags& f = is_local ? local_flags : flags;
  ConfigureLogging(f.log_level);
  if (!f.log_level.empty() && spdlog::level::from_str(f.log_level) == spdlog::level::off &&
      f.log_level != "off") {
    return ConfigError("--log-level='" + f.log_level + "' is not one of trace, debug, info, "
                       "warn, error, off");
  }
  auto table = exitcodes::ExitCodeTable::FromFlags(f.exit_codes, f.fatal_exit_codes);
  if (!table.ok()) return ConfigError(table.status().message(), {}, f.termination_log);
  const exitcodes::ExitCodeTable& codes = *table;
  // The pod's index for the summary, when one of its sources parses (the
  // failure may be about something else entirely).
  std::uint32_t index_hint = 0;
  for (const std::optional<std::string>& v :
       {is_local ? std::nullopt : Given(f, "node-rank", env, &f.node_rank),
        env.contains("JOB_COMPLETION_INDEX") ? std::optional(env.at("JOB_COMPLETION_INDEX"))
                                             : std::nullopt}) {
    if (!v) continue;
    if (auto n = ParseCount("index", *v, 1'000'000); n.ok()) {
      index_hint = *n;
      break;
    }
  }
  auto config_error = [&](const std::string& m) {
    return ConfigError(m, codes, f.termination_log, index_hint);
  };
  exitcodes::MarkerTable markers = exitcodes::MarkerTable::Defaults();
  if (auto s = markers.Add(f.markers); !s.ok()) return config_error(s.message());
  if (f.command.empty()) {
    return config_error("no trainer command: give it after --, e.g. trainlet -- python3 train.py");
  }
  auto grace = ParseSeconds("--grace-period", f.grace_period);
  if (!grace.ok()) return config_error(grace.status().message());
  auto rdzv_timeout = ParseSeconds("--rdzv-timeout", f.rdzv_timeout);
  if (!rdzv_timeout.ok()) return config_error(rdzv_timeout.status().message());

  auto hang_timeout = ParseSecondsOrZero("--hang-timeout", f.hang_timeout);
  if (!hang_timeout.ok()) return config_error(hang_timeout.status().message());
  auto hang_start_timeout = ParseSecondsOrZero("--hang-start-timeout", f.hang_start_timeout);
  if (!hang_start_timeout.ok()) return config_error(hang_start_timeout.status().message());
  auto hang_signal = ParseSignal("--hang-signal", f.hang_signal);
  if (!hang_signal.ok()) return config_error(hang_signal.status().message());
  auto max_restarts = ParseCount(
      "--max-restarts",
      Given(f, "max-restarts", env, &f.max_restarts, "PET_MAX_RESTARTS").value_or(f.max_restarts),
      1'000'000);
  if (!max_restarts.ok()) return config_error(max_restarts.status().message());

  // GPUs (README "GPUs and NCCL").
  GpuOptions gpu_options;
  gpu_options.nccl_ids = f.nccl_ids == "on";
  gpu_options.health = f.gpu_health == "on";
  gpu_options.preflight = f.preflight;
  gpu_options.require_gpus = f.require_gpus;
  gpu_options.self_exe = SelfExe();
  gpu_options.libcuda = gpu::LibraryPath("TRAINLET_LIBCUDA", gpu::kDefaultLibCuda);
  gpu_options.libnccl = gpu::LibraryPath("TRAINLET_LIBNCCL", gpu::kDefaultLibNccl);
  gpu_options.libnvml = gpu::LibraryPath("TRAINLET_LIBNVML", gpu::kDefaultLibNvml);
  // No NVIDIA driver on this node (a CPU pod): no NVML child at start and no NCCL
  // in the agent, which would cost every start a fork and the leader tens of MiB
  // (bench/RESULTS.md). A library named explicitly (TRAINLET_LIB*) is still used.
  if (!gpu::NvidiaDriverPresent()) {
    if (!env.contains("TRAINLET_LIBNVML")) gpu_options.health = false;
    if (!env.contains("TRAINLET_LIBNCCL")) gpu_options.nccl_ids = false;
    spdlog::debug("no NVIDIA driver on this node (/proc/driver/nvidia, /dev/nvidiactl): "
                  "GPU health checks {}, NCCL ids {}",
                  gpu_options.health ? "on" : "off", gpu_options.nccl_ids ? "on" : "off");
  }
  auto preflight_timeout = ParseSeconds("--preflight-timeout", f.preflight_timeout);
  if (!preflight_timeout.ok()) return config_error(preflight_timeout.status().message());
  gpu_options.preflight_timeout = *preflight_timeout;
  auto min_busbw = ParseRate("--preflight-min-busbw", f.preflight_min_busbw);
  if (!min_busbw.ok()) return config_error(min_busbw.status().message());
  gpu_options.preflight_min_busbw_gbps = *min_busbw;
  // --nproc-per-node auto|gpu: one worker per GPU the driver shows this pod
  // (after CUDA_VISIBLE_DEVICES), found in a child so PID 1 never inits CUDA.
  std::optional<std::string> nproc_value =
      is_local ? (f.nproc_per_node.empty() ? std::nullopt : std::optional(f.nproc_per_node))
               : Given(f, "nproc-per-node", env, &f.nproc_per_node, "PET_NPROC_PER_NODE");
  std::optional<std::string> resolved_nproc;
  if ((nproc_value && gpu::NeedsDiscovery(*nproc_value)) || f.preflight) {
    for (const char* var : {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"}) {
      auto it = env.find(var);
      auto v = gpu::ParseVisibleDevices(var, it == env.end() ? std::nullopt : std::optional(it->second));
      if (!v.ok()) return config_error(v.status().message());
    }
    gpu::Discovery d = gpu::DiscoverInChild(gpu_options.libcuda);
    std::string list;
    for (const auto& g : d.gpus) {
      list += (list.empty() ? "" : ", ") + std::to_string(g.index) + " " + g.uuid + " " + g.pci_bus_id;
    }
    spdlog::info("GPUs: {}{}", d.detail, list.empty() ? "" : " (" + list + ")");
    if (nproc_value && gpu::NeedsDiscovery(*nproc_value)) {
      auto n = gpu::ResolveWorkersPerPod("--nproc-per-node", *nproc_value, d);
      if (!n.ok()) return config_error(n.status().message());
      resolved_nproc = *n;
      if (is_local) f.nproc_per_node = *n;
    }
  }
  // NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME against the real interfaces (C27).
  // Only when set: listing the interfaces is a netlink dump in every pod's start.
  if (env.contains("NCCL_SOCKET_IFNAME") || env.contains("GLOO_SOCKET_IFNAME")) {
    if (auto ifs = gpu::ListInterfaces(); ifs.ok()) {
      if (auto s = gpu::ValidateSocketIfnames(env, *ifs); !s.ok()) return config_error(s.message());
    }
  }
  // A GPU that NVML already reports broken: hardware, before the gang forms (C30).
  if (auto fault = GpuFaultEvidence(gpu_options)) {
    return StartupError(exitcodes::FailureClass::kHardware, "GPU fault at start: " + *fault, codes,
                        f.termination_log, index_hint);
  }

  if (is_local) {
    LocalOptions lo;
    auto nnodes = ParseCount("--nnodes", f.nnodes.empty() ? "1" : f.nnodes, 4096);
    if (!nnodes.ok()) return config_error(nnodes.status().message());
    auto nproc = ParseCount("--nproc-per-node", f.nproc_per_node.empty() ? "1" : f.nproc_per_node,
                            1024);
    if (!nproc.ok()) return config_error(nproc.status().message());
    if (*nnodes == 0 || *nproc == 0) return config_error("--nnodes and --nproc-per-node must be >= 1");
    lo.nnodes = *nnodes;
    lo.nproc_per_node = *nproc;
    lo.command = f.command;
    lo.grace = *grace;
    lo.rdzv_timeout = f.opts.at("rdzv-timeout")->count() > 0 ? *rdzv_timeout
                                                             : std::chrono::milliseconds(60'000);
    lo.log_level = f.log_level.empty() ? spdlog::level::to_string_view(spdlog::get_level()).data()
                                       : f.log_level;
    lo.self_exe = SelfExe();
    for (const auto& c : f.exit_codes) lo.pass_through.insert(lo.pass_through.end(), {"--exit-code", c});
    for (const auto& m : f.markers) lo.pass_through.insert(lo.pass_through.end(), {"--marker", m});
    if (!f.fatal_exit_codes.empty()) {
      lo.pass_through.insert(lo.pass_through.end(), {"--fatal-exit-codes", f.fatal_exit_codes});
    }
    if (!f.token_file.empty()) {
      lo.pass_through.insert(lo.pass_through.end(), {"--token-file", f.token_file});
    }
    lo.pass_through.insert(lo.pass_through.end(),
                           {"--max-restarts", std::to_string(*max_restarts),
                            "--hang-timeout", f.hang_timeout, "--hang-start-timeout",
                            f.hang_start_timeout, "--hang-signal", f.hang_signal});
    lo.pass_through.insert(lo.pass_through.end(),
                           {"--preflight-timeout", f.preflight_timeout, "--preflight-min-busbw",
                            f.preflight_min_busbw, "--nccl-ids", f.nccl_ids, "--gpu-health",
                            f.gpu_health});
    if (f.preflight) lo.pass_through.push_back("--preflight");
    if (f.require_gpus) lo.pass_through.push_back("--require-gpus");
    return RunLocal(lo);
  }

  IdentityInputs in;
  in.node_rank = Given(f, "node-rank", env, &f.node_rank);
  in.nnodes = Given(f, "nnodes", env, &f.nnodes);
  in.nproc_per_node = Given(f, "nproc-per-node", env, &f.nproc_per_node);
  if (resolved_nproc) in.nproc_per_node = resolved_nproc;
  in.master_addr = Given(f, "master-addr", env, &f.master_addr);
  in.job_id = Given(f, "job-id", env, &f.job_id);
  in.attempt = Given(f, "attempt", env, &f.attempt);
  in.gang = Given(f, "gang", env, &f.gang);
  in.podinfo_dir = Given(f, "podinfo-dir", env, &f.podinfo_dir);
  in.podinfo_file = Given(f, "podinfo-file", env, &f.podinfo_file);
  in.env = env;
  utsname u{};
  ::uname(&u);
  in.hostname = u.nodename;
  in.etc_hosts = ReadFile("/etc/hosts").value_or("");
  in.read_file = ReadFile;
  auto identity = ResolveIdentity(in);
  if (!identity.ok()) return config_error(identity.status().message());

  PodOptions po;
  po.identity = *identity;
  po.command = f.command;
  auto rdzv_port = ParsePort("--rdzv-port/TRAINLET_RDZV_PORT", f.rdzv_port);
  if (!rdzv_port.ok()) return config_error(rdzv_port.status().message());
  const bool master_port_from_pet =
      f.opts.at("master-port")->count() == 0 && env.contains("PET_MASTER_PORT");
  auto master_port = ParsePort(
      master_port_from_pet ? "PET_MASTER_PORT" : "--master-port/TRAINLET_MASTER_PORT",
      Given(f, "master-port", env, &f.master_port, "PET_MASTER_PORT").value_or(f.master_port));
  if (!master_port.ok()) return config_error(master_port.status().message());
  po.rdzv_port = *rdzv_port;
  po.master_port = *master_port;
  po.rdzv_timeout = *rdzv_timeout;
  po.grace = *grace;
  po.env = env;
  po.codes = codes;
  po.markers = markers;
  po.termination_log = f.termination_log;
  if (f.health_port != "0") {
    auto health_port = ParsePort("--health-port/TRAINLET_HEALTH_PORT", f.health_port);
    if (!health_port.ok()) return config_error(health_port.status().message());
    po.health_port = *health_port;
  }
  if (!f.token_file.empty()) {
    auto token = rendezvous::ReadTokenFile(f.token_file);
    if (!token.ok()) return config_error(token.status().message());
    po.token = std::move(token).value();
  }
  po.hang_timeout = *hang_timeout;
  po.hang_start_timeout = *hang_start_timeout;
  po.hang_signal = *hang_signal;
  po.max_restarts = *max_restarts;
  po.gpu = gpu_options;
  *pod = std::move(po);
  return 0;
}

}  // namespace

int Main(int argc, char** argv) {
  std::optional<PodOptions> pod;
  int code = ParseFlags(argc, argv, &pod);
  if (!pod) return code;
  // The parser's ~45 options are freed by now: hand the pages back to the
  // kernel before an agent that runs for days (bench/HISTORY.md: memory).
  ::malloc_trim(0);
  return RunPod(*pod);
}

}  // namespace trainlet::agent
