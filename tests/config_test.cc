// Config loading, the supported-field check, and --edit_config_json.
#include <gtest/gtest.h>

#include "test_util.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/config/supported_fields.h"

namespace tzrec {
namespace {

using testing::TempDir;
using testing::WriteFile;

const char* kReferenceConfigs[] = {
    "dbmtl_has_sequence_mock.config", "dbmtl_taobao.config",       "deepfm_criteo.config",
    "dlrm_criteo.config",             "dssm_mock.config",          "dssm_taobao.config",
    "mmoe_taobao.config",             "multi_tower_din_mock.config", "multi_tower_din_taobao.config"};

TEST(PipelineConfig, AllReferenceConfigsParse) {
  for (const char* name : kReferenceConfigs) {
    SCOPED_TRACE(name);
    auto config = LoadPipelineConfig(testing::ReferenceConfig(name));
    EXPECT_GT(config.feature_configs_size(), 0);
    EXPECT_TRUE(config.has_model_config());
  }
}

TEST(PipelineConfig, ReferenceConfigValuesAreRead) {
  auto config = LoadPipelineConfig(testing::ReferenceConfig("deepfm_criteo.config"));
  EXPECT_EQ(config.data_config().batch_size(), 8192u);
  EXPECT_EQ(config.feature_configs_size(), 39);
  ASSERT_TRUE(config.model_config().has_deepfm());
  ASSERT_EQ(config.model_config().deepfm().deep().hidden_units_size(), 3);
  EXPECT_EQ(config.model_config().deepfm().deep().hidden_units(0), 512u);
  EXPECT_EQ(config.model_config().feature_groups(0).group_type(), protos::WIDE);
  EXPECT_FLOAT_EQ(config.train_config().sparse_optimizer().adagrad_optimizer().lr(), 0.001f);
}

TEST(PipelineConfig, UnknownFieldNamesLineAndColumn) {
  TempDir dir;
  WriteFile(dir.File("bad.config"), "model_dir: \"x\"\ntrain_config {\n  num_stepz: 3\n}\n");
  EXPECT_TZREC_ERROR(LoadPipelineConfig(dir.File("bad.config")), "line 3, column");
  EXPECT_TZREC_ERROR(LoadPipelineConfig(dir.File("bad.config")), "num_stepz");
}

TEST(PipelineConfig, MissingFileIsAnError) {
  EXPECT_TZREC_ERROR(LoadPipelineConfig("/nonexistent/pipeline.config"), "does not exist");
}

TEST(PipelineConfig, JsonConfigParsesAndRoundTrips) {
  TempDir dir;
  WriteFile(dir.File("p.json"),
            R"({"model_dir": "m", "train_config": {"num_steps": 5},
                "feature_configs": [{"id_feature": {"feature_name": "a", "num_buckets": 3,
                                                    "embedding_dim": 4}}]})");
  auto config = LoadPipelineConfig(dir.File("p.json"));
  EXPECT_EQ(config.model_dir(), "m");
  EXPECT_EQ(config.train_config().num_steps(), 5u);
  EXPECT_EQ(config.feature_configs(0).id_feature().num_buckets(), 3u);
  SavePipelineConfig(config, dir.File("saved.config"));
  auto again = LoadPipelineConfig(dir.File("saved.config"));
  EXPECT_EQ(again.SerializePartialAsString(), config.SerializePartialAsString());
  WriteFile(dir.File("bad.json"), R"({"model_dir": "m", "no_such_field": 1})");
  EXPECT_TZREC_ERROR(LoadPipelineConfig(dir.File("bad.json")), "JSON");
}

TEST(PipelineConfig, FgEncodedCompat) {
  auto config = ParsePipelineConfigText("data_config { fg_encoded: false fg_threads: 2 }", "t");
  ApplyFgModeCompat(&config);
  EXPECT_EQ(config.data_config().fg_mode(), protos::FG_DAG);
  config = ParsePipelineConfigText("data_config { fg_encoded: true }", "t");
  ApplyFgModeCompat(&config);
  EXPECT_EQ(config.data_config().fg_mode(), protos::FG_NONE);
  config = ParsePipelineConfigText("data_config { fg_encoded: false fg_threads: 0 }", "t");
  ApplyFgModeCompat(&config);
  EXPECT_EQ(config.data_config().fg_mode(), protos::FG_NORMAL);
}

TEST(SupportedFields, UnsupportedFieldsAreNamedWithTheirPath) {
  auto config = ParsePipelineConfigText(R"(
    train_config { num_steps: 1 cudnn_allow_tf32: false }
    feature_configs { id_feature { feature_name: "a" num_buckets: 3 embedding_dim: 4 } }
    feature_configs { id_feature { feature_name: "b" num_buckets: 3 embedding_dim: 4
                                   init_fn: "nn.init.uniform_,b=0.01" } }
    model_config { kernel: TRITON }
  )", "t");
  auto unsupported = FindUnsupportedFields(config);
  ASSERT_EQ(unsupported.size(), 3u);
  EXPECT_EQ(unsupported[0].path, "train_config.cudnn_allow_tf32");
  EXPECT_EQ(unsupported[1].path, "feature_configs[1].id_feature.init_fn");
  EXPECT_EQ(unsupported[2].path, "model_config.kernel");
  EXPECT_TZREC_ERROR(CheckConfigSupported(config), "train_config.cudnn_allow_tf32: not supported yet");
}

// Fields behind a registry are checked against what the registered component declares,
// wherever the message appears (here a LossConfig and a MetricConfig inside a task tower).
TEST(SupportedFields, RegistryMembersAndTheirFieldsAreCheckedWhereverTheyAppear) {
  auto config = ParsePipelineConfigText(R"(
    model_config {
      mmoe {
        expert_mlp { hidden_units: [4] }
        task_towers {
          tower_name: "a" label_name: "x"
          losses { binary_focal_loss { gamma: 1.0 } }
          losses { listwise_rank_loss {} }
          losses { binary_cross_entropy {} weight: 2.0 }
          metrics { grouped_auc { grouping_key: "u" } }
          train_metrics { auc { thresholds: 10 } decay_step: 10 }
        }
      }
    }
    train_config { sparse_optimizer { lamb_optimizer {} linear_decay_learning_rate {} } }
    eval_config { use_dense_ema: true }
  )", "t");
  auto unsupported = FindUnsupportedFields(config);
  std::vector<std::string> paths;
  for (const auto& u : unsupported) paths.push_back(u.path);
  EXPECT_EQ(paths, (std::vector<std::string>{
                       "train_config.sparse_optimizer.linear_decay_learning_rate",
                       "model_config.mmoe.task_towers[0].losses[1].listwise_rank_loss",
                       "model_config.mmoe.task_towers[0].losses[2].weight"}));
  EXPECT_NE(unsupported[0].note.find("supported: constant_learning_rate, cosine_annealing_learning_rate"),
            std::string::npos)
      << unsupported[0].note;
  auto simple = ParsePipelineConfigText("model_config { simple_multi_task {} }", "t");
  EXPECT_TZREC_ERROR(CheckConfigSupported(simple), "TorchEasyRec has no SimpleMultiTask model");
}

// MaxCompute read settings in a config switched to Parquet are accepted (they have no effect
// there, in TorchEasyRec too); CSV-only settings too (the dataset says they do nothing).
TEST(SupportedFields, OdpsAndOtherDatasetSettingsAreAccepted) {
  auto config = ParsePipelineConfigText(R"(
    data_config { dataset_type: ParquetDataset odps_data_quota_name: "q" odps_data_compression: "ZSTD"
                  with_header: true delimiter: "\t" }
  )", "t");
  EXPECT_TRUE(FindUnsupportedFields(config).empty());
}

TEST(SupportedFields, WholeUnsupportedModelIsNamed) {
  auto config = ParsePipelineConfigText("model_config { simple_multi_task { } }", "t");
  auto unsupported = FindUnsupportedFields(config);
  bool named = false;
  for (const auto& u : unsupported) named = named || u.path == "model_config.simple_multi_task";
  EXPECT_TRUE(named);
}

TEST(SupportedFields, ReferenceConfigsOfImplementedModelsAreSupported) {
  for (const char* name : {"deepfm_criteo.config", "dlrm_criteo.config", "mmoe_taobao.config",
                           "dbmtl_taobao.config", "multi_tower_din_taobao.config",
                           "multi_tower_din_mock.config", "dbmtl_has_sequence_mock.config", "dssm_taobao.config",
                           "dssm_mock.config", "dssm_v2_taobao.config", "dssm_fg_mock.config",
                           "dssm_fg_hard_negative_mock.config", "dssm_v2_fg_mock.config", "dat_mock.config",
                           "mind_mock.config", "mind_taobao.config", "tdm_fg_mock.config", "tdm_taobao.config",
                           "dssm_v2_mlpemb_fg_mock.config", "multi_tower_din_fg_mock_fp16_ga.config",
                           "multi_tower_din_fg_mock_gradient_clipping.config", "multi_tower_din_zch_fg_mock.config", "multi_tower_din_fg_dynamicemb_mock.config",
                           "multi_tower_din_fg_mock_bf16_emb_fp16.config",
                           "pepnet_taobao.config",
                           "dbmtl_has_sequence_variational_dropout_mock.config"}) {
    auto config = LoadPipelineConfig(testing::ReferenceConfig(name));
    auto unsupported = FindUnsupportedFields(config);
    EXPECT_TRUE(unsupported.empty()) << name << ": " << (unsupported.empty() ? "" : unsupported[0].path);
  }
}

class EditConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = ParsePipelineConfigText(R"(
      model_dir: "a"
      train_config { num_steps: 10 sparse_optimizer { adagrad_optimizer { lr: 0.1 } } }
      data_config { batch_size: 32 dataset_type: CsvDataset label_fields: "clk" }
      feature_configs { id_feature { feature_name: "f0" num_buckets: 10 embedding_dim: 4 } }
      feature_configs { id_feature { feature_name: "f1" num_buckets: 20 embedding_dim: 4 } }
      feature_configs { id_feature { feature_name: "f2" num_buckets: 30 embedding_dim: 8 } }
      feature_configs { raw_feature { feature_name: "r" boundaries: [1, 2] embedding_dim: 4 } }
    )", "test");
  }
  protos::EasyRecConfig config_;
};

