// The front end's first stage: the command line. Parses flags and the
// environment with CLI11 from the flag table (flags.h), runs what ends here
// (--help, --version, exit-codes, probe, policy, a parse error), and hands
// the chosen form's values on: Validate -> Probe -> Plan (front_end.h) ->
// RunLocal or RunPod.
#include "trainlet/agent/front/cli.h"

#include <malloc.h>

#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <variant>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "trainlet/agent/base/build_info.h"
#include "trainlet/agent/pod/evidence.h"
#include "trainlet/agent/front/flags.h"
#include "trainlet/agent/front/front_end.h"
#include "trainlet/agent/observe/health.h"
#include "trainlet/agent/front/local.h"
#include "trainlet/agent/base/log_format.h"
#include "trainlet/agent/pod/pod.h"
#include "trainlet/agent/spec/torchrun.h"
#include "trainlet/agent/base/values.h"
#include "trainlet/exitcodes/exit_code.h"
#include "trainlet/exitcodes/policy.h"
#include "trainlet/exitcodes/termination.h"
#include "trainlet/exitcodes/user_file.h"
#include "trainlet/gpu/preflight.h"

extern char** environ;

namespace trainlet::agent {
namespace {

using enum Flag;
using exitcodes::Status;

std::map<std::string, std::string> Environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
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

void PrintExitCodes() {
  std::printf("%-12s %-5s %s\n", "class", "code", "meaning");
  for (const auto& row : exitcodes::ContractTable()) {
    std::string code = row.code < 0 ? "*" : std::to_string(row.code);
    std::printf("%-12s %-5s %s\n", std::string(exitcodes::ClassName(row.failure_class)).c_str(),
                code.c_str(), std::string(row.meaning).c_str());
  }
  // The order of the evidence for a worker's failure (README, "How a failure
  // is classified"): the same rules Classify applies.
  std::printf("\nThe first worker failure, the first rule that applies:\n");
  for (const auto& r : exitcodes::WorkerFailureRules()) {
    std::printf("%3d. %s\n", r.number, std::string(r.says).c_str());
  }
  // The one code trainlet never exits with itself (README, Exit codes).
  std::printf(
      "\n137 (SIGKILL from outside) is not trainlet's. Where the kernel kills the whole\n"
      "container at an OOM (cgroup v2 memory.oom.group 1: Kubernetes >= 1.28 on cgroup v2,\n"
      "unless singleProcessOOMKill; trainlet says so at start), 137 means OOM. Elsewhere the\n"
      "workers' oom_score_adj is above trainlet's: the kernel picks a worker, trainlet exits 77.\n");
}

// What each option of `app` is, for SplitAtTrainer.
std::function<OptionKind(std::string_view)> KindsOf(const CLI::App& app) {
  return [&app](std::string_view name) {
    const CLI::Option* o = app.get_option_no_throw(std::string(name));
    if (o == nullptr) return OptionKind::kUnknown;
    return o->get_items_expected_max() == 0 ? OptionKind::kFlag : OptionKind::kValue;
  };
}

std::vector<std::string> OptionNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* o : app.get_options()) {
    for (const auto& n : o->get_lnames()) names.push_back("--" + n);
    for (const auto& n : o->get_snames()) names.push_back("-" + n);
  }
  return names;
}

// The pod's index for the summary, when one of its sources parses (the
// failure may be about something else entirely).
std::uint32_t IndexHint(const FlagValues& f) {
  for (const std::optional<std::string>& v :
       {f.Given(kNodeRank),
        f.env().contains("JOB_COMPLETION_INDEX") ? std::optional(f.env().at("JOB_COMPLETION_INDEX"))
                                                 : std::nullopt}) {
    if (!v) continue;
    if (auto n = ParseCount("index", *v, 1'000'000); n.ok()) return *n;
  }
  return 0;
}

