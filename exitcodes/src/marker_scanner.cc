#include "trainlet/exitcodes/marker_scanner.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace trainlet::exitcodes {
namespace {

// Bytes kept before a match for its evidence line, when the line began in an
// earlier piece or long before the match.
constexpr std::size_t kLead = 128;

// 16 bytes compared at once (GCC/Clang vector extensions: SSE2 on x86-64,
// NEON on aarch64).
using Bytes16 = unsigned char __attribute__((vector_size(16)));
constexpr std::size_t kMaxVectorAnchors = 16;  // more: one table look-up per byte

}  // namespace

MarkerScanner::MarkerScanner(const MarkerTable& table, Search search, Which which)
    // A match may begin up to longest() - 1 bytes before a piece, and its line
    // up to kLead bytes before that (found by fuzz_markers).
    : table_(table), skip_(table.markers().size(), false), carry_limit_(kLead + table.longest()),
      search_(search == Search::kBest || !Runs(search) ? Best() : search) {
  if (which == Which::kWholeStream) {
    for (std::size_t i = 0; i < skip_.size(); ++i) skip_[i] = !ScannedInWholeStream(table.markers()[i]);
  }
  // Anchor k sets bit k % 8 in its low and its high nibble's entry.
  for (std::size_t k = 0; k < table.anchor_bytes().size(); ++k) {
    const unsigned char b = table.anchor_bytes()[k];
    nibbles_[b & 15] |= static_cast<unsigned char>(1U << (k % 8));
    nibbles_[16 + (b >> 4)] |= static_cast<unsigned char>(1U << (k % 8));
  }
}

void MarkerScanner::CheckAnchor(std::string_view text, std::size_t at, std::size_t max_start,
                                std::size_t min_end, std::ptrdiff_t shift,
                                std::vector<Match>* out) const {
  for (const MarkerTable::Anchor& a : table_.anchors_of(static_cast<unsigned char>(text[at]))) {
    if (best_ && a.marker > best_->index) continue;  // cannot beat what is already found
    if (at < a.offset || skip_[a.marker]) continue;
    const std::size_t start = at - a.offset;
    const std::string& m = table_.markers()[a.marker].text;
    if (start >= max_start || start + m.size() > text.size() || start + m.size() < min_end) {
      continue;
    }
    if (a.offset + 1 < m.size() && text[at + 1] != m[a.offset + 1]) continue;  // cheap first
    if (std::memcmp(text.data() + start, m.data(), m.size()) == 0) {
      out->push_back({static_cast<std::ptrdiff_t>(start) + shift, a.marker});
    }
  }
}

namespace {

// The bytes of a compare result (0x00 or 0xFF each) as one bit per byte.
std::uint32_t BitsOf(std::uint64_t w) {
  return static_cast<std::uint32_t>(((w & 0x0101010101010101ULL) * 0x0102040810204080ULL) >> 56);
}

// The first i >= from, in steps of 32, where text[i, i + 32) holds one of
// `bytes` (N of them), with *mask the positions that do (bit j: text[i + j]);
// or, with *mask 0, where fewer than 32 bytes are left. The anchors' count is
// a template argument, so their broadcasts stay in registers and the
// compares unroll.
template <std::size_t N>
std::size_t NextBlock(const unsigned char* text, std::size_t n, std::size_t from,
                      const unsigned char* bytes, std::uint32_t* mask) {
  Bytes16 splat[N];
  for (std::size_t a = 0; a < N; ++a) splat[a] = Bytes16{} + bytes[a];
  for (; from + 32 <= n; from += 32) {
    Bytes16 v0, v1;
    std::memcpy(&v0, text + from, 16);
    std::memcpy(&v1, text + from + 16, 16);
    Bytes16 h0 = Bytes16{}, h1 = Bytes16{};
    for (std::size_t a = 0; a < N; ++a) {
      h0 |= reinterpret_cast<Bytes16>(v0 == splat[a]);
      h1 |= reinterpret_cast<Bytes16>(v1 == splat[a]);
    }
    std::uint64_t w[4];
    std::memcpy(w, &h0, 16);
    std::memcpy(w + 2, &h1, 16);
    if ((w[0] | w[1] | w[2] | w[3]) == 0) continue;
    *mask = BitsOf(w[0]) | BitsOf(w[1]) << 8 | BitsOf(w[2]) << 16 | BitsOf(w[3]) << 24;
    return from;
  }
  *mask = 0;
  return from;
}

#if defined(__x86_64__)
// The same search as NextBlock for any number of anchors at a constant cost,
// 64 bytes per step (bit j of *mask: text[i + j] may be an anchor):
// byte b may be an anchor when lo[b & 15] & hi[b >> 4] is not zero (the
// "nibble shuffle" of Hyperscan's Teddy matcher, here with one-byte
// fingerprints: each anchor sets its bucket's bit, 8 buckets; anchors that
// share a bucket let a few other bytes through, which CheckAnchor refuses).
// pshufb is SSSE3 (every x86-64 CPU since 2006 has it; AVX2 does 32 bytes at
// once): chosen at run time, so the binary keeps the x86-64 baseline.

// Per byte of text[0, 32): not zero where it may be an anchor (lo, hi: the
// nibble tables).
__attribute__((target("avx2"))) inline __m256i AnchorBytes(const unsigned char* text, __m256i lo,
                                                           __m256i hi) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(text));
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  return _mm256_and_si256(
      _mm256_shuffle_epi8(lo, _mm256_and_si256(v, low4)),
      _mm256_shuffle_epi8(hi, _mm256_and_si256(_mm256_srli_epi16(v, 4), low4)));
}

