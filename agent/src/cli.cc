#include "trainlet/agent/cli.h"

#include <string.h>
#include <malloc.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
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
#include <set>
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
#include "trainlet/agent/log_format.h"
#include "trainlet/agent/pod.h"
#include "trainlet/agent/supervision_policy.h"
#include "trainlet/agent/torchrun.h"
#include "trainlet/agent/worker_env.h"
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
  std::string rdzv_port = "29400", master_port;
  std::string rdzv_timeout = "600", grace_period = "25";
  std::string log_level;
  std::string log_format = "text", worker_log_format = "text";
  std::string straggler_factor = "2";
  std::vector<std::string> exit_codes, markers;
  std::string fatal_exit_codes;
  std::string termination_log;
  std::string hang_timeout = "0", hang_start_timeout = "0", hang_signal = "SIGUSR1";
  std::string signal_scope = "main";
  std::string run_dir;
  std::string health_port = "0";
  std::string max_restarts = "0";
  std::string spares = "0";
  std::string token_file;
  bool preflight = false, require_gpus = false;
  std::string preflight_timeout = "60", preflight_min_busbw = "0";
  std::string nccl_ids = "on", gpu_health = "on";
  // torchrun's own flags (torch/distributed/run.py), with its defaults.
  std::string rdzv_backend = "static", rdzv_endpoint, rdzv_id, rdzv_conf, role;
  std::string monitor_interval = "0.1", start_method = "spawn", event_log_handler = "null";
  std::string log_dir, redirects = "0", tee = "0", local_ranks_filter;
  std::string local_addr, signals_to_handle, shutdown_timeout, logs_specs, numa_binding;
  std::string log_line_prefix_template, duplicate_stdout_filters, duplicate_stderr_filters;
  std::string print_completion;
  bool virtual_local_rank = false;
  std::string python, jax_port = "29600";
  bool standalone = false, module = false, no_python = false, run_path = false;
  std::vector<std::string> command;
  std::map<std::string, CLI::Option*> opts;
  // Flags whose PET_<FLAG> Given() reads (torchrun's argparse `env` action);
  // identity.cc reads PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK and
  // PET_MASTER_ADDR itself.
  std::map<std::string, std::string> pet;
  // The options written on the command line (not from TRAINLET_*).
  std::set<const CLI::Option*> on_line;
};

// torchrun spells each of its flags with dashes and with underscores.
bool IsTorchrunFlag(const std::string& name) {
  static const std::set<std::string> kNames = {
      "nnodes", "nproc-per-node", "max-restarts", "node-rank", "master-addr", "master-port"};
  return kNames.contains(name);
}

std::string EnvName(const std::string& prefix, const std::string& name) {
  std::string env = prefix;
  for (char c : name) env += c == '-' ? '_' : static_cast<char>(std::toupper(c));
  return env;
}

std::string Names(const std::string& name, const std::string& short_name = "") {
  std::string names = (short_name.empty() ? "" : "-" + short_name + ",") + "--" + name;
  if (name.find('-') != std::string::npos) {
    std::string underscored = name;
    std::replace(underscored.begin(), underscored.end(), '-', '_');
    names += ",--" + underscored;
  }
  return names;
}

// Adds --<name> with TRAINLET_<NAME> as its environment variable.
template <typename T>
CLI::Option* AddFlag(CLI::App& app, Flags& f, const std::string& name, T* target,
                     const std::string& help) {
  CLI::Option* o =
      app.add_option(IsTorchrunFlag(name) ? Names(name) : "--" + name, *target, help)
          ->envname(EnvName("TRAINLET_", name));
  // argparse: the last of a repeated flag wins (torchrun's flags only).
  if (IsTorchrunFlag(name)) o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  f.opts[name] = o;
  return o;
}

// One of torchrun's flags: both spellings, TRAINLET_<FLAG>, and PET_<FLAG>
// read by Given().
CLI::Option* AddTorchrunFlag(CLI::App& app, Flags& f, const std::string& name,
                             std::string* target, const std::string& help,
                             const std::string& short_name = "") {
  CLI::Option* o = app.add_option(Names(name, short_name), *target, help + " (torchrun's)")
                       ->envname(EnvName("TRAINLET_", name))
                       ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  f.opts[name] = o;
  f.pet[name] = EnvName("PET_", name);
  return o;
}

// torchrun's switches (its `check_env` action): PET_<FLAG>=1 sets them too.
void AddTorchrunSwitch(CLI::App& app, Flags& f, const std::string& name, bool* target,
                       const std::string& help, const std::string& short_name = "") {
  f.opts[name] = app.add_flag(Names(name, short_name), *target, help + " (torchrun's)")
                     ->envname(EnvName("TRAINLET_", name))
                     ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  f.pet[name] = EnvName("PET_", name);
}

// Where the agent's own files go; in `local` too.
void AddFileFlags(CLI::App& app, Flags& f) {
  AddFlag(app, f, "termination-log", &f.termination_log,
          "file for the JSON summary of a non-zero exit (default /dev/termination-log when "
          "writable)");
  AddFlag(app, f, "run-dir", &f.run_dir,
          "directory for the files trainlet makes for the workers (error files, heartbeat "
          "files); default: the first writable of $TMPDIR, /dev/shm, /tmp, --log-dir");
}

// The log options with --run-dir (run_dir.h), which the pod reads beside --log-dir.
WorkerLogOptions WithRunDir(WorkerLogOptions logs, const std::string& run_dir) {
  logs.run_dir = run_dir;
  return logs;
}

// How the first positional runs; in `local` too.
void AddTrainerFlags(CLI::App& app, Flags& f) {
  AddTorchrunSwitch(app, f, "module", &f.module,
                    "the first argument is a Python module: python -u -m MODULE args", "m");
  AddTorchrunSwitch(app, f, "no-python", &f.no_python,
                    "the first argument is the program itself, not a Python script");
  AddTorchrunSwitch(app, f, "run-path", &f.run_path,
                    "run the script with runpy.run_path in python -u (wins over --no-python)");
  AddFlag(app, f, "python", &f.python,
          "the interpreter for script.py and -m (default: PYTHON_EXEC, as torchrun, else the "
          "python3 on PATH)");
}

// torchrun's flags that take a value (torch/distributed/run.py), one row each:
// name, where its value goes, help, short name.
struct TorchrunFlag {
  const char* name;
  std::string Flags::*target;
  const char* help;
  const char* short_name = "";
};

// torchrun's log-file flags, in the pod form and in `local`.
void AddLogFileFlags(CLI::App& app, Flags& f) {
  static const TorchrunFlag kFlags[] = {
      {"log-dir", &Flags::log_dir,
       "keep each worker's output in <dir>/<run-id>_<suffix>/attempt_<restart>/"
       "<local-rank>/{stdout,stderr}.log (with --redirects / --tee)"},
      {"redirects", &Flags::redirects,
       "streams to files only: 0 none, 1 stdout, 2 stderr, 3 both, or per local "
       "rank as 0:1,1:2", "r"},
      {"tee", &Flags::tee, "streams to files and the console (as --redirects)", "t"},
      {"local-ranks-filter", &Flags::local_ranks_filter,
       "0,1,...: only these local ranks' output reaches the console (files keep all)"},
      {"log-line-prefix-template", &Flags::log_line_prefix_template,
       "the console prefix, with ${role_name}, ${rank}, ${local_rank}, ${hostname} (wins "
       "over TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE; default [rank<N>]: ; none: "
       "--worker-log-format plain)"},
  };
  for (const TorchrunFlag& t : kFlags) {
    AddTorchrunFlag(app, f, t.name, &(f.*t.target), t.help, t.short_name);
  }
}

