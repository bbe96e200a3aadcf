// pepnet: the forward (EPNet's gate on the main input, PPNet's gated per-task layers, a
// tower per domain) against plain double ops from its parameters; losses reading each row's
// own domain; config errors; training on planted data close to each task's oracle; and
// TorchEasyRec's pepnet_taobao example training from gen_data.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "export_test_util.h"
#include "model_test_util.h"
#include "test_util.h"
#include "train_test_util.h"
#include "tzrec/common/fs.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/serving/predict.h"
#include "tzrec/tools/gen_data.h"
#include "tzrec/train/trainer.h"

namespace tzrec {
namespace {

std::string PepnetConfig(const std::string& groups, const std::string& body) {
  return R"(
  data_config { dataset_type: CsvDataset label_fields: ["l1", "l2", "dom"] }
  feature_configs { raw_feature { feature_name: "d" } }
  feature_configs { raw_feature { feature_name: "e" } }
  feature_configs { raw_feature { feature_name: "f" } }
  model_config {
    feature_groups { group_name: "all" feature_names: ["d", "e", "f"] group_type: DEEP }
    )" + groups + R"(
    pepnet { )" + body + R"( }
  })";
}

const char* const kGroups = R"(
    feature_groups { group_name: "domain" feature_names: ["e"] group_type: DEEP }
    feature_groups { group_name: "uia" feature_names: ["f", "d"] group_type: DEEP })";

const char* const kTwoDomainTowers = R"(
    epnet_hidden_unit: 2 epnet_gamma: 1.5 ppnet_hidden_units: [3] ppnet_gamma: 2.5
    domain_input_name: "dom" task_domain_num: 2
    task_towers { tower_name: "a" label_name: "l1" losses { binary_cross_entropy {} } metrics { auc {} } }
    task_towers { tower_name: "b" label_name: "l2" losses { binary_cross_entropy {} } })";

TEST(PEPNet, ForwardMatchesPlainTensorOpsAndLossesReadEachRowsDomain) {
  torch::manual_seed(4);
  auto pipeline = testing::BuildTestPipeline(PepnetConfig(kGroups, kTwoDomainTowers));
  Model& model = *pipeline->model;
  model.eval();
  testing::SimpleRows rows;
  rows.dense["d"] = {{2.f}, {-1.f}, {0.5f}};
  rows.dense["e"] = {{0.3f}, {1.5f}, {-2.f}};
  rows.dense["f"] = {{-0.7f}, {0.2f}, {1.f}};
  rows.labels["l1"] = {1.f, 0.f, 1.f};
  rows.labels["l2"] = {0.f, 1.f, 1.f};
  rows.labels["dom"] = {1.f, 0.f, 1.f};
  const Batch batch = testing::MakeBatch(rows, 3);
  Predictions p = model.Predict(batch);
  for (const char* name : {"logits_a_0", "logits_a_1", "probs_b_0", "probs_b_1"}) EXPECT_TRUE(p.count(name)) << name;
  EXPECT_FALSE(p.count("probs_a"));
  std::map<std::string, at::Tensor> w;
  for (const auto& item : model.named_parameters()) w[item.key()] = item.value().detach().to(at::kDouble);
  auto linear = [&](const at::Tensor& x, const std::string& prefix) {
    return at::matmul(x, w.at(prefix + ".weight").t()) + w.at(prefix + ".bias");
  };
  auto gate = [&](const at::Tensor& x, const std::string& prefix, double gamma) {
    return gamma * at::sigmoid(linear(at::relu(linear(x, prefix + ".dense_layers.0")), prefix + ".dense_layers.2"));
  };
  const at::Tensor main = torch::tensor({{2.0, 0.3, -0.7}, {-1.0, 1.5, 0.2}, {0.5, -2.0, 1.0}}, at::kDouble);
  const at::Tensor domain = main.narrow(1, 1, 1);
  const at::Tensor uia = at::stack({main.select(1, 2), main.select(1, 0)}, 1);
  const at::Tensor personal = gate(at::cat({domain, main}, 1), "epnet_gate_nu", 1.5) * main;
  std::vector<at::Tensor> selected;
  for (int t = 0; t < 2; ++t) {
    const at::Tensor hidden = at::relu(linear(personal, "ppnet_linears." + std::to_string(t))) *
                              gate(at::cat({uia, personal}, 1), "ppnet_gate_nus." + std::to_string(t), 2.5);
    std::vector<at::Tensor> per_domain;
    for (int d = 0; d < 2; ++d) {
      const at::Tensor logits = linear(hidden, "task_tower." + std::to_string(t * 2 + d) + ".linear").squeeze(1);
      const std::string name = std::string("logits_") + (t == 0 ? "a" : "b") + "_" + std::to_string(d);
      EXPECT_TRUE(p.at(name).to(at::kDouble).allclose(logits, 1e-5, 1e-6)) << name << p.at(name) << logits;
      per_domain.push_back(logits);
    }
    // Rows' domains 1, 0, 1.
    selected.push_back(torch::stack({per_domain[1][0], per_domain[0][1], per_domain[1][2]}));
  }
  const NamedLosses losses = model.ComputeLosses(p, batch);
  ASSERT_EQ(losses.size(), 2u);
  const at::Tensor l1 = torch::tensor({1.0, 0.0, 1.0}, at::kDouble), l2 = torch::tensor({0.0, 1.0, 1.0}, at::kDouble);
  EXPECT_NEAR(losses[0].second.item<double>(),
              torch::binary_cross_entropy_with_logits(selected[0], l1).item<double>(), 1e-6);
  EXPECT_NEAR(losses[1].second.item<double>(),
              torch::binary_cross_entropy_with_logits(selected[1], l2).item<double>(), 1e-6);
  // The export's outputs are the per-domain ones.
  EXPECT_EQ(model.OutputShapes().count("probs_a_1"), 1u);
  EXPECT_EQ(model.OutputShapes().count("probs_a"), 0u);

  testing::SimpleRows bad = rows;
  bad.labels["dom"] = {1.f, 2.f, 0.f};
  EXPECT_TZREC_ERROR(model.ComputeLosses(p, testing::MakeBatch(bad, 3)),
                     "pepnet: label 'dom' (domain_input_name) holds 2, not a domain index in [0, 2) (task_domain_num)");
}

