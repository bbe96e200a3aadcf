// Retrieval models on hand-made batches: the sampled-negative similarity against a loop over
// its definition (hard-negative block included), DSSM's predictions, loss and recall names for
// sampled and in-batch negatives, and config errors.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>

#include "model_test_util.h"
#include "test_util.h"
#include "tzrec/modules/match_tower.h"
#include "tzrec/serving/exported_model.h"

namespace tzrec {
namespace {

TEST(MatchSimilarity, SampledAndHardNegativesMatchTheirDefinition) {
  at::manual_seed(3);
  const int64_t b = 4, n = 3, d = 5;
  at::Tensor user = at::randn({b, d});
  // Hard negatives: row 1 slots 0 and 1, row 3 slot 0.
  std::vector<int64_t> hard_pairs = {1, 0, 1, 1, 3, 0};
  at::Tensor hard = at::tensor(hard_pairs, at::kLong).view({3, 2});
  at::Tensor item = at::randn({b + n + 3, d});
  for (bool with_hard : {false, true}) {
    SCOPED_TRACE(with_hard);
    at::Tensor items = with_hard ? item : item.slice(0, 0, b + n);
    at::Tensor sim = SimilarityWithSampled(user, items, with_hard ? hard : at::Tensor());
    ASSERT_EQ(sim.size(0), b);
    ASSERT_EQ(sim.size(1), 1 + n + (with_hard ? 2 : 0));
    auto dot = [&](int64_t u, int64_t i) { return (user[u] * item[i]).sum().item<float>(); };
    for (int64_t u = 0; u < b; ++u) {
      EXPECT_NEAR(sim[u][0].item<float>(), dot(u, u), 1e-5);
      for (int64_t j = 0; j < n; ++j) EXPECT_NEAR(sim[u][1 + j].item<float>(), dot(u, b + j), 1e-5);
      if (!with_hard) continue;
      for (int64_t slot = 0; slot < 2; ++slot) {
        float expected = -1e32f;
        for (int64_t h = 0; h < 3; ++h) {
          if (hard_pairs[2 * h] == u && hard_pairs[2 * h + 1] == slot) expected = dot(u, b + n + h);
        }
        EXPECT_NEAR(sim[u][1 + n + slot].item<float>(), expected, std::fabs(expected) * 1e-6 + 1e-5);
      }
    }
  }
}

constexpr char kDssmConfig[] = R"(
  data_config { batch_size: 4 label_fields: "clk"
    negative_sampler { input_path: "unused" num_sample: 3 attr_fields: ["item_id", "cate"]
                       item_id_field: "item_id" } }
  feature_configs { id_feature { feature_name: "user_id" num_buckets: 50 embedding_dim: 8 } }
  feature_configs { id_feature { feature_name: "item_id" num_buckets: 50 embedding_dim: 8 } }
  feature_configs { id_feature { feature_name: "cate" num_buckets: 10 embedding_dim: 8 } }
  model_config {
    feature_groups { group_name: "user" feature_names: "user_id" group_type: DEEP }
    feature_groups { group_name: "item" feature_names: ["item_id", "cate"] group_type: DEEP }
    dssm { user_tower { input: "user" mlp { hidden_units: [16] } }
           item_tower { input: "item" mlp { hidden_units: [16] } }
           output_dim: 6 temperature: 0.5 IN_BATCH }
    metrics { recall_at_k { top_k: 1 } }
    metrics { recall_at_k { top_k: 2 } }
    losses { softmax_cross_entropy {} }
  }
)";

std::string DssmConfig(const std::string& extra) {
  std::string text = kDssmConfig;
  return text.replace(text.find("IN_BATCH"), 8, extra);
}

// B = 2 rows, N = 3 sampled items (__NEG__), plus `hard` rows and indices.
Batch SampledBatch(const std::vector<int32_t>& hard_indices = {}) {
  ParsedBatch parsed;
  parsed.size = 2;
  parsed.sparse["user_id"] = {{7, 8}, {1, 1}};
  const int64_t rows = 2 + 3 + static_cast<int64_t>(hard_indices.size() / 2);
  SparseValues items, cates;
  for (int64_t r = 0; r < rows; ++r) {
    items.values.push_back(10 + r);
    items.lengths.push_back(1);
    cates.values.push_back(r % 10);
    cates.lengths.push_back(1);
  }
  parsed.sparse["item_id"] = items;
  parsed.sparse["cate"] = cates;
  parsed.labels["clk"] = {1, 1};
  parsed.sampled_rows = rows - 2;
  parsed.sampled_group = "__NEG__";
  parsed.sampled_features = {"item_id", "cate"};
  parsed.hard_neg_indices = hard_indices;
  return ToBatch(std::move(parsed));
}

TEST(DSSM, SampledNegativesPutThePositiveFirst) {
  auto pipeline = testing::BuildTestPipeline(DssmConfig(""));
  Model& model = *pipeline->model;
  Batch batch = SampledBatch();
  EXPECT_EQ(batch.group("__NEG__").size, 5);
  Predictions predictions = model.Predict(batch);
  ASSERT_EQ(predictions.size(), 1u);
  const at::Tensor& sim = predictions.at("similarity");
  ASSERT_EQ(sim.sizes(), (std::vector<int64_t>{2, 4}));
  NamedLosses losses = model.ComputeLosses(predictions, batch);
  ASSERT_EQ(losses.size(), 1u);
  EXPECT_EQ(losses[0].first, "softmax_cross_entropy");
  // Cross entropy against column 0.
  const double expected = -at::log_softmax(sim, 1).select(1, 0).mean().item<double>();
  EXPECT_NEAR(losses[0].second.item<double>(), expected, 1e-5);
  model.UpdateMetrics(predictions, batch, losses);
  auto metrics = model.ComputeMetrics(nullptr);
  ASSERT_TRUE(metrics.count("recall@1") && metrics.count("recall@2"));
  double hits1 = 0, hits2 = 0;
  for (int64_t r = 0; r < 2; ++r) {
    int64_t above = 0;
    for (int64_t c = 1; c < 4; ++c) above += sim[r][c].item<float>() > sim[r][0].item<float>();
    hits1 += above < 1;
    hits2 += above < 2;
  }
  EXPECT_DOUBLE_EQ(metrics.at("recall@1"), hits1 / 2);
  EXPECT_DOUBLE_EQ(metrics.at("recall@2"), hits2 / 2);
  // Training: the loss reaches every tower's weights.
  model.train();
  losses[0].second.backward();
  int with_grad = 0;
  for (const auto& p : model.named_parameters()) with_grad += p.value().grad().defined();
  EXPECT_GT(with_grad, 4);

  // Hard negatives widen the similarity by the largest slot + 1.
  Batch hard = SampledBatch({1, 0, 1, 1, 0, 0});
  const at::Tensor hard_sim = model.Predict(hard).at("similarity");
  ASSERT_EQ(hard_sim.sizes(), (std::vector<int64_t>{2, 6}));
  EXPECT_LT(hard_sim[0][5].item<float>(), -1e30);  // row 0 has no slot 1
}

TEST(DSSM, InBatchNegativesPutThePositiveOnTheDiagonal) {
  auto pipeline = testing::BuildTestPipeline(DssmConfig("in_batch_negative: true"));
  Model& model = *pipeline->model;
  Batch batch = SampledBatch();
  Predictions predictions = model.Predict(batch);
  const at::Tensor& sim = predictions.at("similarity");
  ASSERT_EQ(sim.sizes(), (std::vector<int64_t>{2, 5}));
  NamedLosses losses = model.ComputeLosses(predictions, batch);
  const at::Tensor log_p = at::log_softmax(sim, 1);
  const double expected = -(log_p[0][0] + log_p[1][1]).item<double>() / 2;
  EXPECT_NEAR(losses[0].second.item<double>(), expected, 1e-5);
}

// Each tower scored alone (what the user/ and item/ exports will run) gives the embeddings the
// whole model's similarity is made of; a batch needs only that tower's features.
TEST(DSSM, TowersScoreAlone) {
  auto pipeline = testing::BuildTestPipeline(DssmConfig("in_batch_negative: true"));
  Model& model = *pipeline->model;
  model.eval();
  EXPECT_EQ(model.TowerNames(), (std::vector<std::string>{"user", "item"}));
  ASSERT_EQ(model.TowerFeatures("item").size(), 2u);
  EXPECT_EQ(model.TowerFeatures("user")[0]->name(), "user_id");
  ParsedBatch both;
  both.size = 3;
  both.sparse["user_id"] = {{7, 8, 9}, {1, 1, 1}};
  both.sparse["item_id"] = {{10, 11, 12}, {1, 1, 1}};
  both.sparse["cate"] = {{1, 2}, {1, 0, 1}};
  both.labels["clk"] = {1, 1, 1};
  both.sampled_group = "__NEG__";
  both.sampled_features = {"item_id", "cate"};
  ParsedBatch users = both, items = both;
  users.sparse.erase("item_id");
  users.sparse.erase("cate");
  users.sampled_features.clear();
  items.sparse.erase("user_id");
  const at::Tensor sim = model.Predict(ToBatch(std::move(both))).at("similarity");

  model.SetTower("user");
  const Predictions user = model.Predict(ToBatch(std::move(users)));
  ASSERT_EQ(user.size(), 1u);
  const at::Tensor& u = user.at("user_tower_emb");
  ASSERT_EQ(u.sizes(), (std::vector<int64_t>{3, 6}));
  model.SetTower("item");
  const at::Tensor i = model.Predict(ToBatch(std::move(items))).at("item_tower_emb");
  EXPECT_TRUE(at::allclose(at::mm(u, i.t()) / 0.5, sim, 1e-5, 1e-6));
  model.SetTower("");
  EXPECT_TZREC_ERROR(model.SetTower("query"), "model has no tower 'query' (towers: user, item)");
}

// An exported tower is built alone: its config keeps only the tower's feature configs, the
// model only that tower's weights and tables, and with the whole model's weights it computes
// the whole model's tower embedding. It cannot be switched to the other tower or the whole.
TEST(DSSM, ATowerBuiltAloneHasOnlyItsFeaturesTablesAndWeights) {
  auto whole = testing::BuildTestPipeline(DssmConfig(""), /*training=*/false);
  const protos::EasyRecConfig user_config = TowerExportConfig(whole->config, "user");
  ASSERT_EQ(user_config.feature_configs_size(), 1);
  EXPECT_EQ(user_config.feature_configs(0).id_feature().feature_name(), "user_id");
  EXPECT_EQ(TowerExportConfig(whole->config, "item").feature_configs_size(), 2);
  EXPECT_TZREC_ERROR(TowerExportConfig(whole->config, "query"), "no tower 'query'");

  auto tower = BuildFeatures(user_config, PipelineMode::kPredict);
  tower->tower = "user";
  BuildModel(tower.get(), nullptr);
  Model& alone = *tower->model;
  EXPECT_TRUE(alone.tower_only());
  EXPECT_TRUE(alone.is_match_model());
  EXPECT_EQ(alone.OutputShapes(), (std::map<std::string, std::vector<int64_t>>{{"user_tower_emb", {6}}}));
  int params = 0;
  for (const auto& p : alone.named_parameters()) {
    EXPECT_EQ(p.key().rfind("user_tower.", 0), 0u) << p.key();
    ++params;
  }
  EXPECT_GT(params, 0);
  std::map<std::string, std::map<std::string, at::Tensor>> tables;
  whole->model->embedding_collection().VisitTableStates(
      false, [&](const std::string& table, const std::map<std::string, at::Tensor>& state) {
        tables[table]["weight"] = state.at("weight").clone();
      });
  std::vector<std::string> missing;
  ASSERT_EQ(alone.embedding_collection().RestoreTables(tables, false, "test",
                                                       [&](const std::string& what) { missing.push_back(what); }),
            1);
  EXPECT_TRUE(missing.empty());
  {
    c10::NoGradGuard no_grad;
    auto whole_params = whole->model->named_parameters();
    for (auto& p : alone.named_parameters()) p.value().copy_(whole_params[p.key()]);
  }
  alone.eval();
  whole->model->eval();
  whole->model->SetTower("user");
  ParsedBatch users;
  users.size = 3;
  users.sparse["user_id"] = {{7, 8, 9}, {1, 1, 1}};
  ParsedBatch copy = users;
  const at::Tensor expected = whole->model->Predict(ToBatch(std::move(users))).at("user_tower_emb");
  const at::Tensor got = alone.Predict(ToBatch(std::move(copy))).at("user_tower_emb");
  EXPECT_TRUE(at::equal(got, expected));
  EXPECT_TZREC_ERROR(alone.SetTower(""), "built as its 'user' tower alone");
  EXPECT_TZREC_ERROR(alone.SetTower("item"), "built as its 'user' tower alone");
  tower->mode = PipelineMode::kTrain;
  EXPECT_TZREC_ERROR(BuildModel(tower.get(), nullptr), "trained whole, not as its tower 'user'");
}

constexpr char kDatConfig[] = R"(
  data_config { batch_size: 4 label_fields: "clk" SAMPLE_WEIGHT
    negative_sampler { input_path: "unused" num_sample: 3 attr_fields: ["item_id", "cate"]
                       item_id_field: "item_id" } }
  feature_configs { id_feature { feature_name: "user_id" num_buckets: 50 embedding_dim: 6 } }
  feature_configs { id_feature { feature_name: "item_id" num_buckets: 50 embedding_dim: 6 } }
  feature_configs { id_feature { feature_name: "cate" num_buckets: 10 embedding_dim: 8 } }
  model_config {
    feature_groups { group_name: "user" feature_names: "user_id" group_type: DEEP }
    feature_groups { group_name: "item" feature_names: ["item_id", "cate"] group_type: DEEP }
    feature_groups { group_name: "user_augment" feature_names: "user_id" group_type: DEEP }
    feature_groups { group_name: "item_augment" feature_names: "item_id" group_type: DEEP }
    dat { user_tower { input: "user" augment_input: "user_augment" mlp { hidden_units: [16] } }
          item_tower { input: "item" augment_input: "item_augment" mlp { hidden_units: [16] } }
          output_dim: 6 temperature: 0.5 amm_u_weight: 0.25 amm_i_weight: 2.0 similarity: COSINE }
    metrics { recall_at_k { top_k: 1 } }
    losses { softmax_cross_entropy {} }
  }
)";

