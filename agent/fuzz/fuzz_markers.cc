// libFuzzer: exitcodes::MarkerScanner on arbitrary worker output, fed in
// pieces whose sizes (and the anchor search) come from the input's first
// bytes, must find what the same scanner finds in the whole text at once (the
// strongest marker, with the same line), and never read out of bounds; so
// must exitcodes::ExceptionKeeper (the same last exception, bounded).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trainlet/exitcodes/last_exception.h"
#include "trainlet/exitcodes/marker_scanner.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace ec = trainlet::exitcodes;
  static const ec::MarkerTable table = ec::MarkerTable::Defaults();
  if (size < 2) return 0;
  const std::size_t step_a = data[0] % 97 + 1, step_b = data[1] % 13 + 1;
  // Each anchor search this CPU runs (kPortable, kSsse3, kAvx2), by the first byte.
  const auto search = static_cast<ec::MarkerScanner::Search>(1 + data[0] / 97 % 3);
  const std::string_view text(reinterpret_cast<const char*>(data) + 2, size - 2);
  const auto whole = table.Match(text);
  ec::MarkerScanner s(table, search);
  bool flip = false;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = std::min((flip = !flip) ? step_a : step_b, text.size() - i);
    s.Feed(text.substr(i, n));
    i += n;
  }
  s.Finish();
  if (whole.has_value() != s.best().has_value()) __builtin_trap();
  if (whole && (whole->index != s.best()->index || whole->line != s.best()->line ||
                whole->failure_class != s.best()->failure_class)) {
    __builtin_trap();
  }
  ec::ExceptionKeeper whole_keeper, keeper;
  whole_keeper.Feed(text);
  whole_keeper.Finish();
  flip = false;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = std::min((flip = !flip) ? step_a : step_b, text.size() - i);
    keeper.Feed(text.substr(i, n));
    i += n;
  }
  keeper.Finish();
  const auto& a = whole_keeper.last();
  const auto& b = keeper.last();
  if (a.has_value() != b.has_value()) __builtin_trap();
  if (a && (a->text != b->text || a->end_offset != b->end_offset ||
            a->text.size() > ec::kExceptionText)) {
    __builtin_trap();
  }
  return 0;
}