// The subcommands other than `local`, with the values their options fill.
struct OtherSubcommands {
  CLI::App* exit_codes = nullptr;
  CLI::App* probe = nullptr;
  CLI::App* policy = nullptr;
  std::string probe_what, probe_port = "0";
  exitcodes::PolicyOptions policy_options;
  std::vector<std::string> policy_codes;
};

void AddOtherSubcommands(CLI::App& app, OtherSubcommands* o) {
  o->exit_codes = app.add_subcommand("exit-codes", "print the exit-code contract");
  o->probe = app.add_subcommand(
      "probe", "exec probe: exit 0 when the local agent is ready / live, or print its "
               "Prometheus metrics (needs --health-port)");
  // Checked in RunOtherSubcommand: CLI11's check would name the option "what".
  o->probe->add_option("what", o->probe_what, "ready, live or metrics")->required();
  o->probe->add_option("--health-port", o->probe_port, "the agent's --health-port")
      ->envname("TRAINLET_HEALTH_PORT");
  o->policy = app.add_subcommand(
      "policy", "print the Job podFailurePolicy (and JobSet failurePolicy) for the contract");
  o->policy->add_option("--container", o->policy_options.container,
                        "containerName the exit-code rules match (default trainer; '' for any)");
  o->policy->add_flag("--per-index", o->policy_options.per_index,
                      "FailIndex instead of FailJob, for backoffLimitPerIndex");
  o->policy->add_flag("--jobset", o->policy_options.jobset, "also print a JobSet failurePolicy");
  o->policy->add_option("--max-restarts", o->policy_options.max_restarts,
                        "JobSet failurePolicy.maxRestarts (default 3)");
  o->policy->add_option("--backoff-limit-per-index", o->policy_options.backoff_limit_per_index,
                        "with --per-index: the Job's backoffLimitPerIndex (default 2)");
  o->policy->add_option("--exit-code", o->policy_codes, "CLASS=CODE, as for the agent")
      ->envname("TRAINLET_EXIT_CODE")
      ->delimiter(',');
}

// The subcommand that was parsed, run; nullopt when none was.
std::optional<int> RunOtherSubcommand(const OtherSubcommands& o) {
  if (o.exit_codes->parsed()) {
    PrintExitCodes();
    return 0;
  }
  if (o.probe->parsed()) {
    if (o.probe_what != "ready" && o.probe_what != "live" && o.probe_what != "metrics") {
      return ConfigError("probe '" + o.probe_what +
                         "': what to probe is one of ready, live, metrics");
    }
    auto port = ParsePort("--health-port/TRAINLET_HEALTH_PORT", o.probe_port);
    if (!port.ok()) return ConfigError(port.status().message());
    return Probe(o.probe_what, *port);
  }
  if (o.policy->parsed()) {
    auto codes = exitcodes::ExitCodeTable::FromFlags(o.policy_codes, "");
    if (!codes.ok()) return ConfigError(codes.status().message());
    std::fputs(exitcodes::GeneratePolicy(*codes, o.policy_options).c_str(), stdout);
    return 0;
  }
  return std::nullopt;
}

// An option SplitAtTrainer could not place: ambiguous or unknown (class config).
Status RefuseUnknown(const SplitArgs& scanned, const CLI::App& app) {
  const std::string& unknown = scanned.unknown;
  if (!scanned.could_match.empty()) {
    std::string list;
    for (const auto& c : scanned.could_match) list += (list.empty() ? "" : ", ") + c;
    // argparse's words ("ambiguous option: --n could match --nnodes, ...").
    return Status::Config("ambiguous option: " + unknown + " could match " + list +
                          "; write more of it, or the flag in full");
  }
  if (unknown.empty()) return Status::Ok();
  const std::vector<std::string> names = OptionNames(app);
  std::string near = NearestOption(unknown, names);
  // "--grace": trainlet's own flags are written in full; say which one.
  if (near.empty()) near = AbbreviationOf(unknown, names).full;
  return Status::Config("unknown option '" + unknown + "'" +
                        (near.empty() ? "" : " (did you mean " + near + "?)") +
                        "; the trainer's own options go after its script or after --");
}

