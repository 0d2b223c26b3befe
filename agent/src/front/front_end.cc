#include "trainlet/agent/front/front_end.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <set>
#include <sstream>
#include <tuple>

#include <spdlog/spdlog.h>

#include "base/file_util.h"
#include "trainlet/agent/pod/gpu_setup.h"
#include "trainlet/agent/spec/identity.h"
#include "trainlet/agent/run/launch_check.h"
#include "trainlet/agent/run/supervision_policy.h"
#include "trainlet/agent/base/tunables.h"
#include "trainlet/agent/base/address.h"
#include "trainlet/agent/base/values.h"
#include "trainlet/agent/run/worker_env.h"
#include "trainlet/gpu/health.h"
#include "trainlet/exitcodes/user_file.h"
#include "trainlet/rendezvous/auth.h"

namespace trainlet::agent {
namespace {

using enum Flag;
using exitcodes::Result;
using exitcodes::Status;

// A version 4 UUID in its canonical text form (RFC 9562 section 5.4), the form
// of Python's str(uuid.uuid4()). The bytes come from getrandom(2) (auth.h);
// boost::uuids::random_generator needs glibc 2.25's getrandom(3), which the
// portable release build (glibc 2.17) lacks.
std::string NewRunId() {
  std::string b = rendezvous::RandomBytes(16);
  b[6] = static_cast<char>((b[6] & 0x0f) | 0x40);  // version 4
  b[8] = static_cast<char>((b[8] & 0x3f) | 0x80);  // variant 10
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += kHex[(static_cast<unsigned char>(b[i]) >> 4) & 0xf];
    out += kHex[static_cast<unsigned char>(b[i]) & 0xf];
  }
  return out;
}

}  // namespace

Status AsConfig(const Status& st) {
  return st.ok() ? st : Status::Config(st.message());
}

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

std::string SubcommandHint(const SplitArgs& trainer, const std::map<std::string, std::string>& env) {
  const std::string first = trainer.trainer.empty() ? "" : trainer.trainer.front();
  if (std::find(kSubcommands.begin(), kSubcommands.end(), first) == kSubcommands.end()) return "";
  return "; `" + first + "` is a subcommand only as the first argument (trainlet " + first +
         " ...)" + (TrainerModeFromEnv(env) ? " and without PET_MODULE/PET_NO_PYTHON/PET_RUN_PATH"
                                              : "");
}

