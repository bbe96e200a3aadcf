// MIND on hand-made inputs: the capsule layer's dynamic routing against a loop over its
// definition (truncation, padding, capsule counts, masks), the user tower's interests and the
// label-aware attention against the whole model's similarity, and config errors.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <google/protobuf/text_format.h>

#include <cmath>
#include <limits>

#include "model_test_util.h"
#include "test_util.h"
#include "tzrec/config/supported_fields.h"
#include "tzrec/modules/capsule.h"

namespace tzrec {
namespace {

protos::B2ICapsule CapsuleConfig(const std::string& text) {
  protos::B2ICapsule config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &config)) << text;
  return config;
}

// The routing of one row, in double, straight from its definition (modules/capsule.h).
std::vector<std::vector<double>> ReferenceRouting(const protos::B2ICapsule& c, const at::Tensor& x /* [T, L] */,
                                                  int64_t length, const at::Tensor& bilinear /* [L, H] */,
                                                  const at::Tensor& init /* [S, K] */, std::vector<bool>* active) {
  const int64_t s_max = c.max_seq_len(), k_max = c.max_k(), low = x.size(1), high_dim = bilinear.size(1);
  const double n = c.const_caps_num() ? k_max : std::min<double>(k_max, std::max(1.0, std::log2(static_cast<double>(length))));
  active->assign(k_max, false);
  for (int64_t k = 0; k < k_max; ++k) (*active)[k] = k < n;
  auto in = [&](int64_t s, int64_t l) { return s < x.size(0) && s < length ? x[s][l].item<double>() : 0.0; };
  std::vector<std::vector<double>> u(s_max, std::vector<double>(high_dim)), u_dir = u;
  for (int64_t s = 0; s < s_max; ++s) {
    double norm = 0;
    for (int64_t h = 0; h < high_dim; ++h) {
      for (int64_t l = 0; l < low; ++l) u[s][h] += in(s, l) * bilinear[l][h].item<double>();
      norm += u[s][h] * u[s][h];
    }
    for (int64_t h = 0; h < high_dim; ++h) u_dir[s][h] = u[s][h] / std::max(std::sqrt(norm), 1e-12);
  }
  std::vector<std::vector<double>> logits(s_max, std::vector<double>(k_max));
  for (int64_t s = 0; s < s_max; ++s) {
    for (int64_t k = 0; k < k_max; ++k) logits[s][k] = init[s][k].item<double>() * c.routing_logits_stddev();
  }
  std::vector<std::vector<double>> v(k_max, std::vector<double>(high_dim));
  for (uint32_t iter = 0; iter < c.num_iters(); ++iter) {
    for (int64_t s = 0; s < s_max; ++s) {
      double top = -std::numeric_limits<double>::infinity(), sum = 0;
      for (int64_t k = 0; k < k_max; ++k) {
        if ((*active)[k]) top = std::max(top, logits[s][k] * c.routing_logits_scale());
      }
      for (int64_t k = 0; k < k_max; ++k) {
        logits[s][k] = (*active)[k] ? std::exp(logits[s][k] * c.routing_logits_scale() - top) : 0.0;
        sum += logits[s][k];
      }
      for (int64_t k = 0; k < k_max; ++k) logits[s][k] = s < length ? logits[s][k] / sum : 0.0;
    }
    for (int64_t k = 0; k < k_max; ++k) {
      for (int64_t h = 0; h < high_dim; ++h) {
        v[k][h] = 0;
        for (int64_t s = 0; s < s_max; ++s) v[k][h] += logits[s][k] * u[s][h];
      }
    }
    if (iter + 1 == c.num_iters()) break;
    for (int64_t s = 0; s < s_max; ++s) {
      for (int64_t k = 0; k < k_max; ++k) {
        for (int64_t h = 0; h < high_dim; ++h) logits[s][k] += v[k][h] * u_dir[s][h];
      }
    }
  }
  for (int64_t k = 0; k < k_max; ++k) {
    double norm = 0;
    for (double value : v[k]) norm += value * value;
    norm = std::max(std::sqrt(norm), 1e-7);
    const double scale = std::pow(norm * norm / (1 + norm * norm), c.squash_pow()) / norm;
    for (double& value : v[k]) value = (*active)[k] ? value * scale : 0.0;
  }
  return v;
}

