// trainlet/agent/front/flags.h — the agent's flags as one table, and their values.
//
// Each flag is one row of FlagTable(): its typed id, long and short name, how
// torchrun spells it (both `--a-b` and `--a_b`, the last of a repeat wins) and
// whether its PET_<FLAG> is read, TRAINLET_<FLAG>, default, help text, the
// forms that take it (the pod form, `trainlet local`) and whether `local`
// passes it on to its agents. CLI11 is configured from the table (AddFlags),
// so is --help, and the precedence flag > TRAINLET_<FLAG> > PET_<FLAG> is
// decided here once (FlagValues::Given). Adding a flag is adding a row.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainlet/agent/spec/torchrun.h"
#include "trainlet/exitcodes/status.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace trainlet::agent {

// Every flag of the agent, in the order of --help.
enum class Flag : std::uint8_t {
  kNnodes, kNprocPerNode, kPreflight, kPreflightTimeout, kPreflightMinBusbw, kRequireGpus,
  kNcclIds, kGpuHealth, kGracePeriod, kSignalScope, kRdzvTimeout, kMaxRestarts, kSpares,
  kLogLevel, kLogFormat, kWorkerLogFormat, kExitCode, kFatalExitCodes, kMarker, kHangTimeout,
  kHangStartTimeout, kStragglerFactor, kHangSignal, kTerminationLog, kRunDir, kModule, kNoPython,
  kRunPath, kPython, kLogDir, kRedirects, kTee, kLocalRanksFilter, kLogLinePrefixTemplate,
  kHealthPort,
  // The pod form only.
  kStandalone, kVirtualLocalRank, kRdzvBackend, kRdzvEndpoint, kRdzvId, kRdzvConf, kRole,
  kMonitorInterval, kStartMethod, kEventLogHandler, kLocalAddr, kSignalsToHandle,
  kShutdownTimeout, kLogsSpecs, kNumaBinding, kDuplicateStdoutFilters, kDuplicateStderrFilters,
  kPrintCompletion, kNodeRank, kMasterAddr, kRdzvPort, kMasterPort, kJaxPort, kJobId, kTokenFile,
  kAttempt, kPodinfoDir, kPodinfoFile, kGang,
  kCount
};
inline constexpr std::size_t kFlagCount = static_cast<std::size_t>(Flag::kCount);

enum class FlagType : std::uint8_t {
  kText,    // one value
  kSwitch,  // no value
  kList,    // repeatable (and comma-separated where `delimiter` is set)
};

enum class Spelling : std::uint8_t {
  kOwn,           // trainlet's: --name, given once (a list: repeatable)
  kTorchrunName,  // trainlet's, named as torchrun names it: --a-b and --a_b, the last wins
  kTorchrun,      // torchrun's flag: as kTorchrunName, help says "(torchrun's)"
};

// Where a flag is taken: the pod form, `trainlet local`, or both.
enum Forms : std::uint8_t { kPodForm = 1, kLocalForm = 2, kBothForms = 3 };
enum class Form : std::uint8_t { kPod = kPodForm, kLocal = kLocalForm };

// Whether `trainlet local` hands a flag on to each of its agents.
enum class PassOn : std::uint8_t {
  kNo,       // local reads it itself, or the agents must not get it
  kAlways,   // its value (given or default) always
  kIfGiven,  // only when given (flag, TRAINLET_* or PET_*): refused without what it refines
  kIfSet,    // a text that is not empty, a switch that is on, each item of a list
};

struct FlagSpec {
  Flag id;
  std::string_view name;        // long name with dashes
  std::string_view short_name;  // "" or one letter
  FlagType type;
  Spelling spelling;
  bool pet;                     // PET_<FLAG> is read, below TRAINLET_<FLAG>
  std::uint8_t forms;           // Forms
  PassOn pass_on;
  std::string_view default_value;
  std::string_view choices;     // "a|b": CLI11 refuses others; "" any
  char delimiter;               // kList: split values at it; 0 none
  std::string_view help;
};

// The table, indexed by Flag.
const std::array<FlagSpec, kFlagCount>& FlagTable();
const FlagSpec& SpecOf(Flag f);