namespace {

// --------------------------------------------------------------- validate --

// torchrun's log-file flags and TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE
// (worker_logs.h), validated; in the pod form and in `local`.
Status ReadLogFlags(const FlagValues& f, WorkerLogOptions* out) {
  out->log_dir = f.Given(kLogDir).value_or("");
  auto redirects = ParseStd(f.Source(kRedirects), f.Resolved(kRedirects));
  if (!redirects.ok()) return redirects.status();
  auto tee = ParseStd(f.Source(kTee), f.Resolved(kTee));
  if (!tee.ok()) return tee.status();
  auto filter = ParseLocalRanksFilter(f.Source(kLocalRanksFilter), f.Resolved(kLocalRanksFilter));
  if (!filter.ok()) return filter.status();
  out->redirects = *redirects;
  out->tee = *tee;
  out->local_ranks_filter = *filter;
  // torch 2.15 run.py: the flag wins over the variable; empty means the default.
  if (auto v = f.Given(kLogLinePrefixTemplate); v && !v->empty()) {
    out->prefix_template = *v;
  } else if (auto it = f.env().find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"); it != f.env().end()) {
    out->prefix_template = it->second;
  }
  return Status::Ok();
}

// torchrun's flags that mean nothing here: said once, or refused where torch
// would refuse the value too.
Status NoEffectFlags(const FlagValues& f) {
  if (auto v = f.Given(kNumaBinding)) {
    // torch/numa/binding.py AffinityMode.
    static const std::set<std::string> kModes = {"node", "socket", "exclusive", "core-complex"};
    if (!kModes.contains(*v)) {
      return Status::Config(f.Source(kNumaBinding) + "='" + *v +
                            "' is not one of node, socket, exclusive, core-complex");
    }
    spdlog::info("{}={} has no effect: trainlet binds no CPUs (bind in the trainer, or run "
                 "numactl: --no-python numactl ... python3 train.py)",
                 f.Source(kNumaBinding), *v);
  }
  for (Flag flag : {kDuplicateStdoutFilters, kDuplicateStderrFilters}) {
    if (auto v = f.Given(flag); v && !v->empty()) {
      spdlog::info("{}='{}' has no effect: trainlet writes no filtered copy of the output",
                   f.Source(flag), *v);
    }
  }
  return Status::Ok();
}

Status Refuse(const FlagValues& f, Flag flag, const std::string& v, const std::string& why) {
  return Status::Config(f.Source(flag) + "='" + v + "': " + why);
}

// torchrun's flags that only take a known word, or nothing.
Status TorchrunWords(const FlagValues& f) {
  const std::string backend = f.Resolved(kRdzvBackend);
  if (backend != "static" && backend != "c10d" && backend != "etcd" && backend != "etcd-v2") {
    return Refuse(f, kRdzvBackend, backend, "not a rendezvous backend trainlet stands in for "
                  "(static, c10d, etcd, etcd-v2)");
  }
  spdlog::debug("--rdzv-backend {}: trainlet's own rendezvous serves it", backend);
  const std::string start = f.Resolved(kStartMethod);
  if (start != "spawn" && start != "fork" && start != "forkserver") {
    return Refuse(f, kStartMethod, start, "not one of spawn, fork, forkserver");
  }
  if (auto r = ParseRate(f.Source(kMonitorInterval), f.Resolved(kMonitorInterval)); !r.ok()) {
    return r.status();
  }
  if (const auto h = f.Resolved(kEventLogHandler); h != "null") {
    return Refuse(f, kEventLogHandler, h, "trainlet has no event log handlers (only 'null')");
  }
  if (auto v = f.Given(kLogsSpecs)) {
    return Refuse(f, kLogsSpecs, *v, "a torchrun.logs_specs plugin is Python; trainlet writes "
                  "torchrun's default layout (--log-dir, --redirects, --tee)");
  }
  return NoEffectFlags(f);
}

Status ReadSignalsToHandle(const FlagValues& f, TorchrunSettings* out) {
  auto v = f.Given(kSignalsToHandle);
  if (!v) return Status::Ok();
  out->signals_to_handle = *v;
  std::stringstream list(*v);
  for (std::string item; std::getline(list, item, ',');) {
    auto sig = ParseSignal(f.Source(kSignalsToHandle), item);
    if (!sig.ok() || !SupervisionPolicy::IsForwarded(*sig) || *sig == SIGWINCH) {
      return Refuse(f, kSignalsToHandle, *v, "'" + item + "' is not one of the signals "
                    "trainlet forwards (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2; "
                    "it always forwards all of them)");
    }
  }
  return Status::Ok();
}

// --rdzv-endpoint, --rdzv-id and --rdzv-conf.
Status ReadRendezvousFlags(const FlagValues& f, TorchrunSettings* out) {
  if (auto v = f.Given(kRdzvEndpoint); v && !v->empty()) {
    auto e = ParseEndpoint(f.Source(kRdzvEndpoint), *v, kDefaultRdzvPort);
    if (!e.ok()) return e.status();
    out->endpoint = *e;
    out->endpoint_port_given = e->port_given;
  }
  if (auto v = f.Given(kRdzvId); v && *v != "none") out->job_id = *v;
  auto v = f.Given(kRdzvConf);
  if (!v) return Status::Ok();
  const std::string what = f.Source(kRdzvConf);
  auto conf = ParseRdzvConf(what, *v);
  if (!conf.ok()) return conf.status();
  for (const auto& note : conf->no_effect) spdlog::info("{}: {}", what, note);
  std::optional<std::chrono::milliseconds> read_timeout;
  const std::tuple<const char*, const std::optional<std::string>*,
                   std::optional<std::chrono::milliseconds>*>
      keys[] = {{"join_timeout", &conf->join_timeout, &out->join_timeout},
                {"read_timeout", &conf->read_timeout, &read_timeout},
                {"last_call_timeout", &conf->last_call_timeout, &out->last_call}};
  for (const auto& [key, text, to] : keys) {
    if (!*text) continue;
    auto t = ParseSeconds(what + " " + key, **text);
    if (!t.ok()) return t.status();
    *to = *t;
  }
  if (read_timeout) out->read_timeout = *read_timeout;
  return Status::Ok();
}

Status ReadTorchrunFlags(const FlagValues& f, TorchrunSettings* out) {
  auto standalone = f.Switch(kStandalone);
  if (!standalone.ok()) return standalone.status();
  out->standalone = *standalone;
  auto virtual_rank = f.Switch(kVirtualLocalRank);
  if (!virtual_rank.ok()) return virtual_rank.status();
  out->virtual_local_rank = *virtual_rank;
  if (auto st = TorchrunWords(f); !st.ok()) return st;
  if (auto st = ReadSignalsToHandle(f, out); !st.ok()) return st;
  if (auto st = ReadRendezvousFlags(f, out); !st.ok()) return st;
  if (auto v = f.Given(kRole)) {
    if (v->empty()) return Refuse(f, kRole, *v, "a role needs a name");
    out->role = *v;
  }
  if (auto v = f.Given(kLocalAddr)) {  // MASTER_ADDR for every pod: an address alone
    auto a = ParseHostAddress(f.Source(kLocalAddr), *v, PortRule::kNone);
    if (!a.ok()) return a.status();
    out->local_addr = a->host;
  }
  return ReadLogFlags(f, &out->logs);
}

// The grace period: --grace-period, else torchrun's --shutdown-timeout /
// PET_SHUTDOWN_TIMEOUT, else TORCH_ELASTIC_SHUTDOWN_TIMEOUT (torch >= 2.11).
Result<std::chrono::milliseconds> GracePeriod(const FlagValues& f) {
  std::string what = f.Source(kGracePeriod), value = f.Value(kGracePeriod);
  if (!f.Set(kGracePeriod) && f.form() == Form::kPod) {
    if (auto v = f.Given(kShutdownTimeout)) {
      what = f.Source(kShutdownTimeout), value = *v;
    } else if (f.env().contains("TORCH_ELASTIC_SHUTDOWN_TIMEOUT")) {
      what = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT";
      value = f.env().at(what);
    }
  }
  return ParseSeconds(what, value);
}

// A flag means what it says on its own, or is refused.
Status FlagsThatNeedOthers(const FlagValues& f) {
  const bool preflight = f.On(kPreflight), hang = f.Value(kHangTimeout) != "0";
  for (auto [flag, needs, on] :
       {std::tuple{kPreflightTimeout, "--preflight", preflight},
        std::tuple{kPreflightMinBusbw, "--preflight", preflight},
        std::tuple{kHangStartTimeout, "--hang-timeout", hang},
        std::tuple{kHangSignal, "--hang-timeout", hang},
        std::tuple{kStragglerFactor, "--hang-timeout", hang}}) {
    if (f.Set(flag) && !on) {
      return Status::Config("--" + std::string(SpecOf(flag).name) + " has no effect without " +
                            needs);
    }
  }
  return Status::Ok();
}

// The timings of a stop, the rendezvous and hang detection.
Status ReadTimings(const FlagValues& f, Settings* s) {
  auto grace = GracePeriod(f);
  if (!grace.ok()) return grace.status();
  auto rdzv_timeout = ParseSeconds(f.Source(kRdzvTimeout), f.Value(kRdzvTimeout));
  if (!rdzv_timeout.ok()) return rdzv_timeout.status();
  auto hang_timeout = ParseSecondsOrZero(f.Source(kHangTimeout), f.Value(kHangTimeout));
  if (!hang_timeout.ok()) return hang_timeout.status();
  auto hang_start = ParseSecondsOrZero(f.Source(kHangStartTimeout), f.Value(kHangStartTimeout));
  if (!hang_start.ok()) return hang_start.status();
  auto hang_signal = ParseSignal(f.Source(kHangSignal), f.Value(kHangSignal));
  if (!hang_signal.ok()) return hang_signal.status();
  auto max_restarts = ParseCount(f.Source(kMaxRestarts), f.Resolved(kMaxRestarts), kMaxPods);
  if (!max_restarts.ok()) return max_restarts.status();
  s->grace = *grace, s->rdzv_timeout = *rdzv_timeout, s->hang_timeout = *hang_timeout;
  s->hang_start_timeout = *hang_start, s->hang_signal = *hang_signal;
  s->max_restarts = *max_restarts;
  return Status::Ok();
}

// GPUs (README "GPUs and NCCL").
Status ReadGpuFlags(const FlagValues& f, Settings* s) {
  s->gpu.nccl_ids = f.Value(kNcclIds) == "on";
  s->gpu.health = f.Value(kGpuHealth) == "on";
  s->gpu.preflight = f.On(kPreflight);
  s->gpu.require_gpus = f.On(kRequireGpus);
  auto timeout = ParseSeconds(f.Source(kPreflightTimeout), f.Value(kPreflightTimeout));
  if (!timeout.ok()) return timeout.status();
  s->gpu.preflight_timeout = *timeout;
  auto min_busbw = ParseRate(f.Source(kPreflightMinBusbw), f.Value(kPreflightMinBusbw));
  if (!min_busbw.ok()) return min_busbw.status();
  s->gpu.preflight_min_busbw_gbps = *min_busbw;
  // --nproc-per-node auto|gpu: one worker per GPU the driver shows this pod
  // (after CUDA_VISIBLE_DEVICES), found in a child so PID 1 never inits CUDA.
  if (f.form() == Form::kLocal) {
    if (!f.Value(kNprocPerNode).empty()) s->nproc = f.Value(kNprocPerNode);
  } else {
    s->nproc = f.Given(kNprocPerNode);
  }
  s->discover_gpus = (s->nproc && gpu::NeedsDiscovery(*s->nproc)) || s->gpu.preflight ||
                     s->gpu.require_gpus;
  if (!s->discover_gpus) return Status::Ok();
  for (const char* var : {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"}) {
    auto it = f.env().find(var);
    auto v = gpu::ParseVisibleDevices(
        var, it == f.env().end() ? std::nullopt : std::optional(it->second));
    if (!v.ok()) return AsConfig(v.status());
  }
  return Status::Ok();
}

// The pod form's own numbers.
Status ReadPodFlags(const FlagValues& f, Settings* s) {
  if (auto st = ReadTorchrunFlags(f, &s->torchrun); !st.ok()) return st;
  auto spares = ParseCount(f.Source(kSpares), f.Resolved(kSpares), kMaxPods);
  if (!spares.ok()) return spares.status();
  s->spares = *spares;
  // formation_policy.h: a fixed gang forms when all its pods joined; the last
  // call only waits for spares, or (elastic --nnodes MIN:MAX) for pods beyond MIN.
  auto range = ParseNnodes(f.Source(kNnodes), f.Resolved(kNnodes));
  const bool elastic = range.ok() && range->find(':') != std::string::npos;
  if (const auto& last = s->torchrun.last_call; last && s->spares == 0 && !elastic) {
    spdlog::info("{}: last_call_timeout={} has no effect: a gang of a fixed size without "
                 "spares (--spares) forms when all its pods have joined",
                 f.Source(kRdzvConf), std::chrono::duration<double>(*last).count());
  }
  return Status::Ok();
}

// The pod form's checks that come after the identity (their messages assume one).
Status ReadPodTail(const FlagValues& f, Settings* s) {
  auto straggler_factor = ParseRate(f.Source(kStragglerFactor), f.Value(kStragglerFactor));
  if (!straggler_factor.ok()) return straggler_factor.status();
  if (*straggler_factor != 0 && *straggler_factor <= 1) {
    return Status::Config("--straggler-factor='" + f.Value(kStragglerFactor) +
                          "' must be above 1 (or 0: off)");
  }
  s->straggler_factor = *straggler_factor;
  if (f.Value(kHealthPort) != "0") {
    auto health_port = ParsePort(f.Source(kHealthPort), f.Value(kHealthPort));
    if (!health_port.ok()) return health_port.status();
    s->health_port = *health_port;
  }
  return Status::Ok();
}

}  // namespace

Result<Settings> Validate(const FlagValues& f, const SplitArgs& split,
                          exitcodes::ExitCodeTable codes) {
  Settings s;
  s.codes = std::move(codes);
  if (auto st = s.markers.Add(f.List(kMarker)); !st.ok()) return AsConfig(st);
  // The trainer's argv, torchrun's way (torchrun.h TrainerArgv); the
  // interpreter is the probe's, the checks here do not depend on it.
  for (auto [flag, slot] : {std::pair{kModule, &s.mode.module},
                            std::pair{kNoPython, &s.mode.no_python},
                            std::pair{kRunPath, &s.mode.run_path}}) {
    auto on = f.Switch(flag);
    if (!on.ok()) return on.status();
    *slot = *on;
  }
  if (auto command = TrainerArgv(split, s.mode); !command.ok()) {
    return Status::Config(command.status().message() + SubcommandHint(split, f.env()));
  }
  if (auto st = FlagsThatNeedOthers(f); !st.ok()) return st;
  if (auto st = ReadTimings(f, &s); !st.ok()) return st;
  if (auto st = ReadGpuFlags(f, &s); !st.ok()) return st;
  if (f.form() == Form::kPod) {
    if (auto st = ReadPodFlags(f, &s); !st.ok()) return st;
    if (auto st = ReadPodTail(f, &s); !st.ok()) return st;
  }
  return s;
}

// ------------------------------------------------------------------ probe --

namespace {

std::string SelfExe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "trainlet";
}

// The GPU options with the libraries' paths and the node's driver applied.
GpuOptions NodeGpuOptions(GpuOptions gpu, const std::map<std::string, std::string>& env,
                          const std::string& self_exe, bool nvidia_driver) {
  gpu.self_exe = self_exe;
  gpu.libcuda = gpu::LibraryPath("TRAINLET_LIBCUDA", gpu::kDefaultLibCuda);
  gpu.libnccl = gpu::LibraryPath("TRAINLET_LIBNCCL", gpu::kDefaultLibNccl);
  gpu.libnvml = gpu::LibraryPath("TRAINLET_LIBNVML", gpu::kDefaultLibNvml);
  // No NVIDIA driver on this node (a CPU pod): no NVML child at start and no NCCL
  // in the agent, which would cost every start a fork and the leader tens of MiB
  // (bench/RESULTS.md). A library named explicitly (TRAINLET_LIB*) is still used.
  if (!nvidia_driver) {
    if (!env.contains("TRAINLET_LIBNVML")) gpu.health = false;
    if (!env.contains("TRAINLET_LIBNCCL")) gpu.nccl_ids = false;
    spdlog::debug("no NVIDIA driver on this node (/proc/driver/nvidia, /dev/nvidiactl): "
                  "GPU health checks {}, NCCL ids {}",
                  gpu.health ? "on" : "off", gpu.nccl_ids ? "on" : "off");
  }
  return gpu;
}

gpu::Discovery DiscoverGpus(const std::string& libcuda) {
  gpu::Discovery d = gpu::DiscoverInChild(libcuda);
  std::string list;
  for (const auto& g : d.gpus) {
    list += (list.empty() ? "" : ", ") + std::to_string(g.index) + " " + g.uuid + " " + g.pci_bus_id;
  }
  spdlog::info("GPUs: {}{}", d.detail, list.empty() ? "" : " (" + list + ")");
  return d;
}

// A downward-API file (--podinfo-dir, --podinfo-file): small (a pod's
// annotations are at most 256 KiB together, kubernetes.io "Annotations"), so
// the cap is a Secret's 1 MiB; a FIFO, device or folder there is refused.
exitcodes::Result<std::optional<std::string>> ReadPodInfoFile(const std::string& path) {
  return exitcodes::ReadUserFile(path, "the downward-API file", exitcodes::kSecretMaxBytes);
}

// The pod form's questions: who this pod is, its token, --standalone's ports.
void ProbePod(const FlagValues& f, const Settings& s, NodeFacts* node) {
  utsname u{};
  ::uname(&u);
  node->hostname = u.nodename;
  node->etc_hosts = ReadSmallFile("/etc/hosts", 1 << 20).value_or("");
  node->read_file = ReadPodInfoFile;
  if (!f.Value(kTokenFile).empty()) {
    node->token = rendezvous::ReadTokenFile(f.Value(kTokenFile), f.Source(kTokenFile));
  }
  // A free rendezvous port and JAX coordinator port: two standalone runs on
  // one machine must not collide (torchrun's --standalone).
  if (s.torchrun.standalone) node->free_ports = FreeLoopbackPorts(2);
}

}  // namespace