void AddTorchrunFlags(CLI::App& app, Flags& f) {
  AddTorchrunSwitch(app, f, "standalone", &f.standalone,
                    "a gang of this pod alone, on free loopback ports");
  AddTorchrunSwitch(app, f, "virtual-local-rank", &f.virtual_local_rank,
                    "every worker gets LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES its own GPU (the "
                    "local rank's entry of this pod's list)");
  static const TorchrunFlag kFlags[] = {
      {"rdzv-backend", &Flags::rdzv_backend,
       "static, c10d, etcd, etcd-v2: all served by trainlet's own rendezvous"},
      {"rdzv-endpoint", &Flags::rdzv_endpoint,
       "HOST[:PORT]: the leader's address and rendezvous port (default port 29400)"},
      {"rdzv-id", &Flags::rdzv_id, "the job id (as --job-id)"},
      {"rdzv-conf", &Flags::rdzv_conf,
       "KEY=VALUE,...: join_timeout or timeout (as --rdzv-timeout), read_timeout "
       "(seconds a connecting pod has for its hello); other keys are refused"},
      {"role", &Flags::role, "ROLE_NAME of the workers (default 'default')"},
      {"monitor-interval", &Flags::monitor_interval,
       "accepted: trainlet reaps workers on SIGCHLD, it does not poll"},
      {"start-method", &Flags::start_method,
       "spawn|fork|forkserver, accepted: every worker is a fresh process"},
      {"event-log-handler", &Flags::event_log_handler, "only 'null'"},
      {"local-addr", &Flags::local_addr,
       "on the leader (index 0): the address every trainer gets as MASTER_ADDR"},
      {"signals-to-handle", &Flags::signals_to_handle,
       "signals forwarded to the workers: trainlet always forwards SIGTERM, SIGINT, "
       "SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2; others are refused"},
      {"shutdown-timeout", &Flags::shutdown_timeout,
       "as --grace-period; also TORCH_ELASTIC_SHUTDOWN_TIMEOUT"},
      {"logs-specs", &Flags::logs_specs, "refused: no Python plugins"},
      {"numa-binding", &Flags::numa_binding,
       "node|socket|exclusive|core-complex: accepted, no effect (trainlet binds no CPUs)"},
      {"duplicate-stdout-filters", &Flags::duplicate_stdout_filters,
       "accepted, no effect: no filtered copy of the output is written"},
      {"duplicate-stderr-filters", &Flags::duplicate_stderr_filters,
       "accepted, no effect: no filtered copy of the output is written"},
      {"print-completion", &Flags::print_completion,
       "SHELL: prints no completion script (a comment), exits 0"},
  };
  for (const TorchrunFlag& t : kFlags) {
    AddTorchrunFlag(app, f, t.name, &(f.*t.target), t.help, t.short_name);
  }
}

// How a stop goes (README "Grace period"; supervision_policy.h).
void AddStopFlags(CLI::App& app, Flags& f) {
  AddFlag(app, f, "grace-period", &f.grace_period,
          "seconds between forwarding SIGTERM and SIGKILL; set it a few seconds below the "
          "pod's terminationGracePeriodSeconds (default 25, for Kubernetes' default 30)");
  AddFlag(app, f, "signal-scope", &f.signal_scope,
          "main|group: main sends a stop's SIGTERM/SIGINT and forwarded signals to each "
          "worker's main process only, as the kubelet does, and SIGTERM to its process group "
          "and the pod's other processes once the main processes exited (or min(5 s, grace/5) "
          "before the grace period ends); group signals each worker's whole process group and "
          "every other process at once, like torchrun 2.x (default main)")
      ->check(CLI::IsMember({"main", "group"}));
}

void AddAgentFlags(CLI::App& app, Flags& f, bool local) {
  AddFlag(app, f, "nnodes", &f.nnodes,
          "number of pods in the gang (the Job's completions); also PET_NNODES");
  AddFlag(app, f, "nproc-per-node", &f.nproc_per_node,
          "workers per pod: N; gpu: one per visible GPU (none visible: exit 78); cpu: one per "
          "online CPU (os.cpu_count()); auto: gpu where a GPU is visible, else cpu (torchrun's "
          "values); each worker picks its GPU by LOCAL_RANK, as under torchrun; also "
          "PET_NPROC_PER_NODE (default 1)");
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
  AddStopFlags(app, f);
  AddFlag(app, f, "rdzv-timeout", &f.rdzv_timeout,
          "seconds to find the leader and form the gang before exiting 75 (default 600)");
  AddFlag(app, f, "max-restarts", &f.max_restarts,
          "restart the whole gang in place up to this many times after a retriable failure "
          "(worker, infra, oom, a lost pod): new rendezvous generation, pods keep running; "
          "never after bug, config or hardware; also PET_MAX_RESTARTS (default 0)");
  AddFlag(app, f, "spares", &f.spares,
          "hot spares: the Job runs --nnodes + K pods; K wait, connected, without workers, "
          "and take the node rank of a lost pod or of one whose GPU failed (hardware) in the "
          "next generation, without waiting for Kubernetes (default 0)");
  AddFlag(app, f, "log-level", &f.log_level,
          "trace|debug|info|warn|error|off (default info, or SPDLOG_LEVEL)");
  AddFlag(app, f, "log-format", &f.log_format,
          "text|json: json writes each of trainlet's own log lines as one JSON object (time, "
          "level, pod_index, generation, message, fields); the last one holds the termination "
          "message as \"summary\" (default text)")
      ->check(CLI::IsMember({"text", "json"}));
  AddFlag(app, f, "worker-log-format", &f.worker_log_format,
          "text|json|plain: json wraps each worker output line as {\"rank\":R,\"stream\":...,"
          "\"line\":...} instead of the [rankR]: prefix; plain writes it as the worker did, "
          "no prefix (torchrun's console without --tee) (default text)")
      ->check(CLI::IsMember({"text", "json", "plain"}));
  AddFlag(app, f, "exit-code", &f.exit_codes,
          "CLASS=CODE, repeatable or comma-separated: change a class's exit code "
          "(`trainlet exit-codes`)")
      ->delimiter(',');
  AddFlag(app, f, "fatal-exit-codes", &f.fatal_exit_codes,
          "comma list of worker exit codes that mean a software defect (default 42)");
  AddFlag(app, f, "marker", &f.markers,
          "CLASS=TEXT, repeatable: text in a worker's stdout or stderr that classifies its "
          "failure (bug, infra, hardware, oom), checked before the built-in table");
  AddFlag(app, f, "hang-timeout", &f.hang_timeout,
          "seconds a worker may go without touching $TRAINLET_HEARTBEAT_FILE before the gang "
          "is stopped as hung (exit 75); 0 = off (default)");
  AddFlag(app, f, "hang-start-timeout", &f.hang_start_timeout,
          "seconds until a worker's first heartbeat (model loading, compilation); default: "
          "none (a worker that never touches the file is not watched)");
  AddFlag(app, f, "straggler-factor", &f.straggler_factor,
          "with --hang-timeout: the leader logs and exports (trainlet_straggler) a pod whose "
          "slowest worker touches its heartbeat file this many times less often than the "
          "gang's median; 0 = off (default 2)");
  AddFlag(app, f, "hang-signal", &f.hang_signal,
          "signal sent, when a hang is found, to each worker's main process if it handles it "
          "(--signal-scope group: to every process of its group that does), for stack dumps "
          "(default SIGUSR1)");
  AddFileFlags(app, f);
  AddTrainerFlags(app, f);
  AddLogFileFlags(app, f);
  AddFlag(app, f, "health-port", &f.health_port,
          "serve /readyz (the gang has formed) and /livez (no hang) over HTTP on this port; "
          "0 = off (default); see also `trainlet probe`; under `local`, agent i serves on "
          "PORT+i");
  if (local) return;
  AddTorchrunFlags(app, f);
  AddFlag(app, f, "node-rank", &f.node_rank,
          "this pod's completion index; else JOB_COMPLETION_INDEX, PET_NODE_RANK, or the "
          "--podinfo-file annotation");
  AddFlag(app, f, "master-addr", &f.master_addr,
          "the leader's (index 0) host name; also PET_MASTER_ADDR, MASTER_ADDR; default: "
          "derived from this pod's FQDN (<prefix>-0.<subdomain>...)");
  AddFlag(app, f, "rdzv-port", &f.rdzv_port, "the leader's rendezvous port (default 29400)");
  AddFlag(app, f, "master-port", &f.master_port,
          "MASTER_PORT for the trainers' own store; also PET_MASTER_PORT, MASTER_PORT (default: "
          "a port the leader finds free and hands to every pod, so it never clashes)");
  AddFlag(app, f, "jax-port", &f.jax_port,
          "on the leader: the port handed to every worker in JAX_COORDINATOR_ADDRESS "
          "(MASTER_ADDR:PORT, for jax.distributed.initialize); 0 = no JAX_* variables "
          "(default 29600)");
  AddFlag(app, f, "job-id", &f.job_id,
          "the job's identity; pods of other jobs are refused (default: the leader's host "
          "label)");
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
  if (pet == nullptr && f.pet.contains(name)) pet = f.pet.at(name).c_str();
  if (pet != nullptr) {
    if (auto it = env.find(pet); it != env.end()) return it->second;
  }
  return std::nullopt;
}

