// trainlet-linegen: the log-forwarding benchmark's worker and its checker.
//
//   trainlet-linegen write BYTES [LINE_BYTES]   numbered lines to stdout
//   trainlet-linegen check LINE_BYTES SOURCES < output
//
// write: BYTES / LINE_BYTES lines, each "<seq, 12 digits> <RANK or 0> xxx...\n"
// exactly LINE_BYTES long, written with write(2) in 64 KiB blocks (as a
// trainer's buffered stdout would), so the figure is the launcher's, not the
// generator's. check: reads the combined output (lines may carry a prefix such
// as trainlet's "[rank3]: "), and verifies that every source's sequence is
// complete and in order. Prints one JSON line; exit 0 only when nothing was
// lost, duplicated, reordered or torn.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

bool WriteAll(const char* p, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::write(STDOUT_FILENO, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

int Write(unsigned long long bytes, std::size_t line) {
  if (line < 20) line = 20;
  const char* rank_env = std::getenv("RANK");
  unsigned rank = rank_env ? static_cast<unsigned>(std::strtoul(rank_env, nullptr, 10)) : 0;
  unsigned long long lines = bytes / line;
  std::vector<char> block(65536 / line * line);
  std::string proto(line, 'x');
  proto[line - 1] = '\n';
  std::size_t used = 0;
  // The line's digits are counted up in place (no formatting per line), so the
  // generator costs little next to the launcher it measures.
  std::snprintf(proto.data(), line, "%012llu %u ", 0ULL, rank);
  proto[std::strlen(proto.data())] = 'x';  // snprintf's terminator
  for (unsigned long long seq = 0; seq < lines; ++seq) {
    if (used + line > block.size()) {
      if (!WriteAll(block.data(), used)) return 1;
      used = 0;
    }
    std::memcpy(block.data() + used, proto.data(), line);
    used += line;
    for (int d = 11; d >= 0 && ++proto[d] > '9'; --d) proto[d] = '0';
  }
  return WriteAll(block.data(), used) ? 0 : 1;
}

int Check(std::size_t line, unsigned sources) {
  std::vector<unsigned long long> next(sources, 0);
  unsigned long long lines = 0, bad = 0, bytes = 0;
  char* buf = nullptr;
  std::size_t cap = 0;
  ssize_t n;
  while ((n = ::getline(&buf, &cap, stdin)) > 0) {
    bytes += static_cast<unsigned long long>(n);
    ++lines;
    // The generator's own part is the last `line` bytes; anything before is a prefix.
    if (static_cast<std::size_t>(n) < line || buf[n - 1] != '\n') {
      ++bad;
      continue;
    }
    const char* l = buf + (n - static_cast<ssize_t>(line));
    char* end = nullptr;
    unsigned long long seq = std::strtoull(l, &end, 10);
    bool ok = end == l + 12 && *end == ' ';
    unsigned long src = ok ? std::strtoul(end + 1, &end, 10) : 0;
    ok = ok && *end == ' ';
    if (!ok || src >= sources || seq != next[src]) {
      ++bad;
      continue;
    }
    ++next[src];
  }
  std::free(buf);
  unsigned long long min_seen = ~0ULL;
  for (auto v : next) min_seen = std::min(min_seen, v);
  std::printf("{\"lines\": %llu, \"bytes\": %llu, \"bad\": %llu, \"complete_lines_per_source\": %llu}\n",
              lines, bytes, bad, min_seen);
  return bad == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "write") == 0) {
    return Write(std::strtoull(argv[2], nullptr, 10),
                 argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 100);
  }
  if (argc == 4 && std::strcmp(argv[1], "check") == 0) {
    return Check(std::strtoul(argv[2], nullptr, 10),
                 static_cast<unsigned>(std::strtoul(argv[3], nullptr, 10)));
  }
  std::fprintf(stderr, "usage: trainlet-linegen write BYTES [LINE_BYTES] | check LINE_BYTES SOURCES\n");
  return 78;
}
