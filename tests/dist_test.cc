// Process group and `tzrec launch` on loopback with two ranks (two processes).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tzrec/common/strings.h"
#include "tzrec/dist/process_group.h"

namespace tzrec {
namespace {

// A TCP port nobody listens on right now.
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

struct ShellRun {
  int exit_code;
  std::string output;
  double seconds;
};

ShellRun RunShell(const std::string& command) {
  auto start = std::chrono::steady_clock::now();
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  std::string output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
  int status = pclose(pipe);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {WEXITSTATUS(status), output, seconds};
}

TEST(Distributed, LaunchRunsRanksAndTheirCollectives) {
  ShellRun run = RunShell(std::string(TZREC_BINARY) + " launch --nproc_per_node 2 --master_port " +
                     std::to_string(FreePort()) + " -- dist_check");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("[rank 0] dist_check: rank 0 of 2 ok"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("[rank 1] dist_check: rank 1 of 2 ok"), std::string::npos) << run.output;
  // Both ranks on this host: the collectives go through shared memory (where the machine has it).
  if (access("/dev/shm", W_OK) == 0) {
    EXPECT_NE(run.output.find("collectives through shared memory"), std::string::npos) << run.output;
  } else {
    EXPECT_NE(run.output.find("shared-memory collectives unavailable"), std::string::npos) << run.output;
  }
  // Two "nodes" of one rank each (the multi-node command line, here on one machine).
  const std::string nodes = std::string(TZREC_BINARY) + " launch --nnodes 2 --nproc_per_node 1 --master_port " +
                            std::to_string(FreePort()) + " --node_rank ";
  ShellRun pair = RunShell("(" + nodes + "1 -- dist_check &) ; " + nodes + "0 -- dist_check; sleep 1");
  EXPECT_EQ(pair.exit_code, 0) << pair.output;
  EXPECT_NE(pair.output.find("[rank 0] dist_check: rank 0 of 2 ok"), std::string::npos) << pair.output;
  EXPECT_NE(pair.output.find("[rank 1] dist_check: rank 1 of 2 ok"), std::string::npos) << pair.output;
  EXPECT_NE(pair.output.find("collectives over Gloo (TCP)"), std::string::npos) << pair.output;
  // Gloo on one host when asked for.
  ShellRun gloo = RunShell("TZREC_SHM_COLLECTIVES=0 " + std::string(TZREC_BINARY) + " launch --nproc_per_node 2 --master_port " +
                           std::to_string(FreePort()) + " -- dist_check");
  EXPECT_EQ(gloo.exit_code, 0) << gloo.output;
  EXPECT_NE(gloo.output.find("collectives over Gloo (TCP)"), std::string::npos) << gloo.output;
}

TEST(Distributed, ADeadRankFailsTheJobNamingIt) {
  // Rank 1 exits before the collectives; rank 0 must not hang, and launch names rank 1.
  ShellRun run = RunShell("PROCESS_GROUP_TIMEOUT_SECONDS=20 " + std::string(TZREC_BINARY) +
                     " launch --nproc_per_node 2 --master_port " + std::to_string(FreePort()) +
                     " -- dist_check --fail_rank=1");
  EXPECT_EQ(run.exit_code, 3) << run.output;
  EXPECT_NE(run.output.find("rank 1 exited with exit code 3"), std::string::npos) << run.output;
  EXPECT_LT(run.seconds, 20.0);
  // Without launch (e.g. torchrun): the surviving rank fails by itself, naming the failure.
  const int port = FreePort();
  const std::string env = "WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 PROCESS_GROUP_TIMEOUT_SECONDS=10 MASTER_PORT=" +
                          std::to_string(port) + " ";
  ShellRun pair = RunShell("(" + env + "RANK=1 " + TZREC_BINARY + " dist_check --fail_rank=1 &) ; " + env +
                      "RANK=0 " + TZREC_BINARY + " dist_check");
  EXPECT_NE(pair.exit_code, 0) << pair.output;
  EXPECT_NE(pair.output.find("rank 0: allreduce failed"), std::string::npos) << pair.output;
  EXPECT_LT(pair.seconds, 15.0);
}

TEST(Distributed, EnvironmentIsReadAndChecked) {
  setenv("WORLD_SIZE", "4", 1);
  setenv("RANK", "2", 1);
  setenv("MASTER_PORT", "12345", 1);
  DistEnv env = ReadDistEnv();
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.master_port, 12345);
  EXPECT_TRUE(env.distributed());
  setenv("RANK", "4", 1);
  EXPECT_TZREC_ERROR(ReadDistEnv(), "RANK='4'");
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  unsetenv("MASTER_PORT");
  // Open MPI's variables, so mpirun can start ranks.
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  env = ReadDistEnv();
  EXPECT_EQ(env.world_size, 2);
  EXPECT_EQ(env.rank, 1);
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("OMPI_COMM_WORLD_RANK");
  EXPECT_FALSE(ReadDistEnv().distributed());
}

}  // namespace
}  // namespace tzrec

