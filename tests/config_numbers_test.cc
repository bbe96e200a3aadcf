// Model numbers a user sets are checked before LibTorch sees them, and the error names the
// field path (issue 12): hidden units, dropout, activation arguments, expert and block counts,
// mask widths, classes.
#include <gtest/gtest.h>

#include <google/protobuf/text_format.h>

#include <string>

#include "model_test_util.h"
#include "test_util.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/config/pipeline_config.h"

namespace tzrec {
namespace {

protos::EasyRecConfig DeepFMMock() {
  return LoadPipelineConfig(testing::SourceDir() + "/examples/deepfm_mock.config");
}

// deepfm_mock's features under a multi-task model given as text.
protos::EasyRecConfig MultiTask(const std::string& model_text) {
  auto config = DeepFMMock();
  auto* model = config.mutable_model_config();
  model->clear_losses();
  model->clear_metrics();
  EXPECT_TRUE(google::protobuf::TextFormat::MergeFromString(model_text, model)) << model_text;
  return config;
}

void ExpectBuildError(const protos::EasyRecConfig& base, const std::string& edits,
                      const std::string& message) {
  SCOPED_TRACE(edits);
  auto config = base;
  if (!edits.empty()) EditConfigJson(&config, edits);
  std::string text;
  google::protobuf::TextFormat::PrintToString(config, &text);
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(text), message);
}

TEST(ConfigNumbers, MlpValuesNameTheirField) {
  const auto base = DeepFMMock();
  ExpectBuildError(base, R"j({"model_config.deepfm.deep.hidden_units": [0, 64]})j",
                   "model_config.deepfm.deep.hidden_units[0] must be in [1, 1048576], got 0");
  ExpectBuildError(base, R"j({"model_config.deepfm.final.hidden_units": [4000000000]})j",
                   "model_config.deepfm.final.hidden_units[0] must be in [1, 1048576], got 4000000000");
  ExpectBuildError(base, R"j({"model_config.deepfm.deep.dropout_ratio": [1.5]})j",
                   "model_config.deepfm.deep.dropout_ratio[0] must be in [0, 1), got 1.5");
  ExpectBuildError(base, R"j({"model_config.deepfm.deep.dropout_ratio": [0.1, -0.2]})j",
                   "model_config.deepfm.deep.dropout_ratio[1] must be in [0, 1)");
  ExpectBuildError(base, R"j({"model_config.deepfm.deep.activation": "nn.PReLU(num_parameters=3)"})j",
                   "model_config.deepfm.deep.activation: num_parameters of 'nn.PReLU(num_parameters=3)' "
                   "must be 1 or the layer width 128");
  ExpectBuildError(base, R"j({"model_config.deepfm.deep.activation": "nn.ELU(alpha=nan)"})j",
                   "argument alpha of 'nn.ELU(alpha=nan)' is not finite");
  ExpectBuildError(base, R"j({"model_config.deepfm.deep.hidden_units": [1048576, 1048576]})j",
                   "model_config.deepfm.deep: a 1048576 x 1048576 layer has more than 1073741824 weights");
}

TEST(ConfigNumbers, FeatureNumbersNameTheirField) {
  ExpectBuildError(DeepFMMock(), R"j({"feature_configs[id_feature.feature_name=cat_0].id_feature.embedding_dim": 4e8})j",
                   ".id_feature.embedding_dim 400000000 is larger than 65536");
}

TEST(ConfigNumbers, MultiTaskCountsAndWidthsNameTheirField) {
  const std::string tower =
      "task_towers { tower_name: 'ctr' label_name: 'label' losses { binary_cross_entropy {} } }";
  const auto mmoe = MultiTask("mmoe { expert_mlp { hidden_units: [8] } num_expert: 2 " + tower + " }");
  testing::BuildTestPipeline([&] {
    std::string text;
    google::protobuf::TextFormat::PrintToString(mmoe, &text);
    return text;
  }());  // the base builds
  ExpectBuildError(mmoe, R"j({"model_config.mmoe.num_expert": 0})j",
                   "model_config.mmoe.num_expert must be in [1, 1024], got 0");
  ExpectBuildError(mmoe, R"j({"model_config.mmoe.num_expert": 100000})j",
                   "model_config.mmoe.num_expert must be in [1, 1024], got 100000");
  ExpectBuildError(mmoe, R"j({"model_config.mmoe.task_towers[0].num_class": 0})j",
                   "model_config.mmoe.task_towers[0]");
  const auto dbmtl = MultiTask(
      "dbmtl { mask_net { n_mask_blocks: 2 mask_block { reduction_ratio: 0.5 hidden_dim: 8 } } " + tower + " }");
  ExpectBuildError(dbmtl, R"j({"model_config.dbmtl.mask_net.mask_block.hidden_dim": 0})j",
                   "model_config.dbmtl.mask_net.mask_block.hidden_dim must be in [1, 1048576], got 0");
  ExpectBuildError(dbmtl, R"j({"model_config.dbmtl.mask_net.mask_block.reduction_ratio": -1})j",
                   "model_config.dbmtl.mask_net.mask_block.reduction_ratio must be a number >= 0");
  ExpectBuildError(dbmtl, R"j({"model_config.dbmtl.mask_net.n_mask_blocks": 5000})j",
                   "model_config.dbmtl.mask_net.n_mask_blocks must be in [1, 1024], got 5000");
  const auto ple = MultiTask(
      "ple { extraction_networks { network_name: 'n' expert_num_per_task: 1 share_num: 1 "
      "task_expert_net { hidden_units: [8] } share_expert_net { hidden_units: [8] } } " + tower + " }");
  ExpectBuildError(ple, R"j({"model_config.ple.extraction_networks[0].share_num": 2000})j",
                   "model_config.ple.extraction_networks[0].share_num must be in [0, 1024], got 2000");
}

}  // namespace
}  // namespace tzrec
