// TorchEasyRec's sequence configs train from gen_data output, and DIN recovers the planted
// target/history signal: on data whose labels depend on the items of the history that share
// the target's key attribute, multi_tower_din (TorchEasyRec's own mock config) reaches 97% of
// the oracle's lift over 0.5 and clearly beats the same model with a pooling encoder.
//
// Test size as in multitask_train_test.cc: features outside the sequence pairs capped at 10
// buckets, a stronger first-order signal without pairwise interactions, short histories and
// small value pools (--sequence_pool_size), a larger sparse learning rate than the config's.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>

#include "test_util.h"
#include "train_test_util.h"
#include "tzrec/common/fs.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/tools/gen_data.h"
#include "tzrec/train/checkpoint.h"
#include "tzrec/train/trainer.h"

namespace tzrec {
namespace {

// Every sequence config of TorchEasyRec this project trains (ODPS ones switched to Parquet, as
// a user without MaxCompute would), on a few thousand generated rows: it builds, trains,
// checkpoints and reports its metrics.
TEST(SequenceConfigs, TorchEasyRecSequenceConfigsTrainFromGenData) {
  constexpr char kEdits[] = R"({"data_config.dataset_type": "ParquetDataset",
      "data_config.batch_size": 512, "train_config.num_epochs": 1,
      "feature_configs[id_feature.num_buckets>100000].id_feature.num_buckets": 100000})";
  for (const char* name :
       {"multi_tower_din_taobao.config", "multi_tower_din_mock.config", "dbmtl_has_sequence_mock.config",
        "dbmtl_taobao_seq.config", "multi_tower_taobao.config", "taobao_bench_mmoe_has_sequence.config",
        "taobao_bench_ple_has_sequence.config", "taobao_bench_dbmtl_has_sequence.config"}) {
    SCOPED_TRACE(name);
    testing::TempDir dir;
    auto config = LoadPipelineConfig(testing::ReferenceConfig(name));
    EditConfigJson(&config, kEdits);
    TrainEvalOptions options = testing::MockDataOptions(dir, config, testing::ReferenceConfig(name));
    options.edit_config_json = kEdits;
    TrainAndEvaluate(options);
    auto result = testing::LastEvalResult(dir.File("model"));
    bool has_auc = false;
    for (const auto& [key, value] : result.items()) has_auc = has_auc || key.rfind("auc", 0) == 0;
    EXPECT_TRUE(has_auc) << result.dump();
    EXPECT_FALSE(ListCheckpoints(dir.File("model")).empty());
  }
}

constexpr char kDinEdits[] = R"({"data_config.batch_size": 512, "train_config.num_epochs": 2,
    "feature_configs[id_feature.feature_name=id_1].id_feature.num_buckets": 10,
    "feature_configs[id_feature.feature_name=id_4].id_feature.num_buckets": 10,
    "feature_configs[id_feature.feature_name=id_5].id_feature.num_buckets": 10,
    "train_config.sparse_optimizer.adagrad_optimizer.lr": 0.1})";

// multi_tower_din_mock's model with its SEQUENCE group "seq" read by a pooling encoder instead
// of DIN: a DEEP group "seq" of the query features with the sequence group nested (mean
// pooling), as a tower without MLP beside the "deep" tower, then the same final MLP.
protos::EasyRecConfig WithPoolingInsteadOfDin(protos::EasyRecConfig config) {
  protos::ModelConfig* model = config.mutable_model_config();
  for (auto& group : *model->mutable_feature_groups()) {
    if (group.group_name() != "seq") continue;
    protos::SeqGroupConfig nested;
    nested.set_group_name("seq");
    for (const auto& name : group.feature_names()) nested.add_feature_names(name);
    group.set_group_type(protos::DEEP);
    group.clear_feature_names();
    for (const auto& name : nested.feature_names()) {
      if (name.find("__") == std::string::npos) group.add_feature_names(name);
    }
    *group.add_sequence_groups() = nested;
    auto* pooling = group.add_sequence_encoders()->mutable_pooling_encoder();
    pooling->set_input("seq");
    pooling->set_pooling_type("mean");
  }
  const protos::MultiTowerDIN din = model->multi_tower_din();
  auto* tower = model->mutable_multi_tower();
  for (const auto& t : din.towers()) *tower->add_towers() = t;
  tower->add_towers()->set_input("seq");
  *tower->mutable_final() = din.final();
  return config;
}

TEST(SequenceDin, BeatsPoolingAndReachesItsOracleOnPlantedData) {
  testing::TempDir dir;
  const std::string din_path = testing::ReferenceConfig("multi_tower_din_mock.config");
  auto din_config = LoadPipelineConfig(din_path);
  EditConfigJson(&din_config, kDinEdits);
  GenDataOptions gen;
  gen.output_dir = dir.File("data");
  gen.train_rows = 450000;
  gen.eval_rows = 30000;
  gen.first_order_variance = 2.0;
  gen.interaction_variance = 0.0;
  gen.sequence_signal_variance = 4.0;
  gen.max_sequence_steps = 5;
  gen.sequence_pool_size = 20;
  GenerateMockData(din_config, gen);
  auto oracle = nlohmann::json::parse(ReadFileToString(dir.File("data/oracle.json")));
  const double oracle_auc = oracle["labels"]["clk"]["oracle_auc"].get<double>();
  const double without_sequence = oracle["labels"]["clk"]["oracle_auc_without_sequence"].get<double>();
  ASSERT_GT(oracle_auc, without_sequence + 0.03) << oracle.dump();

  auto train = [&](const std::string& config_path, const std::string& model_dir) {
    TrainEvalOptions options;
    options.pipeline_config_path = config_path;
    options.model_dir = model_dir;
    options.train_input_path = dir.File("data/train/*.parquet");
    options.eval_input_path = dir.File("data/eval/*.parquet");
    options.edit_config_json = kDinEdits;
    TrainAndEvaluate(options);
    return testing::LastEvalResult(model_dir)["auc"].get<double>();
  };
  const double din_auc = train(din_path, dir.File("din"));
  SavePipelineConfig(WithPoolingInsteadOfDin(LoadPipelineConfig(din_path)), dir.File("pooling.config"));
  const double pooling_auc = train(dir.File("pooling.config"), dir.File("pooling"));
  std::printf("oracle %.4f (without the sequence term %.4f), din %.4f, pooling %.4f\n", oracle_auc,
              without_sequence, din_auc, pooling_auc);
  // Measured (seeds 2024 / 7 / 11): DIN reaches 0.978 / 0.979 / 0.985 of the oracle's lift;
  // seed 2024: oracle 0.8765, DIN 0.8682, pooling 0.8084.
  EXPECT_GE(din_auc, 0.97 * (oracle_auc - 0.5) + 0.5);
  EXPECT_LE(din_auc, oracle_auc + 0.01);
  EXPECT_GT(din_auc, pooling_auc + 0.03);
}

}  // namespace
}  // namespace tzrec