#include <fstream>
#include <set>
#include <sstream>

#include "tzrec/config/pipeline_config.h"
#include "tzrec/tools/gen_data.h"
#include "tzrec/common/fs.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/train/checkpoint.h"

namespace tzrec {
namespace {

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

// gen_data for examples/<example>.config (with `edits`) into dir/data.
GenDataResult MockData(const testing::TempDir& dir, int64_t train_rows, int64_t eval_rows, int files,
                       const std::string& edits = "", const std::string& example = "deepfm_mock") {
  auto cfg = LoadPipelineConfig(testing::SourceDir() + "/examples/" + example + ".config");
  if (!edits.empty()) EditConfigJson(&cfg, edits);
  GenDataOptions gen;
  gen.output_dir = dir.File("data");
  gen.train_rows = train_rows;
  gen.eval_rows = eval_rows;
  gen.num_files = files;
  return GenerateMockData(cfg, gen);
}

// Two ranks on batches of 64 train exactly like one process on the same global batches of
// 128 (rank 0's rows then rank 1's rows): same final dense weights and embedding tables, and
// the same evaluation over all eval rows.
// `example`: a CSV example config; `grouping_key`: one of its sparse features; `mean_pooled`:
// id features made mean-pooled.
void TwoRanksMatchOneProcess(const std::string& sharding, const std::string& example = "deepfm_mock",
                             const std::string& grouping_key = "cat_4",
                             const std::set<std::string>& mean_pooled = {},
                             const std::string& extra_edits = "", const std::string& two_rank_env = "",
                             const std::function<void(protos::EasyRecConfig*)>& adjust = nullptr) {
  SCOPED_TRACE(sharding + " " + example + " " + extra_edits + " " + two_rank_env);
  testing::TempDir dir;
  // The example plus a decayed train AUC, logged with the losses.
  const std::string config = dir.File("train_metrics.config");
  {
    auto cfg = LoadPipelineConfig(testing::SourceDir() + "/examples/" + example + ".config");
    for (auto& feature : *cfg.mutable_feature_configs()) {
      if (feature.has_id_feature() && mean_pooled.count(feature.id_feature().feature_name())) {
        feature.mutable_id_feature()->set_pooling("mean");
      }
    }
    if (adjust) adjust(&cfg);
    auto* train_auc = cfg.mutable_model_config()->add_train_metrics();
    train_auc->mutable_auc();
    train_auc->set_decay_step(4);
    SavePipelineConfig(cfg, config);
  }
  const int64_t batch = 64, steps = 20;
  // One file per rank (CSV is split by whole files).
  MockData(dir, 2 * batch * steps, 1000, 2, "", example);
  // The one-process file: blocks of `batch` rows taken alternately from the two rank files.
  auto a = ReadLines(dir.File("data/train/part-00000.csv"));
  auto b = ReadLines(dir.File("data/train/part-00001.csv"));
  ASSERT_EQ(a.size(), b.size());
  std::ofstream combined(dir.File("combined.csv"));
  combined << a[0] << "\n";
  for (size_t start = 1; start < a.size(); start += batch) {
    for (size_t i = start; i < std::min(a.size(), start + batch); ++i) combined << a[i] << "\n";
    for (size_t i = start; i < std::min(b.size(), start + batch); ++i) combined << b[i] << "\n";
  }
  combined.close();
  auto edits = [&](int64_t batch_size) {
    return StrCat(R"({"train_config.global_embedding_constraints.sharding_types": [")", sharding,
                  R"("], "data_config.batch_size": )", batch_size,
                  R"(, "data_config.shuffle": false, "data_config.num_workers": 1,
                      "train_config.num_epochs": 0, "train_config.num_steps": )", steps,
                  R"(, "train_config.save_checkpoints_epochs": 0, "train_config.log_step_count_steps": 1)",
                  extra_edits, "}");
  };
  const std::string common = std::string(TZREC_BINARY) + " train_eval --pipeline_config_path=" + config +
                             " --eval_input_path='" + dir.File("data/eval/*.csv") + "'";
  ShellRun two = RunShell(two_rank_env + " OMP_NUM_THREADS=1 TORCH_MANUAL_SEED=5 " + std::string(TZREC_BINARY) +
                          " launch --nproc_per_node 2 --master_port " + std::to_string(FreePort()) + " -- " +
                          common.substr(std::string(TZREC_BINARY).size() + 1) + " --model_dir=" +
                          dir.File("two") + " --train_input_path='" + dir.File("data/train/*.csv") +
                          "' --edit_config_json='" + edits(batch) + "'");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  ShellRun one = RunShell("OMP_NUM_THREADS=1 TORCH_MANUAL_SEED=5 " + common + " --model_dir=" + dir.File("one") +
                          " --train_input_path=" + dir.File("combined.csv") + " --edit_config_json='" +
                          edits(2 * batch) + "'");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto ckpt_one = ListCheckpoints(dir.File("one"));
  auto ckpt_two = ListCheckpoints(dir.File("two"));
  ASSERT_FALSE(ckpt_one.empty());
  ASSERT_FALSE(ckpt_two.empty());
  EXPECT_EQ(ckpt_one.back().step, ckpt_two.back().step);
  auto x = LoadCheckpointTensors(ckpt_one.back().path);
  auto y = LoadCheckpointTensors(ckpt_two.back().path);
  for (auto& kv : y) {
    if (!EndsWith(kv.first, ".ids") && !EndsWith(kv.first, ".init_seed")) EXPECT_TRUE(x.count(kv.first)) << kv.first;
  }
  for (auto& kv : x) {
    ASSERT_TRUE(y.count(kv.first)) << kv.first;
    // A zch history holds a rank's ids: sized on its first batch, half the one process's.
    if (EndsWith(kv.first, ".zch_history_capacity")) continue;
    // Hash-stored tables save their touched rows: compare those.
    auto ids = y.find(kv.first.substr(0, kv.first.find(".weight") + 7) + ".ids");
    const bool both_sparse = ids != y.end() && x.count(ids->first);
    if (both_sparse) EXPECT_TRUE(torch::equal(x[ids->first], ids->second)) << ids->first;
    const at::Tensor expected = ids == y.end() || both_sparse ? kv.second : kv.second.index_select(0, ids->second);
    // FP16 / BF16 tables (values all halves / bfloat16s): the merged gradients may differ from
    // one process's by float rounding, which can move an element across its stochastic rounding
    // threshold, one step (2^-10 / 2^-7 relative) away; from there its later roundings draw
    // other random bits, a walk of a few steps over the run (the losses below stay as close as
    // fp32's). BF16 values are checked first: most of them are halves as well.
    auto stored_as = [&](at::ScalarType type) {
      return expected.scalar_type() == at::kFloat && torch::equal(expected, expected.to(type).to(at::kFloat));
    };
    const double rtol = stored_as(at::kBFloat16) ? 5e-2 : stored_as(at::kHalf) ? 1e-2 : 1e-4;
    EXPECT_TRUE(expected.allclose(y[kv.first], rtol, 1e-4))
        << kv.first << " max diff " << (expected - y[kv.first]).abs().max().item<float>();
  }
  // The logged loss curve (global-batch losses) is the same.
  auto curve = [](const std::string& output, const std::string& prefix) {
    std::vector<double> losses;
    std::istringstream in(output);
    std::string line;
    while (std::getline(in, line)) {
      size_t at = line.find(" total_loss: ");
      if (at == std::string::npos || line.rfind(prefix, 0) != 0) continue;
      losses.push_back(std::stod(line.substr(at + 13)));
    }
    return losses;
  };
  auto loss_one = curve(one.output, "");
  auto loss_two = curve(two.output, "[rank 0]");
  ASSERT_EQ(loss_one.size(), static_cast<size_t>(steps));
  ASSERT_EQ(loss_two.size(), loss_one.size());
  for (size_t i = 0; i < loss_one.size(); ++i) EXPECT_NEAR(loss_one[i], loss_two[i], 2e-5) << "step " << i;
  // The decayed train AUC (state summed over ranks at each decay step) is the same too.
  auto train_auc = [](const std::string& output, const std::string& prefix) {
    std::vector<double> values;
    std::istringstream in(output);
    std::string line;
    while (std::getline(in, line)) {
      size_t at = line.find(" auc:");
      if (at == std::string::npos || line.find("Training Epoch") == std::string::npos ||
          line.rfind(prefix, 0) != 0) {
        continue;
      }
      values.push_back(std::stod(line.substr(at + 5)));
    }
    return values;
  };
  auto auc_one = train_auc(one.output, "");
  auto auc_two = train_auc(two.output, "[rank 0]");
  ASSERT_EQ(auc_one.size(), static_cast<size_t>(steps));
  ASSERT_EQ(auc_two.size(), auc_one.size());
  EXPECT_GT(auc_one.back(), 0.0);
  for (size_t i = 0; i < auc_one.size(); ++i) EXPECT_NEAR(auc_one[i], auc_two[i], 1e-4) << "step " << i;
  // Eval metrics over all eval rows (each rank evaluated half) match the one-process run.
  auto last_line = [](const std::string& path) { return ReadLines(path).back(); };
  auto m1 = nlohmann::json::parse(last_line(dir.File("one/train_eval_result_v2.txt")));
  auto m2 = nlohmann::json::parse(last_line(dir.File("two/train_eval_result_v2.txt")));
  EXPECT_NEAR(m1["auc"].get<double>(), m2["auc"].get<double>(), 1e-3);
  EXPECT_NEAR(m1["binary_cross_entropy"].get<double>(), m2["binary_cross_entropy"].get<double>(), 1e-4);
  // `tzrec eval` under launch: each rank evaluates half, rank 0 writes the combined result;
  // every kind of metric (summed states and gathered values) equals one process.
  {
    auto cfg = LoadPipelineConfig(dir.File("two/pipeline.config"));
    auto* metrics = cfg.mutable_model_config();
    bool has_grouped_auc = false;
    for (const auto& m : metrics->metrics()) has_grouped_auc = has_grouped_auc || m.has_grouped_auc();
    if (!has_grouped_auc) metrics->add_metrics()->mutable_grouped_auc()->set_grouping_key(grouping_key);
    metrics->add_metrics()->mutable_normalized_entropy();
    metrics->add_metrics()->mutable_accuracy();
    SavePipelineConfig(cfg, dir.File("two/eval.config"));
  }
  const std::string eval_args = " eval --pipeline_config_path=" + dir.File("two/eval.config") +
                                " --eval_input_path='" + dir.File("data/eval/*.csv") + "'";
  ShellRun eval_two = RunShell("OMP_NUM_THREADS=1 " + std::string(TZREC_BINARY) + " launch --nproc_per_node 2 --master_port " +
                               std::to_string(FreePort()) + " --" + eval_args + " --eval_result_filename=eval2.txt");
  ASSERT_EQ(eval_two.exit_code, 0) << eval_two.output;
  ShellRun eval_one = RunShell(std::string(TZREC_BINARY) + eval_args + " --eval_result_filename=eval1.txt");
  ASSERT_EQ(eval_one.exit_code, 0) << eval_one.output;
  auto e1 = nlohmann::json::parse(last_line(dir.File("two/eval1.txt")));
  auto e2 = nlohmann::json::parse(last_line(dir.File("two/eval2.txt")));
  EXPECT_EQ(ReadLines(dir.File("two/eval2.txt")).size(), 1u);
  for (const char* metric : {"auc", "binary_cross_entropy", "grouped_auc", "normalized_entropy", "accuracy"}) {
    ASSERT_TRUE(e1.contains(metric)) << metric;
    EXPECT_NEAR(e1[metric].get<double>(), e2[metric].get<double>(), 1e-6) << metric;
  }
  EXPECT_GT(e1["grouped_auc"].get<double>(), 0.5);
  if (sharding != "data_parallel") {
    EXPECT_NE(two.output.find("\"sharding_type\": \"" + sharding + "\""), std::string::npos) << two.output;
  }
}