// torchrun's variable for one of its flags ("" for trainlet's own flags).
std::string PetName(const Flags& f, const std::string& name) {
  if (f.pet.contains(name)) return f.pet.at(name);
  return IsTorchrunFlag(name) ? EnvName("PET_", name) : "";
}

// Where a flag's value came from: the flag, TRAINLET_<FLAG>, or PET_<FLAG>
// (nullopt: none of them, the default).
std::optional<Origin> OriginOf(const Flags& f, const std::string& name,
                               const std::map<std::string, std::string>& env) {
  const CLI::Option* o = f.opts.at(name);
  if (f.on_line.contains(o)) return Origin::kFlag;
  if (o->count() > 0) return Origin::kTrainletEnv;
  if (const std::string pet = PetName(f, name); !pet.empty() && env.contains(pet)) {
    return Origin::kPetEnv;
  }
  return std::nullopt;
}

// The name to put in a message about a flag's value: the one the user gave
// ("--max-restarts", "TRAINLET_MAX_RESTARTS", "PET_MAX_RESTARTS").
std::string Source(const Flags& f, const std::string& name,
                   const std::map<std::string, std::string>& env) {
  switch (OriginOf(f, name, env).value_or(Origin::kFlag)) {
    case Origin::kTrainletEnv: return EnvName("TRAINLET_", name);
    case Origin::kPetEnv: return PetName(f, name);
    default: return "--" + name;
  }
}

