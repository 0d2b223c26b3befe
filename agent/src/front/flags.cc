#include "trainlet/agent/front/flags.h"

#include <algorithm>
#include <cctype>

#include <CLI/CLI.hpp>

#include "trainlet/agent/base/tunables.h"
#include "trainlet/agent/base/values.h"
#include "trainlet/agent/spec/torchrun.h"

namespace trainlet::agent {
namespace {

using enum Flag;
using enum FlagType;
using enum Spelling;
using enum PassOn;
constexpr bool kPet = true, kNoPet = false;
constexpr char kComma = ',', kNone = 0;

// The agent's flags, in the order of --help; the rows of `local` are those
// with kLocalForm. Help texts are the user's documentation (tests/golden).
constexpr std::array<FlagSpec, kFlagCount> kFlags = {{
    {kNnodes, "nnodes", "", kText, kTorchrunName, kNoPet, kBothForms, kNo, "", "", kNone,
     "number of pods in the gang (the Job's completions); also PET_NNODES"},
    {kNprocPerNode, "nproc-per-node", "", kText, kTorchrunName, kPet, kBothForms, kNo, "", "", kNone,
     "workers per pod: N; gpu: one per visible GPU (none visible: exit 78); cpu: one per "
     "online CPU (os.cpu_count()); auto: gpu where a GPU is visible, else cpu (torchrun's "
     "values); each worker picks its GPU by LOCAL_RANK, as under torchrun; also "
     "PET_NPROC_PER_NODE (default 1)"},
    {kPreflight, "preflight", "", kSwitch, kOwn, kNoPet, kBothForms, kIfSet, "", "", kNone,
     "before the trainer, check NCCL across every GPU of the gang (init, a checked "
     "all-reduce, bus bandwidth); a failure exits 74 (hardware) or 75 (infra)"},
    {kPreflightTimeout, "preflight-timeout", "", kText, kOwn, kNoPet, kBothForms, kIfGiven,
     kDecimal<kDefaultPreflightTimeout.count()>, "", kNone,
     "seconds for the preflight's NCCL init and all-reduces (default {preflight-timeout})"},
    {kPreflightMinBusbw, "preflight-min-busbw", "", kText, kOwn, kNoPet, kBothForms, kIfGiven, "0",
     "", kNone, "GB/s: a preflight bus bandwidth below this exits 75 (default 0: no floor)"},
    {kRequireGpus, "require-gpus", "", kSwitch, kOwn, kNoPet, kBothForms, kIfSet, "", "", kNone,
     "with --preflight: a pod without a usable GPU exits 74 instead of skipping"},
    {kNcclIds, "nccl-ids", "", kText, kOwn, kNoPet, kBothForms, kAlways, "on", "on|off", kNone,
     "on|off: the leader makes fresh NCCL unique ids each generation for the workers "
     "(TRAINLET_NCCL_UNIQUE_ID, TRAINLET_NCCL_VERSION) (default on)"},
    {kGpuHealth, "gpu-health", "", kText, kOwn, kNoPet, kBothForms, kAlways, "on", "on|off", kNone,
     "on|off: NVML checks (ECC, Xid, recovery action) at start and after a worker failure; "
     "a fault exits 74 (default on)"},
    {kGracePeriod, "grace-period", "", kText, kOwn, kNoPet, kBothForms, kNo,
     kDecimal<kDefaultGrace.count()>, "", kNone,
     "seconds between forwarding SIGTERM and SIGKILL; set it a few seconds below the "
     "pod's terminationGracePeriodSeconds (default {grace-period}, for Kubernetes' default 30)"},
    {kSignalScope, "signal-scope", "", kText, kOwn, kNoPet, kBothForms, kAlways, "main",
     "main|group", kNone,
     "main|group: main sends a stop's SIGTERM/SIGINT and forwarded signals to each "
     "worker's main process only, as the kubelet does, and SIGTERM to its process group "
     "and the pod's other processes once the main processes exited (or min(5 s, grace/5) "
     "before the grace period ends); group signals each worker's whole process group and "
     "every other process at once, like torchrun 2.x (default main)"},
    {kRdzvTimeout, "rdzv-timeout", "", kText, kOwn, kNoPet, kBothForms, kNo,
     kDecimal<kDefaultRdzvTimeout.count()>, "", kNone,
     "seconds to find the leader and form the gang before exiting 75 (default {rdzv-timeout})"},
    {kMaxRestarts, "max-restarts", "", kText, kTorchrunName, kPet, kBothForms, kAlways, "0", "",
     kNone,
     "restart the whole gang in place up to this many times after a retriable failure "
     "(worker, infra, oom, a lost pod): new rendezvous generation, pods keep running; "
     "never after bug, config or hardware; also PET_MAX_RESTARTS (default 0)"},
    {kSpares, "spares", "", kText, kOwn, kNoPet, kBothForms, kNo, "0", "", kNone,
     "hot spares: the Job runs --nnodes + K pods; K wait, connected, without workers, "
     "and take the node rank of a lost pod or of one whose GPU failed (hardware) in the "
     "next generation, without waiting for Kubernetes (default 0)"},
    {kLogLevel, "log-level", "", kText, kOwn, kNoPet, kBothForms, kNo, "", "", kNone,
     "trace|debug|info|warn|error|off (default info, or SPDLOG_LEVEL)"},
    {kLogFormat, "log-format", "", kText, kOwn, kNoPet, kBothForms, kAlways, "text", "text|json",
     kNone,
     "text|json: json writes each of trainlet's own log lines as one JSON object (time, "
     "level, pod_index, generation, message, fields); the last one holds the termination "
     "message as \"summary\" (default text)"},
    {kWorkerLogFormat, "worker-log-format", "", kText, kOwn, kNoPet, kBothForms, kAlways, "text",
     "text|json|plain", kNone,
     "text|json|plain: json wraps each worker output line as {\"rank\":R,\"stream\":...,"
     "\"line\":...} instead of the [rankR]: prefix; plain writes it as the worker did, "
     "no prefix (torchrun's console without --tee) (default text)"},
    {kExitCode, "exit-code", "", kList, kOwn, kNoPet, kBothForms, kIfSet, "", "", kComma,
     "CLASS=CODE, repeatable or comma-separated: change a class's exit code "
     "(`trainlet exit-codes`)"},
    {kFatalExitCodes, "fatal-exit-codes", "", kText, kOwn, kNoPet, kBothForms, kIfSet, "", "",
     kNone, "comma list of worker exit codes that mean a software defect (default 42)"},
    {kMarker, "marker", "", kList, kOwn, kNoPet, kBothForms, kIfSet, "", "", kNone,
     "CLASS=TEXT, repeatable: text in a worker's stdout or stderr that classifies its "
     "failure (bug, infra, hardware, oom), checked before the built-in table"},
    {kHangTimeout, "hang-timeout", "", kText, kOwn, kNoPet, kBothForms, kAlways, "0", "", kNone,
     "seconds a worker may go without touching $TRAINLET_HEARTBEAT_FILE before the gang "
     "is stopped as hung (exit 75); 0 = off (default)"},
    {kHangStartTimeout, "hang-start-timeout", "", kText, kOwn, kNoPet, kBothForms, kIfGiven, "0",
     "", kNone,
     "seconds until a worker's first heartbeat (model loading, compilation); default: "
     "none (a worker that never touches the file is not watched)"},
    {kStragglerFactor, "straggler-factor", "", kText, kOwn, kNoPet, kBothForms, kIfGiven, "2", "",
     kNone,
     "with --hang-timeout: the leader logs and exports (trainlet_straggler) a pod whose "
     "slowest worker touches its heartbeat file this many times less often than the "
     "gang's median; 0 = off (default 2)"},
    {kHangSignal, "hang-signal", "", kText, kOwn, kNoPet, kBothForms, kIfGiven, "SIGUSR1", "",
     kNone,
     "signal sent, when a hang is found, to each worker's main process if it handles it "
     "(--signal-scope group: to every process of its group that does), for stack dumps "
     "(default SIGUSR1)"},
    {kTerminationLog, "termination-log", "", kText, kOwn, kNoPet, kBothForms, kNo, "", "", kNone,
     "file for the JSON summary of a non-zero exit (default /dev/termination-log when "
     "writable)"},
    {kRunDir, "run-dir", "", kText, kOwn, kNoPet, kBothForms, kIfGiven, "", "", kNone,
     "directory for the files trainlet makes for the workers (error files, heartbeat "
     "files); default: the first writable of $TMPDIR, /dev/shm, /tmp, --log-dir"},
    {kModule, "module", "m", kSwitch, kTorchrun, kPet, kBothForms, kNo, "", "", kNone,
     "the first argument is a Python module: python -u -m MODULE args"},
    {kNoPython, "no-python", "", kSwitch, kTorchrun, kPet, kBothForms, kNo, "", "", kNone,
     "the first argument is the program itself, not a Python script"},
    {kRunPath, "run-path", "", kSwitch, kTorchrun, kPet, kBothForms, kNo, "", "", kNone,
     "run the script with runpy.run_path in python -u (wins over --no-python)"},
    {kPython, "python", "", kText, kOwn, kNoPet, kBothForms, kNo, "", "", kNone,
     "the interpreter for script.py and -m (default: PYTHON_EXEC, as torchrun, else the "
     "python3 on PATH)"},
    {kLogDir, "log-dir", "", kText, kTorchrun, kPet, kBothForms, kIfGiven, "", "", kNone,
     "keep each worker's output in <dir>/<run-id>_<suffix>/attempt_<restart>/"
     "<local-rank>/{stdout,stderr}.log (with --redirects / --tee)"},
    {kRedirects, "redirects", "r", kText, kTorchrun, kPet, kBothForms, kIfGiven, "0", "", kNone,
     "streams to files only: 0 none, 1 stdout, 2 stderr, 3 both, or per local "
     "rank as 0:1,1:2"},
    {kTee, "tee", "t", kText, kTorchrun, kPet, kBothForms, kIfGiven, "0", "", kNone,
     "streams to files and the console (as --redirects)"},
    {kLocalRanksFilter, "local-ranks-filter", "", kText, kTorchrun, kPet, kBothForms, kIfGiven, "",
     "", kNone, "0,1,...: only these local ranks' output reaches the console (files keep all)"},
    {kLogLinePrefixTemplate, "log-line-prefix-template", "", kText, kTorchrun, kPet, kBothForms,
     kIfGiven, "", "", kNone,
     "the console prefix, with ${role_name}, ${rank}, ${local_rank}, ${hostname} (wins "
     "over TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE; default [rank<N>]: ; none: "
     "--worker-log-format plain)"},
    {kHealthPort, "health-port", "", kText, kOwn, kNoPet, kBothForms, kNo, "0", "", kNone,
     "serve /readyz (the gang has formed) and /livez (no hang) over HTTP on this port; "
     "0 = off (default); see also `trainlet probe`; under `local`, agent i serves on "
     "PORT+i"},
    {kStandalone, "standalone", "", kSwitch, kTorchrun, kPet, kPodForm, kNo, "", "", kNone,
     "a gang of this pod alone, on free loopback ports"},
    {kVirtualLocalRank, "virtual-local-rank", "", kSwitch, kTorchrun, kPet, kPodForm, kNo, "", "",
     kNone,
     "every worker gets LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES its own GPU (the "
     "local rank's entry of this pod's list)"},
    {kRdzvBackend, "rdzv-backend", "", kText, kTorchrun, kPet, kPodForm, kNo, "static", "", kNone,
     "static, c10d, etcd, etcd-v2: all served by trainlet's own rendezvous"},
    {kRdzvEndpoint, "rdzv-endpoint", "", kText, kTorchrun, kPet, kPodForm, kNo, "", "", kNone,
     "HOST[:PORT] or [IPv6]:PORT: the leader's address and rendezvous port (default port "
     "{rdzv-port})"},
    {kRdzvId, "rdzv-id", "", kText, kTorchrun, kPet, kPodForm, kNo, "", "", kNone,
     "the job id (as --job-id)"},
    {kRdzvConf, "rdzv-conf", "", kText, kTorchrun, kPet, kPodForm, kNo, "", "", kNone,
     "{rdzv-conf-keys}"},
    {kRole, "role", "", kText, kTorchrun, kPet, kPodForm, kNo, "", "", kNone,
     "ROLE_NAME of the workers (default 'default')"},
    {kMonitorInterval, "monitor-interval", "", kText, kTorchrun, kPet, kPodForm, kNo, "0.1", "",
     kNone, "accepted: trainlet reaps workers on SIGCHLD, it does not poll"},
    {kStartMethod, "start-method", "", kText, kTorchrun, kPet, kPodForm, kNo, "spawn", "", kNone,
     "spawn|fork|forkserver, accepted: every worker is a fresh process"},
    {kEventLogHandler, "event-log-handler", "", kText, kTorchrun, kPet, kPodForm, kNo, "null", "",
     kNone, "only 'null'"},
    {kLocalAddr, "local-addr", "", kText, kTorchrun, kPet, kPodForm, kNo, "", "", kNone,
     "on the leader (index 0): the address every trainer gets as MASTER_ADDR"},
    {kSignalsToHandle, "signals-to-handle", "", kText, kTorchrun, kPet, kPodForm, kNo, "", "", kNone,
     "signals forwarded to the workers: trainlet always forwards SIGTERM, SIGINT, "
     "SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2; others are refused"},
    {kShutdownTimeout, "shutdown-timeout", "", kText, kTorchrun, kPet, kPodForm, kNo, "", "", kNone,
     "as --grace-period; also TORCH_ELASTIC_SHUTDOWN_TIMEOUT"},
    {kLogsSpecs, "logs-specs", "", kText, kTorchrun, kPet, kPodForm, kNo, "", "", kNone,
     "refused: no Python plugins"},
    {kNumaBinding, "numa-binding", "", kText, kTorchrun, kPet, kPodForm, kNo, "", "", kNone,
     "node|socket|exclusive|core-complex: accepted, no effect (trainlet binds no CPUs)"},
    {kDuplicateStdoutFilters, "duplicate-stdout-filters", "", kText, kTorchrun, kPet, kPodForm, kNo,
     "", "", kNone, "accepted, no effect: no filtered copy of the output is written"},
    {kDuplicateStderrFilters, "duplicate-stderr-filters", "", kText, kTorchrun, kPet, kPodForm, kNo,
     "", "", kNone, "accepted, no effect: no filtered copy of the output is written"},
    {kPrintCompletion, "print-completion", "", kText, kTorchrun, kPet, kPodForm, kNo, "", "", kNone,
     "SHELL: prints no completion script (a comment), exits 0"},
    {kNodeRank, "node-rank", "", kText, kTorchrunName, kNoPet, kPodForm, kNo, "", "", kNone,
     "this pod's completion index; else JOB_COMPLETION_INDEX, PET_NODE_RANK, or the "
     "--podinfo-file annotation"},
    {kMasterAddr, "master-addr", "", kText, kTorchrunName, kNoPet, kPodForm, kNo, "", "", kNone,
     "the leader's (index 0) host name or IP address (IPv6 bare or in brackets, no port); "
     "also PET_MASTER_ADDR, MASTER_ADDR; default: derived from this pod's FQDN "
     "(<prefix>-0.<subdomain>...)"},
    {kRdzvPort, "rdzv-port", "", kText, kOwn, kNoPet, kPodForm, kNo, kDecimal<kDefaultRdzvPort>, "",
     kNone, "the leader's rendezvous port (default {rdzv-port})"},
    {kMasterPort, "master-port", "", kText, kTorchrunName, kPet, kPodForm, kNo, "", "", kNone,
     "MASTER_PORT for the trainers' own store; also PET_MASTER_PORT, MASTER_PORT (default: "
     "a port the leader finds free and hands to every pod, so it never clashes)"},
    {kJaxPort, "jax-port", "", kText, kOwn, kNoPet, kPodForm, kNo, kDecimal<kDefaultJaxPort>, "",
     kNone,
     "on the leader: the port handed to every worker in JAX_COORDINATOR_ADDRESS "
     "(MASTER_ADDR:PORT, for jax.distributed.initialize); 0 = no JAX_* variables "
     "(default {jax-port})"},
    {kJobId, "job-id", "", kText, kOwn, kNoPet, kPodForm, kNo, "", "", kNone,
     "the job's identity; pods of other jobs are refused (default: the leader's host "
     "label)"},
    {kTokenFile, "token-file", "", kText, kOwn, kNoPet, kPodForm, kNo, "", "", kNone,
     "file holding a shared secret (e.g. a mounted Secret): leader and members prove it "
     "to each other by HMAC-SHA256; it never crosses the wire or reaches a log"},
    {kAttempt, "attempt", "", kText, kOwn, kNoPet, kPodForm, kNo, "", "", kNone,
     "the job's restart attempt; pods of other attempts are refused (default: JobSet's "
     "restart-attempt annotation, else 0)"},
    {kPodinfoDir, "podinfo-dir", "", kText, kOwn, kNoPet, kPodForm, kNo, "/etc/podinfo", "", kNone,
     "downward-API volume folder with the pod's `labels` and `annotations` files "
     "(default /etc/podinfo)"},
    {kPodinfoFile, "podinfo-file", "", kText, kOwn, kNoPet, kPodForm, kNo, "", "", kNone,
     "the downward-API annotations file alone (default <podinfo-dir>/annotations)"},
    {kGang, "gang", "", kText, kOwn, kNoPet, kPodForm, kNo, "", "", kNone,
     "one gang across a JobSet's replicated Jobs, in their order: NAME=PODS or "
     "NAME=REPLICASxPODS, comma-separated (e.g. leader=1,workers=4); the pod's role and "
     "job index come from JobSet's labels in --podinfo-dir or its hostname; implies "
     "--nnodes; workers get ROLE_NAME/ROLE_RANK/ROLE_WORLD_SIZE per role"},
}};

// Every row sits at its id's index, so SpecOf is a lookup.
constexpr bool RowsInOrder() {
  for (std::size_t i = 0; i < kFlags.size(); ++i) {
    if (static_cast<std::size_t>(kFlags[i].id) != i) return false;
  }
  return true;
}
static_assert(RowsInOrder(), "kFlags: one row per Flag, in the enum's order");

}  // namespace

const std::array<FlagSpec, kFlagCount>& FlagTable() { return kFlags; }
const FlagSpec& SpecOf(Flag f) { return kFlags[static_cast<std::size_t>(f)]; }

std::string EnvName(std::string_view prefix, std::string_view name) {
  std::string env(prefix);
  for (char c : name) env += c == '-' ? '_' : static_cast<char>(std::toupper(c));
  return env;
}

std::string PetName(Flag f) {
  const FlagSpec& spec = SpecOf(f);
  return spec.spelling == Spelling::kOwn ? "" : EnvName("PET_", spec.name);
}

std::string GivenTwice(const std::string& flag) {
  return flag + " is given more than once: trainlet's own flags take one value (torchrun's "
         "flags take the last one, as argparse does)";
}

namespace {

// "-m,--module", "--nproc-per-node,--nproc_per_node": torchrun spells each of
// its flags with dashes and with underscores.
std::string CliNames(const FlagSpec& spec) {
  const std::string name(spec.name);
  if (spec.spelling == Spelling::kOwn) return "--" + name;
  std::string names = (spec.short_name.empty() ? "" : "-" + std::string(spec.short_name) + ",") +
                      "--" + name;
  if (name.find('-') != std::string::npos) {
    std::string underscored = name;
    std::replace(underscored.begin(), underscored.end(), '-', '_');
    names += ",--" + underscored;
  }
  return names;
}

// The help text with each "{flag-name}" replaced by that flag's default.
std::string HelpOf(const FlagSpec& spec) {
  std::string help(spec.help);
  for (std::size_t open = help.find('{'); open != std::string::npos;
       open = help.find('{', open + 1)) {
    const std::size_t close = help.find('}', open);
    if (close == std::string::npos) break;
    const std::string_view name = std::string_view(help).substr(open + 1, close - open - 1);
    if (name == "rdzv-conf-keys") {  // generated from the key table (torchrun.h)
      help.replace(open, close - open + 1, RdzvConfHelp());
      continue;
    }
    for (const FlagSpec& other : kFlags) {
      if (other.name != name) continue;
      help.replace(open, close - open + 1, other.default_value);
      break;
    }
  }
  return spec.spelling == Spelling::kTorchrun ? help + " (torchrun's)" : help;
}

std::vector<std::string> Choices(std::string_view choices) {
  return SplitOn(std::string(choices), '|');
}

}  // namespace

FlagValues::FlagValues(Form form, std::map<std::string, std::string> env)
    : form_(form), env_(std::move(env)) {
  for (const FlagSpec& spec : kFlags) text_[Index(spec.id)] = std::string(spec.default_value);
}

bool FlagValues::Has(Flag f) const {
  return (SpecOf(f).forms & static_cast<std::uint8_t>(form_)) != 0;
}

bool FlagValues::Set(Flag f) const {
  if (frozen_) return set_[Index(f)];
  return option_[Index(f)] != nullptr && option_[Index(f)]->count() > 0;
}

void FlagValues::Freeze() {
  for (std::size_t i = 0; i < kFlagCount; ++i) {
    set_[i] = option_[i] != nullptr && option_[i]->count() > 0;
    option_[i] = nullptr;
  }
  frozen_ = true;
}

std::optional<std::string> FlagValues::Given(Flag f) const {
  if (!Has(f)) return std::nullopt;
  if (Set(f)) return Value(f);
  if (SpecOf(f).pet) {
    if (auto it = env_.find(PetName(f)); it != env_.end()) return it->second;
  }
  return std::nullopt;
}

exitcodes::Result<bool> FlagValues::Switch(Flag f) const {
  if (!Has(f)) return false;
  if (Set(f)) return On(f);
  auto it = env_.find(PetName(f));
  if (it == env_.end()) return false;
  auto n = ParseCount(it->first, it->second, 1'000'000);
  if (!n.ok()) {
    return exitcodes::Status::Config(it->first + "='" + it->second +
                                     "' is not an integer (0 off, 1 on), as torchrun reads it");
  }
  return *n != 0;
}

std::optional<Origin> FlagValues::OriginOf(Flag f) const {
  if (on_line_[Index(f)]) return Origin::kFlag;
  if (Set(f)) return Origin::kTrainletEnv;
  if (const std::string pet = PetName(f); !pet.empty() && env_.contains(pet)) {
    return Origin::kPetEnv;
  }
  return std::nullopt;
}

std::string FlagValues::Source(Flag f) const {
  switch (OriginOf(f).value_or(Origin::kFlag)) {
    case Origin::kTrainletEnv: return EnvName("TRAINLET_", SpecOf(f).name);
    case Origin::kPetEnv: return PetName(f);
    default: return "--" + std::string(SpecOf(f).name);
  }
}

void FlagValues::AddTo(CLI::App& app) {
  for (const FlagSpec& spec : kFlags) {
    if (!Has(spec.id)) continue;
    const std::size_t i = Index(spec.id);
    const std::string help = HelpOf(spec);
    CLI::Option* o = nullptr;
    switch (spec.type) {
      case FlagType::kText: o = app.add_option(CliNames(spec), text_[i], help); break;
      case FlagType::kList: o = app.add_option(CliNames(spec), list_[i], help); break;
      case FlagType::kSwitch: o = app.add_flag(CliNames(spec), on_[i], help); break;
    }
    o->envname(EnvName("TRAINLET_", spec.name));
    // argparse: the last of a repeated flag wins (torchrun's flags only).
    if (spec.spelling != Spelling::kOwn) o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    if (spec.delimiter != 0) o->delimiter(spec.delimiter);
    if (!spec.choices.empty()) o->check(CLI::IsMember(Choices(spec.choices)));
    option_[i] = o;
  }
}

exitcodes::Status FlagValues::NoteOnLine(const CLI::App& app,
                                         const std::vector<std::string>& written) {
  std::array<int, kFlagCount> seen{};
  for (const std::string& name : written) {
    const CLI::Option* o = app.get_option_no_throw(name);
    auto at = std::find(option_.begin(), option_.end(), o);
    if (o == nullptr || at == option_.end()) continue;
    const auto i = static_cast<std::size_t>(at - option_.begin());
    on_line_[i] = true;
    const FlagSpec& spec = kFlags[i];
    const bool repeatable = spec.spelling != Spelling::kOwn || spec.type == FlagType::kList;
    if (++seen[i] == 2 && !repeatable) {
      return exitcodes::Status::Config(GivenTwice("--" + std::string(spec.name)));
    }
  }
  return exitcodes::Status::Ok();
}

std::string FlagValues::NameVariables(std::string message) const {
  for (const FlagSpec& spec : kFlags) {
    const std::string var = EnvName("TRAINLET_", spec.name);
    if (!Has(spec.id) || on_line_[Index(spec.id)] || !env_.contains(var)) continue;
    const std::string flag = "--" + std::string(spec.name);
    for (std::size_t at = message.find(flag); at != std::string::npos;
         at = message.find(flag, at + 1)) {
      const std::size_t end = at + flag.size();
      const char next = end < message.size() ? message[end] : ' ';
      if (std::isalnum(static_cast<unsigned char>(next)) || next == '-' || next == '_') continue;
      message.replace(at, flag.size(), var);
    }
  }
  return message;
}

std::vector<std::string> FlagValues::AbbreviableNames() const {
  std::vector<const FlagSpec*> rows;
  for (const FlagSpec& spec : kFlags) {
    if (Has(spec.id) && spec.spelling != Spelling::kOwn) rows.push_back(&spec);
  }
  std::sort(rows.begin(), rows.end(),
            [](const FlagSpec* a, const FlagSpec* b) { return a->name < b->name; });
  std::vector<std::string> names;
  for (const FlagSpec* spec : rows) {
    for (const auto& n : option_[Index(spec->id)]->get_lnames()) names.push_back("--" + n);
  }
  return names;
}

std::vector<std::string> FlagValues::PassedOn() const {
  std::vector<std::string> args;
  for (const FlagSpec& spec : kFlags) {
    if (!Has(spec.id)) continue;
    const std::string flag = "--" + std::string(spec.name);
    switch (spec.pass_on) {
      case PassOn::kNo: break;
      case PassOn::kAlways: args.insert(args.end(), {flag, Resolved(spec.id)}); break;
      case PassOn::kIfGiven:
        if (auto v = Given(spec.id)) args.insert(args.end(), {flag, *v});
        break;
      case PassOn::kIfSet:
        if (spec.type == FlagType::kSwitch && On(spec.id)) args.push_back(flag);
        if (spec.type == FlagType::kText && !Value(spec.id).empty()) {
          args.insert(args.end(), {flag, Value(spec.id)});
        }
        for (const auto& item : List(spec.id)) args.insert(args.end(), {flag, item});
        break;
    }
  }
  return args;
}

exitcodes::Status ParseOptions(FlagValues& f, const std::vector<std::string>& options) {
  CLI::App app;
  f.AddTo(app);
  std::vector<std::string> names;
  for (const std::string& o : options) {
    if (o.starts_with("-")) names.push_back(o.substr(0, o.find('=')));
  }
  if (auto st = f.NoteOnLine(app, names); !st.ok()) return st;
  std::vector<std::string> args = {"trainlet"};
  args.insert(args.end(), options.begin(), options.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return exitcodes::Status::Config(f.NameVariables(e.what()));
  }
  f.Freeze();
  return exitcodes::Status::Ok();
}

}  // namespace trainlet::agent
