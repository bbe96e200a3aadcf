// Embedding kernels vs reference, FM gradient by finite differences, DeepFM forward by hand.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

#include <random>

#include "model_test_util.h"
#include "test_util.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/embedding/embedding_group.h"
#include "tzrec/models/model.h"
#include <google/protobuf/text_format.h>
#include "tzrec/modules/fm.h"
#include "tzrec/modules/interaction.h"

namespace tzrec {
namespace {

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

// The fused kernel in float on DeepFM's shape, with rows that are a slice of a wider lookup
// output (strided), against ATen's formula in double.
TEST(FactorizationMachine, FloatKernelOnStridedRowsMatchesTheFormulaAndItsGradient) {
  torch::manual_seed(5);
  const int64_t batch = 1000, n = 26, d = 16;
  at::Tensor wide = torch::randn({batch, n * d + 13});
  at::Tensor x = wide.narrow(1, 13, n * d).reshape({batch, n, d});
  ASSERT_NE(x.stride(0), n * d);
  at::Tensor view = wide.clone().requires_grad_(true);
  at::Tensor fm = FactorizationMachine(view.narrow(1, 13, n * d).reshape({batch, n, d}));
  at::Tensor xd = x.to(torch::kDouble);
  at::Tensor expected = 0.5 * (xd.sum(1) * xd.sum(1) - (xd * xd).sum(1));
  EXPECT_LT((fm.to(torch::kDouble) - expected).abs().max().item<double>(), 1e-4);
  at::Tensor weights = torch::randn({batch, d});
  (fm * weights).sum().backward();
  at::Tensor expected_grad = (weights.to(torch::kDouble).unsqueeze(1) * (xd.sum(1, true) - xd));
  at::Tensor grad = view.grad().narrow(1, 13, n * d).reshape({batch, n, d}).to(torch::kDouble);
  EXPECT_LT((grad - expected_grad).abs().max().item<double>(), 1e-4);
  EXPECT_EQ(view.grad().narrow(1, 0, 13).abs().max().item<float>(), 0.0f);
  // No features: zeros.
  EXPECT_EQ(FactorizationMachine(torch::randn({4, 0, d})).abs().max().item<float>(), 0.0f);
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
  auto pipeline = testing::BuildTestPipeline(kTinyDeepFM);
  Model* model = pipeline->model.get();
  torch::NoGradGuard no_grad;
  std::map<std::string, EmbeddingTable*> tables;
  for (EmbeddingTable* t : model->embedding_collection().tables()) tables[t->name()] = t;
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

// Shapes cover the generic loops (dim 3, 4) and the dim-16 path with n spanning two
// 16-column blocks (n 27, as DLRM on Criteo).
TEST(PairwiseInteraction, MatchesBruteForce) {
  testing::ForEachCpuIsa([] {
    for (auto [n, dim] : {std::pair<int64_t, int64_t>{5, 4}, {27, 16}, {17, 3}}) {
      torch::manual_seed(4);
      at::Tensor x = torch::randn({70, n, dim});
      at::Tensor out = PairwiseInteraction(x);
      ASSERT_EQ(out.sizes(), (at::IntArrayRef{70, n * (n - 1) / 2}));
      at::Tensor all = torch::bmm(x.to(torch::kDouble), x.to(torch::kDouble).transpose(1, 2));
      int64_t column = 0;
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = i + 1; j < n; ++j, ++column) {
          EXPECT_TRUE(torch::allclose(out.select(1, column).to(torch::kDouble),
                                      all.select(1, i).select(1, j), 1e-5, 1e-5))
              << "pair " << i << "," << j;
        }
      }
    }
  });
}

// The hand-written kernel's gradient: against ATen's bmm formulation and finite differences.
TEST(PairwiseInteraction, GradientMatchesAtenAndFiniteDifferences) {
  testing::ForEachCpuIsa([] {
    for (auto [n, dim] : {std::pair<int64_t, int64_t>{6, 3}, {27, 16}}) {
      torch::manual_seed(8);
      const int64_t pairs = n * (n - 1) / 2;
      at::Tensor x = torch::randn({70, n, dim}).requires_grad_(true);
      at::Tensor upstream = torch::randn({70, pairs});
      (PairwiseInteraction(x) * upstream).sum().backward();
      at::Tensor x2 = x.detach().clone().requires_grad_(true);
      at::Tensor all = torch::bmm(x2, x2.transpose(1, 2));
      at::Tensor idx = torch::triu_indices(n, n, 1);
      at::Tensor ref = all.index({torch::indexing::Slice(), idx[0], idx[1]});
      (ref * upstream).sum().backward();
      EXPECT_TRUE(torch::allclose(x.grad(), x2.grad(), 1e-4, 1e-4));
      // Quadratic in x: central differences are exact up to rounding.
      auto loss = [&](const at::Tensor& v) {
        torch::NoGradGuard no_grad;
        return (PairwiseInteraction(v).to(torch::kDouble) * upstream.to(torch::kDouble))
            .sum()
            .item<double>();
      };
      at::Tensor base = x.detach();
      for (int64_t i = 0; i < base.numel(); i += base.numel() / 40 + 1) {
        at::Tensor plus = base.clone(), minus = base.clone();
        plus.view(-1)[i] += 1e-2f;
        minus.view(-1)[i] -= 1e-2f;
        EXPECT_NEAR((loss(plus) - loss(minus)) / 2e-2, x.grad().view(-1)[i].item<double>(),
                    2e-2);
      }
    }
  });
}

// NaN and inf inputs poison the same pairs as ATen's bmm, and the same input gradients as the
// definition dx_i = sum_{j != i} g_ij x_j. (ATen's bmm backward also multiplies the zero
// gradients of the diagonal and lower triangle by the inputs, so 0 * inf adds NaNs the true
// gradient does not have; the loss is non-finite either way.)
TEST(PairwiseInteraction, PropagatesNonFiniteValuesLikeAten) {
  testing::ForEachCpuIsa([] {
    for (auto [n, dim] : {std::pair<int64_t, int64_t>{5, 4}, {27, 16}}) {
      SCOPED_TRACE(n);
      torch::manual_seed(5);
      at::Tensor base = torch::randn({9, n, dim});
      base[2][1][0] = std::numeric_limits<float>::quiet_NaN();
      base[6][n - 1][dim - 1] = std::numeric_limits<float>::infinity();
      const int64_t pairs = n * (n - 1) / 2;
      at::Tensor upstream = torch::randn({9, pairs});
      at::Tensor x = base.clone().requires_grad_(true);
      at::Tensor out = PairwiseInteraction(x);
      (out * upstream).sum().backward();
      at::Tensor idx = torch::triu_indices(n, n, 1);
      at::Tensor ref = torch::bmm(base, base.transpose(1, 2)).index({torch::indexing::Slice(), idx[0], idx[1]});
      at::Tensor ref_grad = torch::zeros_like(base);
      int64_t column = 0;
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = i + 1; j < n; ++j, ++column) {
          at::Tensor g = upstream.select(1, column).unsqueeze(1);
          ref_grad.select(1, i) += g * base.select(1, j);
          ref_grad.select(1, j) += g * base.select(1, i);
        }
      }
      EXPECT_GT(torch::isnan(out).sum().item<int64_t>(), 0);
      EXPECT_GT(torch::isnan(x.grad()).sum().item<int64_t>(), 0);
      for (auto [a, b] : {std::pair<at::Tensor, at::Tensor>{out.detach(), ref}, {x.grad(), ref_grad}}) {
        EXPECT_TRUE(torch::equal(torch::isnan(a), torch::isnan(b)));
        EXPECT_TRUE(torch::equal(torch::isinf(a), torch::isinf(b)));
        EXPECT_TRUE(torch::allclose(a, b, 1e-4, 1e-4, /*equal_nan=*/true));
      }
    }
  });
}

