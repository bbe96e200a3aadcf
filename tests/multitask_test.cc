// Multi-task models (mmoe, ple, dbmtl) against hand computations from their own parameters, their
// task heads (names, metrics, errors), and the Pareto total loss.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <google/protobuf/text_format.h>

#include "model_test_util.h"
#include "test_util.h"
#include "tzrec/models/model.h"

namespace tzrec {
namespace {

namespace F = torch::nn::functional;

const char* kFeatures = R"(
  data_config { dataset_type: CsvDataset label_fields: "clk" label_fields: "buy" }
  feature_configs { id_feature { feature_name: "a" num_buckets: 3 embedding_dim: 2 } }
  feature_configs { id_feature { feature_name: "b" num_buckets: 4 embedding_dim: 2 } }
  feature_configs { raw_feature { feature_name: "d" } }
)";

std::string Towers(const std::string& ctr_extra, const std::string& cvr_extra) {
  return R"(
    task_towers { tower_name: "ctr" label_name: "clk" losses { binary_cross_entropy {} }
                  metrics { auc {} } )" + ctr_extra + R"( }
    task_towers { tower_name: "cvr" label_name: "buy" losses { binary_cross_entropy {} }
                  metrics { auc {} } )" + cvr_extra + R"( })";
}

std::string Config(const std::string& model) {
  return std::string(kFeatures) + R"(
    model_config {
      feature_groups { group_name: "all" feature_names: ["a", "b", "d"] group_type: DEEP }
      )" + model + " }";
}

// Deterministic, distinct values for every parameter and table.
void FillParameters(Model* model) {
  torch::NoGradGuard no_grad;
  int k = 1;
  for (auto& p : model->parameters()) {
    at::Tensor flat = p.view({-1});
    for (int64_t i = 0; i < flat.numel(); ++i) flat[i] = 0.5 * std::sin(0.7 * (k++));
  }
  for (EmbeddingTable* t : model->embedding_collection().tables()) {
    at::Tensor flat = t->weight();
    for (int64_t r = 0; r < flat.size(0); ++r) {
      for (int64_t c = 0; c < flat.size(1); ++c) flat[r][c] = 0.8 * std::cos(0.9 * (k++));
    }
  }
}

Batch ThreeRows() {
  testing::SimpleRows rows;
  rows.sparse["a"] = {{1}, {2}, {0}};
  rows.sparse["b"] = {{3}, {0}, {1}};
  rows.dense["d"] = {{0.5f}, {-1.0f}, {2.0f}};
  rows.labels["clk"] = {1, 0, 1};
  rows.labels["buy"] = {1, 0, 0};
  return testing::MakeBatch(rows, 3);
}

// The group input [B, 5] = [emb_a, emb_b, d], read from the tables.
at::Tensor Input(Model* model, const Batch& batch) {
  std::map<std::string, at::Tensor> weight;
  for (EmbeddingTable* t : model->embedding_collection().tables()) weight[t->name()] = t->weight();
  at::Tensor a = weight.at("a_emb").index_select(0, batch.Sparse("a").values);
  at::Tensor b = weight.at("b_emb").index_select(0, batch.Sparse("b").values);
  return torch::cat({a, b, batch.Dense("d")}, 1);
}

struct Params {
  std::map<std::string, at::Tensor> p;
  at::Tensor Linear(const std::string& prefix, const at::Tensor& x) const {
    at::Tensor y = torch::matmul(x, p.at(prefix + ".weight").t());
    auto bias = p.find(prefix + ".bias");
    return bias == p.end() ? y : y + bias->second;
  }
  // An MLP of `layers` ReLU layers at `prefix` (TorchEasyRec's mlp.<i>.perceptron.0 paths).
  at::Tensor Mlp(const std::string& prefix, at::Tensor x, int layers) const {
    for (int i = 0; i < layers; ++i) x = torch::relu(Linear(prefix + ".mlp." + std::to_string(i) + ".perceptron.0", x));
    return x;
  }
  at::Tensor Gate(const at::Tensor& logits, const std::vector<at::Tensor>& experts) const {
    at::Tensor g = torch::softmax(logits, 1);
    at::Tensor out = torch::zeros_like(experts[0]);
    for (size_t e = 0; e < experts.size(); ++e) out = out + g.select(1, e).unsqueeze(1) * experts[e];
    return out;
  }
};

