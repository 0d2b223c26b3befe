// trainlet/agent/front/front_end.h — the front end's pipeline after the parse:
//
//   parse (cli.cc, flags.h) -> Validate (pure) -> Probe (the only syscalls) ->
//   PlanLocal / PlanPod (pure) -> RunLocal (local.h) / RunPod (pod.h).
//
// Validate reads nothing but the flags and the environment they came with;
// Probe asks the node only what the settings need (GPU discovery in a child,
// the netlink interface dump, the NVML check, free-port binds, the token file,
// /etc/hosts); the plans decide from both (PlanLocal also runs the launch
// check, a few stat(2) calls: launch_check.h). Every error is one line, of
// class config unless said otherwise; the caller reports it (cli.cc).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "trainlet/agent/base/address.h"
#include "trainlet/agent/front/flags.h"
#include "trainlet/agent/front/local.h"
#include "trainlet/agent/pod/pod.h"
#include "trainlet/agent/spec/torchrun.h"
#include "trainlet/exitcodes/exit_code.h"
#include "trainlet/exitcodes/status.h"
#include "trainlet/gpu/devices.h"
#include "trainlet/gpu/netif.h"

namespace trainlet::agent {

// torchrun's flags, validated, in trainlet's terms (the pod form).
struct TorchrunSettings {
  bool standalone = false;
  std::optional<Endpoint> endpoint;  // --rdzv-endpoint
  bool endpoint_port_given = false;
  std::optional<std::string> job_id, role;
  std::optional<std::chrono::milliseconds> join_timeout;
  std::chrono::milliseconds read_timeout{0};
  std::optional<std::chrono::milliseconds> last_call;  // --rdzv-conf last_call_timeout
  std::string local_addr;
  WorkerLogOptions logs;
  bool virtual_local_rank = false;
  // TORCHELASTIC_SIGNALS_TO_HANDLE for the workers: the flag's value, else torch's default
  // (torch/distributed/launcher/api.py sets it in the agent's environment).
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";
};

// What the flags say, validated; no syscall made.
struct Settings {
  exitcodes::ExitCodeTable codes;  // --exit-code, --fatal-exit-codes (the caller's)
  exitcodes::MarkerTable markers = exitcodes::MarkerTable::Defaults();
  TrainerMode mode;  // python: filled in by the plan from the probe
  std::chrono::milliseconds grace{0}, rdzv_timeout{0}, hang_timeout{0}, hang_start_timeout{0};
  int hang_signal = 0;
  std::uint32_t max_restarts = 0;
  GpuOptions gpu;                    // from the flags; libraries and driver: the probe's
  std::optional<std::string> nproc;  // --nproc-per-node as given: N, gpu, cpu or auto
  bool discover_gpus = false;        // nproc gpu/auto, --preflight or --require-gpus
  // The pod form.
  TorchrunSettings torchrun;
  std::uint32_t spares = 0;
  double straggler_factor = 0;
  std::uint16_t health_port = 0;
};

// Validates `f` (its form's flags) and the trainer's part of the command line;
// `codes` is the exit-code table the caller made first (its errors are reported
// without it).
[[nodiscard]] exitcodes::Result<Settings> Validate(const FlagValues& f, const SplitArgs& split,
                                                   exitcodes::ExitCodeTable codes);

// What the node says, asked once (Probe).
struct NodeFacts {
  std::string self_exe;  // /proc/self/exe
  Interpreter python;    // ChooseInterpreter over the files that exist
  bool nvidia_driver = false;
  GpuOptions gpu;  // Settings::gpu with the libraries (TRAINLET_LIB*) and the driver applied
  long online_cpus = 1;                  // --nproc-per-node cpu
  std::optional<gpu::Discovery> gpus;    // Settings::discover_gpus
  // NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME set: the interfaces (netlink dump).
  std::optional<exitcodes::Result<std::vector<gpu::Interface>>> interfaces;
  std::optional<std::string> gpu_fault;  // NVML already reports a broken GPU
  // The pod form: uname's nodename, /etc/hosts, the downward-API files, the
  // token file, free loopback ports for --standalone.
  std::string hostname, etc_hosts;
  std::function<exitcodes::Result<std::optional<std::string>>(const std::string&)> read_file;
  std::optional<exitcodes::Result<std::string>> token;
  std::vector<std::uint16_t> free_ports;
  std::string working_directory;  // `trainlet local`: its launch check
  // SIGTERM or SIGINT arrived while probing (exitcodes::PendingStopSignal):
  // the probe stopped there, its other answers are missing, the plan refuses
  // with class terminated.
  int stop_signal = 0;
};

// A failure of another class reported as config (bad input the user gave).
exitcodes::Status AsConfig(const exitcodes::Status& st);

// `trainlet local`, `trainlet exit-codes`, ...: only as the first argument.
inline const std::vector<std::string> kSubcommands = {"local", "exit-codes", "probe", "policy"};

// The environment switches on a trainer mode (-m, --no-python, --run-path):
// then, as under torchrun, the first argument is the trainer's.
bool TrainerModeFromEnv(const std::map<std::string, std::string>& env);

// A subcommand's name where the trainer goes (`trainlet --nnodes 1 local`):
// what to write instead, or "".
std::string SubcommandHint(const SplitArgs& trainer, const std::map<std::string, std::string>& env);

// Asks the node what `s` needs. Blocking (GPU discovery in a child: seconds at
// most), but a pending SIGTERM/SIGINT ends it early (NodeFacts::stop_signal).
NodeFacts Probe(const FlagValues& f, const Settings& s);

// The trainer's argv and the workers-per-pod count that discovery resolved.
struct Trainer {
  TrainerMode mode;  // with the interpreter
  std::vector<std::string> command;
  std::string interpreter;  // "" when the trainer is not run by python
  std::optional<std::string> nproc;  // --nproc-per-node resolved (gpu, cpu, auto -> N)
  std::uint32_t gpu_count = 0;
};
// The checks on the node's answers both forms share. Errors: config, or
// hardware (--require-gpus without a GPU, a GPU NVML reports broken).
[[nodiscard]] exitcodes::Result<Trainer> PlanTrainer(const FlagValues& f, const Settings& s,
                                                     const NodeFacts& node,
                                                     const SplitArgs& split);

[[nodiscard]] exitcodes::Result<LocalOptions> PlanLocal(const FlagValues& f, const Settings& s,
                                                        const NodeFacts& node,
                                                        const SplitArgs& split,
                                                        const Trainer& trainer);
// Errors: config; infra (no free loopback port for --standalone).
[[nodiscard]] exitcodes::Result<PodOptions> PlanPod(const FlagValues& f, const Settings& s,
                                                    const NodeFacts& node, const SplitArgs& split,
                                                    const Trainer& trainer);

}  // namespace trainlet::agent