// JSON logs before the parse (the launcher's own arguments only): its errors
// come out in JSON too.
void UseEarlyJsonLogs(const std::string& argv0, const SplitArgs& split,
                      const SplitArgs& local_split) {
  std::vector<std::string> own = {argv0};
  own.insert(own.end(), split.launcher.begin(), split.launcher.end());
  own.insert(own.end(), local_split.launcher.begin(), local_split.launcher.end());
  std::vector<char*> own_argv;
  for (auto& a : own) own_argv.push_back(a.data());
  if (EarlyLogFormat(static_cast<int>(own_argv.size()), own_argv.data()) == LogFormat::kJson) {
    ConfigureLogging(LogFormat::kJson, "");
  }
}

// How the front end ends before the plan: an exit code (--help, --version, a
// subcommand ran), or a refusal (class config, reported without the exit-code table).
struct Ending {
  std::optional<int> exit;
  Status status = Status::Ok();
  bool ends() const { return exit || !status.ok(); }
};

// CLI11's parse of `args` (argv[0] first); its errors name what the user
// wrote: `form`'s TRAINLET_* variables (FlagValues::NameVariables).
Ending Cli11Parse(CLI::App& app, std::vector<std::string> args, const FlagValues& form) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::CallForHelp& e) {
    return {app.exit(e)};
  } catch (const CLI::CallForAllHelp& e) {
    return {app.exit(e)};
  } catch (const CLI::Success& e) {
    return {app.exit(e)};  // --version
  } catch (const CLI::ArgumentMismatch& e) {
    // A subcommand's option given twice (the agent's are checked before the parse).
    const std::string what = e.what();
    const auto at = what.find(": At Most 1 required");
    return {std::nullopt,
            Status::Config(at == std::string::npos ? what : GivenTwice(what.substr(0, at)))};
  } catch (const CLI::ParseError& e) {
    return {std::nullopt, Status::Config(form.NameVariables(e.what()))};
  }
  return {};
}

