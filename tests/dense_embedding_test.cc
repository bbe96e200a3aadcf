// Dense-feature embeddings (autodis, mlp): the module against its formulas, config errors, and
// a model with them that trains, checkpoints and exports (the export's TorchScript copy is
// checked against the model by the exporter).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "model_test_util.h"
#include "test_util.h"
#include "train_test_util.h"
#include "tzrec/common/fs.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/embedding/dense_embedding.h"
#include "tzrec/serving/exported_model.h"
#include "tzrec/train/checkpoint.h"
#include "tzrec/train/trainer.h"

namespace tzrec {
namespace {

const char* kFeatures = R"(
  feature_configs { id_feature { feature_name: "a" num_buckets: 5 embedding_dim: 4 } }
  feature_configs { raw_feature { feature_name: "p" embedding_dim: 4 mlp {} } }
  feature_configs { raw_feature { feature_name: "v" value_dim: 2 embedding_dim: 3 mlp {} } }
  feature_configs { raw_feature { feature_name: "q" embedding_dim: 4
                                  autodis { num_channels: 3 temperature: 0.5 keep_prob: 0.7 } } }
)";

std::string DeepFMWith(const std::string& features, const std::string& deep) {
  return std::string(R"(data_config { dataset_type: CsvDataset label_fields: "label" })") + features + R"(
  model_config {
    feature_groups { group_name: "wide" feature_names: ["a"] group_type: WIDE }
    feature_groups { group_name: "fm" feature_names: ["a"] group_type: DEEP }
    feature_groups { group_name: "deep" feature_names: [)" + deep + R"(] group_type: DEEP }
    deepfm { deep { hidden_units: [8] } wide_embedding_dim: 1 }
    losses { binary_cross_entropy {} }
  })";
}

const Feature& FeatureNamed(const Pipeline& pipeline, const std::string& name) {
  for (const auto& f : pipeline.features) {
    if (f->name() == name) return *f;
  }
  ADD_FAILURE() << name;
  return *pipeline.features.front();
}

// mlp: x * w (value_dim 1) or x W; autodis: softmax((h M^T + keep_prob h) / t) E with
// h = leaky_relu(x w) - computed here in double from the module's own parameters.
TEST(DenseEmbeddings, MlpAndAutoDisFollowTheirFormulas) {
  auto pipeline = testing::BuildTestPipeline(DeepFMWith(kFeatures, R"("a", "p", "v", "q")"));
  torch::manual_seed(4);
  DenseEmbeddings module;
  for (const char* name : {"p", "v", "q"}) module->Add(name, FeatureNamed(*pipeline, name));
  std::map<std::string, at::Tensor> params;
  for (const auto& item : module->named_parameters()) params[item.key()] = item.value().detach().to(at::kDouble);
  EXPECT_EQ(params.size(), 5u);  // p_proj_w, v_proj_w, q_meta_emb, q_proj_w, q_proj_m
  const at::Tensor x1 = torch::tensor({{-2.0f}, {0.0f}, {0.5f}, {3.0f}});
  const at::Tensor x2 = torch::randn({4, 2});
  EXPECT_TRUE(torch::allclose(module->Forward("p", x1).to(at::kDouble), x1.to(at::kDouble) * params["p_proj_w"], 1e-6, 1e-6));
  EXPECT_TRUE(torch::allclose(module->Forward("v", x2).to(at::kDouble), at::matmul(x2.to(at::kDouble), params["v_proj_w"]), 1e-6, 1e-6));
  const at::Tensor h = x1.to(at::kDouble) * params["q_proj_w"];
  const at::Tensor leaky = at::where(h > 0, h, 0.01 * h);
  const at::Tensor mixed = at::matmul(leaky, params["q_proj_m"].t()) + 0.7 * leaky;
  const at::Tensor expected = at::matmul(at::softmax(mixed / 0.5, -1), params["q_meta_emb"]);
  const at::Tensor got = module->Forward("q", x1);
  EXPECT_EQ(got.sizes(), (std::vector<int64_t>{4, 4}));
  EXPECT_TRUE(torch::allclose(got.to(at::kDouble), expected, 1e-5, 1e-6));
  // Gradients reach every parameter (autograd ops only).
  (module->Forward("q", x1).sum() + module->Forward("p", x1).sum() + module->Forward("v", x2).sum()).backward();
  for (const auto& item : module->named_parameters()) {
    EXPECT_TRUE(item.value().grad().defined() && item.value().grad().abs().sum().item<double>() > 0) << item.key();
  }
}