// Two ranks on batches of 64 train exactly like one process on the same global batches of
// 128, for every sharding type of the embedding tables.
TEST(Distributed, TwoRanksMatchOneProcessOnTheSameGlobalBatches) {
  for (const char* sharding : {"data_parallel", "table_wise", "row_wise", "column_wise"}) {
    TwoRanksMatchOneProcess(sharding);
  }
}

// The same with a weighted feature (item_tags: weights travel with the ids) and mean pooling
// (cate, item_tags), features generated from raw inputs (FG_DAG).
TEST(Distributed, TwoRanksMatchOneProcessWithWeightedAndMeanPooledShardedTables) {
  for (const char* sharding : {"table_wise", "row_wise", "column_wise"}) {
    TwoRanksMatchOneProcess(sharding, "deepfm_fg_dag", "user_id", {"cate", "item_tags"});
  }
}

// The same with gradient accumulation (3 steps; table rows accumulate after the data-parallel
// exchange or on the rows' owner), dense norm clipping, the dense EMA and a grad scaler
// (growing every 2 updates; every rank unscales alike): the merged and accumulated gradients
// are the same as one process's.
// Hash-stored tables hand out rows in each rank's own order of first touch; their gradient
// exchange speaks ids, so two ranks with every table hash-stored still train as one process
// with dense tables.
TEST(Distributed, TwoRanksWithHashStoredTablesMatchOneProcess) {
  TwoRanksMatchOneProcess("data_parallel", "deepfm_mock", "cat_4", {}, "", "TZREC_EMBEDDING_STORAGE=hash");
}