Params ParamsOf(Model* model) {
  Params params;
  for (const auto& item : model->named_parameters()) params.p[item.key()] = item.value().detach();
  return params;
}

TEST(MMoE, ForwardMatchesHandComputation) {
  auto pipeline = testing::BuildTestPipeline(Config(R"(
      mmoe { expert_mlp { hidden_units: [3] } gate_mlp { hidden_units: [2] } num_expert: 2
             )" + Towers("mlp { hidden_units: [2] }", "") + " }"));
  Model* model = pipeline->model.get();
  FillParameters(model);
  model->eval();
  torch::NoGradGuard no_grad;
  Batch batch = ThreeRows();
  Predictions predictions = model->Predict(batch);
  Params w = ParamsOf(model);
  at::Tensor x = Input(model, batch);
  std::vector<at::Tensor> experts = {w.Mlp("mmoe.expert_mlps.0", x, 1), w.Mlp("mmoe.expert_mlps.1", x, 1)};
  at::Tensor ctr_in = w.Gate(w.Linear("mmoe.gate_finals.0", w.Mlp("mmoe.gate_mlps.0", x, 1)), experts);
  at::Tensor cvr_in = w.Gate(w.Linear("mmoe.gate_finals.1", w.Mlp("mmoe.gate_mlps.1", x, 1)), experts);
  at::Tensor ctr = w.Linear("_task_tower.0.linear", w.Mlp("_task_tower.0.tower_mlp", ctr_in, 1)).squeeze(1);
  at::Tensor cvr = w.Linear("_task_tower.1.linear", cvr_in).squeeze(1);
  EXPECT_TRUE(torch::allclose(predictions.at("logits_ctr"), ctr, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(predictions.at("logits_cvr"), cvr, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(predictions.at("probs_cvr"), torch::sigmoid(cvr), 1e-5, 1e-6));
  EXPECT_EQ(predictions.size(), 4u);  // logits_/probs_ of both towers
}

TEST(PLE, ForwardMatchesHandComputation) {
  auto pipeline = testing::BuildTestPipeline(Config(R"(
      ple {
        extraction_networks { network_name: "l1" expert_num_per_task: 1 share_num: 2
                              task_expert_net { hidden_units: [3] } share_expert_net { hidden_units: [3] } }
        extraction_networks { network_name: "l2" expert_num_per_task: 2 share_num: 1
                              task_expert_net { hidden_units: [2] } share_expert_net { hidden_units: [2] } }
        )" + Towers("", "mlp { hidden_units: [2] }") + " }"));
  Model* model = pipeline->model.get();
  FillParameters(model);
  model->eval();
  torch::NoGradGuard no_grad;
  Batch batch = ThreeRows();
  Predictions predictions = model->Predict(batch);
  Params w = ParamsOf(model);
  at::Tensor x = Input(model, batch);
  // Layer 1: task t's gate over [its expert, shared 0, shared 1]; the shared gate over
  // [task 0's, task 1's, shared 0, shared 1].
  const std::string l1 = "_extraction_nets.0.", l2 = "_extraction_nets.1.";
  std::vector<at::Tensor> shared = {w.Mlp(l1 + "_shared_layers.0", x, 1), w.Mlp(l1 + "_shared_layers.1", x, 1)};
  std::vector<at::Tensor> task = {w.Mlp(l1 + "_task_layers.0.0", x, 1), w.Mlp(l1 + "_task_layers.1.0", x, 1)};
  std::vector<at::Tensor> t_out;
  for (int t = 0; t < 2; ++t) {
    t_out.push_back(w.Gate(w.Linear(l1 + "_task_gates." + std::to_string(t), x), {task[t], shared[0], shared[1]}));
  }
  at::Tensor s_out = w.Gate(w.Linear(l1 + "_shared_gate", x), {task[0], task[1], shared[0], shared[1]});
  // Layer 2 (last: no shared gate): task t over [its 2 experts, the shared expert].
  at::Tensor shared2 = w.Mlp(l2 + "_shared_layers.0", s_out, 1);
  std::vector<at::Tensor> final_out;
  for (int t = 0; t < 2; ++t) {
    const std::string ts = std::to_string(t);
    final_out.push_back(w.Gate(w.Linear(l2 + "_task_gates." + ts, t_out[t]),
                               {w.Mlp(l2 + "_task_layers." + ts + ".0", t_out[t], 1),
                                w.Mlp(l2 + "_task_layers." + ts + ".1", t_out[t], 1), shared2}));
  }
  at::Tensor ctr = w.Linear("_task_tower.0.linear", final_out[0]).squeeze(1);
  at::Tensor cvr = w.Linear("_task_tower.1.linear", w.Mlp("_task_tower.1.tower_mlp", final_out[1], 1)).squeeze(1);
  EXPECT_TRUE(torch::allclose(predictions.at("logits_ctr"), ctr, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(predictions.at("logits_cvr"), cvr, 1e-5, 1e-6));
  EXPECT_EQ(w.p.count(l2 + "_shared_gate.weight"), 0u);
}

TEST(DBMTL, ForwardWithBottomTaskAndRelationMlpsMatchesHandComputation) {
  auto pipeline = testing::BuildTestPipeline(Config(R"(
      dbmtl { bottom_mlp { hidden_units: [4] }
        task_towers { tower_name: "ctr" label_name: "clk" mlp { hidden_units: [3] }
                      losses { binary_cross_entropy {} } }
        task_towers { tower_name: "cvr" label_name: "buy" mlp { hidden_units: [3] }
                      relation_tower_names: "ctr" relation_mlp { hidden_units: [2] }
                      losses { binary_cross_entropy {} } metrics { auc {} } } })"));
  Model* model = pipeline->model.get();
  FillParameters(model);
  model->eval();
  torch::NoGradGuard no_grad;
  Batch batch = ThreeRows();
  Predictions predictions = model->Predict(batch);
  Params w = ParamsOf(model);
  at::Tensor net = w.Mlp("bottom_mlp", Input(model, batch), 1);
  at::Tensor ctr_net = w.Mlp("task_mlps.ctr", net, 1);
  at::Tensor cvr_net = w.Mlp("task_mlps.cvr", net, 1);
  // ctr has no relation_mlp: its relation net is its task net.
  at::Tensor cvr_rel = w.Mlp("relation_mlps.cvr", torch::cat({cvr_net, ctr_net}, 1), 1);
  EXPECT_TRUE(torch::allclose(predictions.at("logits_ctr"), w.Linear("task_outputs.0", ctr_net).squeeze(1), 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(predictions.at("logits_cvr"), w.Linear("task_outputs.1", cvr_rel).squeeze(1), 1e-5, 1e-6));
}

TEST(DBMTL, ForwardWithMaskNetAndMMoEMatchesHandComputation) {
  for (bool parallel : {true, false}) {
    SCOPED_TRACE(parallel ? "parallel" : "serial");
    auto pipeline = testing::BuildTestPipeline(Config(std::string(R"(
        dbmtl {
          mask_net { n_mask_blocks: 2 mask_block { reduction_ratio: 2.0 hidden_dim: 3 } use_parallel: )") +
                                                      (parallel ? "true" : "false") + R"(
                     top_mlp { hidden_units: [4] } }
          expert_mlp { hidden_units: [3] } num_expert: 2
          task_towers { tower_name: "ctr" label_name: "clk" losses { binary_cross_entropy {} } }
          task_towers { tower_name: "cvr" label_name: "buy" losses { binary_cross_entropy {} } } })"));
    Model* model = pipeline->model.get();
    FillParameters(model);
    model->eval();
    torch::NoGradGuard no_grad;
    Batch batch = ThreeRows();
    Predictions predictions = model->Predict(batch);
    Params w = ParamsOf(model);
    at::Tensor emb = Input(model, batch);
    at::Tensor ln = F::layer_norm(emb, F::LayerNormFuncOptions({5}).weight(w.p.at("mask_net.ln_emb.weight"))
                                           .bias(w.p.at("mask_net.ln_emb.bias")));
    auto block = [&](int i, const at::Tensor& input, int64_t width) {
      const std::string b = "mask_net.mask_blocks." + std::to_string(i);
      // The mask always reads the raw embedding; aggregation width = input width * 2.
      at::Tensor mask = w.Linear(b + ".mask_generator.2", torch::relu(w.Linear(b + ".mask_generator.0", emb)));
      EXPECT_EQ(w.p.at(b + ".mask_generator.0.weight").size(0), 2 * width);
      at::Tensor h = w.Linear(b + ".ffn.0", input * mask);
      return torch::relu(F::layer_norm(h, F::LayerNormFuncOptions({3}).weight(w.p.at(b + ".ffn.1.weight"))
                                               .bias(w.p.at(b + ".ffn.1.bias"))));
    };
    at::Tensor hidden = parallel ? torch::cat({block(0, ln, 5), block(1, ln, 5)}, 1)
                                 : block(1, block(0, ln, 5), 3);
    at::Tensor net = w.Mlp("mask_net.top_mlp", hidden, 1);
    std::vector<at::Tensor> experts = {w.Mlp("mmoe.expert_mlps.0", net, 1), w.Mlp("mmoe.expert_mlps.1", net, 1)};
    at::Tensor ctr_in = w.Gate(w.Linear("mmoe.gate_finals.0", net), experts);
    at::Tensor cvr_in = w.Gate(w.Linear("mmoe.gate_finals.1", net), experts);
    EXPECT_TRUE(torch::allclose(predictions.at("logits_ctr"), w.Linear("task_outputs.0", ctr_in).squeeze(1), 1e-5, 1e-6));
    EXPECT_TRUE(torch::allclose(predictions.at("logits_cvr"), w.Linear("task_outputs.1", cvr_in).squeeze(1), 1e-5, 1e-6));
  }
}

TEST(MultiTask, HeadsNameLossesMetricsAndPredictionsPerTower) {
  auto pipeline = testing::BuildTestPipeline(Config(R"(
      mmoe { expert_mlp { hidden_units: [3] } num_expert: 2
             task_towers { tower_name: "ctr" label_name: "clk" losses { binary_cross_entropy {} }
                           metrics { auc {} } metrics { grouped_auc { grouping_key: "a" } }
                           train_metrics { auc {} decay_step: 1 } }
             task_towers { tower_name: "cls" label_name: "buy" num_class: 2
                           losses { softmax_cross_entropy {} } metrics { auc {} } } })"));
  Model* model = pipeline->model.get();
  Batch batch = ThreeRows();
  model->train();
  Predictions predictions = model->Predict(batch);
  for (const char* key : {"logits_ctr", "probs_ctr", "logits_cls", "probs_cls", "probs1_cls"}) {
    EXPECT_TRUE(predictions.count(key)) << key;
  }
  NamedLosses losses = model->ComputeLosses(predictions, batch);
  ASSERT_EQ(losses.size(), 2u);
  EXPECT_EQ(losses[0].first, "binary_cross_entropy_ctr");
  EXPECT_EQ(losses[1].first, "softmax_cross_entropy_cls");
  EXPECT_NEAR(model->TotalLoss(losses).item<double>(),
              losses[0].second.item<double>() + losses[1].second.item<double>(), 1e-6);
  model->UpdateTrainMetrics(predictions, batch, nullptr);
  EXPECT_EQ(model->TrainMetricValues().count("auc_ctr"), 1u);
  model->eval();
  model->UpdateMetrics(predictions, batch, losses);
  auto metrics = model->ComputeMetrics(nullptr);
  std::vector<std::string> names;
  for (const auto& kv : metrics) names.push_back(kv.first);
  EXPECT_EQ(names, (std::vector<std::string>{"auc_cls", "auc_ctr", "binary_cross_entropy_ctr",
                                             "grouped_auc_ctr", "softmax_cross_entropy_cls"}));
  EXPECT_NEAR(metrics["binary_cross_entropy_ctr"], losses[0].second.item<double>(), 1e-6);
}

TEST(MultiTask, ConfigErrorsNameTheField) {
  auto expect = [](const std::string& model, const std::string& message) {
    EXPECT_TZREC_ERROR(testing::BuildTestPipeline(Config(model)), message);
  };
  const std::string towers = Towers("", "");
  expect("mmoe { expert_mlp { hidden_units: [3] } " + towers + " } losses { binary_cross_entropy {} }",
         "model_config.losses: set losses in model_config.mmoe.task_towers[].losses");
  expect("mmoe { expert_mlp { hidden_units: [3] } }", "model_config.mmoe.task_towers: at least one task tower");
  expect(R"(dbmtl { task_towers { tower_name: "cvr" label_name: "buy" relation_tower_names: "ctr"
                                  relation_mlp { hidden_units: [2] } losses { binary_cross_entropy {} } }
                    task_towers { tower_name: "ctr" label_name: "clk" losses { binary_cross_entropy {} } } })",
         "model_config.dbmtl.task_towers[0].relation_tower_names: 'ctr' is not a tower configured before this one");
  expect(R"(mmoe { expert_mlp { hidden_units: [3] }
               task_towers { tower_name: "a" label_name: "clk" losses { l2_loss {} } metrics { auc {} } } })",
         "model_config.mmoe.task_towers[0].metrics[0].auc: reads the prediction 'probs_a'");
  expect(R"(mmoe { expert_mlp { hidden_units: [3] }
               task_towers { tower_name: "a" label_name: "clk" losses { binary_cross_entropy {} }
                             metrics { grouped_auc { grouping_key: "d" } } } })",
         "grouping_key: 'd' is not a (non-sequence) sparse feature");
  expect(R"(ple { )" + towers + " }", "model_config.ple.extraction_networks: at least one");
  expect("mmoe { expert_mlp { hidden_units: [3] } " + Towers("pareto_min_loss_weight: 0.6", "pareto_min_loss_weight: 0.5") +
             " } use_pareto_loss_weight: true",
         "pareto_min_loss_weight: the bounds of all losses must sum to [0, 1)");
  // BayesTaskTower without label_name takes label_fields in order.
  auto pipeline = testing::BuildTestPipeline(Config(R"(
      dbmtl { task_towers { tower_name: "x" losses { binary_cross_entropy {} } }
              task_towers { tower_name: "y" losses { binary_cross_entropy {} } } })"));
  EXPECT_EQ(pipeline->model->heads()[1]->spec().label_name, "buy");
}

// With use_pareto_loss_weight the backward runs on the weighted sum whose weights make the dense
// gradient the min-norm combination of the two tasks' gradients (closed form for two tasks).
TEST(MultiTask, ParetoTotalLossWeightsTheDenseGradients) {
  auto pipeline = testing::BuildTestPipeline(Config(
      "mmoe { expert_mlp { hidden_units: [3] } num_expert: 2 " + Towers("", "") + " } use_pareto_loss_weight: true"));
  Model* model = pipeline->model.get();
  model->train();
  Batch batch = ThreeRows();
  std::vector<at::Tensor> params = model->parameters();
  auto flat_grad = [&]() {
    std::vector<at::Tensor> parts;
    for (auto& p : params) parts.push_back(p.grad().defined() ? p.grad().reshape({-1}).clone() : torch::zeros({p.numel()}));
    return torch::cat(parts).to(torch::kDouble);
  };
  auto zero = [&]() { for (auto& p : params) p.mutable_grad().reset(); };
  std::vector<at::Tensor> g;
  for (int task = 0; task < 2; ++task) {
    zero();
    NamedLosses losses = model->ComputeLosses(model->Predict(batch), batch);
    auto grads = torch::autograd::grad({losses[task].second}, params, {}, false, false, true);
    std::vector<at::Tensor> parts;
    for (size_t i = 0; i < params.size(); ++i) {
      parts.push_back(grads[i].defined() ? grads[i].reshape({-1}) : torch::zeros({params[i].numel()}));
    }
    g.push_back(torch::cat(parts).to(torch::kDouble));
  }
  const double g11 = g[0].dot(g[0]).item<double>(), g22 = g[1].dot(g[1]).item<double>(), g12 = g[0].dot(g[1]).item<double>();
  const double w0 = std::min(1.0, std::max(0.0, (g22 - g12) / (g11 + g22 - 2 * g12)));
  zero();
  NamedLosses losses = model->ComputeLosses(model->Predict(batch), batch);
  at::Tensor total = model->TotalLoss(losses);
  EXPECT_NEAR(total.item<double>(), w0 * losses[0].second.item<double>() + (1 - w0) * losses[1].second.item<double>(), 1e-5);
  total.backward();
  EXPECT_TRUE(torch::allclose(flat_grad(), w0 * g[0] + (1 - w0) * g[1], 1e-4, 1e-6));
}

}  // namespace
}  // namespace tzrec