NodeFacts Probe(const FlagValues& f, const Settings& s) {
  NodeFacts node;
  const auto& env = f.env();
  // A stop asked for during start-up ends it between (and inside) the steps.
  auto stopped = [&node] { return (node.stop_signal = exitcodes::PendingStopSignal()) != 0; };
  node.self_exe = SelfExe();
  node.python = ChooseInterpreter(
      f.Set(kPython) ? std::optional(f.Value(kPython)) : std::nullopt, env, node.self_exe,
      [](const std::string& path) { return ::access(path.c_str(), F_OK) == 0; });
  node.nvidia_driver = gpu::NvidiaDriverPresent();
  node.gpu = NodeGpuOptions(s.gpu, env, node.self_exe, node.nvidia_driver);
  // torchrun: os.cpu_count(), the CPUs online.
  if (s.nproc == "cpu") node.online_cpus = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
  if (stopped()) return node;
  if (s.discover_gpus) node.gpus = DiscoverGpus(node.gpu.libcuda);
  if (stopped()) return node;
  // Listing the interfaces is a netlink dump in every pod's start: only when
  // NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME ask for them.
  if (env.contains("NCCL_SOCKET_IFNAME") || env.contains("GLOO_SOCKET_IFNAME")) {
    node.interfaces = gpu::ListInterfaces();
  }
  node.gpu_fault = GpuFaultEvidence(node.gpu);
  if (stopped()) return node;
  if (f.form() == Form::kPod) ProbePod(f, s, &node);
  if (f.form() == Form::kLocal) node.working_directory = WorkingDirectory();
  return node;
}

