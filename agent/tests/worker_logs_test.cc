// Per-rank log folders (worker_logs.h): where the error file goes, on real folders.
#include "trainlet/agent/run/worker_logs.h"

#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

namespace trainlet::agent {
namespace {

namespace fs = std::filesystem;

// torchrun (torch/distributed/elastic/multiprocessing/api.py DefaultLogsSpecs.reify):
// with a log dir, each local rank's error.json sits beside its logs.
TEST(WorkerLogs, ErrorFileInTheLogDirOnlyWhenOneIsGiven) {
  WorkerLogOptions o;
  o.log_dir = "/l";
  auto s = PlanWorkerStreams(o, "/l/run_x/attempt_2", 2, 0, "default");
  EXPECT_EQ(s[0].error_file, "/l/run_x/attempt_2/0/error.json");
  EXPECT_EQ(s[1].error_file, "/l/run_x/attempt_2/1/error.json");
  WorkerLogOptions teed;  // -t 3 without --log-dir: files in $TMPDIR, the error file stays ours
  teed.tee = *ParseStd("t", "3");
  EXPECT_EQ(PlanWorkerStreams(teed, "/tmp/torchelastic_x/run_y/attempt_0", 1, 0, "d")[0].error_file,
            "");
  EXPECT_EQ(PlanWorkerStreams(WorkerLogOptions{}, "", 1, 0, "d")[0].error_file, "");
}

TEST(WorkerLogs, ForAttemptMakesTheFolderTheErrorFileGoesIn) {
  const fs::path root = fs::temp_directory_path() / ("worker-logs-" + std::to_string(::getpid()));
  fs::remove_all(root);
  WorkerLogOptions o;
  o.log_dir = (root / "logs").string();  // made if missing, as torchrun makes it
  WorkerLogDirs dirs(o);
  auto s = dirs.ForAttempt("job", 1, 2, 0, "default");
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ(s->size(), 2u);
  EXPECT_EQ((*s)[1].error_file, dirs.run_dir() + "/attempt_1/1/error.json");
  EXPECT_TRUE(fs::is_directory(fs::path((*s)[1].error_file).parent_path()));
  EXPECT_EQ(dirs.run_dir().rfind(o.log_dir + "/job_", 0), 0u) << dirs.run_dir();
  fs::remove_all(root);
}

}  // namespace
}  // namespace trainlet::agent
