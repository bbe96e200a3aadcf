// rocket_launching: the light net's forward against plain tensor ops from its parameters,
// which outputs exist in training and inference, the distillation losses against their
// formulas and what they may train, training on planted data close to the oracle with the
// light net alone exported, and TorchEasyRec's Criteo example with its 40M-row tables.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "model_test_util.h"
#include "test_util.h"
#include "train_test_util.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/strings.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/tools/gen_data.h"
#include "tzrec/train/trainer.h"

namespace tzrec {
namespace {

std::string DenseOnlyConfig(const std::string& rocket, const std::string& extra_model = "") {
  return R"(
  data_config { dataset_type: CsvDataset label_fields: "label" }
  feature_configs { raw_feature { feature_name: "d" } }
  feature_configs { raw_feature { feature_name: "e" } }
  model_config {
    feature_groups { group_name: "all" feature_names: ["d", "e"] group_type: DEEP }
    rocket_launching { )" + rocket + R"( }
    losses { binary_cross_entropy {} } )" + extra_model + R"(
  })";
}

Batch DenseBatch() {
  testing::SimpleRows rows;
  rows.dense["d"] = {{2.f}, {-1.f}, {0.5f}};
  rows.dense["e"] = {{0.3f}, {1.5f}, {-2.f}};
  rows.labels["label"] = {1.f, 0.f, 1.f};
  return testing::MakeBatch(rows, 3);
}

// The layers' Linear weights and biases under `prefix` in registration order, double.
std::vector<at::Tensor> LinearParameters(Model& model, const std::string& prefix) {
  std::vector<at::Tensor> out;
  for (const auto& item : model.named_parameters()) {
    if (StartsWith(item.key(), prefix)) out.push_back(item.value().detach().to(at::kDouble));
  }
  return out;
}

at::Tensor ReluMlp(at::Tensor x, const std::vector<at::Tensor>& p) {
  for (size_t i = 0; i + 1 < p.size(); i += 2) x = at::relu(at::matmul(x, p[i].t()) + p[i + 1]);
  return x;
}

TEST(RocketLaunching, LightNetForwardAndOutputsPerMode) {
  torch::manual_seed(3);
  auto pipeline = testing::BuildTestPipeline(DenseOnlyConfig(
      "share_mlp { hidden_units: [4] } booster_mlp { hidden_units: [6, 3] } light_mlp { hidden_units: [3] }"));
  Model& model = *pipeline->model;
  model.eval();
  const Batch batch = DenseBatch();
  Predictions eval = model.Predict(batch);
  std::set<std::string> names;
  for (const auto& kv : eval) names.insert(kv.first);
  EXPECT_EQ(names, (std::set<std::string>{"logits_light", "probs_light"}));
  const at::Tensor x = torch::tensor({{2.0, 0.3}, {-1.0, 1.5}, {0.5, -2.0}}, at::kDouble);
  const at::Tensor shared = ReluMlp(x, LinearParameters(model, "share_mlp."));
  const at::Tensor light = ReluMlp(shared, LinearParameters(model, "light_mlp."));
  const auto out = LinearParameters(model, "light_linear.");
  const at::Tensor logits = (at::matmul(light, out[0].t()) + out[1]).squeeze(1);
  EXPECT_TRUE(eval.at("logits_light").to(at::kDouble).allclose(logits, 1e-5, 1e-6))
      << eval.at("logits_light") << logits;
  EXPECT_TRUE(eval.at("probs_light").to(at::kDouble).allclose(at::sigmoid(logits), 1e-5, 1e-6));
  // Inference shapes: the light net only.
  std::set<std::string> shapes;
  for (const auto& kv : model.OutputShapes()) shapes.insert(kv.first);
  EXPECT_EQ(shapes, names);
  // Eval losses: the light task's only.
  NamedLosses eval_losses = model.ComputeLosses(eval, batch);
  ASSERT_EQ(eval_losses.size(), 1u);
  EXPECT_EQ(eval_losses[0].first, "binary_cross_entropy_light");
  model.train();
  Predictions train = model.Predict(batch);
  EXPECT_TRUE(train.count("logits_booster"));
  EXPECT_FALSE(train.count("light_0"));  // no feature_based_distillation
  NamedLosses losses = model.ComputeLosses(train, batch);
  std::vector<std::string> loss_names;
  for (const auto& kv : losses) loss_names.push_back(kv.first);
  EXPECT_EQ(loss_names, (std::vector<std::string>{"binary_cross_entropy_booster", "binary_cross_entropy_light",
                                                  "hint_l2_loss"}));
  const at::Tensor hint = (train.at("logits_light") - train.at("logits_booster")).square().mean();
  EXPECT_TRUE(losses[2].second.allclose(hint));
}

TEST(RocketLaunching, DistillationLossesFollowTheirFormulasAndTrainTheLightNetOnly) {
  for (const char* function : {"COSINE", "EUCLID"}) {
    SCOPED_TRACE(function);
    torch::manual_seed(5);
    auto pipeline = testing::BuildTestPipeline(DenseOnlyConfig(
        StrCat("booster_mlp { hidden_units: [8, 4, 2] } light_mlp { hidden_units: [4, 3] } "
               "feature_based_distillation: true feature_distillation_function: ", function)));
    Model& model = *pipeline->model;
    model.train();
    const Batch batch = DenseBatch();
    Predictions p = model.Predict(batch);
    // Light layer 0 (4 wide) distils booster layer 1; light layer 1 (3 wide) has no partner.
    ASSERT_TRUE(p.count("light_0") && p.count("booster_1"));
    EXPECT_FALSE(p.count("light_1"));
    NamedLosses losses = model.ComputeLosses(p, batch);
    ASSERT_EQ(losses.size(), 4u);
    EXPECT_EQ(losses[2].first, "similarity_0_1");
    const at::Tensor l = p.at("light_0").to(at::kDouble), b = p.at("booster_1").to(at::kDouble);
    at::Tensor expected;
    if (std::string(function) == "COSINE") {
      const at::Tensor lu = l / l.norm(2, 1, true).clamp_min(1e-12), bu = b / b.norm(2, 1, true).clamp_min(1e-12);
      expected = -0.1 * (lu * bu).sum(1).mean();
    } else {
      expected = (b - l).square().sum().sqrt();
    }
    EXPECT_NEAR(losses[2].second.item<double>(), expected.item<double>(), 1e-5);
    // The distillation losses reach the light net only (the booster's side is detached).
    std::vector<at::Tensor> booster_params, light_params;
    for (const auto& item : model.named_parameters()) {
      if (StartsWith(item.key(), "booster")) booster_params.push_back(item.value());
      if (StartsWith(item.key(), "light")) light_params.push_back(item.value());
    }
    for (size_t k : {size_t{2}, size_t{3}}) {
      auto grads = torch::autograd::grad({losses[k].second}, booster_params, {}, true, false, true);
      for (const auto& g : grads) EXPECT_TRUE(!g.defined() || g.abs().sum().item<double>() == 0.0) << losses[k].first;
      auto light_grads = torch::autograd::grad({losses[k].second}, light_params, {}, true, false, true);
      double total = 0;
      for (const auto& g : light_grads) total += g.defined() ? g.abs().sum().item<double>() : 0.0;
      EXPECT_GT(total, 0.0) << losses[k].first;
    }
    // The light task's loss does not train the booster either (its input is detached).
    auto grads = torch::autograd::grad({losses[1].second}, booster_params, {}, true, false, true);
    for (const auto& g : grads) EXPECT_TRUE(!g.defined() || g.abs().sum().item<double>() == 0.0);
  }
}

TEST(RocketLaunching, TrainsToTheOracleAndExportsTheLightNet) {
  testing::DeterministicRuntime();
  testing::TempDir dir;
  const std::string text = testing::PlantedFeatures(R"("clk")", 3, 0.002) + R"(
    model_config {
      feature_groups { group_name: "all" feature_names: ["u", "i", "c", "r"] group_type: DEEP }
      rocket_launching { booster_mlp { hidden_units: [64, 32, 16] } light_mlp { hidden_units: [16] }
                         feature_based_distillation: true }
      losses { binary_cross_entropy {} } metrics { auc {} }
    })";
  const testing::PlantedRun run = testing::TrainOnPlantedData(dir, text, 40000, 10000);
  const double oracle = run.oracle["oracle_auc"].get<double>();
  const auto& result = run.result;
  EXPECT_FALSE(result.contains("auc_booster")) << result.dump();
  const double auc = result["auc_light"].get<double>();
  std::printf("[ rocket   ] light net eval AUC %.4f, oracle %.4f\n", auc, oracle);
  EXPECT_GE(auc, 0.97 * (oracle - 0.5) + 0.5) << "oracle " << oracle;
  const auto manifest = testing::ExportLatest(dir.File("model/pipeline.config"), dir.File("export"));
  EXPECT_FALSE(manifest.contains("scripted_model_skipped")) << manifest.dump();
  EXPECT_EQ(manifest.dump().find("booster"), std::string::npos) << manifest.dump();
}