TEST(Capsule, RoutingMatchesALoopOverItsDefinition) {
  for (const std::string text :
       {"max_k: 3 max_seq_len: 4 high_dim: 5 num_iters: 3 routing_logits_scale: 2 squash_pow: 0.5",
        "max_k: 3 max_seq_len: 4 high_dim: 5 num_iters: 1 const_caps_num: true",
        "max_k: 4 max_seq_len: 8 high_dim: 3 num_iters: 2 routing_logits_stddev: 0.5 squash_pow: 0.2"}) {
    SCOPED_TRACE(text);
    const protos::B2ICapsule config = CapsuleConfig(text);
    at::manual_seed(7);
    CapsuleLayer layer(config, 6, "capsule_config");
    layer->eval();
    const at::Tensor bilinear = layer->named_parameters()["bilinear_matrix"];
    const at::Tensor init = layer->named_buffers()["routing_logits"];
    // Lengths 0 (one capsule), 1, 3, 4 and 7 (past T and max_seq_len); T = 6 and T = 2.
    const std::vector<int64_t> lengths = {0, 1, 3, 4, 7};
    for (const int64_t steps : {6, 2}) {
      SCOPED_TRACE(steps);
      at::Tensor x = at::randn({5, steps, 6});
      for (int64_t b = 0; b < 5; ++b) {
        if (lengths[b] < steps) x[b].slice(0, lengths[b]).zero_();
      }
      const CapsuleOutput out = layer->forward(x, at::tensor(lengths));
      ASSERT_EQ(out.interests.sizes(), (std::vector<int64_t>{5, config.max_k(), config.high_dim()}));
      for (int64_t b = 0; b < 5; ++b) {
        std::vector<bool> active;
        const auto expected = ReferenceRouting(config, x[b], lengths[b], bilinear, init, &active);
        for (int64_t k = 0; k < config.max_k(); ++k) {
          EXPECT_EQ(out.mask[b][k].item<bool>(), active[k]) << b << "," << k;
          for (uint32_t h = 0; h < config.high_dim(); ++h) {
            EXPECT_NEAR(out.interests[b][k][h].item<double>(), expected[k][h], 2e-5 + 2e-5 * std::fabs(expected[k][h]))
                << b << "," << k << "," << h;
          }
        }
      }
    }
    // One capsule for short histories, up to max_k; a fractional log2 rounds up.
    const at::Tensor counts = layer->forward(at::zeros({4, 1, 6}), at::tensor(std::vector<int64_t>{0, 2, 5, 1000})).mask.sum(1);
    const std::vector<int64_t> want =
        config.const_caps_num() ? std::vector<int64_t>(4, config.max_k())
                                : std::vector<int64_t>{1, 1, std::min<int64_t>(3, config.max_k()), config.max_k()};
    for (int64_t b = 0; b < 4; ++b) EXPECT_EQ(counts[b].item<int64_t>(), want[b]) << b;
  }
}

// Training draws new routing logits every batch; evaluation uses the stored draw, so it repeats.
// The routing weights carry no gradient; the interests' does reach the bilinear map and inputs.
TEST(Capsule, EvaluationRepeatsTrainingDrawsAndGradientsFlow) {
  at::manual_seed(11);
  CapsuleLayer layer(CapsuleConfig("max_k: 3 max_seq_len: 5 high_dim: 4"), 6, "capsule_config");
  at::Tensor x = at::randn({3, 5, 6}).requires_grad_(true);
  const at::Tensor lengths = at::tensor(std::vector<int64_t>{5, 4, 5});
  layer->eval();
  EXPECT_TRUE(at::equal(layer->forward(x, lengths).interests, layer->forward(x, lengths).interests));
  layer->train();
  const CapsuleOutput a = layer->forward(x, lengths), b = layer->forward(x, lengths);
  EXPECT_FALSE(at::allclose(a.interests, b.interests));
  a.interests.sum().backward();
  EXPECT_GT(layer->named_parameters()["bilinear_matrix"].grad().abs().sum().item<double>(), 0);
  EXPECT_GT(x.grad().abs().sum().item<double>(), 0);
  EXPECT_TRUE(at::isfinite(x.grad()).all().item<bool>());
  // "zeros": every capsule starts alike, so the routing never tells them apart.
  CapsuleLayer zeros(CapsuleConfig("max_k: 3 max_seq_len: 5 high_dim: 4 const_caps_num: true routing_init_method: 'zeros'"), 6,
                     "capsule_config");
  const at::Tensor same = zeros->forward(x.detach(), lengths).interests;
  EXPECT_TRUE(at::allclose(same.select(1, 0), same.select(1, 2), 1e-5, 1e-6));
  EXPECT_TZREC_ERROR(CapsuleLayer(CapsuleConfig("max_k: 3 max_seq_len: 5 high_dim: 4 routing_init_method: 'uniform'"), 6,
                                  "model_config.mind.user_tower.capsule_config"),
                     "model_config.mind.user_tower.capsule_config.routing_init_method: 'uniform' (normal or zeros)");
  EXPECT_TZREC_ERROR(CapsuleLayer(CapsuleConfig("max_k: 0 max_seq_len: 5 high_dim: 4"), 6, "capsule_config"),
                     "capsule_config.max_k");
}