// Bit j set where byte j of AnchorBytes' result is not zero.
__attribute__((target("avx2"))) inline std::uint64_t AnchorBits(__m256i m) {
  return ~static_cast<std::uint32_t>(
      _mm256_movemask_epi8(_mm256_cmpeq_epi8(m, _mm256_setzero_si256())));
}

__attribute__((target("avx2"))) std::size_t NextBlockAvx2(const unsigned char* text,
                                                          std::size_t n, std::size_t from,
                                                          const unsigned char* nibbles,
                                                          std::uint64_t* mask) {
  const __m256i lo = _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(nibbles)));
  const __m256i hi = _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(nibbles + 16)));
  for (; from + 64 <= n; from += 64) {
    const __m256i m0 = AnchorBytes(text + from, lo, hi);
    const __m256i m1 = AnchorBytes(text + from + 32, lo, hi);
    const __m256i any = _mm256_or_si256(m0, m1);
    if (_mm256_testz_si256(any, any)) continue;  // one test for both halves
    *mask = AnchorBits(m0) | AnchorBits(m1) << 32;
    return from;
  }
  *mask = 0;
  return from;
}

// Bit j set where byte j of `v` is no anchor (SSSE3).
__attribute__((target("ssse3"))) inline std::uint64_t NoAnchorBits(__m128i v, __m128i lo,
                                                                   __m128i hi) {
  const __m128i low4 = _mm_set1_epi8(0x0f);
  const __m128i m = _mm_and_si128(_mm_shuffle_epi8(lo, _mm_and_si128(v, low4)),
                                  _mm_shuffle_epi8(hi, _mm_and_si128(_mm_srli_epi16(v, 4), low4)));
  return static_cast<std::uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(m, _mm_setzero_si128())));
}

__attribute__((target("ssse3"))) std::size_t NextBlockSsse3(const unsigned char* text,
                                                            std::size_t n, std::size_t from,
                                                            const unsigned char* nibbles,
                                                            std::uint64_t* mask) {
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(nibbles));
  const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(nibbles + 16));
  for (; from + 64 <= n; from += 64) {
    const auto* at = reinterpret_cast<const __m128i*>(text + from);
    const std::uint64_t bits = ~(NoAnchorBits(_mm_loadu_si128(at), lo, hi) |
                                 NoAnchorBits(_mm_loadu_si128(at + 1), lo, hi) << 16 |
                                 NoAnchorBits(_mm_loadu_si128(at + 2), lo, hi) << 32 |
                                 NoAnchorBits(_mm_loadu_si128(at + 3), lo, hi) << 48);
    if (bits != 0) {
      *mask = bits;
      return from;
    }
  }
  *mask = 0;
  return from;
}