std::unique_ptr<CLI::App> MakeApp() {
  auto app = std::make_unique<CLI::App>(
      "trainlet: the in-pod launcher for distributed training on Kubernetes.\n"
      "Runs as the container entrypoint (PID 1): finds the gang's leader, forms the gang,\n"
      "starts the trainer with torchrun's environment, supervises it, and exits with a code\n"
      "the Job's podFailurePolicy understands (`trainlet exit-codes`).",
      "trainlet");
  app->set_version_flag("--version",
                        std::string("trainlet ") + kVersion + " (commit " + kCommit + ")");
  app->footer(
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
  return app;
}

// The command line, parsed: how it ends here, else the chosen form's flag
// values and its launcher/trainer split.
struct CommandLine {
  Ending ending;
  std::unique_ptr<FlagValues> flags{};
  SplitArgs split{};
};

// The form's options as SplitAtTrainer scanned them: an unknown or ambiguous
// one refused, the ones written on the line noted in `f` (they win over
// TRAINLET_*; one of trainlet's own given twice is refused). Errors: config.
Status NoteForm(const CLI::App& form_app, const SplitArgs& scanned, FlagValues& f) {
  if (Status s = RefuseUnknown(scanned, form_app); !s.ok()) return s;
  return f.NoteOnLine(form_app, scanned.options);
}

// What CLI11 parses: argv[0], then the launcher's options of the pod form, or
// those and `local` with its own, or a subcommand's whole line (the trainer's
// part is never CLI11's).
std::vector<std::string> Cli11Args(const std::string& argv0, const std::string& sub,
                                   const std::vector<std::string>& args, const SplitArgs& split,
                                   const SplitArgs& local_split) {
  std::vector<std::string> out = {argv0};
  if (!sub.empty() && sub != "local") {
    out.insert(out.end(), args.begin(), args.end());
    return out;
  }
  out.insert(out.end(), split.launcher.begin(), split.launcher.end());
  if (sub == "local") {
    out.push_back("local");
    out.insert(out.end(), local_split.launcher.begin(), local_split.launcher.end());
  }
  return out;
}

// The form the arguments ask for, scanned and parsed (the subcommands other
// than `local` are parsed by CLI11 alone).
CommandLine ParseCommandLine(const std::vector<std::string>& argv,
                             const std::map<std::string, std::string>& env) {
  std::unique_ptr<CLI::App> app = MakeApp();
  auto pod = std::make_unique<FlagValues>(Form::kPod, env);
  auto local = std::make_unique<FlagValues>(Form::kLocal, env);
  pod->AddTo(*app);
  CLI::App* local_app = app->add_subcommand(
      "local", "run a whole gang on this machine: N agents over loopback, same code paths");
  const std::vector<std::string> args(argv.begin() + 1, argv.end());
  // A subcommand is its name as the very first argument (torchrun.h
  // SubcommandOf); otherwise the trainer's command line starts at the first
  // positional argument (or after --): nothing from there on is the launcher's
  // (README "Coming from torchrun").
  const std::string sub = SubcommandOf(args, kSubcommands, TrainerModeFromEnv(env));
  SplitArgs split, local_split;
  if (sub.empty()) split = SplitAtTrainer(args, KindsOf(*app), pod->AbbreviableNames());
  if (sub == "local") {
    // Its flags are the agent's again, declared only when `local` is asked
    // for: CLI11 spends as long declaring ~50 options as the rest of an
    // agent's start-up (bench/HISTORY.md: launch overhead).
    local->AddTo(*local_app);
    local_split = SplitAtTrainer({args.begin() + 1, args.end()}, KindsOf(*local_app),
                                 local->AbbreviableNames());
  }
  UseEarlyJsonLogs(argv[0], split, local_split);
  if (sub.empty() || sub == "local") {
    const bool is_local = sub == "local";
    if (Status s = NoteForm(is_local ? *local_app : *app, is_local ? local_split : split,
                            is_local ? *local : *pod);
        !s.ok()) {
      return {{std::nullopt, s}};
    }
  }
  OtherSubcommands others;
  AddOtherSubcommands(*app, &others);
  if (Ending e = Cli11Parse(*app, Cli11Args(argv[0], sub, args, split, local_split),
                            sub == "local" ? *local : *pod);
      e.ends()) {
    return {e};
  }
  if (pod->Set(kPrintCompletion)) {  // torchrun's; exits, as there
    std::puts("# trainlet has no shell completion script (torchrun's --print-completion)");
    return {{0}};
  }
  if (auto code = RunOtherSubcommand(others)) return {{code}};
  const bool is_local = local_app->parsed();
  std::unique_ptr<FlagValues>& chosen = is_local ? local : pod;
  chosen->Freeze();
  return {{}, std::move(chosen), is_local ? local_split : split};
}

// A SIGTERM/SIGINT during start-up: the run ends before it began (class
// terminated: the pod's code, 143 by default; `trainlet local`: 128 + signal).
Status StoppedAtStart(int signo) {
  return Status(exitcodes::FailureClass::kTerminated,
                "received " + std::string(exitcodes::SignalName(signo)) +
                    " during start-up, before the trainer ran");
}

// Validate -> Probe -> Plan, for the form `f` holds.
exitcodes::Result<PlannedRun> PlanForm(
    const FlagValues& f, const SplitArgs& split, const exitcodes::ExitCodeTable& table,
    const ProbeFn& probe) {
  auto settings = Validate(f, split, table);
  if (!settings.ok()) return settings.status();
  const NodeFacts node = probe(f, *settings);
  if (node.stop_signal != 0) return StoppedAtStart(node.stop_signal);
  auto trainer = PlanTrainer(f, *settings, node, split);
  if (!trainer.ok()) return trainer.status();
  if (f.form() == Form::kLocal) {
    auto local = PlanLocal(f, *settings, node, split, *trainer);
    if (!local.ok()) return local.status();
    return PlannedRun(std::move(local).value());
  }
  auto pod = PlanPod(f, *settings, node, split, *trainer);
  if (!pod.ok()) return pod.status();
  return PlannedRun(std::move(pod).value());
}

// The logging the flags ask for, the exit-code table, then PlanForm; how
// each failure is reported.
FrontEnd MakePlan(const FlagValues& f, const SplitArgs& split, const ProbeFn& probe) {
  FrontEnd out;
  const std::string& level = f.Value(kLogLevel);
  ConfigureLogging(f.Value(kLogFormat) == "json" ? LogFormat::kJson : LogFormat::kText, level);
  if (!level.empty() && spdlog::level::from_str(level) == spdlog::level::off && level != "off") {
    out.status = Status::Config("--log-level='" + level + "' is not one of trace, debug, info, "
                                "warn, error, off");
    return out;
  }
  out.termination_log = f.Value(kTerminationLog);
  out.local = f.form() == Form::kLocal;
  auto table = exitcodes::ExitCodeTable::FromFlags(f.List(kExitCode), f.Value(kFatalExitCodes));
  if (!table.ok()) {
    out.status = Status::Config(table.status().message());
    return out;
  }
  out.codes = *table;
  out.pod_index = IndexHint(f);
  auto planned = PlanForm(f, split, *table, probe);
  if (planned.ok()) {
    out.plan = std::move(planned).value();
  } else {
    out.status = planned.status();
  }
  return out;
}

}  // namespace

