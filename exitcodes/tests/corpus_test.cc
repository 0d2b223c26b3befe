// The labelled corpus (exitcodes/tests/corpus/*.case, README there): every
// rank output goes through what the pod does with a worker's streams (the
// pump's whole-stream scan and exception keeper, the 8 KiB stderr tail, the
// error file's message) and Classify; precision and recall per class are
// printed, and the test fails when bug, config or hardware precision is
// below 100 %, or a class's recall is below the README's recorded figure.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainlet/exitcodes/classify.h"
#include "trainlet/exitcodes/marker_scanner.h"

namespace trainlet::exitcodes {
namespace {

namespace fs = std::filesystem;

struct Case {
  std::string name;
  std::map<std::string, std::string> fields;    // "class", "exit", "signal", "source", ...
  std::map<std::string, std::string> sections;  // "stdout", "stderr", "error_file"
};

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// "key: value" lines, then "=== section" blocks to the next one.
Case Parse(const fs::path& p) {
  Case c{p.stem().string(), {}, {}};
  std::istringstream in(ReadAll(p));
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.starts_with("=== ")) {
      section = line.substr(4);
      c.sections[section];
      continue;
    }
    if (!section.empty()) {
      c.sections[section] += line + "\n";
      continue;
    }
    if (line.empty() || line.starts_with('#')) continue;
    const std::size_t colon = line.find(": ");
    if (colon != std::string::npos) c.fields[line.substr(0, colon)] = line.substr(colon + 2);
  }
  return c;
}

// torch's @record error file: {"message": {"message": M, "extraInfo":
// {"py_callstack": S}}} -> M + "\n" + S, as the agent reads it.
std::string ErrorFileMessage(const std::string& content) {
  auto j = nlohmann::json::parse(content, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("message")) return "";
  const auto& m = j["message"];
  if (m.is_string()) return m.get<std::string>();
  std::string text = m.value("message", "");
  if (m.contains("extraInfo") && m["extraInfo"].contains("py_callstack")) {
    text += "\n" + m["extraInfo"]["py_callstack"].get<std::string>();
  }
  return text;
}

// The pump's whole-stream scan of `text` (in 4 KiB reads).
std::optional<MarkerHit> Scan(const MarkerTable& t, const std::string& text, const char* name) {
  MarkerScanner s(t, MarkerScanner::Search::kBest, MarkerScanner::Which::kWholeStream);
  for (std::size_t i = 0; i < text.size(); i += 4096) s.Feed(std::string_view(text).substr(i, 4096));
  s.Finish();
  auto h = s.best();
  if (h) {
    h->stream = name;
    h->bytes_after = text.size() - h->offset;
  }
  return h;
}

Evidence EvidenceOf(const Case& c, const MarkerTable& markers) {
  const std::string& err = c.sections.count("stderr") ? c.sections.at("stderr") : "";
  const std::string& out = c.sections.count("stdout") ? c.sections.at("stdout") : "";
  WorkerFailure f;
  f.local_rank = 1;
  f.rank = 1;
  if (c.fields.count("signal")) {
    f.exit = {.signaled = true, .signal = std::stoi(c.fields.at("signal"))};
  } else {
    f.exit = {.exit_status = std::stoi(c.fields.at("exit"))};
  }
  f.stderr_tail = err.substr(err.size() > 8192 ? err.size() - 8192 : 0);
  auto a = Scan(markers, err, "stderr"), b = Scan(markers, out, "stdout");
  f.stream_marker = a && (!b || !Stronger(*b, *a)) ? a : b;
  ExceptionKeeper keeper;
  for (std::size_t i = 0; i < err.size(); i += 4096) keeper.Feed(std::string_view(err).substr(i, 4096));
  keeper.Finish();
  f.last_exception = keeper.last();
  if (f.last_exception) {
    f.last_exception->bytes_after = keeper.fed() - f.last_exception->end_offset;
    f.last_exception->age_ms =
        c.fields.count("exception_age_s") ? std::stoll(c.fields.at("exception_age_s")) * 1000 : 0;
  }
  if (c.sections.count("error_file")) f.error_file_message = ErrorFileMessage(c.sections.at("error_file"));
  Evidence e{.first_failure = f};
  if (c.fields.count("oom_kills")) e.oom_kills = std::stoull(c.fields.at("oom_kills"));
  if (c.fields.count("nvml")) e.gpu_fault = c.fields.at("nvml");
  if (c.fields.count("shm")) {  // "SIZE FREE", bytes
    std::istringstream s(c.fields.at("shm"));
    std::uint64_t size = 0, free = 0;
    s >> size >> free;
    e.shm_bytes = size;
    e.shm_free_bytes = free;
  }
  return e;
}