// ------------------------------------------------------------------- plan --

namespace {

Status Hardware(const std::string& message) {
  return Status(exitcodes::FailureClass::kHardware, message);
}

// --nproc-per-node gpu|auto against the GPUs found, and --require-gpus.
Status PlaceOnGpus(const FlagValues& f, const Settings& s, const gpu::Discovery& d,
                   Trainer* out) {
  out->gpu_count = static_cast<std::uint32_t>(d.gpus.size());
  if (s.gpu.require_gpus && !s.gpu.preflight && d.gpus.empty()) {
    return Hardware("--require-gpus: no usable GPU on this pod: " + d.detail);
  }
  if (s.nproc && gpu::NeedsDiscovery(*s.nproc)) {
    auto n = gpu::ResolveWorkersPerPod(
        f.form() == Form::kLocal ? "--nproc-per-node" : f.Source(kNprocPerNode), *s.nproc, d);
    if (!n.ok()) return AsConfig(n.status());
    out->nproc = *n;
  }
  return Status::Ok();
}

}  // namespace

Result<Trainer> PlanTrainer(const FlagValues& f, const Settings& s, const NodeFacts& node,
                            const SplitArgs& split) {
  Trainer out;
  out.mode = s.mode;
  out.mode.python = node.python.path;
  auto command = TrainerArgv(split, out.mode);
  if (!command.ok()) return Status::Config(command.status().message() + SubcommandHint(split, f.env()));
  out.command = *command;
  const TrainerMode& m = out.mode;
  const bool runs_python = m.run_path || m.module || !(m.no_python || split.dash_dash);
  if (runs_python) out.interpreter = node.python.path + " (" + node.python.why + ")";
  if (s.nproc == "cpu") out.nproc = std::to_string(node.online_cpus);
  if (node.gpus) {
    if (auto st = PlaceOnGpus(f, s, *node.gpus, &out); !st.ok()) return st;
  }
  // NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME against the real interfaces (NVIDIA/nccl#1837).
  if (node.interfaces && node.interfaces->ok()) {
    if (auto st = gpu::ValidateSocketIfnames(f.env(), **node.interfaces); !st.ok()) return AsConfig(st);
  }
  // A GPU that NVML already reports broken: hardware, before the gang forms (microsoft/pai#4314).
  if (node.gpu_fault) return Hardware("GPU fault at start: " + *node.gpu_fault);
  return out;
}