TEST(DLRM, ForwardShapesAndConfigChecks) {
  auto config = ParsePipelineConfigText(R"(
    feature_configs { raw_feature { feature_name: "d0" } }
    feature_configs { raw_feature { feature_name: "d1" } }
    feature_configs { id_feature { feature_name: "a" num_buckets: 5 embedding_dim: 4 } }
    feature_configs { id_feature { feature_name: "b" num_buckets: 6 embedding_dim: 4 } }
    data_config { dataset_type: CsvDataset label_fields: "label" }
    model_config {
      feature_groups { group_name: "dense" feature_names: ["d0", "d1"] }
      feature_groups { group_name: "sparse" feature_names: ["a", "b"] }
      dlrm { dense_mlp { hidden_units: [8, 4] } final { hidden_units: [6] } }
      losses { binary_cross_entropy {} }
    })", "dlrm");
  std::string text;
  google::protobuf::TextFormat::PrintToString(config, &text);
  auto pipeline = testing::BuildTestPipeline(text);
  Model* model = pipeline->model.get();
  // final input = 3 pairwise products + 4 dense + 8 sparse = 15
  auto params = model->named_parameters();
  EXPECT_EQ(params["final_mlp.mlp.0.perceptron.0.weight"].size(1), 15);
  ParsedBatch parsed;
  parsed.size = 2;
  parsed.sparse["a"] = {{1, 2}, {1, 1}};
  parsed.sparse["b"] = {{5}, {0, 1}};
  parsed.dense["d0"] = {1, {0.5f, -1.f}};
  parsed.dense["d1"] = {1, {2.f, 0.f}};
  parsed.labels["label"] = {1.f, 0.f};
  Batch batch = ToBatch(std::move(parsed));
  auto predictions = model->Predict(batch);
  EXPECT_EQ(predictions.at("logits").sizes(), (at::IntArrayRef{2}));
  model->train();
  predictions = model->Predict(batch);
  auto losses = model->ComputeLosses(predictions, batch);
  ASSERT_EQ(losses.size(), 1u);
  EXPECT_EQ(losses[0].first, "binary_cross_entropy");
  losses[0].second.backward();  // gradients reach the tables without error
  auto bad = config;
  bad.mutable_model_config()->mutable_dlrm()->mutable_dense_mlp()->set_hidden_units(1, 5);
  google::protobuf::TextFormat::PrintToString(bad, &text);
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(text), "must equal the sparse feature dim");
}