// A torchrun switch: the flag, TRAINLET_<FLAG>, else PET_<FLAG> as torchrun
// reads it (bool(int(value))).
exitcodes::Result<bool> GivenSwitch(const Flags& f, const std::string& name,
                                    const std::map<std::string, std::string>& env, bool value) {
  if (f.opts.at(name)->count() > 0) return value;
  auto it = env.find(f.pet.at(name));
  if (it == env.end()) return false;
  auto n = ParseCount(it->first, it->second, 1'000'000);
  if (!n.ok()) {
    return exitcodes::Status::Config(it->first + "='" + it->second +
                                     "' is not an integer (0 off, 1 on), as torchrun reads it");
  }
  return *n != 0;
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
    // SignalName: "SIG" + sigabbrev_np(3), also where glibc predates it.
    if (name == exitcodes::SignalName(s).substr(3) || v == std::to_string(s)) {
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

// "-1", "-0.5": a number, but below zero (said as such in messages).
bool IsNegative(const std::string& v) {
  return v.size() > 1 && v[0] == '-' && v.find_first_not_of("0123456789.", 1) == std::string::npos &&
         v.find_first_of("0123456789") != std::string::npos;
}

exitcodes::Result<std::chrono::milliseconds> ParseSeconds(const std::string& what,
                                                          const std::string& v) {
  // Plain decimal seconds ("25", "0.5"): no signs, exponents, hex or spaces.
  bool plain = !v.empty() && v.find_first_not_of("0123456789.") == std::string::npos &&
               std::count(v.begin(), v.end(), '.') <= 1 && v.front() != '.' && v.back() != '.';
  double s = plain ? std::strtod(v.c_str(), nullptr) : -1;
  if (!plain || s < 0.001 || s > 1e7) {
    return exitcodes::Status::Config(what + "='" + v + "' is " +
                                     (IsNegative(v) ? "negative: not" : "not") +
                                     " a number of seconds between 0.001 and 10000000");
  }
  return std::chrono::milliseconds(static_cast<long long>(std::llround(s * 1000)));
}

// The grace period: --grace-period, else torchrun's --shutdown-timeout /
// PET_SHUTDOWN_TIMEOUT, else TORCH_ELASTIC_SHUTDOWN_TIMEOUT (torch >= 2.11).
// Errors (config): a value that is not plain decimal seconds.
exitcodes::Result<std::chrono::milliseconds> GracePeriod(
    const Flags& f, const std::map<std::string, std::string>& env, bool is_local) {
  std::string what = Source(f, "grace-period", env), value = f.grace_period;
  if (f.opts.at("grace-period")->count() == 0 && !is_local) {
    if (auto v = Given(f, "shutdown-timeout", env, &f.shutdown_timeout)) {
      what = Source(f, "shutdown-timeout", env), value = *v;
    } else if (env.contains("TORCH_ELASTIC_SHUTDOWN_TIMEOUT")) {
      what = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT";
      value = env.at(what);
    }
  }
  return ParseSeconds(what, value);
}

exitcodes::Result<std::chrono::milliseconds> ParseSecondsOrZero(const std::string& what,
                                                                const std::string& v) {
  if (v == "0") return std::chrono::milliseconds(0);
  return ParseSeconds(what, v);
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
  if (CurrentLogFormat() == LogFormat::kJson) {
    LogFields lf;
    lf.failure_class = std::string(exitcodes::ClassName(c));
    lf.code = code;
    lf.summary = summary;
    std::fputs(FormatLogLine(spdlog::level::err, message + " (exit " + std::to_string(code) + ")", lf)
                   .c_str(),
               stderr);
    return code;
  }
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
  if (!plain && IsNegative(v)) return exitcodes::Status::Config(what + "='" + v + "' is negative");
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
  // The one code trainlet never exits with itself (README, Exit codes).
  std::printf(
      "\n137 (SIGKILL from outside) is not trainlet's. Where the kernel kills the whole\n"
      "container at an OOM (cgroup v2 memory.oom.group 1: Kubernetes >= 1.28 on cgroup v2,\n"
      "unless singleProcessOOMKill; trainlet says so at start), 137 means OOM. Elsewhere the\n"
      "workers' oom_score_adj is above trainlet's: the kernel picks a worker, trainlet exits 77.\n");
}

// torchrun's flags, validated, in trainlet's terms.
struct TorchrunSettings {
  bool standalone = false;
  std::optional<Endpoint> endpoint;  // --rdzv-endpoint
  bool endpoint_port_given = false;
  std::optional<std::string> job_id, role;
  std::optional<std::chrono::milliseconds> join_timeout;
  std::chrono::milliseconds read_timeout{0};
  std::string local_addr;
  WorkerLogOptions logs;
  bool virtual_local_rank = false;
  // TORCHELASTIC_SIGNALS_TO_HANDLE for the workers: the flag's value, else torch's default
  // (torch/distributed/launcher/api.py sets it in the agent's environment).
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";
};

// torchrun's log-file flags and TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE
// (worker_logs.h), validated; in the pod form and in `local`.
exitcodes::Status ReadLogFlags(const Flags& f, const std::map<std::string, std::string>& env,
                               WorkerLogOptions* out) {
  auto value = [&](const char* name, const std::string& v) {
    return Given(f, name, env, &v).value_or(v);
  };
  out->log_dir = Given(f, "log-dir", env, &f.log_dir).value_or("");
  auto redirects = ParseStd(Source(f, "redirects", env), value("redirects", f.redirects));
  if (!redirects.ok()) return redirects.status();
  auto tee = ParseStd(Source(f, "tee", env), value("tee", f.tee));
  if (!tee.ok()) return tee.status();
  auto filter = ParseLocalRanksFilter(Source(f, "local-ranks-filter", env),
                                      value("local-ranks-filter", f.local_ranks_filter));
  if (!filter.ok()) return filter.status();
  out->redirects = *redirects;
  out->tee = *tee;
  out->local_ranks_filter = *filter;
  // torch 2.15 run.py: the flag wins over the variable; empty means the default.
  if (auto v = Given(f, "log-line-prefix-template", env, &f.log_line_prefix_template);
      v && !v->empty()) {
    out->prefix_template = *v;
  } else if (auto it = env.find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"); it != env.end()) {
    out->prefix_template = it->second;
  }
  return exitcodes::Status::Ok();
}

// torchrun's flags that mean nothing here: said once, or refused where torch
// would refuse the value too.
exitcodes::Status NoEffectFlags(const Flags& f, const std::map<std::string, std::string>& env) {
  if (auto v = Given(f, "numa-binding", env, &f.numa_binding)) {
    // torch/numa/binding.py AffinityMode.
    static const std::set<std::string> kModes = {"node", "socket", "exclusive", "core-complex"};
    if (!kModes.contains(*v)) {
      return exitcodes::Status::Config(Source(f, "numa-binding", env) + "='" + *v +
                                       "' is not one of node, socket, exclusive, core-complex");
    }
    spdlog::info("{}={} has no effect: trainlet binds no CPUs (bind in the trainer, or run "
                 "numactl: --no-python numactl ... python3 train.py)",
                 Source(f, "numa-binding", env), *v);
  }
  for (auto [name, value] : {std::pair{"duplicate-stdout-filters", &f.duplicate_stdout_filters},
                             std::pair{"duplicate-stderr-filters", &f.duplicate_stderr_filters}}) {
    if (auto v = Given(f, name, env, value); v && !v->empty()) {
      spdlog::info("{}='{}' has no effect: trainlet writes no filtered copy of the output",
                   Source(f, name, env), *v);
    }
  }
  return exitcodes::Status::Ok();
}

exitcodes::Status ReadTorchrunFlags(const Flags& f, const std::map<std::string, std::string>& env,
                                    TorchrunSettings* out) {
  using exitcodes::Status;
  auto value = [&](const char* name, const std::string& v) {
    return Given(f, name, env, &v).value_or(v);
  };
  auto refuse = [&](const char* name, const std::string& v, const std::string& why) {
    return Status::Config(Source(f, name, env) + "='" + v + "': " + why);
  };
  auto standalone = GivenSwitch(f, "standalone", env, f.standalone);
  if (!standalone.ok()) return standalone.status();
  out->standalone = *standalone;
  auto virtual_rank = GivenSwitch(f, "virtual-local-rank", env, f.virtual_local_rank);
  if (!virtual_rank.ok()) return virtual_rank.status();
  out->virtual_local_rank = *virtual_rank;
  const std::string backend = value("rdzv-backend", f.rdzv_backend);
  if (backend != "static" && backend != "c10d" && backend != "etcd" && backend != "etcd-v2") {
    return refuse("rdzv-backend", backend, "not a rendezvous backend trainlet stands in for "
                  "(static, c10d, etcd, etcd-v2)");
  }
  spdlog::debug("--rdzv-backend {}: trainlet's own rendezvous serves it", backend);
  const std::string start = value("start-method", f.start_method);
  if (start != "spawn" && start != "fork" && start != "forkserver") {
    return refuse("start-method", start, "not one of spawn, fork, forkserver");
  }
  if (auto r = ParseRate(Source(f, "monitor-interval", env), value("monitor-interval",
                                                                   f.monitor_interval));
      !r.ok()) {
    return r.status();
  }
  if (const auto h = value("event-log-handler", f.event_log_handler); h != "null") {
    return refuse("event-log-handler", h, "trainlet has no event log handlers (only 'null')");
  }
  if (auto v = Given(f, "logs-specs", env, &f.logs_specs)) {
    return refuse("logs-specs", *v, "a torchrun.logs_specs plugin is Python; trainlet writes "
                  "torchrun's default layout (--log-dir, --redirects, --tee)");
  }
  if (auto st = NoEffectFlags(f, env); !st.ok()) return st;
  if (auto v = Given(f, "signals-to-handle", env, &f.signals_to_handle)) {
    out->signals_to_handle = *v;
    std::stringstream list(*v);
    for (std::string item; std::getline(list, item, ',');) {
      auto sig = ParseSignal(Source(f, "signals-to-handle", env), item);
      if (!sig.ok() || !SupervisionPolicy::IsForwarded(*sig) || *sig == SIGWINCH) {
        return refuse("signals-to-handle", *v, "'" + item + "' is not one of the signals "
                      "trainlet forwards (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2; "
                      "it always forwards all of them)");
      }
    }
  }
  if (auto v = Given(f, "rdzv-endpoint", env, &f.rdzv_endpoint); v && !v->empty()) {
    auto e = ParseEndpoint(Source(f, "rdzv-endpoint", env), *v, 29400);
    if (!e.ok()) return e.status();
    out->endpoint = *e;
    out->endpoint_port_given = v->back() != ']' && v->find(':') != std::string::npos;
  }
  if (auto v = Given(f, "rdzv-id", env, &f.rdzv_id); v && *v != "none") out->job_id = *v;
  if (auto v = Given(f, "rdzv-conf", env, &f.rdzv_conf)) {
    auto conf = ParseRdzvConf(Source(f, "rdzv-conf", env), *v);
    if (!conf.ok()) return conf.status();
    for (const auto& note : conf->no_effect) spdlog::info("{}: {}", Source(f, "rdzv-conf", env), note);
    if (conf->join_timeout) {
      auto t = ParseSeconds(Source(f, "rdzv-conf", env) + " join_timeout", *conf->join_timeout);
      if (!t.ok()) return t.status();
      out->join_timeout = *t;
    }
    if (conf->read_timeout) {
      auto t = ParseSeconds(Source(f, "rdzv-conf", env) + " read_timeout", *conf->read_timeout);
      if (!t.ok()) return t.status();
      out->read_timeout = *t;
    }
  }
  if (auto v = Given(f, "role", env, &f.role)) {
    if (v->empty()) return refuse("role", *v, "a role needs a name");
    out->role = *v;
  }
  if (auto v = Given(f, "local-addr", env, &f.local_addr)) out->local_addr = *v;
  if (auto st = ReadLogFlags(f, env, &out->logs); !st.ok()) return st;
  return Status::Ok();
}

// What each option of `app` is, for SplitAtTrainer.
std::function<OptionKind(std::string_view)> KindsOf(const CLI::App& app) {
  return [&app](std::string_view name) {
    const CLI::Option* o = app.get_option_no_throw(std::string(name));
    if (o == nullptr) return OptionKind::kUnknown;
    return o->get_items_expected_max() == 0 ? OptionKind::kFlag : OptionKind::kValue;
  };
}

// The long options that take argparse's abbreviations (README "Coming from
// torchrun"): torchrun's own, every spelling. trainlet's own flags are
// matched whole, so a flag added later never breaks a line that works today.
std::vector<std::string> AbbreviableNames(const Flags& f) {
  std::vector<std::string> names;
  for (const auto& [name, o] : f.opts) {
    if (!f.pet.contains(name) && !IsTorchrunFlag(name)) continue;
    for (const auto& n : o->get_lnames()) names.push_back("--" + n);
  }
  return names;
}

std::vector<std::string> OptionNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* o : app.get_options()) {
    for (const auto& n : o->get_lnames()) names.push_back("--" + n);
    for (const auto& n : o->get_snames()) names.push_back("-" + n);
  }
  return names;
}