// The README's recorded figures: "| class | cases | precision | recall |"
// rows after "<!-- corpus-score -->"; recall as "N %".
std::map<std::string, double> RecordedRecall() {
  std::istringstream in(ReadAll(TRAINLET_README));
  std::map<std::string, double> recall;
  std::string line;
  bool in_table = false;
  while (std::getline(in, line)) {
    if (line.find("<!-- corpus-score -->") != std::string::npos) in_table = true;
    if (!in_table) continue;
    if (line.empty() && !recall.empty()) break;
    std::vector<std::string> cells;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, '|')) {
      cell.erase(0, cell.find_first_not_of(' '));
      cell.erase(cell.find_last_not_of(' ') + 1);
      cells.push_back(cell);
    }
    if (cells.size() < 5 || cells[1] == "class" || cells[1].starts_with("-")) continue;
    recall[cells[1]] = std::stod(cells[4]);
  }
  return recall;
}

TEST(CorpusTest, PrecisionAndRecallPerClass) {
  const MarkerTable markers = MarkerTable::Defaults();
  const ExitCodeTable codes;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(TRAINLET_CORPUS_DIR)) {
    if (entry.path().extension() == ".case") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 60U) << "the corpus holds at least 60 rank outputs";
  std::map<std::string, int> truth, said, right;
  for (const fs::path& p : files) {
    const Case c = Parse(p);
    ASSERT_TRUE(c.fields.count("class") && c.fields.count("source")) << p << ": class, source";
    ASSERT_TRUE(c.fields.count("exit") || c.fields.count("signal")) << p << ": exit or signal";
    const Verdict v = Classify(EvidenceOf(c, markers), codes, markers);
    const std::string want = c.fields.at("class"), got(ClassName(v.failure_class));
    ++truth[want];
    ++said[got];
    if (want == got) {
      ++right[got];
    } else {
      std::printf("  %-44s true %-8s said %-8s (rule %d): %.160s\n", c.name.c_str(), want.c_str(),
                  got.c_str(), v.rule, v.reason.c_str());
    }
  }
  const std::map<std::string, double> recorded = RecordedRecall();
  std::printf("%zu rank outputs\n| class | cases | precision | recall |\n|---|---|---|---|\n",
              files.size());
  for (const std::string cls : {"bug", "config", "hardware", "infra", "oom", "worker"}) {
    const double precision = said[cls] ? 100.0 * right[cls] / said[cls] : 100.0;
    const double recall = truth[cls] ? 100.0 * right[cls] / truth[cls] : 100.0;
    std::printf("| %s | %d | %.0f %% | %.0f %% |\n", cls.c_str(), truth[cls], precision, recall);
    if (cls == "bug" || cls == "config" || cls == "hardware") {
      EXPECT_EQ(right[cls], said[cls]) << cls << ": a false " << cls << " fails the Job or pages";
    }
    ASSERT_TRUE(recorded.count(cls)) << "README's corpus table lacks " << cls;
    EXPECT_GE(recall + 0.5, recorded.at(cls)) << cls << "'s recall dropped below the README's";
  }
}

}  // namespace
}  // namespace trainlet::exitcodes