std::string DatConfig(const std::string& sample_weight) {
  std::string text = kDatConfig;
  return text.replace(text.find("SAMPLE_WEIGHT"), 13, sample_weight);
}

// DAT: the towers read their group and augmented vector together; training adds the AMM losses,
// TorchEasyRec's formula (summed over the batch, or weighted per row), whose gradients reach the
// augmented vectors but neither tower (the other tower's output is detached); evaluation has
// only the task loss.
TEST(DAT, AmmLossesPullTheAugmentedVectorsTowardsTheOtherTower) {
  for (const bool weighted : {false, true}) {
    SCOPED_TRACE(weighted);
    auto pipeline = testing::BuildTestPipeline(DatConfig(weighted ? "sample_weight_fields: \"w\"" : ""));
    Model& model = *pipeline->model;
    model.train();
    Batch batch = SampledBatch();
    if (weighted) batch.sample_weights["w"] = at::tensor({1.0f, 3.0f});
    const Predictions predictions = model.Predict(batch);
    ASSERT_TRUE(predictions.count("user_augment"));
    const at::Tensor& user_augment = predictions.at("user_augment");
    const at::Tensor& item_augment = predictions.at("item_augment");
    ASSERT_EQ(user_augment.sizes(), (std::vector<int64_t>{2, 6}));
    ASSERT_EQ(item_augment.sizes(), (std::vector<int64_t>{2, 6}));  // the positives' rows only
    const at::Tensor user = predictions.at("user_tower_emb"), item = predictions.at("item_tower_emb");
    EXPECT_FALSE(user.requires_grad());
    NamedLosses losses = model.ComputeLosses(predictions, batch);
    ASSERT_EQ(losses.size(), 3u);
    EXPECT_EQ(losses[1].first, "amm_loss_u");
    EXPECT_EQ(losses[2].first, "amm_loss_i");
    auto expected = [&](const at::Tensor& augment, const at::Tensor& target, double w) {
      const at::Tensor n = augment.detach() / augment.detach().norm(2, {1}, true);
      const at::Tensor rows = ((n - target) * (n - target)).sum({1}) * w;
      if (!weighted) return rows.sum().item<double>();
      const at::Tensor sw = at::tensor({1.0f, 3.0f});
      return ((rows * sw).mean() / sw.mean()).item<double>();
    };
    EXPECT_NEAR(losses[1].second.item<double>(), expected(user_augment, item, 0.25), 1e-5);
    EXPECT_NEAR(losses[2].second.item<double>(), expected(item_augment, user, 2.0), 1e-5);
    // The AMM loss reaches no tower weight.
    losses[1].second.backward({}, /*retain_graph=*/true);
    losses[2].second.backward();
    for (const auto& p : model.named_parameters()) {
      EXPECT_TRUE(!p.value().grad().defined() || p.value().grad().abs().sum().item<double>() == 0) << p.key();
    }
    model.eval();
    EXPECT_EQ(model.ComputeLosses(model.Predict(batch), batch).size(), 1u);
  }
  std::string narrow = DatConfig("");
  narrow.replace(narrow.find("output_dim: 6"), 13, "output_dim: 4");
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(narrow), "must be as wide as the towers' outputs (4, 4; output_dim)");
}

