// Embedding kernels vs reference, FM gradient by finite differences, DeepFM forward by hand.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <random>

#include "test_util.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/embedding/embedding_group.h"
#include "tzrec/embedding/pooled_lookup.h"
#include "tzrec/loss/losses.h"
#include "tzrec/models/model.h"
#include "tzrec/modules/fm.h"

namespace tzrec {
namespace {

// Random jagged ids with duplicates and empty bags.
void RandomBags(std::mt19937& rng, int64_t rows, int64_t bags, at::Tensor* values,
                at::Tensor* offsets) {
  std::uniform_int_distribution<int> length(0, 3);
  std::uniform_int_distribution<int64_t> id(0, rows - 1);
  std::vector<int64_t> v, o{0};
  for (int64_t b = 0; b < bags; ++b) {
    int n = length(rng);
    for (int i = 0; i < n; ++i) v.push_back(id(rng));
    o.push_back(static_cast<int64_t>(v.size()));
  }
  *values = torch::tensor(v, torch::kLong);
  *offsets = torch::tensor(o, torch::kLong);
}

// Reference pooled lookup written with plain tensor ops on a weight that requires grad.
at::Tensor ReferencePooled(const at::Tensor& weight, const at::Tensor& values,
                           const at::Tensor& offsets, bool mean) {
  std::vector<at::Tensor> rows;
  auto o = offsets.accessor<int64_t, 1>();
  for (int64_t b = 0; b + 1 < offsets.numel(); ++b) {
    int64_t n = o[b + 1] - o[b];
    if (n == 0) {
      rows.push_back(torch::zeros({weight.size(1)}, weight.options()));
      continue;
    }
    at::Tensor picked = weight.index_select(0, values.slice(0, o[b], o[b + 1]));
    rows.push_back(mean ? picked.mean(0) : picked.sum(0));
  }
  return torch::stack(rows);
}

TEST(PooledLookup, ForwardAndGradientMatchReference) {
  torch::manual_seed(0);
  std::mt19937 rng(1);
  for (bool mean : {false, true}) {
    EmbeddingTable table("t", 20, 5);
    at::Tensor values, offsets;
    RandomBags(rng, 20, 64, &values, &offsets);
    at::Tensor out = PooledLookup(&table, values, offsets, mean, /*track_gradient=*/true);
    at::Tensor ref_weight = table.weight().clone().requires_grad_(true);
    at::Tensor ref = ReferencePooled(ref_weight, values, offsets, mean);
    EXPECT_TRUE(torch::allclose(out, ref.detach(), 1e-6, 1e-6));
    at::Tensor upstream = torch::randn({64, 5});
    (out * upstream).sum().backward();
    (ref * upstream).sum().backward();
    UniqueGradients g = AccumulateGradients(table.TakePendingGradients(), 5);
    at::Tensor dense = ref_weight.grad();
    // Every row with a non-zero reference gradient appears once, with the same gradient.
    std::set<int64_t> touched(values.data_ptr<int64_t>(), values.data_ptr<int64_t>() + values.numel());
    ASSERT_EQ(g.ids.size(), touched.size());
    for (size_t k = 0; k < g.ids.size(); ++k) {
      EXPECT_TRUE(k == 0 || g.ids[k - 1] < g.ids[k]);
      at::Tensor mine = torch::from_blob(g.grads.data() + k * 5, {5}).clone();
      EXPECT_TRUE(torch::allclose(mine, dense[g.ids[k]], 1e-5, 1e-5)) << g.ids[k];
    }
    // No gradient recorded outside training.
    PooledLookup(&table, values, offsets, mean, /*track_gradient=*/false);
    EXPECT_TRUE(table.TakePendingGradients().empty());
  }
}

TEST(SparseOptimizer, AdagradAndSgdMatchTorchOptimizers) {
  protos::SparseOptimizer adagrad_config, sgd_config;
  adagrad_config.mutable_adagrad_optimizer()->set_lr(0.1f);
  adagrad_config.mutable_adagrad_optimizer()->set_initial_accumulator_value(0.01f);
  sgd_config.mutable_sgd_optimizer()->set_lr(0.1f);
  std::mt19937 rng(2);
  for (bool use_adagrad : {true, false}) {
    torch::manual_seed(1);
    auto optimizer = SparseOptimizer::Create(use_adagrad ? adagrad_config : sgd_config);
    EmbeddingTable table("t", 30, 4);
    optimizer->InitState(&table);
    at::Tensor ref_weight = table.weight().clone().requires_grad_(true);
    std::unique_ptr<torch::optim::Optimizer> ref_opt;
    if (use_adagrad) {
      ref_opt = std::make_unique<torch::optim::Adagrad>(
          std::vector<at::Tensor>{ref_weight},
          torch::optim::AdagradOptions(0.1).initial_accumulator_value(0.01).eps(1e-8));
    } else {
      ref_opt = std::make_unique<torch::optim::SGD>(std::vector<at::Tensor>{ref_weight},
                                                    torch::optim::SGDOptions(0.1));
    }
    for (int step = 0; step < 3; ++step) {
      at::Tensor values, offsets;
      RandomBags(rng, 30, 40, &values, &offsets);
      at::Tensor upstream = torch::randn({40, 4});
      (PooledLookup(&table, values, offsets, false, true) * upstream).sum().backward();
      optimizer->Step({&table});
      ref_opt->zero_grad();
      (ReferencePooled(ref_weight, values, offsets, false) * upstream).sum().backward();
      // Dense Adagrad also decays untouched rows' state by 0 and leaves them unchanged.
      ref_opt->step();
    }
    EXPECT_TRUE(torch::allclose(table.weight(), ref_weight.detach(), 1e-5, 1e-6))
        << (table.weight() - ref_weight).abs().max();
  }
}

TEST(BinaryCrossEntropyLoss, LabelSmoothingAndSampleWeights) {
  at::Tensor logits = torch::tensor({0.5f, -1.0f, 2.0f});
  at::Tensor labels = torch::tensor({1.0f, 0.0f, 1.0f});
  at::Tensor weights = torch::tensor({1.0f, 2.0f, 3.0f});
  auto bce = [](double z, double y) {
    double p = 1.0 / (1.0 + std::exp(-z));
    return -(y * std::log(p) + (1 - y) * std::log(1 - p));
  };
  double z[] = {0.5, -1.0, 2.0}, y[] = {1, 0, 1}, w[] = {1, 2, 3};
  double plain = 0, smoothed = 0, weighted = 0;
  for (int i = 0; i < 3; ++i) {
    plain += bce(z[i], y[i]) / 3;
    smoothed += bce(z[i], y[i] * 0.8 + 0.5 * 0.2) / 3;
    weighted += bce(z[i], y[i]) * w[i] / 2.0 / 3;  // w / mean(w), then mean
  }
  EXPECT_NEAR(BinaryCrossEntropyLoss(logits, labels, {}, 0.0).item<double>(), plain, 1e-6);
  EXPECT_NEAR(BinaryCrossEntropyLoss(logits, labels, {}, 0.2).item<double>(), smoothed, 1e-6);
  EXPECT_NEAR(BinaryCrossEntropyLoss(logits, labels, weights, 0.0).item<double>(), weighted, 1e-6);
}

TEST(FactorizationMachine, MatchesBruteForceAndFiniteDifferences) {
  torch::manual_seed(3);
  at::Tensor x = torch::randn({3, 4, 5}, torch::kDouble).requires_grad_(true);
  at::Tensor fm = FactorizationMachine(x);
  // Brute force: sum over pairs i<j of x_i * x_j, per dim.
  at::Tensor brute = torch::zeros({3, 5}, torch::kDouble);
  for (int i = 0; i < 4; ++i) {
    for (int j = i + 1; j < 4; ++j) brute += x.select(1, i) * x.select(1, j);
  }
  EXPECT_TRUE(torch::allclose(fm, brute, 1e-12, 1e-12));
  at::Tensor weights = torch::randn({3, 5}, torch::kDouble);
  (fm * weights).sum().backward();
  at::Tensor analytic = x.grad().clone();
  at::Tensor base = x.detach().clone();
  const double eps = 1e-6;
  double max_error = 0.0;
  for (int64_t i = 0; i < base.numel(); ++i) {
    at::Tensor plus = base.clone(), minus = base.clone();
    plus.view(-1)[i] += eps;
    minus.view(-1)[i] -= eps;
    double numeric = ((FactorizationMachine(plus) * weights).sum().item<double>() -
                      (FactorizationMachine(minus) * weights).sum().item<double>()) / (2 * eps);
    max_error = std::max(max_error, std::abs(numeric - analytic.view(-1)[i].item<double>()));
  }
  EXPECT_LT(max_error, 1e-7);
}

const char* kTinyDeepFM = R"(
  data_config { dataset_type: CsvDataset label_fields: "label" }
  feature_configs { id_feature { feature_name: "a" num_buckets: 3 embedding_dim: 2 } }
  feature_configs { id_feature { feature_name: "b" num_buckets: 4 embedding_dim: 2 } }
  feature_configs { raw_feature { feature_name: "d" } }
  model_config {
    feature_groups { group_name: "wide" feature_names: ["a", "b"] group_type: WIDE }
    feature_groups { group_name: "fm" feature_names: ["a", "b"] group_type: DEEP }
    feature_groups { group_name: "deep" feature_names: ["a", "b", "d"] group_type: DEEP }
    deepfm { deep { hidden_units: [2] } wide_embedding_dim: 1 }
    losses { binary_cross_entropy {} }
    metrics { auc {} }
  })";

TEST(DeepFM, ForwardMatchesHandComputation) {
  auto config = ParsePipelineConfigText(kTinyDeepFM, "tiny");
  auto features = CreateFeatures(config.feature_configs(), config.data_config());
  std::vector<const Feature*> ptrs;
  for (auto& f : features) ptrs.push_back(f.get());
  auto model = CreateModel(config.model_config(), ptrs, {"label"}, {});
  torch::NoGradGuard no_grad;
  std::map<std::string, EmbeddingTable*> tables;
  for (EmbeddingTable* t : model->embedding_group().tables()) tables[t->name()] = t;
  ASSERT_EQ(tables.size(), 4u);  // a_emb, b_emb, a_emb_wide, b_emb_wide
  tables["a_emb"]->weight().copy_(torch::tensor({{1.f, 2.f}, {3.f, 4.f}, {5.f, 6.f}}));
  tables["b_emb"]->weight().copy_(torch::tensor({{.5f, -1.f}, {0.f, 1.f}, {2.f, 2.f}, {-1.f, 0.f}}));
  tables["a_emb_wide"]->weight().copy_(torch::tensor({{.1f}, {.2f}, {.3f}}));
  tables["b_emb_wide"]->weight().copy_(torch::tensor({{-.1f}, {-.2f}, {-.3f}, {-.4f}}));
  auto params = model->named_parameters();
  params["deep_mlp.mlp.0.perceptron.0.weight"].copy_(
      torch::tensor({{.1f, 0.f, .2f, 0.f, 1.f}, {0.f, -.1f, 0.f, .3f, -1.f}}));
  params["deep_mlp.mlp.0.perceptron.0.bias"].copy_(torch::tensor({.5f, .5f}));
  params["output_mlp.weight"].copy_(torch::tensor({{2.f, -3.f}}));
  params["output_mlp.bias"].copy_(torch::tensor({.25f}));
  model->eval();

  // Row 0: a=[1], b=[2,3] (sum pooled), d=2.  Row 1: a=[] (empty), b=[0], d=-1.
  ParsedBatch parsed;
  parsed.size = 2;
  parsed.sparse["a"] = {{1}, {1, 0}};
  parsed.sparse["b"] = {{2, 3, 0}, {2, 1}};
  parsed.dense["d"] = {1, {2.f, -1.f}};
  parsed.labels["label"] = {1.f, 0.f};
  auto predictions = model->Predict(ToBatch(std::move(parsed)));

  auto expect_row = [](double a0, double a1, double b0, double b1, double d, double wide) {
    double fm = a0 * b0 + a1 * b1;  // two fields: the FM is their dot product
    double h0 = std::max(0.0, .1 * a0 + .2 * b0 + 1.0 * d + .5);
    double h1 = std::max(0.0, -.1 * a1 + .3 * b1 - 1.0 * d + .5);
    return wide + fm + (2.0 * h0 - 3.0 * h1 + .25);
  };
  double row0 = expect_row(3, 4, 2 + -1, 2 + 0, 2, .2 + (-.3 + -.4));
  double row1 = expect_row(0, 0, .5, -1, -1, -.1);
  at::Tensor logits = predictions.at("logits");
  ASSERT_EQ(logits.sizes(), (at::IntArrayRef{2}));
  EXPECT_NEAR(logits[0].item<double>(), row0, 1e-5);
  EXPECT_NEAR(logits[1].item<double>(), row1, 1e-5);
  EXPECT_NEAR(predictions.at("probs")[0].item<double>(), 1.0 / (1.0 + std::exp(-row0)), 1e-6);
}

TEST(EmbeddingGroup, SharingShapesAndErrors) {
  auto config = ParsePipelineConfigText(R"(
    feature_configs { id_feature { feature_name: "a" num_buckets: 5 embedding_dim: 3 embedding_name: "s" } }
    feature_configs { id_feature { feature_name: "b" num_buckets: 5 embedding_dim: 3 embedding_name: "s" } }
    feature_configs { id_feature { feature_name: "c" num_buckets: 6 embedding_dim: 3 embedding_name: "s" } }
    feature_configs { raw_feature { feature_name: "d" value_dim: 2 } }
    model_config {
      feature_groups { group_name: "g1" feature_names: ["a", "b", "d"] }
      feature_groups { group_name: "g2" feature_names: ["a"] group_type: WIDE }
    })", "t");
  auto features = CreateFeatures(config.feature_configs(), config.data_config());
  std::vector<const Feature*> ptrs;
  for (auto& f : features) ptrs.push_back(f.get());
  EmbeddingGroup group(ptrs, config.model_config().feature_groups(), 4);
  EXPECT_EQ(group.tables().size(), 2u);  // "s" shared by a and b, "s_wide"
  EXPECT_EQ(group.GroupDims("g1"), (std::vector<int>{3, 3, 2}));
  EXPECT_EQ(group.GroupTotalDim("g2"), 4);
  auto bad = config.model_config();
  bad.mutable_feature_groups(0)->add_feature_names("c");
  EXPECT_TZREC_ERROR(EmbeddingGroup(ptrs, bad.feature_groups(), 4), "embedding 's' is shared");
  bad = config.model_config();
  bad.mutable_feature_groups(1)->add_feature_names("d");
  EXPECT_TZREC_ERROR(EmbeddingGroup(ptrs, bad.feature_groups(), 4), "WIDE groups take sparse");
  bad = config.model_config();
  bad.mutable_feature_groups(0)->add_feature_names("zzz");
  EXPECT_TZREC_ERROR(EmbeddingGroup(ptrs, bad.feature_groups(), 4), "unknown feature 'zzz'");
  bad = config.model_config();
  bad.mutable_feature_groups(0)->set_group_type(protos::SEQUENCE);
  EXPECT_TZREC_ERROR(EmbeddingGroup(ptrs, bad.feature_groups(), 4),
                     "model_config.feature_groups[0].group_type: SEQUENCE not supported yet");
}

}  // namespace
}  // namespace tzrec
