#include "trainlet/agent/base/log_format.h"

#include <cstdlib>
#include <ctime>
#include <string_view>

#include <nlohmann/json.hpp>
#include <spdlog/cfg/env.h>
#include <spdlog/formatter.h>
#include <spdlog/spdlog.h>

#include "base/output.h"

namespace trainlet::agent {

namespace {

LogFormat g_format = LogFormat::kText;
std::optional<std::uint32_t> g_pod;
std::uint32_t g_generation = 0;
thread_local const LogFields* t_fields = nullptr;

// "2026-12-01T11:22:33.123Z" (RFC 3339, UTC, milliseconds).
std::string Rfc3339(std::chrono::system_clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch());
  const std::time_t secs = static_cast<std::time_t>(ms.count() / 1000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[40];
  std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%03dZ", static_cast<int>(ms.count() % 1000));
  return buf;
}

std::string JsonLine(std::chrono::system_clock::time_point time, spdlog::level::level_enum level,
                     std::string_view message, const LogFields* fields) {
  nlohmann::ordered_json j;
  j["time"] = Rfc3339(time);
  j["level"] = std::string(spdlog::level::to_string_view(level).data());
  if (g_pod) j["pod_index"] = *g_pod;
  j["generation"] = g_generation;
  j["message"] = std::string(message);
  if (fields != nullptr) {
    if (fields->failure_class) j["class"] = *fields->failure_class;
    if (fields->code) j["code"] = *fields->code;
    if (fields->rank) j["rank"] = *fields->rank;
    if (fields->pod) j["pod"] = *fields->pod;
    if (!fields->summary.empty()) {
      j["summary"] = nlohmann::ordered_json::parse(fields->summary, nullptr, false);
    }
  }
  // Worker text in messages is arbitrary bytes: invalid UTF-8 is replaced.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

class JsonFormatter : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    std::string line = JsonLine(msg.time, msg.level,
                                std::string_view(msg.payload.data(), msg.payload.size()), t_fields);
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

std::string TextPattern() {
  return g_pod ? "[trainlet pod" + std::to_string(*g_pod) + " %Y-%m-%dT%H:%M:%S.%e %l] %v"
               : "[trainlet %Y-%m-%dT%H:%M:%S.%e %l] %v";
}

void ApplyFormat() {
  if (g_format == LogFormat::kJson) {
    spdlog::set_formatter(std::make_unique<JsonFormatter>());
  } else {
    spdlog::set_pattern(TextPattern());
  }
}

}  // namespace

exitcodes::Result<LogFormat> ParseLogFormat(const std::string& what, const std::string& value) {
  if (value == "text") return LogFormat::kText;
  if (value == "json") return LogFormat::kJson;
  return exitcodes::Status::Config(what + "='" + value + "' is not one of text, json");
}

LogFormat EarlyLogFormat(int argc, char** argv) {
  std::optional<std::string> value;
  if (const char* env = std::getenv("TRAINLET_LOG_FORMAT")) value = env;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--") break;
    if (a == "--log-format" && i + 1 < argc) {
      value = argv[++i];
    } else if (a.starts_with("--log-format=")) {
      value = std::string(a.substr(13));
    }
  }
  return value && *value == "json" ? LogFormat::kJson : LogFormat::kText;
}

void ConfigureLogging(LogFormat format, const std::string& level_flag) {
  g_format = format;
  auto logger = std::make_shared<spdlog::logger>("trainlet", MakeLogSink());
  spdlog::set_default_logger(logger);
  ApplyFormat();
  spdlog::set_level(spdlog::level::info);
  spdlog::cfg::load_env_levels();  // SPDLOG_LEVEL
  if (!level_flag.empty()) spdlog::set_level(spdlog::level::from_str(level_flag));
}

LogFormat CurrentLogFormat() { return g_format; }

void SetLogPod(std::uint32_t index) {
  g_pod = index;
  // The rendezvous library's named loggers share the default logger's sink,
  // whose formatter this replaces.
  ApplyFormat();
}

void SetLogGeneration(std::uint32_t generation) { g_generation = generation; }

ScopedLogFields::ScopedLogFields(LogFields fields) : previous_(t_fields), fields_(std::move(fields)) {
  t_fields = &fields_;
}

ScopedLogFields::~ScopedLogFields() { t_fields = previous_; }

std::string FormatLogLine(spdlog::level::level_enum level, const std::string& message,
                          const LogFields& fields) {
  if (g_format == LogFormat::kJson) {
    return JsonLine(std::chrono::system_clock::now(), level, message, &fields);
  }
  return "trainlet: " + message + "\n";
}

}  // namespace trainlet::agent