constexpr char kMindConfig[] = R"(
  data_config { batch_size: 4 label_fields: "clk" }
  feature_configs { id_feature { feature_name: "user_id" num_buckets: 50 embedding_dim: 8 } }
  feature_configs { id_feature { feature_name: "item_id" num_buckets: 50 embedding_dim: 8 } }
  feature_configs { sequence_feature { sequence_name: "click_seq" sequence_length: 10
    features { id_feature { feature_name: "item_id" num_buckets: 50 embedding_dim: 8 } } } }
  model_config {
    feature_groups { group_name: "user" feature_names: "user_id" group_type: DEEP }
    feature_groups { group_name: "item" feature_names: "item_id" group_type: DEEP }
    feature_groups { group_name: "hist" feature_names: "click_seq__item_id" group_type: SEQUENCE }
    mind {
      user_tower { input: "user" history_input: "hist" user_mlp { hidden_units: [12, 8] }
                   hist_seq_mlp { hidden_units: [8] }
                   capsule_config { max_k: 3 max_seq_len: 6 high_dim: 8 squash_pow: 0.5 }
                   concat_mlp { hidden_units: [16, 8] } }
      item_tower { input: "item" mlp { hidden_units: [16, 8] } }
      output_dim: 6 simi_pow: 5 temperature: 0.5 in_batch_negative: true EXTRA
    }
    metrics { recall_at_k { top_k: 1 } }
    losses { softmax_cross_entropy {} }
  }
)";

std::string MindConfig(const std::string& extra = "") {
  std::string text = kMindConfig;
  return text.replace(text.find("EXTRA"), 5, extra);
}

testing::SimpleRows MindRows() {
  testing::SimpleRows rows;
  rows.sparse["user_id"] = {{1}, {2}, {3}, {4}};
  rows.sparse["item_id"] = {{11}, {12}, {13}, {14}};
  rows.sequences["click_seq__item_id"] = {{{5}, {6}, {7}, {8}, {9}}, {}, {{21}}, {{3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}}};
  rows.labels["clk"] = {1, 1, 1, 1};
  return rows;
}