// zch tables: each rank records its own ids, rounds admit from the union of the ranks'
// histories, so every rank keeps the index one process keeps over the global batch. Tables of
// 24 / 40 rows against ids over 1000 and 500 evict every step; table-wise sharding maps ids
// to rows before the exchange.
TEST(Distributed, TwoRanksWithZchTablesMatchOneProcess) {
  auto zch = [](protos::EasyRecConfig* config) {
    int n = 0;
    for (auto& feature : *config->mutable_feature_configs()) {
      if (!feature.has_id_feature() || n >= 2) continue;
      auto* spec = feature.mutable_id_feature()->mutable_zch();
      spec->set_zch_size(n == 0 ? 24 : 40);
      spec->set_eviction_interval(1);
      if (n++ == 0) {
        spec->mutable_lfu();
      } else {
        spec->mutable_distance_lfu();
      }
    }
    ASSERT_EQ(n, 2);
  };
  for (const char* sharding : {"data_parallel", "table_wise"}) {
    TwoRanksMatchOneProcess(sharding, "deepfm_mock", "cat_4", {}, "", "", zch);
  }
}

// dynamicemb replicas stay alike: every rank admits and evicts from the ranks' merged ids, so
// two ranks hold the same rows as one process reading both ranks' batches.
TEST(Distributed, TwoRanksWithDynamicembTablesMatchOneProcess) {
  auto dynamicemb = [](protos::EasyRecConfig* config) {
    // Adagrad from a zero accumulator moves a row by lr * sign(g) on its first update whatever
    // |g| is, and rows admitted here start fresh all the time: a gradient sum within rounding of
    // zero (one process sums a row's gradients in the kernel with fused multiply-adds, two ranks
    // sum them apart and merge) moved such rows by +-lr either way (seen on an AMD Zen 5). A
    // small initial accumulator keeps every step proportional to its gradient.
    config->mutable_train_config()->mutable_sparse_optimizer()->mutable_adagrad_optimizer()->set_initial_accumulator_value(0.1f);
    int n = 0;
    for (auto& feature : *config->mutable_feature_configs()) {
      if (!feature.has_id_feature() || n >= 2) continue;
      auto* spec = feature.mutable_id_feature()->mutable_dynamicemb();
      spec->set_max_capacity(n == 0 ? 24 : 40);
      if (n++ == 0) {
        spec->mutable_frequency_admission_strategy()->set_threshold(2);
      } else {
        spec->set_score_strategy("LFU");
      }
    }
    ASSERT_EQ(n, 2);
  };
  TwoRanksMatchOneProcess("data_parallel", "deepfm_mock", "cat_4", {}, "", "", dynamicemb);
}