TEST_F(EditConfigTest, ScalarsAndEnums) {
  EditConfigJson(&config_, R"({"model_dir": "b", "data_config.batch_size": 64,
                               "data_config.dataset_type": "ParquetDataset",
                               "data_config.drop_remainder": "true",
                               "train_config.sparse_optimizer.adagrad_optimizer.lr": 0.5})");
  EXPECT_EQ(config_.model_dir(), "b");
  EXPECT_EQ(config_.data_config().batch_size(), 64u);
  EXPECT_EQ(config_.data_config().dataset_type(), protos::ParquetDataset);
  EXPECT_TRUE(config_.data_config().drop_remainder());
  EXPECT_FLOAT_EQ(config_.train_config().sparse_optimizer().adagrad_optimizer().lr(), 0.5f);
  EditConfigJson(&config_, R"({"data_config.drop_remainder": false})");
  EXPECT_FALSE(config_.data_config().drop_remainder());
}

TEST_F(EditConfigTest, IndexSliceAllAndCondition) {
  EditConfigJson(&config_, R"({"feature_configs[0].id_feature.embedding_dim": 16})");
  EXPECT_EQ(config_.feature_configs(0).id_feature().embedding_dim(), 16u);
  EditConfigJson(&config_, R"({"feature_configs[1:3].id_feature.num_buckets": 7})");
  EXPECT_EQ(config_.feature_configs(0).id_feature().num_buckets(), 10u);
  EXPECT_EQ(config_.feature_configs(1).id_feature().num_buckets(), 7u);
  EXPECT_EQ(config_.feature_configs(2).id_feature().num_buckets(), 7u);
  EditConfigJson(&config_, R"({"feature_configs[:2].id_feature.pooling": "mean"})");
  EXPECT_EQ(config_.feature_configs(1).id_feature().pooling(), "mean");
  EXPECT_EQ(config_.feature_configs(2).id_feature().pooling(), "sum");
  EditConfigJson(&config_,
                 R"({"feature_configs[id_feature.feature_name=f2].id_feature.embedding_dim": 3})");
  EXPECT_EQ(config_.feature_configs(2).id_feature().embedding_dim(), 3u);
  EXPECT_EQ(config_.feature_configs(1).id_feature().embedding_dim(), 4u);
  EditConfigJson(&config_,
                 R"({"feature_configs[id_feature.embedding_dim>=4].id_feature.hash_bucket_size": 99})");
  EXPECT_EQ(config_.feature_configs(0).id_feature().hash_bucket_size(), 99u);
  EXPECT_EQ(config_.feature_configs(1).id_feature().hash_bucket_size(), 99u);
  EXPECT_FALSE(config_.feature_configs(2).id_feature().has_hash_bucket_size());
  // A condition through another oneof case leaves that element alone (the raw_feature stays
  // a raw_feature rather than becoming an empty id_feature).
  EditConfigJson(&config_,
                 R"({"feature_configs[id_feature.num_buckets>8].id_feature.num_buckets": 12})");
  EXPECT_EQ(config_.feature_configs(0).id_feature().num_buckets(), 12u);
  EXPECT_EQ(config_.feature_configs(2).id_feature().num_buckets(), 7u);
  EXPECT_TRUE(config_.feature_configs(3).has_raw_feature());
  EXPECT_EQ(config_.feature_configs(3).raw_feature().feature_name(), "r");
}