// trainlet's subcommands (`trainlet local ...`): only as the first argument.
const std::vector<std::string> kSubcommands = {"local", "exit-codes", "probe", "policy"};

// The environment switches on a trainer mode (-m, --no-python, --run-path):
// then, as under torchrun, the first argument is the trainer's.
bool TrainerModeFromEnv(const std::map<std::string, std::string>& env) {
  for (const char* prefix : {"PET_", "TRAINLET_"}) {
    for (const char* name : {"MODULE", "NO_PYTHON", "RUN_PATH"}) {
      auto it = env.find(std::string(prefix) + name);
      if (it == env.end()) continue;
      static const std::set<std::string> kOff = {"", "0", "false", "off", "no"};
      if (!kOff.contains(it->second)) return true;
    }
  }
  return false;
}

// A subcommand's name where the trainer goes (`trainlet --nnodes 1 local`):
// what to write instead, or "".
std::string SubcommandHint(const SplitArgs& trainer, const std::map<std::string, std::string>& env) {
  const std::string first = trainer.trainer.empty() ? "" : trainer.trainer.front();
  if (std::find(kSubcommands.begin(), kSubcommands.end(), first) == kSubcommands.end()) return "";
  return "; `" + first + "` is a subcommand only as the first argument (trainlet " + first +
         " ...)" + (TrainerModeFromEnv(env) ? " and without PET_MODULE/PET_NO_PYTHON/PET_RUN_PATH"
                                              : "");
}

std::string GivenTwice(const std::string& flag) {
  return flag + " is given more than once: trainlet's own flags take one value (torchrun's "
         "flags take the last one, as argparse does)";
}

// Records which options the command line gave (Flags::on_line: they win over
// TRAINLET_*), and refuses one of trainlet's own flags given twice. torchrun's
// flags take the last value, as argparse does; --exit-code and --marker are
// repeatable.
exitcodes::Status NoteOptionsOnLine(CLI::App& app, const SplitArgs& split, Flags* f) {
  std::map<const CLI::Option*, std::string> own;  // the option -> its name in Flags
  for (const auto& [name, o] : f->opts) own[o] = name;
  std::map<const CLI::Option*, int> seen;
  for (const std::string& written : split.options) {
    const CLI::Option* o = app.get_option_no_throw(written);
    if (o == nullptr || !own.contains(o)) continue;
    f->on_line.insert(o);
    const std::string& name = own.at(o);
    const bool repeatable = f->pet.contains(name) || IsTorchrunFlag(name) ||
                            o->get_items_expected_max() > 1;
    if (++seen[o] == 2 && !repeatable) return exitcodes::Status::Config(GivenTwice("--" + name));
  }
  return exitcodes::Status::Ok();
}

// Says which values a chosen one overrode (never silently).
void LogOverridden(const std::vector<Candidate>& candidates, const std::optional<Candidate>& chosen) {
  for (const Candidate& c : candidates) {
    if (chosen && c.value != chosen->value) {
      spdlog::info("{}='{}' is overridden by {}='{}' (a flag wins over TRAINLET_*, which wins "
                   "over PET_*)", c.source, c.value, chosen->source, chosen->value);
    }
  }
}

std::string SelfExe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "trainlet";
}

// MASTER_PORT as given: --master-port, TRAINLET_MASTER_PORT, PET_MASTER_PORT,
// else MASTER_PORT in the environment; nullopt: the leader picks a free one.
exitcodes::Result<std::optional<std::uint16_t>> GivenMasterPort(
    const Flags& f, const std::map<std::string, std::string>& env) {
  std::string what = Source(f, "master-port", env);
  std::optional<std::string> v = Given(f, "master-port", env, &f.master_port, "PET_MASTER_PORT");
  if (!v && env.contains("MASTER_PORT")) v = env.at("MASTER_PORT"), what = "MASTER_PORT";
  if (!v) return std::optional<std::uint16_t>();
  auto port = ParsePort(what, *v);
  if (!port.ok()) return port.status();
  return std::optional(*port);
}

// The rendezvous port, MASTER_PORT (0: the leader picks a free one and hands
// it out, leader.h) and, for --standalone, JAX's port. Errors: config (bad or
// clashing ports, port 0 that other pods would have to know), infra (no free
// loopback port).
exitcodes::Status ChoosePorts(const Flags& f, const std::map<std::string, std::string>& env,
                              const TorchrunSettings& tr, PodOptions* po,
                              std::optional<std::uint16_t>* free_jax_port) {
  using exitcodes::Status;
  auto rdzv_port = ParsePort(Source(f, "rdzv-port", env), f.rdzv_port);
  if (!rdzv_port.ok()) return rdzv_port.status();
  // The rendezvous port: --rdzv-port or --rdzv-endpoint's, as for the leader.
  std::vector<Candidate> ports;
  if (f.opts.at("rdzv-port")->count() > 0) {
    ports.push_back({std::to_string(*rdzv_port), Source(f, "rdzv-port", env),
                     *OriginOf(f, "rdzv-port", env)});
  }
  if (tr.endpoint && tr.endpoint_port_given && !tr.standalone) {
    ports.push_back({std::to_string(tr.endpoint->port), Source(f, "rdzv-endpoint", env),
                     *OriginOf(f, "rdzv-endpoint", env)});
  }
  auto port_choice = ChooseCandidate("the rendezvous port", ports);
  if (!port_choice.ok()) return port_choice.status();
  LogOverridden(ports, *port_choice);
  auto master_port = GivenMasterPort(f, env);
  if (!master_port.ok()) return master_port.status();
  po->rdzv_port = *port_choice ? static_cast<std::uint16_t>(std::stoul((*port_choice)->value))
                               : *rdzv_port;
  po->master_port = master_port->value_or(0);
  if (tr.standalone) {
    // A free rendezvous port and JAX coordinator port, unless given: two
    // standalone runs on one machine must not collide (torchrun's --standalone).
    const std::vector<std::uint16_t> free = FreeLoopbackPorts(2);
    if (free.empty()) return Status::Infra("--standalone: no free loopback port");
    po->rdzv_port = free[0];
    if (f.opts.at("jax-port")->count() == 0) *free_jax_port = free[1];
    return Status::Ok();
  }
  if (po->rdzv_port == 0 && po->identity.nnodes > 1) {
    // torch's endpoint parser takes 0 (a free port), but a member must know it.
    return Status::Config((*port_choice)->source + " gives port 0 (a free port), which only a "
                          "gang of one pod can use: the other " +
                          std::to_string(po->identity.nnodes - 1) + " pod(s) would have to "
                          "know it; give the port they dial");
  }
  if (*master_port && po->master_port == po->rdzv_port) {
    // torchrun's static rendezvous shares MASTER_PORT with its store (Kubeflow
    // Trainer sets PET_MASTER_PORT=29400); trainlet's rendezvous needs its own.
    if (port_choice->has_value()) {
      return Status::Config("the rendezvous port (" + (*port_choice)->source + ") and "
                            "MASTER_PORT are both " + std::to_string(po->master_port) +
                            ": trainlet's rendezvous and the trainers' store need two ports; "
                            "leave MASTER_PORT unset and the leader picks a free one");
    }
    po->rdzv_port = static_cast<std::uint16_t>(po->master_port == 65535 ? 65534
                                                                         : po->master_port + 1);
    spdlog::info("MASTER_PORT is {}: the rendezvous uses port {}", po->master_port, po->rdzv_port);
  }
  return Status::Ok();
}