// FP16 tables: replicas round alike (the random bits follow the values, not the rank), and
// sharded tables' owners round the merged gradients as one process rounds its own. With SGD
// for the tables: Adagrad's first steps move a row by about lr whatever its gradient's size,
// so a gradient near zero that a rounding flip tips over turns into a step of lr the other way.
TEST(Distributed, TwoRanksWithFp16TablesMatchOneProcess) {
  auto fp16 = [](protos::EasyRecConfig* config) {
    for (auto& feature : *config->mutable_feature_configs()) {
      if (feature.has_id_feature()) feature.mutable_id_feature()->set_data_type("FP16");
    }
    config->mutable_train_config()->mutable_sparse_optimizer()->mutable_sgd_optimizer()->set_lr(0.05f);
  };
  for (const char* sharding : {"data_parallel", "row_wise"}) {
    TwoRanksMatchOneProcess(sharding, "deepfm_mock", "cat_4", {}, "", "", fp16);
  }
}

// BF16 tables likewise, on row-wise shards (replicas round as FP16 ones do, by the same rule).
TEST(Distributed, TwoRanksWithRowWiseBf16TablesMatchOneProcess) {
  TwoRanksMatchOneProcess("row_wise", "deepfm_mock", "cat_4", {}, "", "", [](protos::EasyRecConfig* config) {
    for (auto& feature : *config->mutable_feature_configs()) {
      if (feature.has_id_feature()) feature.mutable_id_feature()->set_data_type("BF16");
    }
    config->mutable_train_config()->mutable_sparse_optimizer()->mutable_sgd_optimizer()->set_lr(0.05f);
  });
}

TEST(Distributed, TwoRanksMatchOneProcessWithAccumulationClippingAndEma) {
  for (const char* sharding : {"data_parallel", "row_wise"}) {
    TwoRanksMatchOneProcess(sharding, "deepfm_fg_dag", "user_id", {"cate"},
                            R"(, "train_config.gradient_accumulation_steps": 3,
                               "train_config.grad_clipping.clipping_type": "norm",
                               "train_config.grad_clipping.max_gradient": 0.05,
                               "train_config.dense_optimizer.ema.decay": 0.9,
                               "train_config.grad_scaler.growth_interval": 2)");
  }
}

