// Variational dropout (model_config.variational_dropout) and `tzrec feature_selection`: the
// module against its formulas (evaluation scaling, the concrete relaxation's limits, the
// loss), which groups get one, the "<group>_feature_p_loss" losses, TorchEasyRec's
// dbmtl_has_sequence_variational_dropout_mock config training, and feature selection's CSV
// files and reduced config.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>

#include "model_test_util.h"
#include "test_util.h"
#include "train_test_util.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/strings.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/modules/variational_dropout.h"
#include "tzrec/train/checkpoint.h"
#include "tzrec/train/feature_selection.h"
#include "tzrec/train/trainer.h"

namespace tzrec {
namespace {

TEST(VariationalDropout, ScalesEachFeaturesSliceAndPenalisesKeeping) {
  torch::manual_seed(3);
  VariationalDropout dropout(std::vector<std::pair<std::string, int>>{{"a", 2}, {"b", 1}, {"c", 3}}, 0.5);
  at::Tensor p = dropout->named_parameters()["feature_p"];
  {
    torch::NoGradGuard no_grad;
    p.copy_(torch::tensor({0.0f, 20.0f, -20.0f}));
  }
  const at::Tensor x = torch::randn({4, 6});
  dropout->eval();
  auto [scaled, loss] = dropout->forward(x);
  const at::Tensor keep = torch::tensor({0.5f, 0.5f, 0.0f, 1.0f, 1.0f, 1.0f});
  EXPECT_TRUE(scaled.allclose(x * keep, 1e-5, 1e-6)) << scaled;
  // lambda / batch * sum(1 - sigmoid(p)) = 0.5 / 4 * (0.5 + 0 + 1).
  EXPECT_NEAR(loss.item<double>(), 0.5 / 4 * 1.5, 1e-6);
  // Training: a relaxed Bernoulli per row and feature; certain ratios give certain masks.
  dropout->train();
  auto [noisy, train_loss] = dropout->forward(x);
  EXPECT_TRUE(noisy.narrow(1, 2, 1).abs().max().item<float>() < 1e-6);          // b: dropped
  EXPECT_TRUE(noisy.narrow(1, 3, 3).allclose(x.narrow(1, 3, 3), 1e-4, 1e-5));    // c: kept
  const at::Tensor a = noisy.narrow(1, 0, 2) / x.narrow(1, 0, 2);
  EXPECT_TRUE((a >= -1e-5).all().item<bool>() && (a <= 1 + 1e-5).all().item<bool>());
  // The loss pushes ratios up; the data term reaches p through the relaxation.
  (noisy.sum() + train_loss).backward();
  EXPECT_TRUE(p.grad().defined());
  EXPECT_NE(p.grad()[0].item<float>(), 0.0f);
  EXPECT_EQ(dropout->DropoutRatios()[1].first, "b");
  EXPECT_NEAR(dropout->DropoutRatios()[1].second, 1.0, 1e-6);
}

TEST(VariationalDropout, EachGroupOfSeveralFeaturesGetsOneAndItsLoss) {
  auto pipeline = testing::BuildTestPipeline(R"(
    data_config { dataset_type: CsvDataset label_fields: ["l"] }
    feature_configs { raw_feature { feature_name: "d" } }
    feature_configs { raw_feature { feature_name: "e" } }
    feature_configs { id_feature { feature_name: "i" num_buckets: 5 embedding_dim: 4 } }
    model_config {
      feature_groups { group_name: "wide" feature_names: ["i"] group_type: WIDE }
      feature_groups { group_name: "deep" feature_names: ["d", "i", "e"] group_type: DEEP }
      variational_dropout { regularization_lambda: 0.1 }
      wide_and_deep { deep { hidden_units: [4] } }
      losses { binary_cross_entropy {} }
    })");
  Model& model = *pipeline->model;
  std::set<std::string> names;
  for (const auto& item : model.named_parameters()) names.insert(item.key());
  EXPECT_TRUE(names.count("group_variational_dropouts.deep.feature_p"));
  EXPECT_FALSE(names.count("group_variational_dropouts.wide.feature_p"));  // one feature: none
  EXPECT_EQ(model.named_parameters()["group_variational_dropouts.deep.feature_p"].numel(), 3);
  testing::SimpleRows rows;
  rows.dense["d"] = {{1.f}, {2.f}};
  rows.dense["e"] = {{0.f}, {-1.f}};
  rows.sparse["i"] = {{1}, {3}};
  rows.labels["l"] = {1.f, 0.f};
  const Batch batch = testing::MakeBatch(rows, 2);
  model.train();
  const NamedLosses losses = model.ComputeLosses(model.Predict(batch), batch);
  ASSERT_EQ(losses.size(), 2u);
  EXPECT_EQ(losses[0].first, "binary_cross_entropy");
  EXPECT_EQ(losses[1].first, "deep_feature_p_loss");
  const at::Tensor p = model.named_parameters()["group_variational_dropouts.deep.feature_p"].detach();
  EXPECT_NEAR(losses[1].second.item<double>(), (0.1 / 2 * (1 - p.sigmoid()).sum()).item<double>(), 1e-6);

  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(R"(
    data_config { dataset_type: CsvDataset label_fields: ["l"] }
    feature_configs { raw_feature { feature_name: "d" } }
    feature_configs { raw_feature { feature_name: "e" } }
    model_config {
      feature_groups { group_name: "deep" feature_names: ["d", "e"] group_type: DEEP }
      variational_dropout { embedding_wise_variational_dropout: true }
      deepfm { deep { hidden_units: [4] } }
      losses { binary_cross_entropy {} }
    })"), "variational_dropout.embedding_wise_variational_dropout: not supported");
}

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// TorchEasyRec's config (DBMTL, a DEEP group of 8 features and 2 DIN sequence encoders) trains,
// then feature_selection keeps each group's 3 features of lowest dropout ratio.
TEST(VariationalDropout, TorchEasyRecsConfigTrainsAndFeatureSelectionReducesIt) {
  testing::TempDir dir;
  auto config = LoadPipelineConfig(testing::ReferenceConfig("dbmtl_has_sequence_variational_dropout_mock.config"));
  ASSERT_TRUE(config.model_config().has_variational_dropout());
  const std::string edits = R"({"data_config.batch_size": 256, "train_config.num_epochs": 1})";
  EditConfigJson(&config, edits);
  TrainEvalOptions options = testing::MockDataOptions(dir, config, testing::ReferenceConfig("dbmtl_has_sequence_variational_dropout_mock.config"));
  options.edit_config_json = edits;
  TrainAndEvaluate(options);
  EXPECT_TRUE(testing::LastEvalResult(dir.File("model")).contains("auc_ctr"));
  const auto tensors = LoadCheckpointTensors(ListCheckpoints(dir.File("model")).back().path);
  ASSERT_TRUE(tensors.count("group_variational_dropouts.deep.feature_p"));
  EXPECT_EQ(tensors.at("group_variational_dropouts.deep.feature_p").numel(), 10);

  FeatureSelectionOptions select;
  select.pipeline_config_path = dir.File("model/pipeline.config");
  select.output_dir = dir.File("selected");
  select.topk = 3;
  select.clear_variational_dropout = true;
  const std::string reduced = SelectFeatures(select);
  EXPECT_EQ(reduced, dir.File("selected/pipeline.config"));
  const auto csv = Lines(dir.File("selected/feature_dropout_ratio_deep.csv"));
  ASSERT_EQ(csv.size(), 11u);
  EXPECT_EQ(csv[0], "feature_name,mean_drop_p");
  std::vector<std::string> top;
  double previous = -1;
  for (size_t i = 1; i < csv.size(); ++i) {
    const auto parts = Split(csv[i], ",");
    const double ratio = std::stod(parts[1]);
    EXPECT_GE(ratio, previous);  // ascending: the most useful first
    previous = ratio;
    if (i <= 3) top.push_back(parts[0]);
  }
  auto out = LoadPipelineConfig(reduced);
  EXPECT_FALSE(out.model_config().has_variational_dropout());
  const auto& deep = out.model_config().feature_groups(0);
  std::vector<std::string> kept(deep.feature_names().begin(), deep.feature_names().end());
  for (const std::string& name : kept) EXPECT_NE(std::find(top.begin(), top.end(), name), top.end()) << name;
  EXPECT_LE(kept.size(), 3u);
  EXPECT_EQ(deep.sequence_groups_size(), 2);  // sequence inputs stay
  EXPECT_EQ(deep.sequence_encoders_size(), 2);
  EXPECT_LT(out.feature_configs_size(), config.feature_configs_size());
  // The reduced config trains on the same data.
  TrainEvalOptions again = options;
  again.pipeline_config_path = reduced;
  again.model_dir = dir.File("reduced_model");
  TrainAndEvaluate(again);
  EXPECT_TRUE(testing::LastEvalResult(dir.File("reduced_model")).contains("auc_ctr"));

  select.output_dir = dir.File("again");
  select.topk = 0;
  EXPECT_TZREC_ERROR(SelectFeatures(select), "--topk must be > 0");
}

}  // namespace
}  // namespace tzrec
