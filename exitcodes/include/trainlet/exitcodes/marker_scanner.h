// trainlet/exitcodes/marker_scanner.h — the strongest marker anywhere in a
// stream, fed in pieces as it is read.
//
// A worker's evidence is not always in its last lines: NCCL's watchdog line
// can be followed by a 15 KB faulthandler dump, and NCCL writes its WARN lines
// to stdout. The scanner sees every byte once, as the pump forwards it, and
// keeps the strongest hit (Stronger(): the lowest table index, i.e. --marker
// entries first, then hardware, shared memory, infra, bug) with the first line
// it counted on. Markers that span two pieces are found (the last
// MarkerTable::longest() - 1 bytes are carried over).
//
// Speed: a match is looked for only where one of the table's anchor bytes
// occurs (one rare byte per marker, a few distinct ones for the defaults:
// MarkerTable::Compile), found 64 bytes at a time on x86-64 with pshufb nibble
// tables (AVX2 or SSSE3, chosen at run time), elsewhere (aarch64) 32 at a
// time with compiler vector extensions. No library, so the release build's glibc 2.17
// and aarch64 targets need nothing new. Memory: bounded (kEvidenceLine per
// line being judged, a small carry).
//
// One scanner per stream; not thread-safe (the pump thread owns it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainlet/exitcodes/classify.h"

namespace trainlet::exitcodes {

class MarkerScanner {
 public:
  // The instructions that look for anchor bytes (marker_scanner.cc). kBest:
  // the fastest this CPU runs (kAvx2, kSsse3, kPortable, in that order); the
  // others are there so that tests and benchmarks reach each one. Every one
  // finds the same hits.
  enum class Search { kBest, kPortable, kSsse3, kAvx2 };
  // Whether this CPU runs `search` (kSsse3, kAvx2: x86-64 only).
  static bool Runs(Search search);
  // Which of the table's markers it looks for: all, or only those a scan of
  // the whole stream may use (ScannedInWholeStream: the pump's).
  enum class Which { kAll, kWholeStream };
  // `table` is not owned and must outlive the scanner. A `search` this CPU
  // does not run for the table (Runs) gives kBest.
  explicit MarkerScanner(const MarkerTable& table, Search search = Search::kBest,
                         Which which = Which::kAll);
  // A temporary table would dangle once the statement ends: refused when compiled.
  explicit MarkerScanner(MarkerTable&&, Search = Search::kBest, Which = Which::kAll) = delete;
  // The search in use (never kBest).
  Search search() const { return search_; }
  // Scans the next piece of the stream.
  void Feed(std::string_view data);
  // The stream ended: judges a line still open (one without its '\n').
  void Finish();
  // The strongest hit so far (its `stream` is empty; its `offset` set).
  const std::optional<MarkerHit>& best() const { return best_; }
  // True once after best() changed.
  bool TakeImproved() { return std::exchange(improved_, false); }
  // Bytes fed so far.
  std::uint64_t fed() const { return fed_; }

 private:
  struct Match {
    std::ptrdiff_t start;  // relative to the piece being fed; < 0: in carry_
    std::uint32_t marker;
  };
  // Appends to `out` the matches in `text` that begin at or after `from` and
  // end after `min_end`, by anchor position; skips markers weaker than best_.
  void Find(std::string_view text, std::size_t from, std::size_t min_end,
            std::ptrdiff_t shift, std::vector<Match>* out) const;
  void CheckAnchor(std::string_view text, std::size_t at, std::size_t from,
                   std::size_t min_end, std::ptrdiff_t shift, std::vector<Match>* out) const;
  // Walks the piece's matches in order, collecting each candidate line.
  void Collect(std::string_view data, const std::vector<Match>& matches);
  // Starts collecting the line around a match at `start` (may be < 0).
  void OpenLine(std::string_view data, std::ptrdiff_t start);
  // Appends data[from, to) to the open line (bounded); judges it at a '\n'
  // found there. Returns where the line ended (to if it did not).
  std::size_t ExtendLine(std::string_view data, std::size_t from, std::size_t to);
  // Judges the open line's candidates and closes it.
  void Judge();
  static Search Best();
  bool Done() const { return best_ && best_->index == 0 && best_->failure_class != FailureClass::kWorker; }

  const MarkerTable& table_;
  std::vector<bool> skip_;  // by marker: not looked for (Which)
  std::size_t carry_limit_;
  std::uint64_t fed_ = 0;         // bytes fed before the current piece, then after it
  std::uint64_t line_offset_ = 0;  // the open line's start in the stream
  std::string carry_;  // the stream's last carry_limit_ bytes
  std::optional<MarkerHit> best_;
  bool improved_ = false;
  bool open_ = false;            // a candidate line is being collected
  std::string line_;             // its bytes so far (at most kEvidenceLine)
  std::vector<std::uint32_t> candidates_;  // markers found on it
  std::vector<Match> matches_;   // scratch, reused
  std::string seam_;             // scratch, reused: carry_ and the piece's first bytes
  // The anchor bytes as two 16-entry tables, by low and by high nibble, of
  // bucket bits (marker_scanner.cc: x86-64's pshufb search).
  unsigned char nibbles_[32] = {};
  Search search_;
};

}  // namespace trainlet::exitcodes