// The same for sequence tables (a SEQUENCE group with DIN attention): sequence lookups take
// part in the gradient exchange and the sharded alltoall like pooled ones.
TEST(Distributed, TwoRanksMatchOneProcessWithShardedSequenceTables) {
  for (const char* sharding : {"data_parallel", "table_wise", "row_wise", "column_wise"}) {
    TwoRanksMatchOneProcess(sharding, "multi_tower_din_mock", "user_id");
  }
}

}  // namespace
}  // namespace tzrec

namespace tzrec {
namespace {

// A 2-rank checkpoint continues with 1 rank and a 1-rank one with 2 ranks: checkpoints hold
// logical tables and every rank's data position.
TEST(Distributed, ContinueWithAnotherWorldSize) {
  testing::TempDir dir;
  const std::string config = testing::SourceDir() + "/examples/deepfm_mock.config";
  auto data = MockData(dir, 6000, 500, 2, R"({"data_config.dataset_type": "ParquetDataset"})");
  auto run = [&](int ranks, const std::string& model_dir, int64_t steps, bool resume) {
    const std::string edits = StrCat(R"({"train_config.global_embedding_constraints.sharding_types": ["row_wise"],
        "data_config.dataset_type": "ParquetDataset", "data_config.batch_size": 64,
        "data_config.shuffle": false, "data_config.num_workers": 1, "train_config.num_epochs": 0,
        "train_config.num_steps": )", steps, R"(, "train_config.save_checkpoints_epochs": 0})");
    std::string args = " train_eval --pipeline_config_path=" + config + " --model_dir=" + model_dir +
                       " --train_input_path='" + data.train_pattern + "' --eval_input_path='" +
                       data.eval_pattern + "' --edit_config_json='" + edits + "'" +
                       (resume ? " --continue_train" : "");
    std::string command = ranks == 1 ? std::string(TZREC_BINARY) + args
                                     : std::string(TZREC_BINARY) + " launch --nproc_per_node 2 --master_port " +
                                           std::to_string(FreePort()) + " --" + args;
    return RunShell("OMP_NUM_THREADS=1 " + command);
  };
  for (int first : {2, 1}) {
    SCOPED_TRACE(first);
    const std::string model_dir = dir.File(StrCat("model_", first));
    ShellRun a = run(first, model_dir, 10, false);
    ASSERT_EQ(a.exit_code, 0) << a.output;
    auto ckpts = ListCheckpoints(model_dir);
    ASSERT_FALSE(ckpts.empty());
    EXPECT_TRUE(PathExists(JoinPath(ckpts.back().path, "plan.json")));
    const std::string state = ReadFileToString(JoinPath(ckpts.back().path, "dataloader_state.json"));
    // A 2-rank run records both ranks' row ranges.
    EXPECT_EQ(std::count(state.begin(), state.end(), ':') >= (first == 2 ? 3 : 2), true) << state;
    ShellRun b = run(3 - first, model_dir, 20, true);
    ASSERT_EQ(b.exit_code, 0) << b.output;
    EXPECT_NE(b.output.find("Continuing from"), std::string::npos) << b.output;
    ckpts = ListCheckpoints(model_dir);
    EXPECT_EQ(ckpts.back().step, 19);
  }
}

TEST(Distributed, ShardingConstraintsAreCheckedByThePlanner) {
  testing::TempDir dir;
  const std::string config = testing::SourceDir() + "/examples/deepfm_mock.config";
  auto data = MockData(dir, 500, 100, 2);
  auto run = [&](const std::string& edits) {
    return RunShell(std::string(TZREC_BINARY) + " train_eval --pipeline_config_path=" + config +
                    " --model_dir=" + dir.File("m" + std::to_string(FreePort())) + " --train_input_path='" +
                    data.train_pattern + "' --eval_input_path='" + data.eval_pattern +
                    "' --edit_config_json='" + edits + "'");
  };
  ShellRun grid = run(R"({"feature_configs[0].raw_feature.embedding_dim": 4,
      "feature_configs[id_feature.feature_name=cat_0].id_feature.embedding_constraints.sharding_types": ["table_row_wise"]})");
  EXPECT_NE(grid.exit_code, 0);
  EXPECT_NE(grid.output.find("embedding_constraints.sharding_types: [table_row_wise]: not supported yet"),
            std::string::npos) << grid.output;
  ShellRun unknown = run(R"({"train_config.global_embedding_constraints.sharding_types": ["diagonal"]})");
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(unknown.output.find("unknown sharding type 'diagonal'"), std::string::npos) << unknown.output;
  ShellRun ok = run(R"({"train_config.global_embedding_constraints.sharding_types": ["data_parallel", "row_wise"],
      "train_config.num_epochs": 1})");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("\"sharding_type\": \"data_parallel\""), std::string::npos) << ok.output;
}

