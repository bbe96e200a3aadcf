// wide_and_deep, dcn_v1, dcn_v2, xdeepfm, mask_net and wukong: each forward against the same computation written out
// with plain tensor ops from the model's own parameters (double precision), config errors,
// and each trained on planted data close to the generator's oracle, then exported (the
// exporter checks the TorchScript copy against the model).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "model_test_util.h"
#include "test_util.h"
#include "train_test_util.h"
#include "tzrec/common/fs.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/tools/gen_data.h"
#include "tzrec/train/trainer.h"

namespace tzrec {
namespace {

std::string TinyConfig(const std::string& groups_and_model) {
  return std::string(R"(
  data_config { dataset_type: CsvDataset label_fields: "label" }
  feature_configs { id_feature { feature_name: "a" num_buckets: 3 embedding_dim: 2 } }
  feature_configs { id_feature { feature_name: "b" num_buckets: 4 embedding_dim: 2 } }
  feature_configs { raw_feature { feature_name: "d" } }
  model_config { )") + groups_and_model + R"(
    losses { binary_cross_entropy {} }
  })";
}

// Row 0: a=[1], b=[2, 3] (summed), d=2; row 1: a=[] (zero), b=[0], d=-1.
Batch TinyBatch() {
  ParsedBatch parsed;
  parsed.size = 2;
  parsed.sparse["a"] = {{1}, {1, 0}};
  parsed.sparse["b"] = {{2, 3, 0}, {2, 1}};
  parsed.dense["d"] = {1, {2.f, -1.f}};
  parsed.labels["label"] = {1.f, 0.f};
  return ToBatch(std::move(parsed));
}

struct Tiny {
  std::unique_ptr<Pipeline> pipeline;
  std::map<std::string, at::Tensor> p;  // parameters, double
  at::Tensor a, b, a_wide, b_wide;      // the batch's pooled embeddings [2, dim], double
};

// Builds `config` with seeded random weights and pools the batch's rows by hand.
Tiny BuildTiny(const std::string& config) {
  torch::manual_seed(17);
  Tiny t{testing::BuildTestPipeline(config), {}, {}, {}, {}, {}};
  t.pipeline->model->eval();
  for (const auto& item : t.pipeline->model->named_parameters()) t.p[item.key()] = item.value().detach().to(at::kDouble);
  std::map<std::string, at::Tensor> tables;
  for (EmbeddingTable* table : t.pipeline->model->embedding_collection().tables()) {
    tables[table->name()] = table->weight().to(at::kDouble);
  }
  auto pool = [&](const std::string& table, std::vector<std::vector<int64_t>> rows) {
    if (!tables.count(table)) return at::Tensor();
    std::vector<at::Tensor> out;
    for (const auto& ids : rows) {
      at::Tensor sum = at::zeros({tables[table].size(1)}, at::kDouble);
      for (int64_t id : ids) sum += tables[table][id];
      out.push_back(sum);
    }
    return at::stack(out);
  };
  t.a = pool("a_emb", {{1}, {}});
  t.b = pool("b_emb", {{2, 3}, {0}});
  t.a_wide = pool("a_emb_wide", {{1}, {}});
  t.b_wide = pool("b_emb_wide", {{2, 3}, {0}});
  return t;
}

const at::Tensor kD = torch::tensor({{2.0}, {-1.0}}, at::kDouble);

at::Tensor Linear(const Tiny& t, const std::string& name, const at::Tensor& x, bool bias = true) {
  at::Tensor y = at::matmul(x, t.p.at(name + ".weight").t());
  return bias ? y + t.p.at(name + ".bias") : y;
}

// One-layer ReLU MLP "<name>.mlp.<i>.perceptron.0" per hidden layer.
at::Tensor Mlp(const Tiny& t, const std::string& name, at::Tensor x, int layers) {
  for (int i = 0; i < layers; ++i) x = at::relu(Linear(t, name + ".mlp." + std::to_string(i) + ".perceptron.0", x));
  return x;
}

at::Tensor Logits(Tiny& t) {
  return t.pipeline->model->Predict(TinyBatch()).at("logits").to(at::kDouble);
}

TEST(WideAndDeep, ForwardMatchesPlainOps) {
  for (bool with_final : {false, true}) {
    SCOPED_TRACE(with_final);
    Tiny t = BuildTiny(TinyConfig(std::string(R"(
      feature_groups { group_name: "wide" feature_names: ["a", "b"] group_type: WIDE }
      feature_groups { group_name: "deep" feature_names: ["a", "b", "d"] group_type: DEEP }
      wide_and_deep { deep { hidden_units: [3] } wide_embedding_dim: 2 )") +
                                  (with_final ? "final { hidden_units: [2] } " : "") + "}"));
    const at::Tensor y_wide = (t.a_wide + t.b_wide).sum(1, true);
    const at::Tensor deep = Mlp(t, "deep_mlp", at::cat({t.a, t.b, kD}, 1), 1);
    const at::Tensor expected = with_final ? Linear(t, "output_mlp", Mlp(t, "final_mlp", at::cat({y_wide, deep}, 1), 1))
                                           : y_wide + Linear(t, "output_mlp", deep);
    EXPECT_TRUE(torch::allclose(Logits(t), expected.view({-1}), 1e-5, 1e-6));
  }
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(TinyConfig(R"(
      feature_groups { group_name: "all" feature_names: ["a", "b", "d"] group_type: DEEP }
      wide_and_deep { deep { hidden_units: [3] } })")),
                     "model_config.wide_and_deep needs a 'wide' group");
}

TEST(DCNV1, ForwardMatchesPlainOps) {
  Tiny t = BuildTiny(TinyConfig(R"(
      feature_groups { group_name: "all" feature_names: ["a", "b", "d"] group_type: DEEP }
      dcn_v1 { cross { cross_num: 2 } deep { hidden_units: [3] } final { hidden_units: [2] } })"));
  const at::Tensor x0 = at::cat({t.a, t.b, kD}, 1);
  at::Tensor x = x0;
  for (int l = 0; l < 2; ++l) {
    const std::string i = std::to_string(l);
    x = at::matmul(x, t.p.at("cross.w." + i + ".weight").t()) * x0 + t.p.at("cross.b." + i) + x;
  }
  const at::Tensor joined = at::cat({x, Mlp(t, "deep", x0, 1)}, 1);
  const at::Tensor expected = Linear(t, "output_linear", Mlp(t, "final_dnn", joined, 1), false);
  EXPECT_TRUE(torch::allclose(Logits(t), expected.view({-1}), 1e-5, 1e-6));
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(TinyConfig(R"(
      feature_groups { group_name: "all" feature_names: ["a", "b", "d"] group_type: DEEP }
      dcn_v1 { cross { cross_num: 0 } deep { hidden_units: [3] } final { hidden_units: [2] } })")),
                     "model_config.dcn_v1.cross.cross_num: 0");
}

TEST(DCNV2, ForwardMatchesPlainOps) {
  for (bool backbone_and_deep : {false, true}) {
    SCOPED_TRACE(backbone_and_deep);
    Tiny t = BuildTiny(TinyConfig(std::string(R"(
      feature_groups { group_name: "all" feature_names: ["a", "b", "d"] group_type: DEEP }
      dcn_v2 { cross { cross_num: 2 low_rank: 2 } final { hidden_units: [2] } )") +
                                  (backbone_and_deep ? "backbone { hidden_units: [4] } deep { hidden_units: [3] } " : "") +
                                  "}"));
    const at::Tensor raw = at::cat({t.a, t.b, kD}, 1);
    const at::Tensor x0 = backbone_and_deep ? Mlp(t, "backbone", raw, 1) : raw;
    at::Tensor x = x0;
    for (int l = 0; l < 2; ++l) {
      const std::string i = std::to_string(l);
      x = x0 * Linear(t, "cross.v_kernels." + i, Linear(t, "cross.u_kernels." + i, x, false)) + x;
    }
    // The deep MLP reads the raw group, not the backbone's output.
    const at::Tensor net = backbone_and_deep ? at::cat({x, Mlp(t, "deep", raw, 1)}, 1) : x;
    const at::Tensor expected = Linear(t, "output_mlp", Mlp(t, "final", net, 1), false);
    EXPECT_TRUE(torch::allclose(Logits(t), expected.view({-1}), 1e-5, 1e-6));
  }
}

TEST(XDeepFM, ForwardMatchesPlainOps) {
  Tiny t = BuildTiny(TinyConfig(R"(
      feature_groups { group_name: "wide" feature_names: ["a", "b"] group_type: WIDE }
      feature_groups { group_name: "deep" feature_names: ["a", "b", "d"] group_type: DEEP }
      xdeepfm { cin { cin_layer_size: [3, 2] } deep { hidden_units: [2] } final { hidden_units: [2] }
                wide_embedding_dim: 2 })"));
  const at::Tensor x0 = at::stack({t.a_wide, t.b_wide}, 1);  // [B, F=2, D=2]
  at::Tensor x = x0;
  std::vector<at::Tensor> parts;
  for (int k = 0; k < 2; ++k) {
    const std::string name = "cin.cin_layers." + std::to_string(k);
    // Row h*F + f of the outer products is x[:, h, :] * x0[:, f, :].
    std::vector<at::Tensor> rows;
    for (int64_t h = 0; h < x.size(1); ++h) {
      for (int64_t f = 0; f < 2; ++f) rows.push_back(x.select(1, h) * x0.select(1, f));
    }
    const at::Tensor z = at::stack(rows, 1);  // [B, H*F, D]
    x = at::matmul(t.p.at(name + ".weight").squeeze(2), z) + t.p.at(name + ".bias").unsqueeze(1);
    parts.push_back(x.sum(2));
  }
  const at::Tensor joined = at::cat({at::cat(parts, 1), Mlp(t, "deep", at::cat({t.a, t.b, kD}, 1), 1)}, 1);
  const at::Tensor expected = Linear(t, "output_mlp", Mlp(t, "final", joined, 1));
  EXPECT_TRUE(torch::allclose(Logits(t), expected.view({-1}), 1e-5, 1e-6));
}

TEST(MaskNet, ForwardMatchesPlainOps) {
  Tiny t = BuildTiny(TinyConfig(R"(
      feature_groups { group_name: "all" feature_names: ["a", "b", "d"] group_type: DEEP }
      mask_net { mask_net_module { n_mask_blocks: 1 mask_block { reduction_ratio: 2.0 hidden_dim: 3 }
                                   top_mlp { hidden_units: [2] } } })"));
  const std::string m = "mask_net_layer.";
  const at::Tensor emb = at::cat({t.a, t.b, kD}, 1);
  const at::Tensor ln = at::layer_norm(emb, {5}, t.p.at(m + "ln_emb.weight"), t.p.at(m + "ln_emb.bias"), 1e-5);
  const std::string b = m + "mask_blocks.0.";
  const at::Tensor mask = Linear(t, b + "mask_generator.2", at::relu(Linear(t, b + "mask_generator.0", emb)));
  EXPECT_EQ(t.p.at(b + "mask_generator.0.weight").size(0), 10);  // aggregation = 5 * reduction_ratio
  const at::Tensor h = Linear(t, b + "ffn.0", ln * mask);
  const at::Tensor block = at::relu(at::layer_norm(h, {3}, t.p.at(b + "ffn.1.weight"), t.p.at(b + "ffn.1.bias"), 1e-5));
  const at::Tensor expected = Linear(t, "output_linear", Mlp(t, m + "top_mlp", block, 1), false);
  EXPECT_TRUE(torch::allclose(Logits(t), expected.view({-1}), 1e-5, 1e-6));
}

TEST(WuKong, ForwardMatchesPlainOps) {
  Tiny t = BuildTiny(TinyConfig(R"(
      feature_groups { group_name: "all" feature_names: ["a", "b"] group_type: DEEP }
      wukong { wukong_layers { lcb_feature_num: 2 fmb_feature_num: 1 compressed_feature_num: 2
                               feature_num_mlp { hidden_units: [3] } }
               final { hidden_units: [2] } })"));
  const std::string l = "_wukong_layers.0.";
  const at::Tensor x = at::stack({t.a, t.b}, 1);  // [B, F=2, D=2]
  auto lcb = [&](const std::string& name, const at::Tensor& in) {
    return at::matmul(in.permute({0, 2, 1}), t.p.at(name)).permute({0, 2, 1});
  };
  const at::Tensor compressed = at::matmul(x, at::matmul(x.permute({0, 2, 1}), t.p.at(l + "fmb.weight")));
  const at::Tensor flat = at::layer_norm(compressed.reshape({2, 4}), {4}, t.p.at(l + "fmb.norm.weight"),
                                         t.p.at(l + "fmb.norm.bias"), 1e-5);
  const at::Tensor fmb = Linear(t, l + "fmb.feature_out_liner", Mlp(t, l + "fmb.mlp", flat, 1)).reshape({2, 1, 2});
  // 3 output fields from 2 inputs: the residual is projected.
  const at::Tensor sum = at::cat({fmb, lcb(l + "lcb.weight", x)}, 1) + lcb(l + "residual_projection.weight", x);
  const at::Tensor out = at::layer_norm(sum, {2}, t.p.at(l + "norm.weight"), t.p.at(l + "norm.bias"), 1e-5);
  const at::Tensor expected = Linear(t, "output_mlp", Mlp(t, "final_mlp", out.reshape({2, -1}), 1));
  EXPECT_TRUE(torch::allclose(Logits(t), expected.view({-1}), 1e-5, 1e-6));
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(TinyConfig(R"(
      feature_groups { group_name: "all" feature_names: ["a", "d"] group_type: DEEP }
      wukong { final { hidden_units: [2] } })")),
                     "must share one embedding dim");
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(TinyConfig(R"(
      feature_groups { group_name: "sparse" feature_names: ["a", "b"] group_type: DEEP }
      feature_groups { group_name: "dense" feature_names: ["d"] group_type: DEEP }
      wukong { dense_mlp { hidden_units: [3] } final { hidden_units: [2] } })")),
                     "model_config.wukong.dense_mlp: its last hidden unit (3) must equal the sparse features' dim 2");
}

// A dense_mlp of width k * D (TorchEasyRec refuses anything but D) enters as k dense fields
// in front of the sparse ones.
TEST(WuKong, ADenseMlpOfSeveralFieldsWidthEntersAsThatManyFields) {
  Tiny t = BuildTiny(TinyConfig(R"(
      feature_groups { group_name: "sparse" feature_names: ["a", "b"] group_type: DEEP }
      feature_groups { group_name: "dense" feature_names: ["d"] group_type: DEEP }
      wukong { dense_mlp { hidden_units: [4] } final { hidden_units: [2] } })"));
  const at::Tensor dense = Mlp(t, "dense_mlp", kD, 1).reshape({2, 2, 2});
  const at::Tensor fields = at::cat({dense, at::stack({t.a, t.b}, 1)}, 1);  // [B, 4, 2]
  const at::Tensor expected = Linear(t, "output_mlp", Mlp(t, "final_mlp", fields.reshape({2, 8}), 1));
  EXPECT_TRUE(torch::allclose(Logits(t), expected.view({-1}), 1e-5, 1e-6));
}

// Planted first-order signal (no pairwise term), as the multi-task tests: each model comes
// within 97% of the oracle's lift over 0.5 after a few epochs, and exports with a TorchScript
// copy the exporter has checked against the model.
TEST(RankZoo, EachModelTrainsToItsOracleAndExports) {
  const std::string features = testing::PlantedFeatures(R"("clk")", 3, 0.002);
  const std::map<std::string, std::string> models = {
      {"wide_and_deep", R"(feature_groups { group_name: "wide" feature_names: ["u", "i", "c"] group_type: WIDE }
                           feature_groups { group_name: "deep" feature_names: ["u", "i", "c", "r"] group_type: DEEP }
                           wide_and_deep { deep { hidden_units: [32, 16] } })"},
      {"dcn_v1", R"(feature_groups { group_name: "all" feature_names: ["u", "i", "c", "r"] group_type: DEEP }
                    dcn_v1 { cross { cross_num: 2 } deep { hidden_units: [32] } final { hidden_units: [16] } })"},
      {"dcn_v2", R"(feature_groups { group_name: "all" feature_names: ["u", "i", "c", "r"] group_type: DEEP }
                    dcn_v2 { backbone { hidden_units: [32] } cross { cross_num: 2 low_rank: 8 }
                             deep { hidden_units: [16] } final { hidden_units: [16] } })"},
      {"xdeepfm", R"(feature_groups { group_name: "wide" feature_names: ["u", "i", "c"] group_type: WIDE }
                     feature_groups { group_name: "deep" feature_names: ["u", "i", "c", "r"] group_type: DEEP }
                     xdeepfm { cin { cin_layer_size: [8, 8] } deep { hidden_units: [32] } final { hidden_units: [16] } })"},
      {"mask_net", R"(feature_groups { group_name: "all" feature_names: ["u", "i", "c", "r"] group_type: DEEP }
                      mask_net { mask_net_module { n_mask_blocks: 2 mask_block { reduction_ratio: 1.0 hidden_dim: 16 }
                                                   top_mlp { hidden_units: [16] } } })"},
      {"wukong", R"(feature_groups { group_name: "sparse" feature_names: ["u", "i", "c"] group_type: DEEP }
                    feature_groups { group_name: "dense" feature_names: ["r"] group_type: DEEP }
                    wukong { dense_mlp { hidden_units: [8] }
                             wukong_layers { lcb_feature_num: 4 fmb_feature_num: 4 compressed_feature_num: 4
                                             feature_num_mlp { hidden_units: [16] } }
                             final { hidden_units: [16] } })"}};
  for (const auto& [name, model] : models) {
    SCOPED_TRACE(name);
    testing::DeterministicRuntime();
    testing::TempDir dir;
    const std::string text = features + "\nmodel_config { " + model + " losses { binary_cross_entropy {} } metrics { auc {} } }";
    const testing::PlantedRun run = testing::TrainOnPlantedData(dir, text, 40000, 10000);
    const double oracle = run.oracle["oracle_auc"].get<double>();
    const double auc = run.result["auc"].get<double>();
    std::printf("[ zoo      ] %s: eval AUC %.4f, oracle %.4f\n", name.c_str(), auc, oracle);
    EXPECT_GE(auc, 0.97 * (oracle - 0.5) + 0.5) << "oracle " << oracle;
    const auto manifest = testing::ExportLatest(dir.File("model/pipeline.config"), dir.File("export"));
    EXPECT_FALSE(manifest.contains("scripted_model_skipped")) << manifest.dump();
  }
}

// TorchEasyRec's own mask_net example (dataset switched to Parquet, as a user without
// MaxCompute runs it; its 40M-row tables capped to keep the test small) trains from gen_data
// output. (Its wukong example trains with its declared tables in hash_storage_test.cc.)
TEST(RankZooCriteo, MaskNetExampleTrains) {
  testing::TempDir dir;
  const std::string edits = R"({"data_config.dataset_type": "ParquetDataset",
      "feature_configs[id_feature.hash_bucket_size>20000].id_feature.hash_bucket_size": 20000,
      "data_config.batch_size": 256, "train_config.num_epochs": 1, "eval_config.num_steps": 4})";
  auto config = LoadPipelineConfig(testing::ReferenceConfig("masknet_criteo.config"));
  EditConfigJson(&config, edits);
  GenDataOptions gen;
  gen.output_dir = dir.File("data");
  gen.train_rows = 2048;
  gen.eval_rows = 1024;
  const auto data = GenerateMockData(config, gen);
  TrainEvalOptions options;
  options.pipeline_config_path = testing::ReferenceConfig("masknet_criteo.config");
  options.model_dir = dir.File("model");
  options.train_input_path = data.train_pattern;
  options.eval_input_path = data.eval_pattern;
  options.edit_config_json = edits;
  TrainAndEvaluate(options);
  const auto result = testing::LastEvalResult(dir.File("model"));
  EXPECT_EQ(result["global_step"], 7) << result.dump();
  EXPECT_TRUE(result.contains("auc")) << result.dump();

}

}  // namespace
}  // namespace tzrec