TEST_F(EditConfigTest, RepeatedScalarsMessagesAndMultiKeys) {
  EditConfigJson(&config_, R"({"feature_configs[3].raw_feature.boundaries": [4, 5, 6, 7]})");
  ASSERT_EQ(config_.feature_configs(3).raw_feature().boundaries_size(), 4);
  EXPECT_FLOAT_EQ(config_.feature_configs(3).raw_feature().boundaries(3), 7.0f);
  EditConfigJson(&config_, R"({"train_config.sparse_optimizer":
                               "{sgd_optimizer { lr: 0.25 }}"})");
  EXPECT_TRUE(config_.train_config().sparse_optimizer().has_sgd_optimizer());
  EXPECT_FALSE(config_.train_config().sparse_optimizer().has_adagrad_optimizer());
  EditConfigJson(&config_, R"({"model_dir;data_config.batch_size": "c;128"})");
  EXPECT_EQ(config_.model_dir(), "c");
  EXPECT_EQ(config_.data_config().batch_size(), 128u);
  EditConfigJson(&config_, R"({"data_config.label_fields[0]": "buy"})");
  EXPECT_EQ(config_.data_config().label_fields(0), "buy");
}

TEST_F(EditConfigTest, ErrorsNameThePath) {
  EXPECT_TZREC_ERROR(EditConfigJson(&config_, R"({"data_config.batch_sizes": 1})"),
                     "no field 'batch_sizes'");
  EXPECT_TZREC_ERROR(EditConfigJson(&config_, R"({"data_config.batch_size": "many"})"),
                     "data_config.batch_size");
  EXPECT_TZREC_ERROR(EditConfigJson(&config_, R"({"feature_configs[9].id_feature.num_buckets": 1})"),
                     "out of range");
  EXPECT_TZREC_ERROR(EditConfigJson(&config_, R"({"data_config.dataset_type": "NoSuch"})"),
                     "dataset_type");
  EXPECT_TZREC_ERROR(EditConfigJson(&config_, "not json"), "not valid JSON");
}

}  // namespace
}  // namespace tzrec
