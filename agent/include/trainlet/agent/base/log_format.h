// trainlet/agent/base/log_format.h — how trainlet's own log lines look.
//
// text (default): "[trainlet pod3 2026-12-01T11:22:33.123 info] message".
// json (--log-format json, TRAINLET_LOG_FORMAT=json): one JSON object per line,
//   {"time":"2026-12-01T11:22:33.123Z","level":"info","pod_index":3,
//    "generation":0,"message":"...", ...fields}
// with the time in RFC 3339 (UTC, milliseconds), and the structured fields a
// line has (LogFields: class, code, rank, pod, and for the final line the
// termination message's object as "summary"), for log pipelines that parse
// JSON (Loki, Cloud Logging, Elasticsearch). Worker lines are separate
// (pump.h). All calls on the thread that logs (the agent's event loop).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <spdlog/common.h>

#include "trainlet/exitcodes/status.h"

namespace trainlet::agent {

enum class LogFormat { kText, kJson };

// "text" or "json"; errors (class config) name `what`.
exitcodes::Result<LogFormat> ParseLogFormat(const std::string& what, const std::string& value);

// The format given before the flags are parsed (so a flag error is already
// in it): the last --log-format VALUE / --log-format=VALUE before "--", else
// TRAINLET_LOG_FORMAT, else text. Unparsable values mean text here (the
// parser reports them).
LogFormat EarlyLogFormat(int argc, char** argv);

// Installs the default logger (stderr, through OutputSink) in `format`, at
// level info, SPDLOG_LEVEL, then `level_flag` if not empty.
void ConfigureLogging(LogFormat format, const std::string& level_flag);
LogFormat CurrentLogFormat();

// This pod's index (text: "[trainlet podN ...]"; json: "pod_index", as in the
// termination message) and the gang
// generation ("generation" in json) for the lines that follow.
void SetLogPod(std::uint32_t index);
void SetLogGeneration(std::uint32_t generation);

// Structured fields of a log line (json only; text lines carry them in words).
struct LogFields {
  std::optional<std::string> failure_class;  // "class": a FailureClass name
  std::optional<int> code;                   // "code": an exit code
  std::optional<int> rank;                   // "rank": a global worker rank
  std::optional<std::uint32_t> pod;          // "pod": the pod a line is about
  std::string summary;  // a JSON object (the termination message): "summary"
};

// Attaches `fields` to the lines this thread logs while it lives.
class ScopedLogFields {
 public:
  explicit ScopedLogFields(LogFields fields);
  ~ScopedLogFields();
  ScopedLogFields(const ScopedLogFields&) = delete;
  ScopedLogFields& operator=(const ScopedLogFields&) = delete;

 private:
  const LogFields* previous_;
  LogFields fields_;
};

// One line (with '\n') in the current format, for paths that write stderr
// without the logger (start-up errors, internal errors).
std::string FormatLogLine(spdlog::level::level_enum level, const std::string& message,
                          const LogFields& fields = {});

}  // namespace trainlet::agent
