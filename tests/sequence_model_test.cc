// Sequence groups and encoders against hand computation: SEQUENCE group inputs (query,
// padded sequence, lengths) from the tables, separate sequence tables, nested sequence groups
// with encoders in DEEP groups, DIN / simple attention / pooling / multi-window DIN from their
// own parameters, Dice, and the models multi_tower and multi_tower_din.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model_test_util.h"
#include "tzrec/embedding/embedding_group.h"
#include "tzrec/modules/mlp.h"
#include "tzrec/modules/sequence_encoder.h"
#include "tzrec/serving/scripted_model.h"

namespace tzrec {
namespace {

using testing::BuildTestPipeline;
using testing::MakeBatch;
using testing::SimpleRows;

const char kFeatures[] = R"(
feature_configs { id_feature { feature_name: "user" num_buckets: 50 embedding_dim: 4 } }
feature_configs { id_feature { feature_name: "item" num_buckets: 30 embedding_dim: 4 } }
feature_configs { id_feature { feature_name: "cate" num_buckets: 10 embedding_dim: 2 } }
feature_configs { raw_feature { feature_name: "price" } }
feature_configs { sequence_feature {
  sequence_name: "click" sequence_length: 10 sequence_delim: "|"
  features { id_feature { feature_name: "item" num_buckets: 30 embedding_dim: 4 } }
  features { id_feature { feature_name: "cate" num_buckets: 10 embedding_dim: 2 } }
  features { raw_feature { feature_name: "price" } }
} }
data_config { batch_size: 4 label_fields: "clk" }
)";

// Four rows: histories of 2, 0, 3 and 1 steps; the second step of row 0 has two item ids
// (pooled with sum), row 2's last step no cate.
SimpleRows Rows() {
  SimpleRows rows;
  rows.sparse["user"] = {{1}, {2}, {3}, {4}};
  rows.sparse["item"] = {{5}, {6}, {7}, {8}};
  rows.sparse["cate"] = {{1}, {2}, {3}, {4}};
  rows.dense["price"] = {{0.5f}, {1.5f}, {2.5f}, {3.5f}};
  rows.sequences["click__item"] = {{{5}, {9, 10}}, {}, {{1}, {2}, {3}}, {{8}}};
  rows.sequences["click__cate"] = {{{1}, {2}}, {}, {{3}, {4}, {}}, {{4}}};
  rows.dense_sequences["click__price"] = {{{0.1f}, {0.2f}}, {}, {{0.3f}, {0.4f}, {0.5f}}, {{0.6f}}};
  rows.labels["clk"] = {1, 0, 1, 0};
  return rows;
}

const EmbeddingTable* Table(const EmbeddingCollection& collection, const std::string& name) {
  for (const EmbeddingTable* t : collection.tables()) {
    if (t->name() == name) return t;
  }
  ADD_FAILURE() << "no table " << name;
  return nullptr;
}


// The inputs of a sequence group equal the rows of its own tables, placed by hand.
TEST(SequenceGroup, QuerySequenceAndLengthsFromSeparateTables) {
  const std::string config = std::string(kFeatures) + R"(
model_config {
  feature_groups { group_name: "deep" feature_names: ["user", "item"] group_type: DEEP }
  feature_groups { group_name: "seq" group_type: SEQUENCE
    feature_names: ["item", "cate", "price", "click__item", "click__cate", "click__price"] }
  multi_tower_din {
    towers { input: "deep" mlp { hidden_units: [4] } }
    din_towers { input: "seq" attn_mlp { hidden_units: [3] } }
    final { hidden_units: [2] }
  }
  metrics { auc {} }
  losses { binary_cross_entropy {} }
})";
  auto pipeline = BuildTestPipeline(config, /*training=*/false);
  // The model's own tables: pooled "item_emb" and the sequence group's "item_emb.seq" differ.
  EXPECT_NE(Table(pipeline->model->embedding_collection(), "item_emb"), nullptr);
  EXPECT_NE(Table(pipeline->model->embedding_collection(), "item_emb.seq"), nullptr);