struct Cpu {
  bool ssse3, avx2;
};
// What this CPU runs, asked of cpuid when the first scanner is made, not at
// load: __builtin_cpu_init reads a dozen cpuid leaves in a constructor, and in
// a virtual machine each one traps to the hypervisor (~50 us of every launch:
// bench/RESULTS.md). AVX2 also needs the kernel to save the YMM registers:
// OSXSAVE and XCR0's SSE and AVX bits (Intel SDM vol. 1, 14.3, "Detection of
// Intel AVX instructions"), as libgcc's cpuinfo.c checks.
Cpu ReadCpu() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return {false, false};
  const bool ssse3 = (c & bit_SSSE3) != 0;
  bool ymm_saved = false;
  if ((c & bit_OSXSAVE) != 0) {
    unsigned xcr0 = 0, high = 0;
    __asm__("xgetbv" : "=a"(xcr0), "=d"(high) : "c"(0));
    ymm_saved = (xcr0 & 6) == 6;
  }
  if (!ymm_saved || __get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return {ssse3, false};
  return {ssse3, (b & bit_AVX2) != 0};
}
const Cpu& CpuNow() {
  static const Cpu cpu = ReadCpu();
  return cpu;
}
#endif

template <std::size_t... I>
constexpr auto MakeNextBlockTable(std::index_sequence<I...>) {
  return std::array{&NextBlock<I + 1>...};
}
constexpr auto kNextBlock = MakeNextBlockTable(std::make_index_sequence<kMaxVectorAnchors>());

}  // namespace

bool MarkerScanner::Runs(Search search) {
  switch (search) {
    case Search::kBest:
    case Search::kPortable:
      return true;
#if defined(__x86_64__)
    case Search::kSsse3:
      return CpuNow().ssse3;
    case Search::kAvx2:
      return CpuNow().avx2;
#endif
    default:
      return false;
  }
}

MarkerScanner::Search MarkerScanner::Best() {
  for (Search s : {Search::kAvx2, Search::kSsse3}) {
    if (Runs(s)) return s;
  }
  return Search::kPortable;
}

void MarkerScanner::Find(std::string_view text, std::size_t max_start, std::size_t min_end,
                         std::ptrdiff_t shift, std::vector<Match>* out) const {
  const std::vector<unsigned char>& bytes = table_.anchor_bytes();
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
#if defined(__x86_64__)
  using WideSearch = std::size_t (*)(const unsigned char*, std::size_t, std::size_t,
                                     const unsigned char*, std::uint64_t*);
  const WideSearch wide = search_ == Search::kAvx2    ? &NextBlockAvx2
                          : search_ == Search::kSsse3 ? &NextBlockSsse3
                                                      : nullptr;
  if (!bytes.empty() && wide != nullptr) {
    for (std::uint64_t mask = 0;; i += 64) {
      i = wide(p, n, i, nibbles_, &mask);
      if (mask == 0) break;  // fewer than 64 bytes left: below
      for (; mask != 0; mask &= mask - 1) {
        const std::size_t at = i + static_cast<std::size_t>(__builtin_ctzll(mask));
        if (!table_.anchors_of(p[at]).empty()) {
          CheckAnchor(text, at, max_start, min_end, shift, out);
        }
      }
    }
  } else
#endif
  if (!bytes.empty() && bytes.size() <= kMaxVectorAnchors) {
    for (std::uint32_t mask = 0;; i += 32) {
      i = kNextBlock[bytes.size() - 1](p, n, i, bytes.data(), &mask);
      if (mask == 0) break;  // fewer than 32 bytes left: below
      for (; mask != 0; mask &= mask - 1) {
        CheckAnchor(text, i + static_cast<std::size_t>(__builtin_ctz(mask)), max_start, min_end,
                    shift, out);
      }
    }
  }
  for (; i < n; ++i) {
    if (!table_.anchors_of(p[i]).empty()) CheckAnchor(text, i, max_start, min_end, shift, out);
  }
}