TEST(EmbeddingGroup, SharingShapesAndErrors) {
  auto config = ParsePipelineConfigText(R"(
    feature_configs { id_feature { feature_name: "a" num_buckets: 5 embedding_dim: 3 embedding_name: "s" } }
    feature_configs { id_feature { feature_name: "b" num_buckets: 5 embedding_dim: 3 embedding_name: "s" } }
    feature_configs { id_feature { feature_name: "c" num_buckets: 6 embedding_dim: 3 embedding_name: "s" } }
    feature_configs { raw_feature { feature_name: "d" value_dim: 2 } }
    feature_configs { id_feature { feature_name: "unused" num_buckets: 7 embedding_dim: 3 } }
    model_config {
      feature_groups { group_name: "g1" feature_names: ["a", "b", "d"] }
      feature_groups { group_name: "g2" feature_names: ["a"] group_type: WIDE }
    })", "t");
  auto features = CreateFeatures(config.feature_configs(), config.data_config());
  std::vector<const Feature*> ptrs;
  for (auto& f : features) ptrs.push_back(f.get());
  auto make = [&](const protos::ModelConfig& model, EmbeddingCollection* collection) {
    EmbeddingGroup::Options options;
    EmbeddingGroup group(collection, ptrs, model.feature_groups(), options);
    return group;
  };
  EmbeddingCollection collection;
  EmbeddingGroup group = make(config.model_config(), &collection);
  // "s" shared by a and b, "s_wide"; the unused feature gets no table.
  ASSERT_EQ(collection.table_specs().size(), 2u);
  EXPECT_EQ(collection.table_specs()[0].name, "s");
  EXPECT_EQ(collection.table_specs()[0].features, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(collection.table_specs()[1].name, "s_wide");
  protos::SparseOptimizer sgd_config;
  sgd_config.mutable_adagrad_optimizer()->set_lr(0.1f);
  SparseOptimizer adagrad(ParseSparseOptimizer(sgd_config));
  const SparseOptimizerSpec spec = adagrad.spec();
  EXPECT_EQ(EmbeddingCollection::TableBytes(collection.table_specs()[0], &spec), 5 * ((3 + 3) * 4 + 4));
  EXPECT_EQ(EmbeddingCollection::TableBytes(collection.table_specs()[0], nullptr), 5 * (3 * 4 + 4));
  EmbeddingCollection::MaterializeOptions options;
  options.optimizer = &adagrad;
  collection.Materialize(std::move(options));
  ASSERT_EQ(collection.tables().size(), 2u);
  EXPECT_NE(collection.tables()[0]->storage(), collection.tables()[1]->storage());  // dims 3 and 4
  EXPECT_EQ(collection.tables()[0]->optimizer_state().size(), 1u);
  EXPECT_EQ(group.GroupDims("g1"), (std::vector<int>{3, 3, 2}));
  EXPECT_EQ(group.GroupTotalDim("g2"), 4);
  // Inference tables carry no optimizer state and cannot train.
  EmbeddingCollection inference;
  make(config.model_config(), &inference);
  inference.Materialize({});
  EXPECT_TRUE(inference.tables()[0]->optimizer_state().empty());
  EXPECT_EQ(inference.tables()[0]->storage()->row_width(), 3);
  auto bad = config.model_config();
  bad.mutable_feature_groups(0)->add_feature_names("c");
  EmbeddingCollection scratch;
  EXPECT_TZREC_ERROR(make(bad, &scratch), "embedding 's' is shared");
  bad = config.model_config();
  bad.mutable_feature_groups(1)->add_feature_names("d");
  EXPECT_TZREC_ERROR(make(bad, &scratch), "WIDE groups take sparse");
  bad = config.model_config();
  bad.mutable_feature_groups(0)->add_feature_names("zzz");
  EXPECT_TZREC_ERROR(make(bad, &scratch), "unknown feature 'zzz'");
  bad = config.model_config();
  bad.mutable_feature_groups(0)->set_group_type(protos::SEQUENCE);
  EXPECT_TZREC_ERROR(make(bad, &scratch),
                     "model_config.feature_groups[0]: sequence group 'g1' has no sequence feature");
}

}  // namespace
}  // namespace tzrec
