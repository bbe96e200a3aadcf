// dc2vr and its Intervention: orthogonal weights stay orthonormal and train only through their
// parameter's strict lower triangle, the intervention against its formula (its source gets no
// gradient), the model's forward against plain tensor ops from its parameters, config errors,
// and training on planted data close to every tower's oracle, then export.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "model_test_util.h"
#include "test_util.h"
#include "train_test_util.h"
#include "tzrec/common/fs.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/modules/intervention.h"
#include "tzrec/tools/gen_data.h"
#include "tzrec/train/trainer.h"

namespace tzrec {
namespace {

at::Tensor Gram(const at::Tensor& w) { return at::matmul(w.t(), w); }

TEST(Intervention, OrthogonalWeightsStayOrthonormalAndTrainTheirLowerTriangle) {
  torch::manual_seed(7);
  OrthogonalWeight weight(6, 3);
  at::Tensor w0 = weight->forward().detach();
  EXPECT_TRUE(Gram(w0).allclose(at::eye(3), 1e-5, 1e-5)) << Gram(w0);
  at::Tensor original = weight->named_parameters()["original"];
  EXPECT_TRUE(torch::equal(original, -at::eye(6, 3)));
  EXPECT_TRUE(w0.allclose(weight->named_buffers()["base"].narrow(1, 0, 3), 1e-5, 1e-6));
  torch::optim::SGD sgd(weight->parameters(), 0.3);
  const at::Tensor target = at::randn({6, 3});
  for (int step = 0; step < 20; ++step) {
    sgd.zero_grad();
    at::Tensor loss = (weight->forward() - target).square().sum();
    loss.backward();
    if (step == 0) {
      const at::Tensor g = original.grad();
      EXPECT_EQ(g.triu().abs().sum().item<float>(), 0.0f);  // diagonal and above: no gradient
      EXPECT_GT(g.tril(-1).abs().sum().item<float>(), 0.0f);
    }
    sgd.step();
  }
  at::Tensor w = weight->forward().detach();
  EXPECT_FALSE(w.allclose(w0, 1e-3, 1e-3));
  EXPECT_TRUE(Gram(w).allclose(at::eye(3), 1e-5, 1e-5)) << Gram(w);
}

TEST(Intervention, MatchesItsFormulaAndLeavesTheSourceUntrained) {
  torch::manual_seed(8);
  Intervention intervention(5, 4, 2, 0.0, "t");
  intervention->eval();
  const at::Tensor base = torch::randn({3, 5}, torch::requires_grad());
  const at::Tensor source = torch::randn({3, 4}, torch::requires_grad());
  const at::Tensor out = intervention->forward(base, source);
  at::Tensor wb, ws;
  for (const auto& item : intervention->named_modules()) {
    if (item.key() == "base_rotate_layer") wb = item.value()->as<OrthogonalWeightImpl>()->forward().detach();
    if (item.key() == "source_rotate_layer") ws = item.value()->as<OrthogonalWeightImpl>()->forward().detach();
  }
  ASSERT_TRUE(wb.defined() && ws.defined());
  const at::Tensor expected = at::matmul(at::matmul(base, wb) - at::matmul(source, ws), wb.t()) + base;
  EXPECT_TRUE(out.allclose(expected, 1e-5, 1e-6));
  out.sum().backward();
  EXPECT_FALSE(source.grad().defined() && source.grad().abs().sum().item<float>() > 0);
  EXPECT_GT(base.grad().abs().sum().item<float>(), 0.0f);
  EXPECT_TZREC_ERROR(Intervention(5, 4, 5, 0.0, "model_config.dc2vr.task_towers[1]"),
                     "model_config.dc2vr.task_towers[1].low_rank_dim (5) must be at least 1 and below the tower's width (5)");
}

std::string Dc2vrConfig(const std::string& towers) {
  return R"(
  data_config { dataset_type: CsvDataset label_fields: ["l1", "l2"] }
  feature_configs { raw_feature { feature_name: "d" } }
  feature_configs { raw_feature { feature_name: "e" } }
  feature_configs { raw_feature { feature_name: "f" } }
  model_config {
    feature_groups { group_name: "all" feature_names: ["d", "e", "f"] group_type: DEEP }
    dc2vr { )" + towers + R"( }
  })";
}

TEST(DC2VR, ForwardMatchesPlainTensorOps) {
  torch::manual_seed(9);
  auto pipeline = testing::BuildTestPipeline(Dc2vrConfig(R"(
      task_towers { tower_name: "a" label_name: "l1" mlp { hidden_units: [4] } losses { binary_cross_entropy {} } }
      task_towers { tower_name: "b" label_name: "l2" intervention_tower_names: "a" low_rank_dim: 2
                    losses { binary_cross_entropy {} } })"));
  Model& model = *pipeline->model;
  model.eval();
  testing::SimpleRows rows;
  rows.dense["d"] = {{2.f}, {-1.f}};
  rows.dense["e"] = {{0.3f}, {1.5f}};
  rows.dense["f"] = {{-0.7f}, {0.2f}};
  rows.labels["l1"] = {1.f, 0.f};
  rows.labels["l2"] = {0.f, 1.f};
  Predictions p = model.Predict(testing::MakeBatch(rows, 2));
  std::map<std::string, at::Tensor> w;
  for (const auto& item : model.named_parameters()) w[item.key()] = item.value().detach().to(at::kDouble);
  for (const auto& item : model.named_buffers()) w[item.key()] = item.value().detach().to(at::kDouble);
  auto orthogonal = [&](const std::string& prefix) {
    const at::Tensor x = w.at(prefix + ".original");
    const at::Tensor a = x.tril(-1);
    const at::Tensor q = at::linalg_householder_product(a, 2.0 / (1.0 + (a * a).sum(0)));
    return at::matmul(w.at(prefix + ".base"), q * x.diagonal().to(at::kInt).unsqueeze(0));
  };
  const at::Tensor x = torch::tensor({{2.0, 0.3, -0.7}, {-1.0, 1.5, 0.2}}, at::kDouble);
  const at::Tensor a_net = at::relu(at::matmul(x, w.at("task_mlp_a.mlp.0.perceptron.0.weight").t()) +
                                    w.at("task_mlp_a.mlp.0.perceptron.0.bias"));
  const at::Tensor a_out = at::matmul(a_net, w.at("task_output_a.weight").t()) + w.at("task_output_a.bias");
  const at::Tensor wb = orthogonal("intervention_b.base_rotate_layer");
  const at::Tensor ws = orthogonal("intervention_b.source_rotate_layer");
  const at::Tensor b_net = at::matmul(at::matmul(x, wb) - at::matmul(a_net, ws), wb.t()) + x;
  const at::Tensor b_out = at::matmul(b_net, w.at("task_output_b.weight").t()) + w.at("task_output_b.bias");
  EXPECT_TRUE(p.at("logits_a").to(at::kDouble).allclose(a_out.squeeze(1), 1e-5, 1e-6));
  EXPECT_TRUE(p.at("logits_b").to(at::kDouble).allclose(b_out.squeeze(1), 1e-5, 1e-6)) << p.at("logits_b") << b_out;
}

TEST(DC2VR, ConfigErrorsNameTheirField) {
  const std::string loss = " losses { binary_cross_entropy {} } ";
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(Dc2vrConfig(
                         R"(task_towers { tower_name: "a" label_name: "l1" intervention_tower_names: "b" low_rank_dim: 1)" + loss + "}" +
                         R"(task_towers { tower_name: "b" label_name: "l2")" + loss + "}")),
                     "model_config.dc2vr.task_towers[0].intervention_tower_names[0]: 'b' is not a task tower before this one");
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(Dc2vrConfig(
                         R"(task_towers { tower_name: "a" label_name: "l1" low_rank_dim: 1)" + loss + "}")),
                     "model_config.dc2vr.task_towers[0].intervention_tower_names is empty");
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(Dc2vrConfig(
                         R"(task_towers { tower_name: "a" label_name: "l1")" + loss + "}" +
                         R"(task_towers { tower_name: "b" label_name: "l2" intervention_tower_names: "a" low_rank_dim: 3)" + loss + "}")),
                     "model_config.dc2vr.task_towers[1].low_rank_dim (3) must be at least 1 and below the tower's width (3)");
}