FrontEnd PlanCommandLine(const std::vector<std::string>& argv,
                         const std::map<std::string, std::string>& env, const ProbeFn& probe) {
  CommandLine command_line = ParseCommandLine(argv, env);
  if (command_line.ending.ends()) {
    FrontEnd out;
    out.exit = command_line.ending.exit;
    out.status = command_line.ending.status;
    return out;
  }
  return MakePlan(*command_line.flags, command_line.split, probe);
}

int Main(int argc, char** argv) {
  const std::vector<std::string> args(argv, argv + argc);
  const auto env = Environment();
  // Internal: the agent's short-lived GPU preflight child (gpu/preflight.h),
  // which the agent starts as `trainlet preflight` with TRAINLET_PREFLIGHT_RANK.
  if (args.size() > 1 && args[1] == "preflight" && env.contains("TRAINLET_PREFLIGHT_RANK")) {
    return gpu::PreflightChildMain();
  }
  // The parser's state is gone when PlanCommandLine returns.
  FrontEnd front = PlanCommandLine(args, env, [](const FlagValues& f, const Settings& s) {
    return Probe(f, s);  // front_end.h's
  });
  if (front.exit) return *front.exit;
  // A stop that came while the front end ran (parsing, probing, reading
  // files): blocked since main's first line, so still pending; it wins over
  // running, as a SIGTERM before any failure does in the pod (gang_policy.h).
  if (int signo = exitcodes::PendingStopSignal();
      signo != 0 && (front.status.ok() ||
                     front.status.failure_class() == exitcodes::FailureClass::kTerminated)) {
    const Status stop = StoppedAtStart(signo);
    if (front.local) {
      std::fprintf(stderr, "trainlet local: %s (exit %d)\n", stop.message().c_str(), 128 + signo);
      return 128 + signo;
    }
    return StartupError(stop.failure_class(), stop.message(), front.codes, front.termination_log,
                        front.pod_index);
  }
  if (!front.status.ok()) {
    return StartupError(front.status.failure_class(), front.status.message(), front.codes,
                        front.termination_log, front.pod_index);
  }
  if (const auto* local = std::get_if<LocalOptions>(&front.plan)) return RunLocal(*local);
  // The parser's ~60 options are freed by now: hand the pages back to the
  // kernel before an agent that runs for days (bench/HISTORY.md: memory).
  ::malloc_trim(0);
  return RunPod(std::move(std::get<PodOptions>(front.plan)));
}

}  // namespace trainlet::agent
