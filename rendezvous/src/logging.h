// Private: named loggers for library code (never the default logger).
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace trainlet::rendezvous {

// The logger called `name`, created on first use with the default logger's sinks
// and level, so main's configuration applies.
std::shared_ptr<spdlog::logger> Logger(const std::string& name);

}  // namespace trainlet::rendezvous