namespace {

// `trainlet local` sets each agent's identity and ports itself: a variable
// for a flag it does not take would be ignored, so it is refused.
Status RefuseUnusedLocalEnv(const FlagValues& f) {
  std::vector<const FlagSpec*> rows;
  for (const FlagSpec& spec : FlagTable()) {
    if (!f.Has(spec.id)) rows.push_back(&spec);
  }
  std::sort(rows.begin(), rows.end(),
            [](const FlagSpec* a, const FlagSpec* b) { return a->name < b->name; });
  for (const FlagSpec* spec : rows) {
    for (const std::string& var : {EnvName("TRAINLET_", spec->name), PetName(spec->id)}) {
      if (!var.empty() && f.env().contains(var)) {
        return Status::Config(
            var + " is set, but `trainlet local` has no --" + std::string(spec->name) + ": it "
            "sets each agent's identity and ports itself; unset it, or run the pod form "
            "(trainlet without local)");
      }
    }
  }
  return Status::Ok();
}

// `trainlet local`'s log files (handed on as given) and health ports (agent i
// on PORT+i).
Status LocalLogsAndHealth(const FlagValues& f, LocalOptions* lo) {
  WorkerLogOptions logs;
  if (auto st = ReadLogFlags(f, &logs); !st.ok()) return st;
  if (f.Value(kHealthPort) != "0") {
    auto port = ParsePort(f.Source(kHealthPort), f.Value(kHealthPort));
    if (!port.ok()) return port.status();
    if (*port + lo->nnodes - 1 > 65535) {
      return Status::Config(f.Source(kHealthPort) + "='" + f.Value(kHealthPort) +
                            "': agent i serves on PORT+i, past 65535");
    }
    lo->health_port = *port;
  }
  return Status::Ok();
}

}  // namespace