  EmbeddingCollection collection;
  EmbeddingGroup view(&collection, pipeline->FeaturePointers(),
                      pipeline->config.model_config().feature_groups(), {});
  collection.Materialize({});
  const EmbeddingTable* pooled_item = Table(collection, "item_emb");
  const EmbeddingTable* item = Table(collection, "item_emb.seq");
  const EmbeddingTable* cate = Table(collection, "cate_emb.seq");
  const EmbeddingTable* click_item = Table(collection, "click__item_emb.seq");
  const EmbeddingTable* click_cate = Table(collection, "click__cate_emb.seq");
  ASSERT_TRUE(pooled_item && item && cate && click_item && click_cate);
  EXPECT_EQ(collection.tables().size(), 6u);  // user, item pooled; 4 sequence tables
  EXPECT_EQ(view.QueryDim("seq"), 4 + 2 + 1);
  EXPECT_EQ(view.SequenceDim("seq"), 4 + 2 + 1);
  Batch batch = MakeBatch(Rows(), 4);
  auto inputs = view.Forward(collection.Lookup(batch, false), batch);
  at::Tensor query = inputs.at("seq.query"), sequence = inputs.at("seq.sequence");
  ASSERT_EQ(query.sizes(), (std::vector<int64_t>{4, 7}));
  ASSERT_EQ(sequence.sizes(), (std::vector<int64_t>{4, 3, 7}));
  EXPECT_TRUE(torch::equal(inputs.at("seq.sequence_length"), torch::tensor({2, 0, 3, 1}, torch::kLong)));
  auto expect_step = [&](int row, int step, std::vector<int64_t> items, std::vector<int64_t> cates, float price) {
    at::Tensor want = torch::zeros({7});
    for (int64_t i : items) want.narrow(0, 0, 4) += click_item->weight()[i];
    for (int64_t c : cates) want.narrow(0, 4, 2) += click_cate->weight()[c];
    want[6] = price;
    EXPECT_TRUE(torch::allclose(sequence[row][step], want)) << "row " << row << " step " << step;
  };
  expect_step(0, 0, {5}, {1}, 0.1f);
  expect_step(0, 1, {9, 10}, {2}, 0.2f);
  expect_step(2, 2, {3}, {}, 0.5f);
  expect_step(3, 0, {8}, {4}, 0.6f);
  EXPECT_TRUE(torch::equal(sequence[1], torch::zeros({3, 7})));  // no history: all padding
  EXPECT_TRUE(torch::equal(sequence[3][1], torch::zeros({7})));
  at::Tensor want_query = torch::cat({item->weight()[7], cate->weight()[3], torch::tensor({2.5f})});
  EXPECT_TRUE(torch::allclose(query[2], want_query));
  // The DEEP group still reads the pooled table.
  EXPECT_TRUE(torch::allclose(inputs.at("deep")[1].narrow(0, 4, 4), pooled_item->weight()[6]));
}

