// metrics.h, log_format.h, stragglers.h, heartbeat_watch.h, roster.h: the
// pure parts, and the heartbeat watch on a real loop with real files (the e2e
// side is tests/e2e/test_observe.py).
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "trainlet/agent/pod/roster.h"
#include "trainlet/agent/observe/heartbeat_watch.h"
#include "trainlet/agent/base/log_format.h"
#include "trainlet/agent/base/metrics.h"
#include "trainlet/agent/observe/stragglers.h"
#include "trainlet/rendezvous/leader.h"

namespace trainlet::agent {
namespace {

using namespace std::chrono_literals;

TEST(MetricsTest, EveryFamilyHasHelpAndTypeAndSamplesFollowThem) {
  MetricsSnapshot s;
  s.leader = true;
  s.generation = 2;
  s.restarts = 2;
  s.pods_joined = 3;
  s.pods_expected = 4;
  s.pods_min = 2;
  s.formed = true;
  s.max_restarts = 3;
  s.restart_count = 2;
  s.spares_configured = 2;
  s.last_culprit = Culprit{.index = 2, .node_name = "gpu-\"7\\", .failure_class = "hardware"};
  s.worker_exits = {{"bug", 1}, {"ok", 3}};
  s.last_failure_class = "bug";
  s.heartbeat_rtt_seconds = {{1, 0.00025}, {3, 0.5}};
  s.step_rate = {{0, 10}, {1, 2.5}};
  s.stragglers = {1};
  s.heartbeat_age_seconds = {{0, 1.5}};
  s.replacements = {{.generation = 1, .node_rank = 1, .replaced = 1, .spare = 3},
                    {.generation = 2, .node_rank = 2, .replaced = 2, .spare = 4}};
  const std::string text = RenderMetrics(s);
  // Text format 0.0.4: "# HELP name text", "# TYPE name type", then samples of that family.
  const std::string value = R"("(?:[^"\\\n]|\\[\\"n])*")";  // escapes: \\ \" \n
  std::regex sample("^([a-z_]+)(\\{[a-z_]+=" + value + "(,[a-z_]+=" + value + R"()*\})? (\S+)$)");
  std::string family;
  int families = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t nl = text.find('\n', pos);
    ASSERT_NE(nl, std::string::npos) << "the last line has no newline";
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.starts_with("# HELP ")) {
      family = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_TRUE(family.starts_with("trainlet_")) << line;
      ++families;
      continue;
    }
    if (line.starts_with("# TYPE ")) {
      EXPECT_TRUE(line == "# TYPE " + family + " counter" || line == "# TYPE " + family + " gauge")
          << line;
      if (line.ends_with("counter")) {
        EXPECT_TRUE(family.ends_with("_total")) << line;
      }
      continue;
    }
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, sample)) << line;
    EXPECT_EQ(m[1], family) << line;
  }
  EXPECT_GE(families, 23);
  EXPECT_NE(text.find("\ntrainlet_gang_restarts_total 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\ntrainlet_worker_exits_total{class=\"bug\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("\ntrainlet_worker_exits_total{class=\"oom\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("\ntrainlet_last_failure{class=\"bug\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("\ntrainlet_last_failure{class=\"infra\"} 0\n"), std::string::npos);
  // The pod's index is "member": the Prometheus Operator's target label "pod"
  // would rename a "pod" of ours to "exported_pod".
  EXPECT_NE(text.find("\ntrainlet_heartbeat_rtt_seconds{member=\"1\"} 0.00025\n"),
            std::string::npos);
  EXPECT_NE(text.find("\ntrainlet_straggler{member=\"1\"} 1\n"), std::string::npos);
  EXPECT_EQ(text.find("pod=\""), std::string::npos) << text;
  // What alert rules need: the budget, the spares, MIN, formation, the culprit's node.
  EXPECT_NE(text.find("\ntrainlet_gang_max_restarts 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\ntrainlet_gang_restart_count 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\ntrainlet_gang_spares_configured 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\ntrainlet_gang_pods_min 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\ntrainlet_gang_formed 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\ntrainlet_gang_last_culprit{member=\"2\",node_name=\"gpu-\\\"7\\\\\","
                      "class=\"hardware\"} 1\n"),
            std::string::npos)
      << "escaped as the text format asks\n"
      << text;
  // Hot spares: which spare took which pod's node rank, per generation.
  EXPECT_NE(text.find("\ntrainlet_gang_replacements_total 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\ntrainlet_gang_replacement{generation=\"2\",node_rank=\"2\",spare=\"4\","
                      "replaced=\"2\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\ntrainlet_output_dropped_lines_total{stream=\"stderr\"} "),
            std::string::npos);
  // A member has no per-member series.
  s.leader = false;
  EXPECT_EQ(RenderMetrics(s).find("member="), std::string::npos);
}

TEST(MetricsTest, OutputCountersAreCountedPerStream) {
  const auto before = OutputCounters(STDERR_FILENO).lines.load();
  OutputCounters(STDERR_FILENO).lines += 3;
  MetricsSnapshot s;
  const std::string text = RenderMetrics(s);
  EXPECT_NE(text.find("trainlet_output_lines_total{stream=\"stderr\"} " +
                      std::to_string(before + 3) + "\n"),
            std::string::npos)
      << text;
  FillProcessStats(&s);
  EXPECT_GT(s.resident_bytes, 1 << 20);
  EXPECT_GT(s.cpu_seconds, 0);
}

TEST(LogFormatTest, JsonLinesAreOneObjectWithTheFields) {
  ConfigureLogging(LogFormat::kJson, "");
  SetLogPod(3);
  SetLogGeneration(2);
  LogFields f;
  f.failure_class = "bug";
  f.code = 42;
  f.rank = 7;
  f.pod = 1;
  f.summary = R"({"class":"bug","code":42})";
  const std::string line = FormatLogLine(spdlog::level::err, "exit 42 \"x\"\n\xff", f);
  ASSERT_TRUE(line.ends_with("}\n")) << line;
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "one line";
  auto j = nlohmann::json::parse(line);
  EXPECT_TRUE(std::regex_match(j["time"].get<std::string>(),
                               std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")))
      << j["time"];
  EXPECT_EQ(j["level"], "error");
  EXPECT_EQ(j["pod_index"], 3);
  EXPECT_EQ(j["generation"], 2);
  EXPECT_EQ(j["message"], "exit 42 \"x\"\n\xEF\xBF\xBD");
  EXPECT_EQ(j["class"], "bug");
  EXPECT_EQ(j["code"], 42);
  EXPECT_EQ(j["rank"], 7);
  EXPECT_EQ(j["pod"], 1);
  EXPECT_EQ(j["summary"], nlohmann::json::parse(f.summary));
  ConfigureLogging(LogFormat::kText, "");
  EXPECT_EQ(FormatLogLine(spdlog::level::err, "bad"), "trainlet: bad\n");
}

TEST(LogFormatTest, ParsesTheFlagAndFindsItBeforeTheParser) {
  EXPECT_EQ(*ParseLogFormat("--log-format", "json"), LogFormat::kJson);
  EXPECT_EQ(*ParseLogFormat("--log-format", "text"), LogFormat::kText);
  EXPECT_FALSE(ParseLogFormat("--log-format", "JSON").ok());
  std::string a0 = "trainlet", a1 = "--log-format", a2 = "json", a3 = "--", a4 = "--log-format=text";
  char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(), a4.data()};
  ::unsetenv("TRAINLET_LOG_FORMAT");
  EXPECT_EQ(EarlyLogFormat(5, argv), LogFormat::kJson) << "after -- is the trainer's";
  std::string eq = "--log-format=json";
  char* argv2[] = {a0.data(), eq.data()};
  EXPECT_EQ(EarlyLogFormat(2, argv2), LogFormat::kJson);
  EXPECT_EQ(EarlyLogFormat(1, argv2), LogFormat::kText);
  ::setenv("TRAINLET_LOG_FORMAT", "json", 1);
  EXPECT_EQ(EarlyLogFormat(1, argv2), LogFormat::kJson);
  ::unsetenv("TRAINLET_LOG_FORMAT");
}

TEST(StragglerTest, StepRateFromTheLastTouchesAndTheQuietSinceThen) {
  const auto t0 = StepClock::now();
  std::deque<StepClock::time_point> t;
  EXPECT_EQ(StepRate(t, t0), 0);
  t.push_back(t0);
  EXPECT_EQ(StepRate(t, t0 + 1s), 0) << "one touch: no rate yet";
  for (int i = 1; i <= 4; ++i) t.push_back(t0 + i * 250ms);
  EXPECT_DOUBLE_EQ(StepRate(t, t0 + 1s), 4.0);
  EXPECT_DOUBLE_EQ(StepRate(t, t0 + 1s + 200ms), 4.0) << "quiet less than a step";
  EXPECT_DOUBLE_EQ(StepRate(t, t0 + 3s), 5.0 / 3) << "quiet 2 s: 5 steps in 3 s";
  EXPECT_LT(StepRate(t, t0 + 60s), 0.1) << "stopped: falls towards 0";
}

TEST(StragglerTest, APodFarBehindTheMedianIsNamedAndLeavesWithHysteresis) {
  std::map<std::uint32_t, double> rates = {{0, 10}, {1, 9}, {2, 11}, {3, 4}};
  EXPECT_DOUBLE_EQ(MedianRate(rates), 9.5);
  auto s = FindStragglers(rates, 2, {});
  EXPECT_EQ(s, (std::set<std::uint32_t>{3}));
  rates[3] = 5.5;  // 5.5 * 2 >= 9.5, but 5.5 * 1.5 < 9.5: still behind
  s = FindStragglers(rates, 2, s);
  EXPECT_EQ(s, (std::set<std::uint32_t>{3}));
  EXPECT_TRUE(FindStragglers(rates, 2, {}).empty()) << "not entered at 5.5";
  rates[3] = 7;
  EXPECT_TRUE(FindStragglers(rates, 2, s).empty()) << "caught up";
  EXPECT_TRUE(FindStragglers({{0, 10}}, 2, {}).empty()) << "one pod: nobody to compare";
  EXPECT_TRUE(FindStragglers(rates, 0, {}).empty()) << "off";
  // Two pods: the median is their mean.
  EXPECT_EQ(FindStragglers({{0, 10}, {1, 1}}, 2, {}), (std::set<std::uint32_t>{1}));
}

TEST(StragglerTest, StepMeterCountsTouchesOfHeartbeatFiles) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("observe_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<std::string> files = {(dir / "hb0").string(), (dir / "hb1").string()};
  for (const auto& f : files) ::close(::open(f.c_str(), O_WRONLY | O_CREAT, 0644));
  boost::asio::io_context io;
  auto meter = StepMeter::Create(io.get_executor(), files);
  ASSERT_NE(meter, nullptr);
  for (int i = 0; i < 6; ++i) {
    std::filesystem::last_write_time(files[0], std::filesystem::file_time_type::clock::now());
    if (i % 3 == 0) {
      std::filesystem::last_write_time(files[1], std::filesystem::file_time_type::clock::now());
    }
    io.run_for(30ms);
  }
  const auto slowest = meter->Slowest({true, true}, StepClock::now());
  ASSERT_TRUE(slowest.has_value());
  EXPECT_EQ(slowest->second, 1u) << "hb1 is touched a third as often";
  const auto only0 = meter->Slowest({true, false}, StepClock::now());
  ASSERT_TRUE(only0.has_value());
  EXPECT_EQ(only0->second, 0u);
  EXPECT_GT(only0->first, slowest->first * 1.5);
  meter.reset();
  std::filesystem::remove_all(dir);
}

TEST(StragglerTest, TheBoardNamesAPodBehindAndForgetsItOnceCaughtUp) {
  StragglerBoard board(2);
  board.Look({{0, 10}, {1, 9}, {2, 11}, {3, 4}}, {{3, 12}});
  EXPECT_EQ(board.stragglers(), (std::set<std::uint32_t>{3}));
  EXPECT_EQ(board.rates().size(), 4u);
  board.Look({{0, 10}, {1, 9}, {2, 11}, {3, 5.5}}, {});
  EXPECT_EQ(board.stragglers(), (std::set<std::uint32_t>{3})) << "hysteresis";
  board.Look({{0, 10}, {1, 9}, {2, 11}}, {});
  EXPECT_TRUE(board.stragglers().empty()) << "no longer reports a rate";
  StragglerBoard off(0);
  off.Look({{0, 10}, {1, 1}}, {});
  EXPECT_TRUE(off.stragglers().empty()) << "factor 0: rates only";
  EXPECT_EQ(off.rates().size(), 2u);
}

TEST(MetricsTest, WorkerExitsAreCountedByClass) {
  struct Case {
    std::optional<std::string> first;
    int collateral;
    bool stop_signal;
    std::map<std::string, std::uint64_t> want;
  };
  const Case cases[] = {
      {std::nullopt, 0, false, {{"ok", 4}}},
      {"bug", 3, false, {{"bug", 1}, {"peer_failed", 3}}},
      {"oom", 1, false, {{"oom", 1}, {"peer_failed", 1}, {"ok", 2}}},
      {std::nullopt, 4, true, {{"terminated", 4}}},
  };
  for (const Case& c : cases) {
    PodMeters m;
    m.CountWorkerExits(4, c.first, c.collateral, c.stop_signal);
    EXPECT_EQ(m.worker_exits, c.want) << c.first.value_or("-") << " " << c.collateral;
  }
  PodMeters m;
  m.restarts = 2;
  m.last_failure_class = "infra";
  m.CountWorkerExits(2, std::nullopt, 0, false);
  m.CountWorkerExits(2, "worker", 1, false);
  MetricsSnapshot s;
  m.Fill(&s);
  EXPECT_EQ(s.restarts, 2u);
  EXPECT_EQ(s.last_failure_class, "infra");
  EXPECT_EQ(s.worker_exits, (std::map<std::string, std::uint64_t>{
                                {"ok", 2}, {"worker", 1}, {"peer_failed", 1}}));
}

TEST(HeartbeatWatchTest, AWorkerThatStopsTouchingItsFileIsHungAndTheWatchStops) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("heartbeat_watch_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<std::string> files;
  for (std::uint32_t lr = 0; lr < 2; ++lr) {
    files.push_back(HeartbeatWatch::CreateFile(dir.string(), lr));
    ASSERT_FALSE(files.back().empty());
  }
  EXPECT_TRUE(HeartbeatWatch::CreateFile((dir / "missing").string(), 0).empty());
  boost::asio::io_context io;
  int looks = 0;
  std::string hung;
  HeartbeatWatch::Callbacks cb;
  cb.watching = [] { return true; };
  cb.running = [](int) { return true; };
  cb.on_look = [&looks] { ++looks; };
  cb.on_hang = [&hung, &io](const std::string& h) {
    hung = h;
    io.stop();
  };
  HeartbeatWatch watch(io.get_executor(), {.timeout = 200ms}, files, cb);
  watch.Start();
  // Local rank 1 keeps touching its file; local rank 0 touches it once.
  std::filesystem::last_write_time(files[0], std::filesystem::file_time_type::clock::now());
  for (int i = 0; i < 200 && hung.empty(); ++i) {
    std::filesystem::last_write_time(files[1], std::filesystem::file_time_type::clock::now());
    io.restart();
    io.run_for(50ms);
  }
  ASSERT_FALSE(hung.empty()) << "no hang found in 10 s";
  EXPECT_NE(hung.find("local rank 0"), std::string::npos) << hung;
  EXPECT_EQ(hung.find("local rank 1"), std::string::npos) << hung;
  EXPECT_EQ(watch.hang(), hung);
  EXPECT_GT(looks, 0);
  EXPECT_EQ(watch.Ages().size(), 2u);
  // After the hang (or Stop) no look comes any more.
  const int before = looks;
  watch.Stop();
  io.restart();
  io.run_for(300ms);
  EXPECT_EQ(looks, before);
  std::filesystem::remove_all(dir);
}

TEST(RosterTest, ASpareTakesTheNodeRankOfAPodThatMustLeave) {
  Roster roster;
  const Roster::TimePoint t0{};
  EXPECT_TRUE(roster.Expected().empty()) << "before the first generation: all indices";
  const FormationConfig two{.min_nodes = 2, .max_nodes = 2, .spares = 1};
  roster.StartRound(t0, two);
  EXPECT_FALSE(roster.Plan({0}, t0).has_value()) << "one pod of two: wait";
  auto ranks = roster.Plan({0, 1, 2}, t0);
  ASSERT_TRUE(ranks.has_value());
  EXPECT_EQ(*ranks, (std::map<std::uint32_t, std::uint32_t>{{0, 0}, {1, 1}}));
  roster.Adopt(0);
  EXPECT_EQ(roster.Unranked(), (std::set<std::uint32_t>{2}));
  EXPECT_EQ(roster.Expected(), (std::set<std::uint32_t>{0, 1, 2}));
  roster.MarkLeaving(1);
  EXPECT_EQ(roster.Expected(), (std::set<std::uint32_t>{0, 2}));
  roster.StartRound(t0, two);
  ranks = roster.Plan({0, 2}, t0);  // pod 1 left (its Job recreates it)
  ASSERT_TRUE(ranks.has_value());
  EXPECT_EQ(*ranks, (std::map<std::uint32_t, std::uint32_t>{{0, 0}, {2, 1}}));
  roster.Adopt(1);
  EXPECT_EQ(roster.replacements(),
            (std::vector<Replacement>{{.generation = 1, .node_rank = 1, .replaced = 1, .spare = 2}}));
  EXPECT_TRUE(roster.Unranked().empty());
  EXPECT_EQ(roster.Expected(), (std::set<std::uint32_t>{0, 2}));
  roster.MarkLost(7);  // unknown: ignored
  roster.MarkLost(2);
  EXPECT_EQ(roster.Expected(), (std::set<std::uint32_t>{0}));
}

// A pod new to the gang that arrives while the gang restarts (an elastic join,
// a recreated pod) must not stand in for a survivor still stopping its
// workers: the round waits for the survivor by identity, not by count.
TEST(RosterTest, ANewcomerDuringARestartDoesNotStandInForASurvivor) {
  Roster roster;
  const Roster::TimePoint t0{};
  // Generation 0 forms with pods 0, 1 and 3 (MIN 3, no last call to wait out).
  roster.StartRound(t0, {.min_nodes = 3, .max_nodes = 5, .last_call = std::chrono::milliseconds(0)});
  auto ranks = roster.Plan({0, 1, 3}, t0);
  ASSERT_TRUE(ranks.has_value());
  roster.Adopt(0);
  EXPECT_EQ(roster.Expected(), (std::set<std::uint32_t>{0, 1, 3}));
  // Generation 1 (a restart, torch's 30 s last call): pod 2 is new, survivor 1
  // still stops its workers.
  roster.StartRound(t0, {.min_nodes = 3, .max_nodes = 5, .last_call = std::chrono::seconds(30)});
  EXPECT_FALSE(roster.Plan({0, 3, 2}, t0).has_value())
      << "three pods joined, but survivor 1 is not back: it must not be planned out";
  ranks = roster.Plan({0, 3, 2, 1}, t0);
  ASSERT_TRUE(ranks.has_value());
  EXPECT_EQ(*ranks, (std::map<std::uint32_t, std::uint32_t>{{0, 0}, {1, 1}, {2, 2}, {3, 3}}));
  roster.Adopt(1);
  EXPECT_TRUE(roster.replacements().empty()) << "nobody was replaced";
  EXPECT_EQ(roster.LeftIn(1), std::nullopt);
}

TEST(CompactIndicesTest, RunsAndALimit) {
  EXPECT_EQ(rendezvous::CompactIndices({1, 2, 3, 7, 9, 10}, 16), "1-3,7,9-10");
  EXPECT_EQ(rendezvous::CompactIndices({}, 16), "");
  EXPECT_EQ(rendezvous::CompactIndices({1, 3, 5, 7, 8}, 2), "1,3 (+3 more)");
}

}  // namespace
}  // namespace trainlet::agent