TEST(DSSM, ConfigErrors) {
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(DssmConfig("similarity: EUCLID")),
                     "model_config.dssm.similarity: EUCLID");
  std::string two_losses = DssmConfig("");
  two_losses.replace(two_losses.find("losses {"), 8, "losses { binary_cross_entropy {} } losses {");
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(two_losses), "exactly one loss, softmax_cross_entropy");
  std::string auc = DssmConfig("");
  auc.replace(auc.find("metrics { recall_at_k { top_k: 2 } }"), 37, "metrics { auc {} }");
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(auc), "reads the prediction 'probs'");
  // A user feature that reads a sampler attribute would have the sampled rows too.
  std::string user_attr = DssmConfig("");
  user_attr.replace(user_attr.find("feature_names: \"user_id\""), 24, "feature_names: \"cate\"");
  user_attr.replace(user_attr.find("feature_names: [\"item_id\", \"cate\"]"), 35, "feature_names: \"item_id\"");
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(user_attr), "feature 'cate' of group 'user' reads a negative sampler attr_field");
  // A group's features must have the same rows.
  std::string mixed = DssmConfig("");
  mixed.replace(mixed.find("feature_names: \"user_id\""), 24, "feature_names: [\"user_id\", \"cate\"]");
  mixed.replace(mixed.find("feature_names: [\"item_id\", \"cate\"]"), 35, "feature_names: \"item_id\"");
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(mixed), "group 'user' mixes data groups");
  // Without a sampler and without in-batch negatives there is nothing to contrast.
  std::string no_sampler = DssmConfig("");
  const size_t begin = no_sampler.find("negative_sampler");
  no_sampler.erase(begin, no_sampler.find("} }", begin) + 1 - begin);
  auto pipeline = testing::BuildTestPipeline(no_sampler);
  testing::SimpleRows rows;
  rows.sparse["user_id"] = {{1}, {2}};
  rows.sparse["item_id"] = {{3}, {4}};
  rows.sparse["cate"] = {{1}, {2}};
  rows.labels["clk"] = {1, 0};
  EXPECT_TZREC_ERROR(pipeline->model->Predict(testing::MakeBatch(rows, 2)), "no negatives");
  // One embedding_name in both towers: two tables in TorchEasyRec's dssm; refused, not shared.
  std::string shared = DssmConfig("in_batch_negative: true");
  const size_t sampler = shared.find("negative_sampler");
  shared.erase(sampler, shared.find("} }", sampler) + 1 - sampler);
  for (const char* feature : {"\"user_id\" num_buckets: 50 embedding_dim: 8", "\"item_id\" num_buckets: 50 embedding_dim: 8"}) {
    const std::string f = feature;
    shared.replace(shared.find(f), f.size(), f + " embedding_name: \"id_emb\"");
  }
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(shared),
                     "item feature 'item_id' and user feature 'user_id' share the table 'id_emb'");
}

}  // namespace
}  // namespace tzrec