TEST(SequenceGroup, ConfigErrorsNameTheField) {
  auto build = [](const std::string& groups, const std::string& model = "") {
    return std::string(kFeatures) + "model_config { " + groups +
           (model.empty() ? " multi_tower { towers { input: \"deep\" mlp { hidden_units: [2] } } final { hidden_units: [2] } }"
                          : model) +
           " metrics { auc {} } losses { binary_cross_entropy {} } }";
  };
  const std::string deep = "feature_groups { group_name: \"deep\" feature_names: [\"user\"] group_type: DEEP ";
  auto expect_error = [](const std::string& config, const std::string& message) {
    try {
      BuildTestPipeline(config, false);
      ADD_FAILURE() << "no error, expected: " << message;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  // A sequence feature in a DEEP group.
  expect_error(build("feature_groups { group_name: \"deep\" feature_names: [\"click__item\"] }"),
               "model_config.feature_groups[0]: sequence feature 'click__item' in a DEEP group");
  // A nested sequence group without encoder, and an encoder of an unknown group.
  expect_error(build(deep + "sequence_groups { feature_names: [\"item\", \"click__item\"] } }"),
               "sequence group 'deep' has no sequence_encoders entry");
  expect_error(build(deep + "sequence_groups { feature_names: [\"item\", \"click__item\"] } "
                            "sequence_encoders { pooling_encoder { input: \"other\" } } }"),
               "model_config.feature_groups[0].sequence_encoders[0].input: 'other' is not one of");
  // A query wider than the sequence.
  expect_error(build(deep + "sequence_groups { feature_names: [\"item\", \"user\", \"click__item\"] } "
                            "sequence_encoders { din_encoder { input: \"deep\" attn_mlp { hidden_units: [2] } } } }"),
               "sequence_encoders[0].din_encoder: the query features are 8 wide but the sequence features only 4");
  // A SEQUENCE group without sequence features.
  expect_error(build(deep + "} feature_groups { group_name: \"s\" feature_names: [\"item\"] group_type: SEQUENCE }"),
               "model_config.feature_groups[1]: sequence group 's' has no sequence feature");
  // pooled and sequence table names may not collide.
  expect_error(std::string(kFeatures) +
                   "feature_configs { id_feature { feature_name: \"x\" num_buckets: 30 embedding_dim: 4 "
                   "embedding_name: \"item_emb.seq\" } } model_config { feature_groups { group_name: \"deep\" "
                   "feature_names: [\"x\"] } feature_groups { group_name: \"s\" group_type: SEQUENCE feature_names: "
                   "[\"item\", \"click__item\"] } multi_tower_din { towers { input: \"deep\" } din_towers { input: \"s\" "
                   "attn_mlp { hidden_units: [2] } } final { hidden_units: [2] } } losses { binary_cross_entropy {} } }",
               "is used both by a pooled table and by a sequence group's table");
}

// DIN from its own parameters: MLP over [q, s, q - s, q * s] (query zero-padded), Linear(1),
// padded steps masked, softmax, weighted sum; and max_seq_length truncation.
TEST(SequenceEncoders, DinMatchesHandComputation) {
  torch::manual_seed(3);
  protos::MLP mlp;
  mlp.add_hidden_units(5);
  mlp.set_activation("Dice");
  auto din = MakeDinEncoder("g", 3, 4, mlp, 0, "test");
  din->eval();  // Dice's BatchNorm with running statistics: a per-row computation
  SequenceInputs in{torch::randn({3, 3}), torch::randn({3, 5, 4}), torch::tensor({2, 0, 5}, torch::kLong)};
  in.sequence[0].narrow(0, 2, 3).zero_();  // padding is zero
  in.sequence[1].zero_();
  at::Tensor out = din->Encode(in);
  auto params = din->named_parameters();
  auto buffers = din->named_buffers();
  at::Tensor w0 = params["mlp.mlp.0.perceptron.0.weight"], b0 = params["mlp.mlp.0.perceptron.0.bias"];
  at::Tensor alpha = params["mlp.mlp.0.perceptron.1.alpha"];
  at::Tensor bn_w = params["mlp.mlp.0.perceptron.1.bn.weight"], bn_b = params["mlp.mlp.0.perceptron.1.bn.bias"];
  at::Tensor mean = buffers["mlp.mlp.0.perceptron.1.bn.running_mean"], var = buffers["mlp.mlp.0.perceptron.1.bn.running_var"];
  at::Tensor lw = params["linear.weight"], lb = params["linear.bias"];
  for (int b = 0; b < 3; ++b) {
    at::Tensor q = torch::cat({in.query[b], torch::zeros({1})});
    std::vector<at::Tensor> scores;
    const int64_t length = in.lengths[b].item<int64_t>();
    for (int t = 0; t < 5; ++t) {
      at::Tensor s = in.sequence[b][t];
      at::Tensor h = torch::matmul(w0, torch::cat({q, s, q - s, q * s})) + b0;
      at::Tensor p = torch::sigmoid((h - mean) / torch::sqrt(var + 1e-5) * bn_w + bn_b);
      h = p * h + alpha * (1 - p) * h;
      at::Tensor score = (torch::matmul(lw, h) + lb).squeeze();
      scores.push_back(t < length ? score : torch::tensor(-2147483647.0f));
    }
    at::Tensor weights = torch::softmax(torch::stack(scores), 0);
    at::Tensor want = torch::matmul(weights.unsqueeze(0), in.sequence[b]).squeeze(0);
    EXPECT_TRUE(torch::allclose(out[b], want, 1e-5, 1e-6)) << b << out[b] << want;
  }
  EXPECT_TRUE(torch::equal(out[1], torch::zeros({4})));  // no history
  // max_seq_length 2 keeps the first two steps only.
  auto short_din = MakeDinEncoder("g", 3, 4, mlp, 2, "test");
  short_din->eval();
  for (auto& p : short_din->named_parameters()) p.value().data().copy_(params[p.key()]);
  for (auto& p : short_din->named_buffers()) p.value().copy_(buffers[p.key()]);
  SequenceInputs cut{in.query, in.sequence.narrow(1, 0, 2).clone(), torch::tensor({2, 0, 2}, torch::kLong)};
  EXPECT_TRUE(torch::allclose(short_din->Encode(in), din->Encode(cut)));
}

// The fast paths equal the plain attention MLP on the concatenation of every step: the split
// first layer (query part once per row) on the valid steps only (MLPs without batch
// statistics) or on every step (BatchNorm, Dice). Outputs and gradients of inputs (padded
// steps included) and parameters, for several MLP settings; an empty row and a full one.
TEST(SequenceEncoders, DinFastPathsMatchThePlainConcatenation) {
  for (const char* activation : {"nn.ReLU", "Dice", "", "nn.Sigmoid"}) {
    for (bool use_bn : {false, true}) {
      SCOPED_TRACE(::testing::Message() << activation << " bn " << use_bn);
      protos::MLP mlp;
      mlp.add_hidden_units(6);
      mlp.add_hidden_units(3);
      mlp.set_activation(activation);
      mlp.set_use_bn(use_bn);
      torch::manual_seed(8);
      auto din = MakeDinEncoder("g", 3, 5, mlp, 0, "test");
      at::Tensor query = torch::randn({4, 3}), sequence = torch::randn({4, 6, 5});
      at::Tensor lengths = torch::tensor({6, 0, 2, 1}, torch::kLong);
      std::vector<at::Tensor> outs, grads;
      std::vector<std::vector<at::Tensor>> param_grads;
      for (const char* fast : {"1", "0"}) {
        setenv("TZREC_FAST_DIN", fast, 1);
        for (auto& p : din->parameters()) p.mutable_grad() = at::Tensor();
        at::Tensor q = query.clone().requires_grad_(true), s = sequence.clone().requires_grad_(true);
        at::Tensor out = din->Encode({q, s, lengths});
        torch::manual_seed(1);
        (out * torch::randn_like(out)).sum().backward();
        outs.push_back(out.detach());
        grads.push_back(torch::cat({q.grad().flatten(), s.grad().flatten()}));
        std::vector<at::Tensor> pg;
        for (auto& p : din->parameters()) pg.push_back(p.grad().clone());
        param_grads.push_back(pg);
      }
      unsetenv("TZREC_FAST_DIN");
      EXPECT_TRUE(torch::allclose(outs[0], outs[1], 1e-5, 1e-6)) << (outs[0] - outs[1]).abs().max();
      EXPECT_TRUE(torch::allclose(grads[0], grads[1], 1e-4, 1e-5)) << (grads[0] - grads[1]).abs().max();
      for (size_t i = 0; i < param_grads[0].size(); ++i) {
        EXPECT_TRUE(torch::allclose(param_grads[0][i], param_grads[1][i], 1e-4, 1e-5)) << i;
      }
    }
  }
}

TEST(SequenceEncoders, PoolingSimpleAttentionAndMultiWindow) {
  torch::manual_seed(4);
  SequenceInputs in{torch::randn({2, 3}), torch::randn({2, 4, 3}), torch::tensor({3, 0}, torch::kLong)};
  in.sequence[0][3].zero_();
  in.sequence[1].zero_();
  protos::SeqEncoderConfig config;
  SequenceEncoderContext context{&config, 3, 3, "enc"};
  config.mutable_pooling_encoder()->set_input("g");
  config.mutable_pooling_encoder()->set_pooling_type("mean");
  at::Tensor mean = CreateSequenceEncoder(context)->Encode(in);
  EXPECT_TRUE(torch::allclose(mean[0], in.sequence[0].narrow(0, 0, 3).mean(0)));
  EXPECT_TRUE(torch::equal(mean[1], torch::zeros({3})));
  config.mutable_pooling_encoder()->set_pooling_type("sum");
  EXPECT_TRUE(torch::allclose(CreateSequenceEncoder(context)->Encode(in)[0], in.sequence[0].sum(0)));
  config.mutable_pooling_encoder()->set_pooling_type("max");
  EXPECT_THROW(CreateSequenceEncoder(context), std::exception);

  config.mutable_simple_attention()->set_input("g");
  at::Tensor attended = CreateSequenceEncoder(context)->Encode(in);
  at::Tensor w = torch::softmax(torch::matmul(in.sequence[0].narrow(0, 0, 3), in.query[0]), 0);
  EXPECT_TRUE(torch::allclose(attended[0], torch::matmul(w, in.sequence[0].narrow(0, 0, 3)), 1e-5, 1e-6));

  auto* window = config.mutable_multi_window_din_encoder();
  window->set_input("g");
  window->add_windows_len(1);
  window->add_windows_len(3);
  window->mutable_attn_mlp()->add_hidden_units(2);
  auto encoder = CreateSequenceEncoder(context);
  EXPECT_EQ(encoder->output_dim(), 9);
  at::Tensor out = encoder->Encode(in);
  auto params = encoder->named_parameters();
  auto weight_of = [&](int b, int t) {
    at::Tensor q = in.query[b], s = in.sequence[b][t];
    at::Tensor h = torch::relu(torch::matmul(params["mlp.mlp.0.perceptron.0.weight"], torch::cat({s, q * s, q})) +
                               params["mlp.mlp.0.perceptron.0.bias"]);
    at::Tensor y = torch::matmul(params["linear.weight"], h) + params["linear.bias"];
    return torch::prelu(y, params["active.weight"]);
  };
  // Row 0: window 1 = step 0 / 1; window 2 = steps 1..2 / 2 valid steps; then the query.
  at::Tensor first = weight_of(0, 0) * in.sequence[0][0];
  at::Tensor second = (weight_of(0, 1) * in.sequence[0][1] + weight_of(0, 2) * in.sequence[0][2]) / 2;
  EXPECT_TRUE(torch::allclose(out[0], torch::cat({first, second, in.query[0]}), 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(out[1], torch::cat({torch::zeros({6}), in.query[1]})));
}

// Self-attention: Q/K/V Linear, then multi-head attention with its in- and out-projections
// (padded keys masked), mean over the valid steps; recomputed head by head from the parameters.
TEST(SequenceEncoders, SelfAttentionMatchesHandComputation) {
  torch::manual_seed(6);
  protos::SeqEncoderConfig config;
  auto* self = config.mutable_self_attention_encoder();
  self->set_input("g");
  self->set_multihead_attn_dim(4);
  self->set_num_heads(2);
  SequenceEncoderContext context{&config, 3, 3, "enc"};
  auto encoder = CreateSequenceEncoder(context);
  ASSERT_EQ(encoder->output_dim(), 4);
  SequenceInputs in{torch::randn({3, 3}), torch::randn({3, 4, 3}), torch::tensor({3, 0, 4}, torch::kLong)};
  at::Tensor out = encoder->Encode(in);
  auto p = encoder->named_parameters();
  at::Tensor in_w = p["multihead_attn.in_proj_weight"], in_b = p["multihead_attn.in_proj_bias"];
  at::Tensor out_w = p["multihead_attn.out_proj.weight"], out_b = p["multihead_attn.out_proj.bias"];
  for (int b : {0, 2}) {
    const int64_t n = in.lengths[b].item<int64_t>();
    at::Tensor s = in.sequence[b];  // [T, 3]
    at::Tensor q = torch::matmul(torch::matmul(s, p["q.weight"].t()) + p["q.bias"], in_w.narrow(0, 0, 4).t()) + in_b.narrow(0, 0, 4);
    at::Tensor k = torch::matmul(torch::matmul(s, p["k.weight"].t()) + p["k.bias"], in_w.narrow(0, 4, 4).t()) + in_b.narrow(0, 4, 4);
    at::Tensor v = torch::matmul(torch::matmul(s, p["v.weight"].t()) + p["v.bias"], in_w.narrow(0, 8, 4).t()) + in_b.narrow(0, 8, 4);
    std::vector<at::Tensor> heads;
    for (int h = 0; h < 2; ++h) {
      at::Tensor qh = q.narrow(1, 2 * h, 2), kh = k.narrow(1, 2 * h, 2).narrow(0, 0, n), vh = v.narrow(1, 2 * h, 2).narrow(0, 0, n);
      at::Tensor w = torch::softmax(torch::matmul(qh, kh.t()) / std::sqrt(2.0), 1);
      heads.push_back(torch::matmul(w, vh));
    }
    at::Tensor o = torch::matmul(torch::cat(heads, 1), out_w.t()) + out_b;  // [T, 4]
    EXPECT_TRUE(torch::allclose(out[b], o.narrow(0, 0, n).mean(0), 1e-5, 1e-6)) << b;
  }
  EXPECT_TRUE(torch::equal(out[1], torch::zeros({4})));
  self->set_num_heads(3);
  EXPECT_THROW(CreateSequenceEncoder(context), std::exception);
}

// The models train end to end on a small batch (loss falls), and a DEEP group's nested
// sequence group feeds its encoder's output into the tower.
TEST(SequenceModels, MultiTowerDinAndNestedEncodersTrain) {
  const std::string nested = std::string(kFeatures) + R"(
model_config {
  feature_groups { group_name: "deep" feature_names: ["user", "item"] group_type: DEEP
    sequence_groups { feature_names: ["item", "cate", "price", "click__item", "click__cate", "click__price"] }
    sequence_encoders { din_encoder { input: "deep" attn_mlp { hidden_units: [4] activation: "Dice" } } }
  }
  multi_tower { towers { input: "deep" mlp { hidden_units: [6] } } final { hidden_units: [3] } }
  metrics { auc {} }
  losses { binary_cross_entropy {} }
})";
  const std::string din = std::string(kFeatures) + R"(
model_config {
  feature_groups { group_name: "deep" feature_names: ["user", "price"] group_type: DEEP }
  feature_groups { group_name: "seq" group_type: SEQUENCE feature_names: ["item", "click__item"] }
  multi_tower_din {
    towers { input: "deep" mlp { hidden_units: [4] } }
    din_towers { input: "seq" attn_mlp { hidden_units: [3] activation: "nn.PReLU" } }
    final { hidden_units: [2] activation: "" }
  }
  metrics { auc {} }
  losses { binary_cross_entropy {} }
})";
  const std::string optimizers =
      "train_config { sparse_optimizer { adagrad_optimizer { lr: 0.1 } } "
      "dense_optimizer { adam_optimizer { lr: 0.01 } } }";
  for (const std::string& config : {nested, din}) {
    torch::manual_seed(0);
    auto pipeline = BuildTestPipeline(config + optimizers);
    std::vector<at::Tensor> tables_before;
    for (const EmbeddingTable* t : pipeline->model->embedding_collection().tables()) {
      tables_before.push_back(t->weight().clone());
    }
    Model& model = *pipeline->model;
    model.train();
    Batch batch = MakeBatch(Rows(), 4);
    double first = 0, last = 0;
    for (int step = 0; step < 80; ++step) {
      pipeline->dense_optimizer->zero_grad();
      Predictions predictions = model.Predict(batch);
      at::Tensor loss = model.TotalLoss(model.ComputeLosses(predictions, batch));
      loss.backward();
      if (step == 0) {
        // Every dense parameter (attention MLP included) gets a gradient.
        for (const auto& p : model.named_parameters()) {
          ASSERT_TRUE(p.value().grad().defined()) << p.key();
          EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0.0) << p.key();
        }
      }
      pipeline->dense_optimizer->step();
      pipeline->sparse_optimizer->FinishStep();
      (step == 0 ? first : last) = loss.item<double>();
    }
    EXPECT_LT(last, first * 0.5) << config;
    // Every table the batch reaches moved (the sequence tables included).
    const auto& tables = pipeline->model->embedding_collection().tables();
    for (size_t t = 0; t < tables.size(); ++t) {
      EXPECT_FALSE(torch::equal(tables[t]->weight(), tables_before[t])) << tables[t]->name();
    }
  }
}