// Ranks started with different configs refuse to train.
TEST(Distributed, MismatchedConfigsAreDetectedAtStart) {
  testing::TempDir dir;
  const std::string config = testing::SourceDir() + "/examples/deepfm_mock.config";
  auto data = MockData(dir, 500, 100, 2);
  const std::string env = "WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 PROCESS_GROUP_TIMEOUT_SECONDS=20 MASTER_PORT=" +
                          std::to_string(FreePort()) + " ";
  auto command = [&](int rank, int batch) {
    return env + "RANK=" + std::to_string(rank) + " " + TZREC_BINARY + " train_eval --pipeline_config_path=" +
           config + " --model_dir=" + dir.File("m") + " --train_input_path='" + data.train_pattern +
           "' --edit_config_json='{\"data_config.batch_size\": " + std::to_string(batch) + "}'";
  };
  ShellRun run = RunShell("(" + command(1, 64) + " > " + dir.File("rank1.log") + " 2>&1 &) ; " + command(0, 32));
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("rank 1 has a different pipeline config than rank 0"), std::string::npos)
      << run.output;
}

// A rank killed in the middle of training ends the whole job quickly, naming the rank.
TEST(Distributed, KilledRankEndsTheTrainingJob) {
  testing::TempDir dir;
  const std::string config = testing::SourceDir() + "/examples/deepfm_mock.config";
  auto data = MockData(dir, 20000, 100, 2);
  const std::string model_dir = dir.File("killed_model");
  const std::string command =
      "OMP_NUM_THREADS=1 PROCESS_GROUP_TIMEOUT_SECONDS=20 " + std::string(TZREC_BINARY) +
      " launch --nproc_per_node 2 --stop_grace_seconds 5 --master_port " + std::to_string(FreePort()) +
      " -- train_eval --pipeline_config_path=" + config + " --model_dir=" + model_dir +
      " --train_input_path='" + data.train_pattern + "' --eval_input_path='" + data.eval_pattern +
      "' --edit_config_json='{\"data_config.batch_size\": 32, \"train_config.num_epochs\": 50}'";
  // Once both ranks run, kill the newer one by its PID: a child of this launch process (by
  // parent PID, never by a name pattern that could match another test's processes).
  const std::string run_and_kill =
      command + " 2>&1 & launch=$!; for i in $(seq 1 100); do sleep 0.2; "
                "if [ $(pgrep -P $launch | wc -l) -ge 2 ]; then sleep 2; kill -9 $(pgrep -n -P $launch); break; fi; "
                "done; wait $launch";
  ShellRun run = RunShell(run_and_kill);
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("exited with signal 9"), std::string::npos) << run.output;
  EXPECT_LT(run.seconds, 40.0) << run.output;
}

// A hung rank (SIGSTOP: alive, silent): the job ends after the collective timeout, and the
// error names the stopped rank (from its missing heartbeats), not the rank that noticed.
TEST(Distributed, AHungRankIsNamedWhenTheJobTimesOut) {
  testing::TempDir dir;
  const std::string config = testing::SourceDir() + "/examples/deepfm_mock.config";
  auto data = MockData(dir, 20000, 100, 2);
  const std::string command =
      "OMP_NUM_THREADS=1 PROCESS_GROUP_TIMEOUT_SECONDS=8 " + std::string(TZREC_BINARY) +
      " launch --nproc_per_node 2 --stop_grace_seconds 3 --master_port " + std::to_string(FreePort()) +
      " -- train_eval --pipeline_config_path=" + config + " --model_dir=" + dir.File("hung_model") +
      " --train_input_path='" + data.train_pattern + "' --eval_input_path='" + data.eval_pattern +
      "' --edit_config_json='{\"data_config.batch_size\": 32, \"train_config.num_epochs\": 50}'";
  // Rank 1 is the child of this launch process whose environment says RANK=1 (found by PIDs).
  const std::string run_and_stop =
      command + " 2>&1 & launch=$!; for i in $(seq 1 100); do sleep 0.2; "
                "if [ $(pgrep -P $launch | wc -l) -ge 2 ]; then sleep 3; "
                "for p in $(pgrep -P $launch); do if tr '\\0' '\\n' < /proc/$p/environ | grep -qx RANK=1; "
                "then kill -STOP $p; fi; done; break; fi; done; wait $launch";
  ShellRun run = RunShell(run_and_stop);
  EXPECT_NE(run.exit_code, 0) << run.output;
  const size_t at = run.output.find("rank 1 stopped answering");
  ASSERT_NE(at, std::string::npos) << run.output;
  const size_t line = run.output.rfind('\n', at) + 1;
  std::cout << "[hung rank] " << run.output.substr(line, run.output.find('\n', at) - line) << std::endl;
  EXPECT_LT(run.seconds, 60.0) << run.output;
}

}  // namespace
}  // namespace tzrec

#include "tzrec/dist/sharding_plan.h"
#include "tzrec/features/feature.h"
#include "model_test_util.h"
#include <google/protobuf/text_format.h>

