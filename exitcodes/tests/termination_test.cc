#include "trainlet/exitcodes/termination.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace trainlet::exitcodes {
namespace {

bool ValidUtf8(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size()) {
    unsigned char c = s[i];
    int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    if (n < 0) return false;
    for (int k = 1; k <= n; ++k) {
      if (i + k >= s.size() || (static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n + 1;
  }
  return true;
}

TerminationInfo Info(std::string tail) {
  TerminationInfo info;
  info.verdict = {FailureClass::kBug, 42, "local rank 1 (rank 3) exited with code 42", "exit-code"};
  info.first_failure = WorkerFailure{.local_rank = 1, .rank = 3,
                                     .exit = WorkerExit{.exit_status = 42},
                                     .stderr_tail = std::move(tail)};
  info.pod_index = 2;
  info.attempt = 1;
  info.node_name = "node-a";
  info.phase_ms = {{"rendezvous", 3.14159}, {"run", 1234.5}};
  return info;
}

TEST(TerminationMessageTest, CarriesTheSummary) {
  std::string m = TerminationMessage(Info("Traceback...\nValueError: boom\n"));
  auto j = nlohmann::json::parse(m);
  EXPECT_EQ(j["class"], "bug");
  EXPECT_EQ(j["code"], 42);
  EXPECT_EQ(j["pod_index"], 2);
  EXPECT_EQ(j["attempt"], 1);
  EXPECT_EQ(j["node"], "node-a");
  EXPECT_EQ(j["first_failure"]["rank"], 3);
  EXPECT_EQ(j["first_failure"]["exit"], "exit 42");
  EXPECT_DOUBLE_EQ(j["phases_ms"]["rendezvous"].get<double>(), 3.1);
  EXPECT_EQ(j["stderr_tail"], "Traceback...\nValueError: boom\n");
}

// Hot spares: a pod that leaves names the spare that takes its node rank;
// without one there is no such field.
TEST(TerminationMessageTest, NamesTheSpareThatTookThePodsPlace) {
  TerminationInfo info = Info("CUDA error: uncorrectable ECC error encountered\n");
  info.verdict = {FailureClass::kHardware, 74, "GPU fault", "marker"};
  EXPECT_FALSE(nlohmann::json::parse(TerminationMessage(info)).contains("replaced_by"));
  info.replaced_by = Handover{.spare = 4, .node_rank = 1, .generation = 2};
  auto j = nlohmann::json::parse(TerminationMessage(info));
  EXPECT_EQ(j["class"], "hardware");
  EXPECT_EQ(j["replaced_by"]["spare"], 4);
  EXPECT_EQ(j["replaced_by"]["node_rank"], 1);
  EXPECT_EQ(j["replaced_by"]["generation"], 2);
}

TEST(TerminationMessageTest, LongTailIsCutFromTheFrontWithinTheLimit) {
  std::string tail;
  for (int i = 0; i < 2000; ++i) tail += "line " + std::to_string(i) + " \xc3\xa9\xe2\x82\xac\n";
  tail += "THE END";
  for (std::size_t limit : {4096u, 1000u, 300u}) {
    std::string m = TerminationMessage(Info(tail), limit);
    EXPECT_LE(m.size(), limit);
    EXPECT_TRUE(ValidUtf8(m));
    auto j = nlohmann::json::parse(m);  // throws, failing the test, if invalid
    std::string t = j["stderr_tail"];
    EXPECT_TRUE(t.ends_with("THE END")) << "the end explains the failure";
    EXPECT_EQ(j["class"], "bug");
    EXPECT_GT(m.size(), limit - 40) << "the room is used";
  }
}

TEST(TerminationMessageTest, ControlCharactersAndInvalidBytesStayValidJson) {
  static const char kRaw[] = "a\0b\x01\"quote\"\\ \xff\xfe end";
  std::string tail(kRaw, sizeof(kRaw) - 1);  // embedded NUL included
  std::string m = TerminationMessage(Info(tail), 4096);
  auto j = nlohmann::json::parse(m);
  EXPECT_TRUE(ValidUtf8(m));
  EXPECT_NE(j["stderr_tail"].get<std::string>().find("end"), std::string::npos);
}

TEST(Utf8TailTest, NeverSplitsACharacter) {
  std::string s = "\xe2\x82\xac\xe2\x82\xac";  // two euro signs, 3 bytes each
  EXPECT_EQ(Utf8Tail(s, 6), s);
  EXPECT_EQ(Utf8Tail(s, 5), "\xe2\x82\xac");
  EXPECT_EQ(Utf8Tail(s, 2), "");
}

}  // namespace
}  // namespace trainlet::exitcodes