// scripted_model.pt of sequence groups: SEQUENCE groups and nested ones, steps with several
// ids and empty rows, each encoder with a TorchScript form, equal the model's eval outputs.
TEST(SequenceModels, ScriptedSequenceGroupsEqualTheModel) {
  const std::string group = R"(feature_groups { group_name: "deep" feature_names: ["user", "item"] group_type: DEEP
    sequence_groups { group_name: "seq" feature_names: ["item", "cate", "price", "click__item", "click__cate", "click__price"] }
    sequence_encoders { ENCODER } })";
  const std::vector<std::string> encoders = {
      R"(pooling_encoder { input: "seq" pooling_type: "mean" max_seq_length: 2 })",
      R"(pooling_encoder { input: "seq" pooling_type: "sum" })",
      R"(simple_attention { input: "seq" })",
      R"(din_encoder { input: "seq" attn_mlp { hidden_units: [4] activation: "Dice" use_bn: true } max_seq_length: 2 })",
      R"(multi_window_din_encoder { input: "seq" attn_mlp { hidden_units: [4] } windows_len: [1, 2] })",
      R"(self_attention_encoder { input: "seq" multihead_attn_dim: 4 num_heads: 2 })",
      R"(self_attention_encoder { input: "seq" multihead_attn_dim: 6 num_heads: 3 max_seq_length: 2 })"};
  std::vector<std::string> configs;
  for (const std::string& encoder : encoders) {
    std::string g = group;
    g.replace(g.find("ENCODER"), 7, encoder);
    configs.push_back(std::string(kFeatures) + "model_config { " + g +
                      R"( multi_tower { towers { input: "deep" mlp { hidden_units: [6] } } final { hidden_units: [3] } }
                          metrics { auc {} } losses { binary_cross_entropy {} } })");
  }
  configs.push_back(std::string(kFeatures) + R"(model_config {
    feature_groups { group_name: "deep" feature_names: ["user", "item"] group_type: DEEP }
    feature_groups { group_name: "seq" group_type: SEQUENCE
      feature_names: ["item", "cate", "price", "click__item", "click__cate", "click__price"] }
    multi_tower_din { towers { input: "deep" mlp { hidden_units: [4] } } din_towers { input: "seq" attn_mlp { hidden_units: [3] } }
                      final { hidden_units: [2] } }
    metrics { auc {} } losses { binary_cross_entropy {} } })");
  for (const std::string& config : configs) {
    SCOPED_TRACE(config.substr(config.find("model_config")));
    torch::manual_seed(3);
    auto pipeline = BuildTestPipeline(config, /*training=*/false);
    Model& model = *pipeline->model;
    model.eval();
    StoredTables tables;
    for (const EmbeddingTable* t : model.embedding_collection().tables()) {
      tables[t->name()] = {t->stored().detach().clone(), TableDtype::kFP32, t->dim()};
    }
    torch::NoGradGuard no_grad;
    torch::jit::Module module = BuildScriptedModule(model, tables);
    const Batch batch = MakeBatch(Rows(), 4);
    const Predictions expected = model.Predict(batch);
    const auto got = RunScriptedModule(module, ScriptedInputs(batch, pipeline->FeaturePointers()));
    ASSERT_EQ(got.size(), expected.size());
    for (const auto& [name, tensor] : expected) {
      ASSERT_TRUE(got.count(name)) << name;
      EXPECT_TRUE(torch::allclose(got.at(name), tensor, 1e-5, 1e-6)) << name << got.at(name) << tensor;
    }
  }
}

}  // namespace
}  // namespace tzrec