// "TRAINLET_" + "grace-period" -> "TRAINLET_GRACE_PERIOD".
std::string EnvName(std::string_view prefix, std::string_view name);
// The PET_<FLAG> of a flag torchrun has, "" for trainlet's own.
std::string PetName(Flag f);

// The values of one form's flags after CLI11's parse, with the process
// environment for PET_*. Not copyable: CLI11 writes into it.
class FlagValues {
 public:
  FlagValues(Form form, std::map<std::string, std::string> env);
  FlagValues(const FlagValues&) = delete;
  FlagValues& operator=(const FlagValues&) = delete;

  Form form() const { return form_; }
  bool Has(Flag f) const;  // the form takes it
  const std::map<std::string, std::string>& env() const { return env_; }

  // Given on the command line or as TRAINLET_<FLAG> (not PET_*).
  bool Set(Flag f) const;
  // The text as the command line or TRAINLET_<FLAG> gave it, else the default.
  const std::string& Value(Flag f) const { return text_[Index(f)]; }
  // Flag, else TRAINLET_<FLAG>, else (where the row reads it) PET_<FLAG>.
  std::optional<std::string> Given(Flag f) const;
  // Given(), else the default.
  std::string Resolved(Flag f) const { return Given(f).value_or(std::string(SpecOf(f).default_value)); }
  // A switch as set by the command line or TRAINLET_<FLAG>.
  bool On(Flag f) const { return on_[Index(f)]; }
  // A switch, else PET_<FLAG> as torchrun reads it (bool(int(value))).
  // Errors (config): a PET_<FLAG> that is not an integer.
  exitcodes::Result<bool> Switch(Flag f) const;
  const std::vector<std::string>& List(Flag f) const { return list_[Index(f)]; }
  // Where Given()'s value came from; nullopt: the default.
  std::optional<Origin> OriginOf(Flag f) const;
  // The name the user gave: "--max-restarts", "TRAINLET_MAX_RESTARTS", "PET_MAX_RESTARTS".
  std::string Source(Flag f) const;

  // Declares the form's flags on `app`, from the table, in its order.
  void AddTo(CLI::App& app);
  // Records the options written on the command line (they win over
  // TRAINLET_*), by their written names; refuses one of trainlet's own flags
  // given twice. Errors: class config.
  exitcodes::Status NoteOnLine(const CLI::App& app, const std::vector<std::string>& written);
  // A CLI11 parse error's message with each flag whose value came from its
  // TRAINLET_* variable (set in env(), not written on the command line, after
  // NoteOnLine) named by that variable: "Could not convert: TRAINLET_RUN_PATH
  // = x", not "--run-path", which the user never wrote.
  std::string NameVariables(std::string message) const;
  // After CLI11's parse: keeps what Set() needs, so the CLI::App can go.
  void Freeze();
  // The long options that take argparse's abbreviations: torchrun's, every spelling.
  std::vector<std::string> AbbreviableNames() const;
  // What `trainlet local` hands on to each agent (PassOn), in table order.
  std::vector<std::string> PassedOn() const;

 private:
  static std::size_t Index(Flag f) { return static_cast<std::size_t>(f); }

  Form form_;
  std::map<std::string, std::string> env_;
  std::array<std::string, kFlagCount> text_;
  std::array<bool, kFlagCount> on_{};
  std::array<std::vector<std::string>, kFlagCount> list_;
  std::array<CLI::Option*, kFlagCount> option_{};
  std::array<bool, kFlagCount> on_line_{};
  std::array<bool, kFlagCount> set_{};  // Freeze(): the options' counts
  bool frozen_ = false;
};

// Parses `options` (the form's launcher options alone: no argv[0], no
// trainer) into `f` with CLI11 from the table, as the agent does, and freezes
// it; for tests and tools that need a form's values without the binary.
// Errors (config): CLI11's message, or a flag of trainlet's given twice.
[[nodiscard]] exitcodes::Status ParseOptions(FlagValues& f, const std::vector<std::string>& options);

// "--exit-code given more than once: ..." for a flag given twice.
std::string GivenTwice(const std::string& flag);

}  // namespace trainlet::agent