TEST(PEPNet, ConfigErrorsNameTheirField) {
  const std::string tower = R"(task_towers { tower_name: "a" label_name: "l1" losses { binary_cross_entropy {} } })";
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(R"(
      data_config { dataset_type: CsvDataset label_fields: ["l1"] }
      feature_configs { raw_feature { feature_name: "d" } }
      model_config { feature_groups { group_name: "main" feature_names: ["d"] group_type: DEEP }
                     pepnet { )" + tower + "} }"),
                     "pepnet needs a DEEP group named 'all'");
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(PepnetConfig("", R"(domain_input_name: "l9" task_domain_num: 2 )" + tower)),
                     "model_config.pepnet.domain_input_name 'l9' must be one of data_config.label_fields");
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(PepnetConfig(kGroups, R"(ppnet_hidden_units: [4, 2] ppnet_dropout_ratio: [0.1, 0.1, 0.1] )" + tower)),
                     "model_config.pepnet.ppnet_dropout_ratio has 3 values for 2 ppnet_hidden_units");
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(PepnetConfig(kGroups, tower)),
                     "model_config.pepnet.ppnet_hidden_units: set them");
}

TEST(PEPNet, TrainsEachTaskToItsOracle) {
  testing::DeterministicRuntime();
  testing::TempDir dir;
  const std::string text = testing::PlantedFeatures(R"(["clk", "buy"])", 10, 0.004) + R"(
    model_config {
      feature_groups { group_name: "all" feature_names: ["u", "i", "c", "r"] group_type: DEEP }
      feature_groups { group_name: "domain" feature_names: ["c"] group_type: DEEP }
      feature_groups { group_name: "uia" feature_names: ["u", "i"] group_type: DEEP }
      pepnet {
        ppnet_hidden_units: [32, 16] ppnet_dropout_ratio: [0.0]
        task_towers { tower_name: "ctr" label_name: "clk" mlp { hidden_units: [8] }
                      losses { binary_cross_entropy {} } metrics { auc {} } }
        task_towers { tower_name: "cvr" label_name: "buy" mlp { hidden_units: [8] }
                      losses { binary_cross_entropy {} } metrics { auc {} } }
      }
    })";
  const testing::PlantedRun run = testing::TrainOnPlantedData(dir, text, 100000, 15000);
  ASSERT_TRUE(run.oracle.contains("towers")) << run.oracle.dump();
  for (const auto& [tower, info] : run.oracle["towers"].items()) {
    SCOPED_TRACE(tower);
    const double oracle_auc = info["oracle_auc"].get<double>();
    ASSERT_TRUE(run.result.contains("auc_" + tower)) << run.result.dump();
    const double auc = run.result["auc_" + tower].get<double>();
    std::printf("[ pepnet   ] %s: eval AUC %.4f, oracle %.4f\n", tower.c_str(), auc, oracle_auc);
    EXPECT_GE(auc, 0.97 * (oracle_auc - 0.5) + 0.5) << "oracle " << oracle_auc;
  }
}

// TorchEasyRec's example (EPNet on occupation, PPNet, a tower per occupation domain; the
// domain read from the `occupation` label field), Parquet instead of ODPS.
TEST(PEPNet, TorchEasyRecsTaobaoExampleTrainsAndExportsPerDomainOutputs) {
  testing::TempDir dir;
  auto config = LoadPipelineConfig(testing::ReferenceConfig("pepnet_taobao.config"));
  const std::string edits = R"({"data_config.dataset_type": "ParquetDataset", "data_config.batch_size": 256,
      "train_config.num_epochs": 1})";
  EditConfigJson(&config, edits);
  EXPECT_EQ(config.model_config().pepnet().domain_input_name(), "occupation");
  TrainEvalOptions options = testing::MockDataOptions(dir, config, testing::ReferenceConfig("pepnet_taobao.config"));
  options.edit_config_json = edits;
  TrainAndEvaluate(options);
  const auto result = testing::LastEvalResult(dir.File("model"));
  EXPECT_TRUE(result.contains("auc_ctr") && result.contains("auc_cvr")) << result.dump();
  const auto manifest = testing::ExportLatest(dir.File("model/pipeline.config"), dir.File("export"));
  EXPECT_TRUE(manifest.dump().find("probs_cvr_2") != std::string::npos) << manifest.dump();
  // The scripted model (EPNet and PPNet gates, per-domain towers and outputs) gives predict's
  // outputs in LibTorch and in Python torch.
  ASSERT_TRUE(PathExists(dir.File("export/scripted_model.pt"))) << manifest.value("scripted_model_skipped", "");
  PredictOptions predict;
  predict.scripted_model_path = dir.File("export");
  predict.predict_input_path = options.eval_input_path;
  const auto expected = testing::RunPredict(predict, dir.File("pred"));
  EXPECT_TRUE(expected.count("probs_cvr_2"));
  EXPECT_LE(testing::CheckScriptedModel(dir.File("export"), options.eval_input_path, expected, dir), 1e-5);
}

}  // namespace
}  // namespace tzrec