// `trainlet local`'s log files and health ports: validated here, handed to
// every agent (health: agent i on PORT+i).
exitcodes::Status LocalLogsAndHealth(const Flags& f, const std::map<std::string, std::string>& env,
                                     LocalOptions* lo) {
  WorkerLogOptions logs;
  if (auto st = ReadLogFlags(f, env, &logs); !st.ok()) return st;
  for (auto [name, value] : {std::pair{"log-dir", &f.log_dir}, std::pair{"redirects", &f.redirects},
                             std::pair{"tee", &f.tee},
                             std::pair{"local-ranks-filter", &f.local_ranks_filter},
                             std::pair{"log-line-prefix-template", &f.log_line_prefix_template}}) {
    if (auto v = Given(f, name, env, value)) {
      lo->pass_through.insert(lo->pass_through.end(), {"--" + std::string(name), *v});
    }
  }
  if (f.health_port != "0") {
    auto port = ParsePort(Source(f, "health-port", env), f.health_port);
    if (!port.ok()) return port.status();
    if (*port + lo->nnodes - 1 > 65535) {
      return exitcodes::Status::Config(Source(f, "health-port", env) + "='" + f.health_port +
                                       "': agent i serves on PORT+i, past 65535");
    }
    lo->health_port = *port;
  }
  return exitcodes::Status::Ok();
}

// `trainlet local` sets each agent's identity and ports itself: a variable
// for a flag it does not take would be ignored, so it is refused. `pod` and
// `local` are the two forms' flags.
exitcodes::Status RefuseUnusedLocalEnv(const Flags& pod, const Flags& local,
                                       const std::map<std::string, std::string>& env) {
  for (const auto& [name, o] : pod.opts) {
    if (local.opts.contains(name)) continue;
    for (const std::string& var : {EnvName("TRAINLET_", name), PetName(pod, name)}) {
      if (!var.empty() && env.contains(var)) {
        return exitcodes::Status::Config(
            var + " is set, but `trainlet local` has no --" + name + ": it sets each agent's "
            "identity and ports itself; unset it, or run the pod form (trainlet without local)");
      }
    }
  }
  return exitcodes::Status::Ok();
}