void MarkerScanner::Feed(std::string_view data) {
  if (!Done() && !data.empty()) {
    matches_.clear();
    if (!carry_.empty() && table_.longest() > 1) {
      // Matches that begin in the carried bytes and end in this piece.
      seam_.assign(carry_);
      seam_.append(data.substr(0, std::min(data.size(), table_.longest() - 1)));
      Find(seam_, carry_.size(), carry_.size() + 1, -static_cast<std::ptrdiff_t>(carry_.size()),
           &matches_);
    }
    Find(data, data.size(), 0, 0, &matches_);
    std::stable_sort(matches_.begin(), matches_.end(),
                     [](const Match& a, const Match& b) { return a.start < b.start; });
    Collect(data, matches_);
  }
  fed_ += data.size();
  if (data.size() >= carry_limit_) {
    carry_.assign(data.substr(data.size() - carry_limit_));
  } else {
    carry_.append(data);
    if (carry_.size() > carry_limit_) carry_.erase(0, carry_.size() - carry_limit_);
  }
}

void MarkerScanner::Collect(std::string_view data, const std::vector<Match>& matches) {
  std::size_t pos = 0;  // data before pos is in the open line, or judged
  for (const Match& m : matches) {
    const std::size_t s = static_cast<std::size_t>(std::max<std::ptrdiff_t>(m.start, 0));
    if (open_ && s >= pos) pos = ExtendLine(data, pos, s);
    // After the lines before it are judged, whatever the pieces were (found
    // by fuzz_markers): a weaker marker opens no line.
    if (best_ && m.marker > best_->index) continue;
    if (!open_) {
      OpenLine(data, m.start);
      pos = std::max(pos, s);
    }
    if (std::find(candidates_.begin(), candidates_.end(), m.marker) == candidates_.end()) {
      candidates_.push_back(m.marker);
    }
  }
  if (open_) ExtendLine(data, pos, data.size());
}

void MarkerScanner::OpenLine(std::string_view data, std::ptrdiff_t start) {
  // The line's start: after the last '\n' at most kLead bytes before the match,
  // looking into the carried bytes when the match is near the piece's start.
  const std::ptrdiff_t carry = static_cast<std::ptrdiff_t>(carry_.size());
  const std::ptrdiff_t lo = std::max<std::ptrdiff_t>(start - static_cast<std::ptrdiff_t>(kLead),
                                                     -carry);
  auto at = [&](std::ptrdiff_t p) { return p < 0 ? carry_[carry + p] : data[p]; };
  std::ptrdiff_t begin = start;
  while (begin > lo && at(begin - 1) != '\n') --begin;
  open_ = true;
  line_offset_ = static_cast<std::uint64_t>(static_cast<std::int64_t>(fed_) + begin);
  line_.clear();
  for (std::ptrdiff_t p = begin; p < std::max<std::ptrdiff_t>(start, 0); ++p) {
    if (line_.size() < kEvidenceLine) line_.push_back(at(p));
  }
}

std::size_t MarkerScanner::ExtendLine(std::string_view data, std::size_t from, std::size_t to) {
  const void* nl = std::memchr(data.data() + from, '\n', to - from);
  const std::size_t stop = nl ? static_cast<std::size_t>(static_cast<const char*>(nl) - data.data())
                              : to;
  const std::size_t room = kEvidenceLine - std::min(kEvidenceLine, line_.size());
  line_.append(data.substr(from, std::min(stop - from, room)));
  if (nl != nullptr) {
    Judge();
    return stop + 1;
  }
  if (line_.size() >= kEvidenceLine) Judge();  // enough of it: what follows is not needed
  return to;
}

void MarkerScanner::Judge() {
  while (!line_.empty() && (line_.back() == '\r' || line_.back() == ' ')) line_.pop_back();
  for (std::uint32_t c : candidates_) {
    auto meaning = Interpret(table_.markers()[c], line_);
    if (!meaning) continue;
    MarkerHit hit{c, meaning->first, std::move(meaning->second), line_, "", line_offset_};
    if (!best_ || Stronger(hit, *best_)) {
      best_ = std::move(hit);
      improved_ = true;
    }
  }
  open_ = false;
  line_.clear();
  candidates_.clear();
}

void MarkerScanner::Finish() {
  if (open_) Judge();
}

}  // namespace trainlet::exitcodes