// The whole model's similarity is the label-aware attention of the user tower's interests
// (scored alone, as the exported user/ runs) with the item tower's embeddings.
TEST(MIND, LabelAwareAttentionOverTheTowersInterests) {
  for (const std::string similarity : {"similarity: COSINE", "similarity: INNER_PRODUCT"}) {
    SCOPED_TRACE(similarity);
    auto pipeline = testing::BuildTestPipeline(MindConfig(similarity));
    Model& model = *pipeline->model;
    model.eval();
    EXPECT_EQ(model.TowerFeatures("user").size(), 2u);
    const at::Tensor sim = model.Predict(testing::MakeBatch(MindRows(), 4)).at("similarity");
    ASSERT_EQ(sim.sizes(), (std::vector<int64_t>{4, 4}));
    model.SetTower("user");
    EXPECT_EQ(model.OutputShapes(), (std::map<std::string, std::vector<int64_t>>{{"user_tower_emb", {3, 6}}}));
    const at::Tensor interests = model.Predict(testing::MakeBatch(MindRows(), 4)).at("user_tower_emb");
    ASSERT_EQ(interests.sizes(), (std::vector<int64_t>{4, 3, 6}));
    model.SetTower("item");
    const at::Tensor items = model.Predict(testing::MakeBatch(MindRows(), 4)).at("item_tower_emb");
    model.SetTower("");
    // Active interests: 3 for 5 steps (log2 5 = 2.3 rounds up), 1 for 0 or 1 step, 3 for 8.
    const std::vector<int64_t> active = {3, 1, 1, 3};
    for (int64_t b = 0; b < 4; ++b) {
      std::vector<double> weights;
      for (int64_t k = 0; k < 3; ++k) {
        const double norm = interests[b][k].norm().item<double>();
        if (k >= active[b]) {
          EXPECT_EQ(norm, 0.0) << b << "," << k;
          continue;
        }
        if (similarity == "similarity: COSINE") EXPECT_NEAR(norm, 1.0, 1e-5);
        weights.push_back(std::exp(5 * (interests[b][k] * items[b]).sum().item<double>()));
      }
      double total = 0;
      for (double w : weights) total += w;
      at::Tensor user = at::zeros({6}, at::kDouble);
      for (size_t k = 0; k < weights.size(); ++k) user += weights[k] / total * interests[b][k].to(at::kDouble);
      for (int64_t i = 0; i < 4; ++i) {
        EXPECT_NEAR(sim[b][i].item<double>(), (user * items[i].to(at::kDouble)).sum().item<double>() / 0.5, 1e-4)
            << b << "," << i;
      }
    }
  }
}

TEST(MIND, TrainingReachesEveryTowerWeight) {
  auto pipeline = testing::BuildTestPipeline(MindConfig());
  Model& model = *pipeline->model;
  model.train();
  Batch batch = testing::MakeBatch(MindRows(), 4);
  const Predictions predictions = model.Predict(batch);
  NamedLosses losses = model.ComputeLosses(predictions, batch);
  ASSERT_EQ(losses.size(), 1u);
  losses[0].second.backward();
  for (const auto& p : model.named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_TRUE(at::isfinite(p.value().grad()).all().item<bool>()) << p.key();
    EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0) << p.key();
  }
  EXPECT_TRUE(model.named_parameters().contains("user_tower.capsule_layer.bilinear_matrix"));
  EXPECT_TRUE(model.named_buffers().contains("user_tower.capsule_layer.routing_logits"));
}

TEST(MIND, ConfigErrors) {
  std::string deep_history = MindConfig();
  deep_history.replace(deep_history.find("history_input: \"hist\""), 21, "history_input: \"user\"");
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(deep_history),
                     "model_config.mind.user_tower.history_input: 'user' is not a SEQUENCE feature group");
  std::string biased = MindConfig();
  biased.replace(biased.find("hist_seq_mlp { hidden_units: [8] }"), 34, "hist_seq_mlp { hidden_units: [8] bias: true }");
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(biased), "model_config.mind.user_tower.hist_seq_mlp.bias");
  std::string dropouts = MindConfig();
  dropouts.replace(dropouts.find("user_mlp { hidden_units: [12, 8] }"), 34,
                   "user_mlp { hidden_units: [12, 8] dropout_ratio: [0.1, 0.2] }");
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(dropouts), "model_config.mind.user_tower.user_mlp.dropout_ratio");
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(MindConfig("simi_pow: 0")), "model_config.mind.simi_pow must be");
  std::string combine = MindConfig();
  combine.replace(combine.find("history_input: \"hist\""), 21, "history_input: \"hist\" user_seq_combine: CONCAT");
  // TorchEasyRec reads no user_seq_combine (it always concatenates): set, it is rejected.
  EXPECT_TZREC_ERROR(CheckConfigSupported(ParsePipelineConfigText(combine, "test")),
                     "model_config.mind.user_tower.user_seq_combine: not supported yet");
  CheckConfigSupported(ParsePipelineConfigText(MindConfig(), "test"));
  std::string narrow = MindConfig();
  narrow.replace(narrow.find("output_dim: 6"), 13, "output_dim: 0");
  narrow.replace(narrow.find("concat_mlp { hidden_units: [16, 8] }"), 36, "concat_mlp { hidden_units: [16, 4] }");
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(narrow), "model_config.mind: the user interests are 4 wide and the item embedding 8");
}

}  // namespace
}  // namespace tzrec