Result<LocalOptions> PlanLocal(const FlagValues& f, const Settings& s, const NodeFacts& node,
                               const SplitArgs& split, const Trainer& trainer) {
  LocalOptions lo;
  const std::string nnodes_text = f.Value(kNnodes), nproc_text = trainer.nproc.value_or(f.Value(kNprocPerNode));
  auto nnodes = ParseCount("--nnodes", nnodes_text.empty() ? "1" : nnodes_text, kMaxLocalPods);
  if (!nnodes.ok()) return nnodes.status();
  auto nproc = ParseCount("--nproc-per-node", nproc_text.empty() ? "1" : nproc_text,
                          kMaxWorkersPerPod);
  if (!nproc.ok()) return nproc.status();
  if (*nnodes == 0 || *nproc == 0) return Status::Config("--nnodes and --nproc-per-node must be >= 1");
  lo.nnodes = *nnodes;
  lo.nproc_per_node = *nproc;
  lo.command = trainer.command;
  // The agents check it too, but only here is the script known as one.
  LaunchCheck check = LaunchCheckFor(split, trainer.mode);
  check.script_hint = SubcommandHint(split, f.env());
  if (auto st = CheckLaunch(trainer.command, check, f.env(), {}, node.working_directory); !st.ok()) {
    return AsConfig(st);
  }
  lo.grace = s.grace;
  lo.rdzv_timeout = f.Set(kRdzvTimeout) ? s.rdzv_timeout : kLocalRdzvTimeout;
  lo.log_level = f.Value(kLogLevel).empty()
                     ? spdlog::level::to_string_view(spdlog::get_level()).data()
                     : f.Value(kLogLevel);
  lo.self_exe = node.self_exe;
  lo.pass_through = f.PassedOn();
  if (auto st = LocalLogsAndHealth(f, &lo); !st.ok()) return st;
  if (auto st = RefuseUnusedLocalEnv(f); !st.ok()) return st;
  lo.json_logs = f.Value(kLogFormat) == "json";
  lo.interpreter = trainer.interpreter;
  return lo;
}