// --virtual-local-rank gives local rank i the i-th entry of the pod's GPU
// list: torch refuses a list with fewer entries than workers, and so do we.
exitcodes::Status CheckVirtualLocalRank(const PodOptions& po) {
  if (!po.virtual_local_rank) return exitcodes::Status::Ok();
  for (const char* var : {"HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"}) {
    auto it = po.env.find(var);
    if (it == po.env.end() || it->second.empty()) continue;
    if (SplitDeviceList(it->second).size() < po.identity.nproc_per_node) {
      return exitcodes::Status::Config(
          "--virtual-local-rank: " + std::string(var) + "='" + it->second + "' has fewer GPUs "
          "than the " + std::to_string(po.identity.nproc_per_node) + " workers of this pod");
    }
    break;
  }
  return exitcodes::Status::Ok();
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
      "Options end at the first positional argument (or at --): the trainer's command line.\n"
      "A subcommand (local, exit-codes, probe, policy) is one only as the very first argument,\n"
      "and not while PET_MODULE/PET_NO_PYTHON/PET_RUN_PATH (or TRAINLET_*) is on: `trainlet -m\n"
      "policy` runs the module policy. torchrun's flags may be repeated (the last wins, as in\n"
      "argparse); trainlet's own flags, except --exit-code and --marker, are given once.\n"
      "Examples:\n"
      "  trainlet --nnodes 4 --nproc-per-node 8 -- python3 train.py\n"
      "  trainlet local --nnodes 2 --nproc-per-node 2 -- python3 train.py\n"
      "  trainlet exit-codes");
  Flags flags, local_flags;
  AddAgentFlags(app, flags, false);

  CLI::App* local = app.add_subcommand(
      "local", "run a whole gang on this machine: N agents over loopback, same code paths");
  std::vector<std::string> args(argv + 1, argv + argc);
  const auto env = Environment();
  // Internal: the agent's short-lived GPU preflight child (gpu/preflight.h),
  // which the agent starts as `trainlet preflight` with TRAINLET_PREFLIGHT_RANK.
  if (!args.empty() && args[0] == "preflight" && env.contains("TRAINLET_PREFLIGHT_RANK")) {
    return gpu::PreflightChildMain();
  }
  // A subcommand is its name as the very first argument (torchrun.h
  // SubcommandOf); otherwise the trainer's command line starts at the first
  // positional argument (or after --): nothing from there on is the launcher's
  // (README "Coming from torchrun").
  const std::string sub = SubcommandOf(args, kSubcommands, TrainerModeFromEnv(env));
  const bool local_requested = sub == "local";
  const bool other_subcommand = !sub.empty() && !local_requested;
  SplitArgs split, local_split;
  if (sub.empty()) split = SplitAtTrainer(args, KindsOf(app), AbbreviableNames(flags));
  if (local_requested) {
    // Its flags are the agent's again, declared only when `local` is asked
    // for: CLI11 spends as long declaring ~50 options as the rest of an
    // agent's start-up (bench/HISTORY.md: launch overhead).
    AddAgentFlags(*local, local_flags, true);
    local_split = SplitAtTrainer({args.begin() + 1, args.end()}, KindsOf(*local),
                                 AbbreviableNames(local_flags));
  }
  {
    // JSON logs before the parse (the launcher's own arguments only): its
    // errors come out in JSON too.
    std::vector<std::string> own = split.launcher;
    own.insert(own.end(), local_split.launcher.begin(), local_split.launcher.end());
    std::vector<char*> own_argv = {argv[0]};
    for (auto& a : own) own_argv.push_back(a.data());
    if (EarlyLogFormat(static_cast<int>(own_argv.size()), own_argv.data()) == LogFormat::kJson) {
      ConfigureLogging(LogFormat::kJson, "");
    }
  }
  const SplitArgs& scanned = local_requested ? local_split : split;
  const std::string& unknown = scanned.unknown;
  if (!scanned.could_match.empty() && !other_subcommand) {
    std::string list;
    for (const auto& c : scanned.could_match) list += (list.empty() ? "" : ", ") + c;
    // argparse's words ("ambiguous option: --n could match --nnodes, ...").
    return ConfigError("ambiguous option: " + unknown + " could match " + list +
                       "; write more of it, or the flag in full");
  }
  if (!unknown.empty() && !other_subcommand) {
    const std::vector<std::string> names = OptionNames(local_requested ? *local : app);
    std::string near = NearestOption(unknown, names);
    // "--grace": trainlet's own flags are written in full; say which one.
    if (near.empty()) near = AbbreviationOf(unknown, names).full;
    return ConfigError("unknown option '" + unknown + "'" +
                       (near.empty() ? "" : " (did you mean " + near + "?)") +
                       "; the trainer's own options go after its script or after --");
  }
  if (!other_subcommand) {
    Flags& sf = local_requested ? local_flags : flags;
    if (auto s = NoteOptionsOnLine(local_requested ? *local : app, scanned, &sf); !s.ok()) {
      return ConfigError(s.message());
    }
  }
  std::vector<std::string> cli_args = {argv[0]};
  if (other_subcommand) {
    cli_args.insert(cli_args.end(), args.begin(), args.end());
  } else {
    cli_args.insert(cli_args.end(), split.launcher.begin(), split.launcher.end());
    if (local_requested) {
      cli_args.push_back("local");
      cli_args.insert(cli_args.end(), local_split.launcher.begin(), local_split.launcher.end());
    }
  }
  std::vector<char*> cli_argv;
  for (auto& a : cli_args) cli_argv.push_back(a.data());
  CLI::App* exit_codes = app.add_subcommand("exit-codes", "print the exit-code contract");
  std::string probe_what, probe_port = "0";
  CLI::App* probe = app.add_subcommand(
      "probe", "exec probe: exit 0 when the local agent is ready / live, or print its "
               "Prometheus metrics (needs --health-port)");
  probe->add_option("what", probe_what, "ready, live or metrics")->required()->check(
      CLI::IsMember({"ready", "live", "metrics"}));
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
    app.parse(static_cast<int>(cli_argv.size()), cli_argv.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --version
  } catch (const CLI::ArgumentMismatch& e) {
    // A subcommand's option given twice (the agent's are checked before the parse).
    const std::string what = e.what();
    const auto at = what.find(": At Most 1 required");
    return ConfigError(at == std::string::npos ? what : GivenTwice(what.substr(0, at)));
  } catch (const CLI::ParseError& e) {
    return ConfigError(e.what());
  }

  if (flags.opts.at("print-completion")->count() > 0) {  // torchrun's; exits, as there
    std::puts("# trainlet has no shell completion script (torchrun's --print-completion)");
    return 0;
  }
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
  const bool is_local = local->parsed();
  Flags& f = is_local ? local_flags : flags;
  ConfigureLogging(f.log_format == "json" ? LogFormat::kJson : LogFormat::kText, f.log_level);
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
  // The trainer's argv, torchrun's way (torchrun.h TrainerArgv).
  TrainerMode mode;
  for (auto [name, value, slot] : {std::tuple{"module", f.module, &mode.module},
                                   std::tuple{"no-python", f.no_python, &mode.no_python},
                                   std::tuple{"run-path", f.run_path, &mode.run_path}}) {
    auto on = GivenSwitch(f, name, env, value);
    if (!on.ok()) return config_error(on.status().message());
    *slot = *on;
  }
  const Interpreter python = ChooseInterpreter(
      f.opts.at("python")->count() > 0 ? std::optional(f.python) : std::nullopt, env, SelfExe(),
      [](const std::string& path) { return ::access(path.c_str(), F_OK) == 0; });
  mode.python = python.path;
  const SplitArgs& trainer = is_local ? local_split : split;
  auto command = TrainerArgv(trainer, mode);
  if (!command.ok()) {
    return config_error(command.status().message() + SubcommandHint(trainer, env));
  }
  f.command = *command;
  const bool runs_python = mode.run_path || mode.module || !(mode.no_python || trainer.dash_dash);
  const std::string interpreter = runs_python ? python.path + " (" + python.why + ")" : "";
  // A flag means what it says on its own, or is refused.
  for (auto [flag, needs, on] :
       {std::tuple{"preflight-timeout", "--preflight", f.preflight},
        std::tuple{"preflight-min-busbw", "--preflight", f.preflight},
        std::tuple{"hang-start-timeout", "--hang-timeout", f.hang_timeout != "0"},
        std::tuple{"hang-signal", "--hang-timeout", f.hang_timeout != "0"},
        std::tuple{"straggler-factor", "--hang-timeout", f.hang_timeout != "0"}}) {
    if (f.opts.at(flag)->count() > 0 && !on) {
      return config_error("--" + std::string(flag) + " has no effect without " + needs);
    }
  }
  auto grace = GracePeriod(f, env, is_local);
  if (!grace.ok()) return config_error(grace.status().message());
  auto rdzv_timeout = ParseSeconds(Source(f, "rdzv-timeout", env), f.rdzv_timeout);
  if (!rdzv_timeout.ok()) return config_error(rdzv_timeout.status().message());

  auto hang_timeout = ParseSecondsOrZero(Source(f, "hang-timeout", env), f.hang_timeout);
  if (!hang_timeout.ok()) return config_error(hang_timeout.status().message());
  auto hang_start_timeout =
      ParseSecondsOrZero(Source(f, "hang-start-timeout", env), f.hang_start_timeout);
  if (!hang_start_timeout.ok()) return config_error(hang_start_timeout.status().message());
  auto hang_signal = ParseSignal(Source(f, "hang-signal", env), f.hang_signal);
  if (!hang_signal.ok()) return config_error(hang_signal.status().message());
  auto max_restarts = ParseCount(
      Source(f, "max-restarts", env),
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
  auto preflight_timeout = ParseSeconds(Source(f, "preflight-timeout", env), f.preflight_timeout);
  if (!preflight_timeout.ok()) return config_error(preflight_timeout.status().message());
  gpu_options.preflight_timeout = *preflight_timeout;
  auto min_busbw = ParseRate(Source(f, "preflight-min-busbw", env), f.preflight_min_busbw);
  if (!min_busbw.ok()) return config_error(min_busbw.status().message());
  gpu_options.preflight_min_busbw_gbps = *min_busbw;
  // --nproc-per-node auto|gpu: one worker per GPU the driver shows this pod
  // (after CUDA_VISIBLE_DEVICES), found in a child so PID 1 never inits CUDA.
  std::optional<std::string> nproc_value =
      is_local ? (f.nproc_per_node.empty() ? std::nullopt : std::optional(f.nproc_per_node))
               : Given(f, "nproc-per-node", env, &f.nproc_per_node, "PET_NPROC_PER_NODE");
  std::optional<std::string> resolved_nproc;
  std::uint32_t gpu_count = 0;
  if (nproc_value && *nproc_value == "cpu") {
    // torchrun: os.cpu_count(), the CPUs online.
    resolved_nproc = std::to_string(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
    if (is_local) f.nproc_per_node = *resolved_nproc;
  }
  if ((nproc_value && gpu::NeedsDiscovery(*nproc_value)) || f.preflight || f.require_gpus) {
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
    gpu_count = static_cast<std::uint32_t>(d.gpus.size());
    if (f.require_gpus && !f.preflight && d.gpus.empty()) {
      return StartupError(exitcodes::FailureClass::kHardware,
                          "--require-gpus: no usable GPU on this pod: " + d.detail, codes,
                          f.termination_log, index_hint);
    }
    if (nproc_value && gpu::NeedsDiscovery(*nproc_value)) {
      auto n = gpu::ResolveWorkersPerPod(is_local ? "--nproc-per-node" : Source(f, "nproc-per-node", env),
                                         *nproc_value, d);
      if (!n.ok()) return config_error(n.status().message());
      resolved_nproc = *n;
      if (is_local) f.nproc_per_node = *n;
    }
  }
  // NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME against the real interfaces (NVIDIA/nccl#1837).
  // Only when set: listing the interfaces is a netlink dump in every pod's start.
  if (env.contains("NCCL_SOCKET_IFNAME") || env.contains("GLOO_SOCKET_IFNAME")) {
    if (auto ifs = gpu::ListInterfaces(); ifs.ok()) {
      if (auto s = gpu::ValidateSocketIfnames(env, *ifs); !s.ok()) return config_error(s.message());
    }
  }
  // A GPU that NVML already reports broken: hardware, before the gang forms (microsoft/pai#4314).
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
    // The agents check it too, but only here is the script known as one.
    LaunchCheck check = LaunchCheckFor(local_split, mode);
    check.script_hint = SubcommandHint(local_split, env);
    if (auto s = CheckLaunch(f.command, check, env, {}, WorkingDirectory());
        !s.ok()) {
      return config_error(s.message());
    }
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
                           {"--max-restarts", std::to_string(*max_restarts), "--hang-timeout",
                            f.hang_timeout, "--nccl-ids", f.nccl_ids, "--gpu-health",
                            f.gpu_health, "--signal-scope", f.signal_scope});
    // Only what was given: these are refused without the flag they refine.
    for (const char* name : {"hang-start-timeout", "hang-signal", "preflight-timeout",
                             "preflight-min-busbw", "straggler-factor", "run-dir"}) {
      if (f.opts.at(name)->count() > 0) {
        lo.pass_through.insert(lo.pass_through.end(),
                               {"--" + std::string(name), f.opts.at(name)->as<std::string>()});
      }
    }
    if (f.preflight) lo.pass_through.push_back("--preflight");
    lo.pass_through.insert(lo.pass_through.end(), {"--log-format", f.log_format,
                                                   "--worker-log-format", f.worker_log_format});
    if (f.require_gpus) lo.pass_through.push_back("--require-gpus");
    if (auto st = LocalLogsAndHealth(f, env, &lo); !st.ok()) return config_error(st.message());
    if (auto st = RefuseUnusedLocalEnv(flags, f, env); !st.ok()) return config_error(st.message());
    lo.json_logs = f.log_format == "json";
    lo.interpreter = interpreter;
    return RunLocal(lo);
  }

  TorchrunSettings tr;
  if (auto st = ReadTorchrunFlags(f, env, &tr); !st.ok()) return config_error(st.message());
  IdentityInputs in;
  auto spares = ParseCount(Source(f, "spares", env),
                           Given(f, "spares", env, &f.spares).value_or(f.spares), 1'000'000);
  if (!spares.ok()) return config_error(spares.status().message());
  in.spares = *spares;
  in.node_rank = Given(f, "node-rank", env, &f.node_rank);
  in.node_rank_source = Source(f, "node-rank", env);
  in.nnodes = Given(f, "nnodes", env, &f.nnodes);
  in.nnodes_source = Source(f, "nnodes", env);
  in.nproc_per_node = Given(f, "nproc-per-node", env, &f.nproc_per_node);
  in.nproc_per_node_source = Source(f, "nproc-per-node", env);
  if (resolved_nproc) in.nproc_per_node = resolved_nproc;
  in.job_id = Given(f, "job-id", env, &f.job_id);
  in.job_id_source = Source(f, "job-id", env);
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
  if (tr.job_id && !in.job_id) in.job_id = tr.job_id, in.job_id_source = Source(f, "rdzv-id", env);
  if (tr.standalone) {
    // torchrun --standalone: this pod is the whole gang.
    if (in.nnodes && *in.nnodes != "1" && *in.nnodes != "1:1") {
      return config_error("--standalone runs a gang of one pod, but " + in.nnodes_source +
                          " is '" + *in.nnodes + "'");
    }
    in.nnodes = "1", in.node_rank = "0", in.master_addr = std::nullopt, in.gang = std::nullopt;
    in.nnodes_source = in.node_rank_source = Source(f, "standalone", env);
    in.env.erase("PET_MASTER_ADDR"), in.env.erase("MASTER_ADDR");
  } else {
    // The leader: --rdzv-endpoint's host or --master-addr, by the README's
    // precedence; torchrun reads master_addr only without rdzv_endpoint, so
    // two different ones at the same level are refused, not picked.
    std::vector<Candidate> hosts;
    if (tr.endpoint) {
      hosts.push_back({tr.endpoint->host, Source(f, "rdzv-endpoint", env),
                       *OriginOf(f, "rdzv-endpoint", env)});
    }
    if (auto v = Given(f, "master-addr", env, &f.master_addr)) {
      hosts.push_back({*v, Source(f, "master-addr", env), *OriginOf(f, "master-addr", env)});
    }
    for (auto [var, origin] : {std::pair{"PET_MASTER_ADDR", Origin::kPetEnv},
                               std::pair{"MASTER_ADDR", Origin::kPlainEnv}}) {
      if (env.contains(var)) hosts.push_back({env.at(var), var, origin});
    }
    auto leader = ChooseCandidate("the leader's address", hosts);
    if (!leader.ok()) return config_error(leader.status().message());
    LogOverridden(hosts, *leader);
    if (*leader) in.master_addr = (*leader)->value, in.master_addr_source = (*leader)->source;
    in.leader_from_endpoint =
        *leader && tr.endpoint && (*leader)->source == Source(f, "rdzv-endpoint", env);
  }
  auto identity = ResolveIdentity(in);
  if (!identity.ok()) return config_error(identity.status().message());
  if (auto s = CheckLeaderNotLoopback(*identity, env); !s.ok()) return config_error(s.message());
  if (tr.role) {
    if (!identity->gang.empty()) {
      return config_error("--role/PET_ROLE with --gang: the roles are the gang's replicated Jobs");
    }
    identity->role_name = *tr.role;
  }

  PodOptions po;
  po.identity = *identity;
  po.command = f.command;
  po.launch_check = LaunchCheckFor(split, mode);
  po.launch_check.script_hint = SubcommandHint(split, env);
  po.interpreter = interpreter;
  std::optional<std::uint16_t> free_jax_port;
  if (auto st = ChoosePorts(f, env, tr, &po, &free_jax_port); !st.ok()) {
    return StartupError(st.failure_class(), st.message(), codes, f.termination_log, index_hint);
  }
  po.gpu_count = gpu_count;
  if (f.jax_port == "0") {
    po.jax_port = 0;
  } else if (free_jax_port) {
    po.jax_port = *free_jax_port;
  } else {
    auto jax = ParsePort(Source(f, "jax-port", env), f.jax_port);
    if (!jax.ok()) return config_error(jax.status().message());
    po.jax_port = *jax;
    if (po.jax_port == po.master_port || po.jax_port == po.rdzv_port) {
      return config_error("--jax-port " + f.jax_port + " is also MASTER_PORT or the rendezvous "
                          "port: JAX's coordinator needs a port of its own");
    }
  }
  po.logs = WithRunDir(tr.logs, f.run_dir);
  po.logs.console_prefix = f.worker_log_format != "plain";
  po.logs.hostname = in.hostname;
  po.virtual_local_rank = tr.virtual_local_rank;
  po.local_addr = tr.local_addr;
  po.rdzv_read_timeout = tr.read_timeout;
  po.rdzv_timeout = *rdzv_timeout;
  if (tr.join_timeout && f.opts.at("rdzv-timeout")->count() == 0) po.rdzv_timeout = *tr.join_timeout;
  po.grace = *grace;
  po.signal_scope = f.signal_scope == "group" ? SignalScope::kGroup : SignalScope::kMain;
  po.env = env;
  po.env["TORCHELASTIC_SIGNALS_TO_HANDLE"] = tr.signals_to_handle;
  if (auto st = CheckVirtualLocalRank(po); !st.ok()) return config_error(st.message());
  po.codes = codes;
  po.markers = markers;
  po.termination_log = f.termination_log;
  po.json_worker_lines = f.worker_log_format == "json";
  auto straggler_factor = ParseRate(Source(f, "straggler-factor", env), f.straggler_factor);
  if (!straggler_factor.ok()) return config_error(straggler_factor.status().message());
  if (*straggler_factor != 0 && *straggler_factor <= 1) {
    return config_error("--straggler-factor='" + f.straggler_factor +
                        "' must be above 1 (or 0: off)");
  }
  po.straggler_factor = *straggler_factor;
  if (f.health_port != "0") {
    auto health_port = ParsePort(Source(f, "health-port", env), f.health_port);
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