// TorchEasyRec's example, dataset switched to Parquet, its 40M-row tables as declared
// (hash-stored).
TEST(RocketLaunching, CriteoExampleTrainsWithItsDeclaredTableSizes) {
  testing::TempDir dir;
  setenv("TZREC_EMBEDDING_STORAGE", "hash", 1);
  const std::string edits = R"({"data_config.dataset_type": "ParquetDataset",
      "data_config.batch_size": 512, "train_config.num_epochs": 1, "eval_config.num_steps": 2})";
  auto config = LoadPipelineConfig(testing::ReferenceConfig("rocket_launching_criteo.config"));
  EditConfigJson(&config, edits);
  GenDataOptions gen;
  gen.output_dir = dir.File("data");
  gen.train_rows = 2048;
  gen.eval_rows = 1024;
  const auto data = GenerateMockData(config, gen);
  TrainEvalOptions options;
  options.pipeline_config_path = testing::ReferenceConfig("rocket_launching_criteo.config");
  options.model_dir = dir.File("model");
  options.train_input_path = data.train_pattern;
  options.eval_input_path = data.eval_pattern;
  options.edit_config_json = edits;
  TrainAndEvaluate(options);
  unsetenv("TZREC_EMBEDDING_STORAGE");
  const auto result = testing::LastEvalResult(dir.File("model"));
  EXPECT_TRUE(result.contains("auc_light")) << result.dump();
}

}  // namespace
}  // namespace tzrec