namespace {

// Says which values a chosen one overrode (never silently).
void LogOverridden(const std::vector<Candidate>& candidates, const std::optional<Candidate>& chosen) {
  for (const Candidate& c : candidates) {
    if (chosen && c.value != chosen->value) {
      spdlog::info("{}='{}' is overridden by {}='{}' (a flag wins over TRAINLET_*, which wins "
                   "over PET_*)", c.source, c.value, chosen->source, chosen->value);
    }
  }
}

// A leader address in the one form every input shares (address.h): "[fd00::1]"
// and "fd00::1" are one address, not two that disagree. A value that does not
// parse stays as written; ResolveIdentity refuses it if it is the one chosen.
std::string Canonical(const std::string& addr) {
  auto a = ParseHostAddress("", addr, PortRule::kNone);
  return a.ok() ? a->host : addr;
}

// The leader: --rdzv-endpoint's host or --master-addr, by the README's
// precedence; torchrun reads master_addr only without rdzv_endpoint, so two
// different ones at the same level are refused, not picked.
Status ChooseLeader(const FlagValues& f, const TorchrunSettings& tr, IdentityInputs* in) {
  std::vector<Candidate> hosts;
  if (tr.endpoint) {
    hosts.push_back({tr.endpoint->host, f.Source(kRdzvEndpoint), *f.OriginOf(kRdzvEndpoint)});
  }
  if (auto v = f.Given(kMasterAddr)) {
    hosts.push_back({Canonical(*v), f.Source(kMasterAddr), *f.OriginOf(kMasterAddr)});
  }
  for (auto [var, origin] : {std::pair{"PET_MASTER_ADDR", Origin::kPetEnv},
                             std::pair{"MASTER_ADDR", Origin::kPlainEnv}}) {
    if (f.env().contains(var)) hosts.push_back({Canonical(f.env().at(var)), var, origin});
  }
  auto leader = ChooseCandidate("the leader's address", hosts);
  if (!leader.ok()) return leader.status();
  LogOverridden(hosts, *leader);
  if (*leader) in->master_addr = (*leader)->value, in->master_addr_source = (*leader)->source;
  // Without any index, the endpoint's host leads and the pods are numbered as
  // they join (identity.h PodIdentity::by_arrival).
  in->leader_from_endpoint = *leader && tr.endpoint && (*leader)->source == f.Source(kRdzvEndpoint);
  return Status::Ok();
}

// ResolveIdentity's inputs: the flags as given, and the node's answers.
Result<IdentityInputs> IdentityInputsFor(const FlagValues& f, const Settings& s,
                                         const NodeFacts& node, const Trainer& trainer) {
  IdentityInputs in;
  in.spares = s.spares;
  in.node_rank = f.Given(kNodeRank), in.node_rank_source = f.Source(kNodeRank);
  in.nnodes = f.Given(kNnodes), in.nnodes_source = f.Source(kNnodes);
  in.nproc_per_node = f.Given(kNprocPerNode), in.nproc_per_node_source = f.Source(kNprocPerNode);
  if (trainer.nproc) in.nproc_per_node = trainer.nproc;
  in.job_id = f.Given(kJobId), in.job_id_source = f.Source(kJobId);
  in.attempt = f.Given(kAttempt);
  in.gang = f.Given(kGang);
  in.podinfo_dir = f.Given(kPodinfoDir);
  in.podinfo_file = f.Given(kPodinfoFile);
  in.env = f.env();
  in.hostname = node.hostname;
  in.etc_hosts = node.etc_hosts;
  in.read_file = node.read_file;
  const TorchrunSettings& tr = s.torchrun;
  if (tr.job_id && !in.job_id) in.job_id = tr.job_id, in.job_id_source = f.Source(kRdzvId);
  if (!tr.standalone) {
    if (auto st = ChooseLeader(f, tr, &in); !st.ok()) return st;
    return in;
  }
  // torchrun --standalone: this pod is the whole gang.
  if (in.nnodes && *in.nnodes != "1" && *in.nnodes != "1:1") {
    return Status::Config("--standalone runs a gang of one pod, but " + in.nnodes_source +
                          " is '" + *in.nnodes + "'");
  }
  in.nnodes = "1", in.node_rank = "0", in.master_addr = std::nullopt, in.gang = std::nullopt;
  in.nnodes_source = in.node_rank_source = f.Source(kStandalone);
  // torchrun --standalone sets rdzv_id to str(uuid.uuid4()) (torch/distributed/
  // run.py), --rdzv-id or not: TORCHELASTIC_RUN_ID is fresh per run. trainlet's
  // own --job-id, when given, is kept.
  if (!f.Given(kJobId)) {
    in.job_id = NewRunId();
    in.job_id_source = f.Source(kStandalone) + " (a fresh id per run, as torchrun's)";
  }
  in.env.erase("PET_MASTER_ADDR"), in.env.erase("MASTER_ADDR");
  return in;
}

// MASTER_PORT as given: --master-port, TRAINLET_MASTER_PORT, PET_MASTER_PORT,
// else MASTER_PORT in the environment; nullopt: the leader picks a free one.
Result<std::optional<std::uint16_t>> GivenMasterPort(const FlagValues& f) {
  std::string what = f.Source(kMasterPort);
  std::optional<std::string> v = f.Given(kMasterPort);
  if (!v && f.env().contains("MASTER_PORT")) v = f.env().at("MASTER_PORT"), what = "MASTER_PORT";
  if (!v) return std::optional<std::uint16_t>();
  auto port = ParsePort(what, *v);
  if (!port.ok()) return port.status();
  return std::optional(*port);
}

// The rendezvous port: --rdzv-port or --rdzv-endpoint's, as for the leader.
Result<std::optional<Candidate>> ChooseRdzvPort(const FlagValues& f, const TorchrunSettings& tr,
                                                std::uint16_t rdzv_port) {
  std::vector<Candidate> ports;
  if (f.Set(kRdzvPort)) {
    ports.push_back({std::to_string(rdzv_port), f.Source(kRdzvPort), *f.OriginOf(kRdzvPort)});
  }
  if (tr.endpoint && tr.endpoint_port_given && !tr.standalone) {
    ports.push_back({std::to_string(tr.endpoint->port), f.Source(kRdzvEndpoint),
                     *f.OriginOf(kRdzvEndpoint)});
  }
  auto choice = ChooseCandidate("the rendezvous port", ports);
  if (choice.ok()) LogOverridden(ports, *choice);
  return choice;
}

// The rendezvous port and MASTER_PORT (0: the leader picks a free one and
// hands it out, leader.h); for --standalone, JAX's port too. Errors: config
// (bad or clashing ports, port 0 that other pods would have to know), infra
// (no free loopback port).
Status ChoosePorts(const FlagValues& f, const TorchrunSettings& tr,
                   const std::vector<std::uint16_t>& free_ports, PodOptions* po) {
  auto rdzv_port = ParsePort(f.Source(kRdzvPort), f.Value(kRdzvPort));
  if (!rdzv_port.ok()) return rdzv_port.status();
  auto port_choice = ChooseRdzvPort(f, tr, *rdzv_port);
  if (!port_choice.ok()) return port_choice.status();
  auto master_port = GivenMasterPort(f);
  if (!master_port.ok()) return master_port.status();
  po->rdzv_port = *port_choice ? static_cast<std::uint16_t>(std::stoul((*port_choice)->value))
                               : *rdzv_port;
  po->master_port = master_port->value_or(0);
  if (tr.standalone) {
    if (free_ports.size() < 2) return Status::Infra("--standalone: no free loopback port");
    po->rdzv_port = free_ports[0];
    if (!f.Set(kJaxPort)) po->jax_port = free_ports[1];
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

// JAX's coordinator port: --jax-port (0: none), or --standalone's free one.
Status ChooseJaxPort(const FlagValues& f, bool free_port_taken, PodOptions* po) {
  if (f.Value(kJaxPort) == "0") {
    po->jax_port = 0;
    return Status::Ok();
  }
  if (free_port_taken) return Status::Ok();
  auto jax = ParsePort(f.Source(kJaxPort), f.Value(kJaxPort));
  if (!jax.ok()) return jax.status();
  po->jax_port = *jax;
  if (po->jax_port == po->master_port || po->jax_port == po->rdzv_port) {
    return Status::Config("--jax-port " + f.Value(kJaxPort) + " is also MASTER_PORT or the "
                          "rendezvous port: JAX's coordinator needs a port of its own");
  }
  return Status::Ok();
}

// --virtual-local-rank gives local rank i the i-th entry of the pod's GPU
// list: torch refuses a list with fewer entries than workers, and so do we.
Status CheckVirtualLocalRank(const PodOptions& po) {
  if (!po.virtual_local_rank) return Status::Ok();
  for (const char* var : {"HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"}) {
    auto it = po.env.find(var);
    if (it == po.env.end() || it->second.empty()) continue;
    if (SplitDeviceList(it->second).size() < po.identity.nproc_per_node) {
      return Status::Config(
          "--virtual-local-rank: " + std::string(var) + "='" + it->second + "' has fewer GPUs "
          "than the " + std::to_string(po.identity.nproc_per_node) + " workers of this pod");
    }
    break;
  }
  return Status::Ok();
}

// The identity, checked and with torchrun's --role.
Result<PodIdentity> PlanIdentity(const FlagValues& f, const Settings& s, const NodeFacts& node,
                                 const Trainer& trainer) {
  auto in = IdentityInputsFor(f, s, node, trainer);
  if (!in.ok()) return in.status();
  auto identity = ResolveIdentity(*in);
  if (!identity.ok()) return AsConfig(identity.status());
  if (auto st = CheckLeaderNotLoopback(*identity, f.env()); !st.ok()) return AsConfig(st);
  if (s.torchrun.role) {
    if (!identity->gang.empty()) {
      return Status::Config("--role/PET_ROLE with --gang: the roles are the gang's replicated Jobs");
    }
    identity->role_name = *s.torchrun.role;
  }
  return identity;
}

// What the pod's run takes from the settings as they are.
void CopySettings(const FlagValues& f, const Settings& s, const NodeFacts& node, PodOptions* po) {
  const TorchrunSettings& tr = s.torchrun;
  po->logs = tr.logs;
  po->logs.run_dir = f.Value(kRunDir);
  po->logs.console_prefix = f.Value(kWorkerLogFormat) != "plain";
  po->logs.hostname = node.hostname;
  po->virtual_local_rank = tr.virtual_local_rank;
  po->local_addr = tr.local_addr;
  po->rdzv_read_timeout = tr.read_timeout;
  if (tr.last_call) po->rdzv_last_call = *tr.last_call;
  po->rdzv_timeout = tr.join_timeout && !f.Set(kRdzvTimeout) ? *tr.join_timeout : s.rdzv_timeout;
  po->grace = s.grace;
  po->signal_scope = f.Value(kSignalScope) == "group" ? SignalScope::kGroup : SignalScope::kMain;
  po->env = f.env();
  po->env["TORCHELASTIC_SIGNALS_TO_HANDLE"] = tr.signals_to_handle;
  po->codes = s.codes;
  po->markers = s.markers;
  po->termination_log = f.Value(kTerminationLog);
  po->json_worker_lines = f.Value(kWorkerLogFormat) == "json";
  po->straggler_factor = s.straggler_factor;
  po->health_port = s.health_port;
  po->hang_timeout = s.hang_timeout;
  po->hang_start_timeout = s.hang_start_timeout;
  po->hang_signal = s.hang_signal;
  po->max_restarts = s.max_restarts;
  po->gpu = node.gpu;
}

}  // namespace

Result<PodOptions> PlanPod(const FlagValues& f, const Settings& s, const NodeFacts& node,
                           const SplitArgs& split, const Trainer& trainer) {
  auto identity = PlanIdentity(f, s, node, trainer);
  if (!identity.ok()) return identity.status();
  PodOptions po;
  po.identity = *identity;
  po.command = trainer.command;
  po.launch_check = LaunchCheckFor(split, trainer.mode);
  po.launch_check.script_hint = SubcommandHint(split, f.env());
  po.interpreter = trainer.interpreter;
  if (auto st = ChoosePorts(f, s.torchrun, node.free_ports, &po); !st.ok()) return st;
  po.gpu_count = trainer.gpu_count;
  const bool free_jax_port = s.torchrun.standalone && !f.Set(kJaxPort);
  if (auto st = ChooseJaxPort(f, free_jax_port, &po); !st.ok()) return st;
  CopySettings(f, s, node, &po);
  if (auto st = CheckVirtualLocalRank(po); !st.ok()) return st;
  if (node.token) {
    if (!node.token->ok()) return AsConfig(node.token->status());
    po.token = **node.token;
    const std::string short_token =
        rendezvous::ShortTokenWarning(f.Value(kTokenFile), f.Source(kTokenFile), po.token.size());
    if (!short_token.empty()) spdlog::warn("{}", short_token);
  }
  return po;
}

}  // namespace trainlet::agent