namespace tzrec {
namespace {

// Without constraints tables stay whole, unless they do not fit the memory budget: then the
// largest become row_wise; constrained tables keep their type.
TEST(Distributed, PlannerShardsTablesThatDoNotFitInMemory) {
  auto config = LoadPipelineConfig(testing::SourceDir() + "/examples/deepfm_mock.config");
  std::string text;
  google::protobuf::TextFormat::PrintToString(config, &text);
  // The model's own tables (DEEP and WIDE ones) are what the planner plans.
  auto pipeline = testing::BuildTestPipeline(text);
  const std::vector<EmbeddingTableSpec> pointers = pipeline->model->embedding_collection().table_specs();
  bool has_wide = false;
  for (const auto& t : pointers) has_wide = has_wide || EndsWith(t.name, "_wide");
  EXPECT_TRUE(has_wide);
  auto type_of = [](const std::vector<TablePlan>& plan, const std::string& table) {
    for (const auto& t : plan) {
      if (t.table == table) return t.sharding_type;
    }
    return std::string("missing");
  };
  auto roomy = PlanSharding(config, pointers, 2, int64_t{1} << 40);
  for (const auto& t : roomy) EXPECT_EQ(t.sharding_type, "data_parallel") << t.table;
  // Find the largest table and give a budget just below everything.
  int64_t total = 0;
  std::string largest;
  int64_t largest_size = 0;
  for (const auto& t : roomy) {
    int64_t size = t.rows * (2 * t.dim + 1) * 4;  // adagrad state + slot
    total += size;
    if (size > largest_size) largest_size = size, largest = t.table;
  }
  auto tight = PlanSharding(config, pointers, 2, total - 1);
  EXPECT_EQ(type_of(tight, largest), "row_wise");
  int row_wise = 0;
  for (const auto& t : tight) row_wise += t.sharding_type == "row_wise";
  EXPECT_EQ(row_wise, 1);
  EditConfigJson(&config, R"({"train_config.global_embedding_constraints.sharding_types": ["table_wise"]})");
  auto constrained = PlanSharding(config, pointers, 2, total - 1);
  for (const auto& t : constrained) {
    EXPECT_EQ(t.sharding_type, "table_wise") << t.table;
    ASSERT_EQ(t.ranks.size(), 1u);
  }
  EXPECT_EQ(type_of(PlanSharding(config, pointers, 1, 1), largest), "data_parallel");
}

}  // namespace
}  // namespace tzrec

#include "train_test_util.h"
#include "tzrec/serving/exported_model.h"

namespace tzrec {
namespace {

// Two ranks of `tzrec launch ... predict` each score their share of the rows: together
// exactly the rows (and the probabilities) of one process, in part-0 and part-1, nothing else.
TEST(Distributed, PredictUnderLaunchWritesOnePartPerRank) {
  testing::TempDir dir;
  testing::TrainAndExportSmallModel(dir);
  const std::string predict = " predict --scripted_model_path=" + dir.File("export") +
                              " --predict_input_path='" + dir.File("data/train/*.csv") +
                              "' --reserved_columns=label,x";
  ShellRun one = RunShell("OMP_NUM_THREADS=1 " + std::string(TZREC_BINARY) + predict +
                          " --predict_output_path=" + dir.File("one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  ShellRun two = RunShell("OMP_NUM_THREADS=1 " + std::string(TZREC_BINARY) +
                          " launch --nproc_per_node 2 --master_port " + std::to_string(FreePort()) +
                          " --" + predict + " --predict_output_path=" + dir.File("two"));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_EQ(ListDirectory(dir.File("two")), (std::vector<std::string>{"part-0.csv", "part-1.csv"}));
  auto rows = [](const std::string& path) {
    std::vector<std::string> lines = Split(ReadFileToString(path), "\n");
    EXPECT_EQ(lines.front(), "logits,probs,label,x");
    std::vector<std::string> body(lines.begin() + 1, lines.end());
    body.erase(std::remove(body.begin(), body.end(), ""), body.end());
    return body;
  };
  std::vector<std::string> single = rows(dir.File("one/part-0.csv"));
  std::vector<std::string> part0 = rows(dir.File("two/part-0.csv"));
  std::vector<std::string> part1 = rows(dir.File("two/part-1.csv"));
  EXPECT_EQ(single.size(), 1000u);
  EXPECT_FALSE(part0.empty());
  EXPECT_FALSE(part1.empty());
  std::vector<std::string> joined = part0;
  joined.insert(joined.end(), part1.begin(), part1.end());
  std::sort(single.begin(), single.end());
  std::sort(joined.begin(), joined.end());
  EXPECT_EQ(joined, single);
}

}  // namespace
}  // namespace tzrec
