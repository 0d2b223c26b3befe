// libFuzzer entry for the torchelastic error file (TORCHELASTIC_ERROR_FILE, as
// @record trainers write it): any bytes give a message or "", never a crash or
// an exception out of the JSON parser.
#include <cstdint>
#include <string>

#include "trainlet/agent/pod/evidence.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string content(reinterpret_cast<const char*>(data), size);
  (void)trainlet::agent::ErrorFileMessage(content);
  return 0;
}