TEST(DC2VR, TrainsEachTowerToItsOracleAndExports) {
  testing::DeterministicRuntime();
  testing::TempDir dir;
  const std::string text = testing::PlantedFeatures(R"(["clk", "buy"])", 10, 0.002) + R"(
    model_config {
      feature_groups { group_name: "all" feature_names: ["u", "i", "c", "r"] group_type: DEEP }
      dc2vr {
        bottom_mlp { hidden_units: [32] }
        expert_mlp { hidden_units: [16] } num_expert: 3
        task_towers { tower_name: "ctr" label_name: "clk" mlp { hidden_units: [8] }
                      losses { binary_cross_entropy {} } metrics { auc {} } }
        task_towers { tower_name: "cvr" label_name: "buy" mlp { hidden_units: [8] }
                      intervention_tower_names: "ctr" low_rank_dim: 2 dropout_ratio: 0.0
                      losses { binary_cross_entropy {} } metrics { auc {} } }
      }
    })";
  const testing::PlantedRun run = testing::TrainOnPlantedData(dir, text, 100000, 15000);
  const auto& oracle = run.oracle;
  const auto& result = run.result;
  ASSERT_TRUE(oracle.contains("towers")) << oracle.dump();
  for (const auto& [tower, info] : oracle["towers"].items()) {
    SCOPED_TRACE(tower);
    const double oracle_auc = info["oracle_auc"].get<double>();
    ASSERT_TRUE(result.contains("auc_" + tower)) << result.dump();
    const double auc = result["auc_" + tower].get<double>();
    std::printf("[ dc2vr    ] %s: eval AUC %.4f, oracle %.4f\n", tower.c_str(), auc, oracle_auc);
    EXPECT_GE(auc, 0.97 * (oracle_auc - 0.5) + 0.5) << "oracle " << oracle_auc;
  }
  const auto manifest = testing::ExportLatest(dir.File("model/pipeline.config"), dir.File("export"));
  EXPECT_FALSE(manifest.contains("scripted_model_skipped")) << manifest.dump();
}

}  // namespace
}  // namespace tzrec