// In a model: the group is as wide as the embeddings, the parameters are the model's dense
// parameters ("dense_embedding.<feature>_<name>"), and their standard deviations follow
// TorchEasyRec's initialisation.
TEST(DenseEmbeddings, ModelGroupsUseTheEmbeddingsAndOwnTheirParameters) {
  torch::manual_seed(1);
  auto pipeline = testing::BuildTestPipeline(DeepFMWith(kFeatures, R"("a", "p", "v", "q")"));
  std::set<std::string> names;
  for (const auto& item : pipeline->model->named_parameters()) {
    if (item.key().rfind("dense_embedding.", 0) == 0) names.insert(item.key());
  }
  EXPECT_EQ(names, (std::set<std::string>{"dense_embedding.p_proj_w", "dense_embedding.v_proj_w",
                                          "dense_embedding.q_meta_emb", "dense_embedding.q_proj_w",
                                          "dense_embedding.q_proj_m"}));
  // Without dense embeddings a model has no such module (checkpoints of other models unchanged).
  auto plain = testing::BuildTestPipeline(DeepFMWith(R"(
    feature_configs { id_feature { feature_name: "a" num_buckets: 5 embedding_dim: 4 } }
    feature_configs { raw_feature { feature_name: "p" } })", R"("a", "p")"));
  for (const auto& item : plain->model->named_parameters()) EXPECT_NE(item.key().rfind("dense_embedding", 0), 0u);
}

TEST(DenseEmbeddings, ConfigErrorsNameTheField) {
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(DeepFMWith(R"(
    feature_configs { id_feature { feature_name: "a" num_buckets: 5 embedding_dim: 4 } }
    feature_configs { raw_feature { feature_name: "q" value_dim: 2 embedding_dim: 4 autodis { num_channels: 3 } } })",
                                                           R"("a", "q")")),
                     "feature_configs[1].raw_feature.autodis: needs value_dim 1");
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(DeepFMWith(R"(
    feature_configs { id_feature { feature_name: "a" num_buckets: 5 embedding_dim: 4 } }
    feature_configs { raw_feature { feature_name: "q" mlp {} } })",
                                                           R"("a", "q")")),
                     "feature_configs[1].raw_feature.embedding_dim: 0");
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(DeepFMWith(R"(
    feature_configs { id_feature { feature_name: "a" num_buckets: 5 embedding_dim: 4 } }
    feature_configs { raw_feature { feature_name: "q" embedding_dim: 4 autodis { num_channels: 0 } } })",
                                                           R"("a", "q")")),
                     "autodis.num_channels: 0");
}

// As in TorchEasyRec, a sequence feature's dense embedding does nothing: its steps stay raw.
TEST(DenseEmbeddings, SequenceFeaturesKeepRawValues) {
  auto pipeline = BuildFeatures(ParsePipelineConfigText(R"(
    data_config { dataset_type: CsvDataset label_fields: "label" }
    feature_configs { sequence_raw_feature { feature_name: "s" sequence_length: 3 embedding_dim: 8 mlp {} } })", "t"),
                                PipelineMode::kEval);
  const Feature& s = FeatureNamed(*pipeline, "s");
  EXPECT_EQ(s.dense_embedding().kind, DenseEmbeddingSpec::Kind::kNone);
  EXPECT_EQ(s.output_dim(), 1);
}

// The small DeepFM with its dense feature embedded (autodis, then mlp): trains, the embedding's
// parameters move and are checkpointed, and it exports with a TorchScript copy (the exporter
// checks it against the model) whose predictions the export's predict reproduces.
TEST(DenseEmbeddings, TrainAndExportWithScriptedModel) {
  for (const std::string embedding : {"embedding_dim: 4 autodis { num_channels: 5 }", "embedding_dim: 3 mlp {}"}) {
    SCOPED_TRACE(embedding);
    testing::TempDir dir;
    const std::string config = testing::WriteSmallConfig(dir);
    std::string text = ReadFileToString(config);
    const std::string from = R"(raw_feature { feature_name: "x" })";
    text.replace(text.find(from), from.size(), R"(raw_feature { feature_name: "x" )" + embedding + " }");
    testing::WriteFile(config, text);
    TrainAndEvaluate(testing::SmallOptions(dir, config, dir.File("model")));
    const auto checkpoints = ListCheckpoints(dir.File("model"));
    ASSERT_GE(checkpoints.size(), 2u);
    const auto first = testing::LoadModelFile(checkpoints.front().path);
    const auto last = testing::LoadModelFile(checkpoints.back().path);
    ASSERT_TRUE(last.count("dense_embedding.x_proj_w"));
    EXPECT_FALSE(torch::equal(first.at("dense_embedding.x_proj_w"), last.at("dense_embedding.x_proj_w")));
    EXPECT_TRUE(testing::LastEvalResult(dir.File("model")).contains("auc"));
    const auto manifest = testing::ExportLatest(dir.File("model/pipeline.config"), dir.File("export"));
    EXPECT_FALSE(manifest.contains("scripted_model_skipped")) << manifest.dump();
    EXPECT_TRUE(PathExists(dir.File("export/scripted_model.pt")));
  }
}

}  // namespace
}  // namespace tzrec
