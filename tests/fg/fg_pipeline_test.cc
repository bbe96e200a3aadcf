// Feature generation inside the data pipeline: reference configs from gen_data raw input,
// FG_NONE parsing of sequence and weighted features.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/gen_data_test_util.h"
#include "fg/fg_test_util.h"
#include "test_util.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/input/dataset.h"
#include "tzrec/features/feature.h"
#include "tzrec/tools/gen_data.h"

namespace tzrec {
namespace {

using ::testing::ElementsAre;

// Runs gen_data for `config`, reads the first train batch back through the Dataset (with
// feature generation when the config asks for it) and checks every feature's shape and ids.
void CheckGeneratedFeatures(const std::string& name, const std::string& edits) {
  SCOPED_TRACE(name);
  testing::TempDir dir;
  auto config = LoadPipelineConfig(testing::ReferenceConfig(name));
  EditConfigJson(&config, edits);
  GenDataOptions gen;
  gen.output_dir = dir.File("data");
  gen.train_rows = 600;
  gen.eval_rows = 100;
  gen.num_files = 1;
  auto data = GenerateMockData(config, gen);
  EXPECT_GT(data.oracle_auc, 0.6);
  if (config.data_config().has_negative_sampler()) {
    config.mutable_data_config()->mutable_negative_sampler()->set_input_path(data.sampler_tables.at("item_table"));
  }

  gen_data_test::ConfigDataset read(config, data.train_pattern);
  const std::vector<const Feature*>& pointers = read.pointers;
  auto stream = read.dataset->Open(0);
  ParsedBatch batch;
  ASSERT_TRUE(stream->Next(&batch));
  ASSERT_GT(batch.size, 0);
  int sequences = 0;
  for (const Feature* f : pointers) {
    SCOPED_TRACE(f->name());
    // Item features of a negative sampler also hold the sampled items' rows.
    const int64_t feature_rows = batch.size + (f->data_group() == "__NEG__" ? batch.sampled_rows : 0);
    if (f->is_sparse()) {
      ASSERT_TRUE(batch.sparse.count(f->name()));
      const SparseValues& sv = batch.sparse.at(f->name());
      ASSERT_EQ(static_cast<int64_t>(sv.lengths.size()), feature_rows);
      int64_t values = 0;
      if (f->is_sequence()) {
        ++sequences;
        int64_t steps = 0;
        for (int32_t n : sv.lengths) steps += n;
        ASSERT_EQ(static_cast<int64_t>(sv.key_lengths.size()), steps);
        for (int32_t n : sv.key_lengths) values += n;
      } else {
        for (int32_t n : sv.lengths) values += n;
      }
      ASSERT_EQ(static_cast<int64_t>(sv.values.size()), values);
      EXPECT_GT(values, 0);
      for (int64_t id : sv.values) {
        ASSERT_GE(id, 0);
        ASSERT_LT(id, f->num_embeddings());
      }
    } else {
      ASSERT_TRUE(batch.dense.count(f->name()));
      const DenseValues& dv = batch.dense.at(f->name());
      int64_t rows = feature_rows;
      if (f->is_sequence()) {
        ++sequences;
        rows = 0;
        for (int32_t n : dv.lengths) rows += n;
      }
      EXPECT_EQ(static_cast<int64_t>(dv.values.size()), rows * dv.dim);
    }
  }
  if (name.find("din") != std::string::npos || name.find("dssm_taobao") != std::string::npos) {
    EXPECT_GT(sequences, 0);
  }
}

TEST(FgPipeline, ReferenceConfigsGenerateFeaturesFromGenDataRawInput) {
  // FG_DAG configs (ODPS in the original: written as Parquet here), raw columns in.
  CheckGeneratedFeatures("dbmtl_taobao.config", R"({"data_config.dataset_type": "ParquetDataset"})");
  CheckGeneratedFeatures("dssm_taobao.config", R"({"data_config.dataset_type": "ParquetDataset"})");
  CheckGeneratedFeatures("dbmtl_taobao.config", R"({"data_config.dataset_type": "CsvDataset",
      "data_config.with_header": true})");
  // FG_NONE with grouped sequences (already encoded ids).
  CheckGeneratedFeatures("multi_tower_din_mock.config", "{}");
}

Feature MakeFeature(const std::string& text, protos::FgMode mode, fg::FeatureInfo* info_out,
                    protos::EasyRecConfig* keep) {
  *keep = fg::testing::Config(text);
  auto infos = fg::DescribeFeatures(keep->feature_configs(), mode);
  *info_out = infos.at(0);
  FeatureContext context;
  context.fg_mode = mode;
  context.config_path = info_out->config_path;
  return Feature(*info_out, context);
}

TEST(FgPipeline, EncodedSequencesAndWeights) {
  protos::EasyRecConfig keep;
  fg::FeatureInfo info;
  const std::string seq =
      "feature_configs { sequence_feature { sequence_name: 'click_50_seq' sequence_length: 50 "
      "sequence_delim: ';' features { id_feature { feature_name: 'id_feat' expression: 'item:id' "
      "embedding_dim: 8 num_buckets: 10 %s } } } }";
  auto with = [&](const std::string& extra) {
    std::string text = seq;
    text.replace(text.find("%s"), 2, extra);
    return text;
  };
  auto batch = fg::testing::Batch({fg::testing::TextColumn(
      "click_50_seq__id_feat", {"1;2", "", "3", "4\x03" "5;6", std::nullopt})});
  {
    Feature f = MakeFeature(with(""), protos::FG_NONE, &info, &keep);
    ParsedBatch out;
    f.ParseEncoded(batch, &out);
    const auto& sv = out.sparse.at("click_50_seq__id_feat");
    EXPECT_THAT(sv.values, ElementsAre(1, 2, 3, 4, 5, 6));
    EXPECT_THAT(sv.key_lengths, ElementsAre(1, 1, 1, 2, 1));
    EXPECT_THAT(sv.lengths, ElementsAre(2, 0, 1, 2, 0));
  }
  {
    Feature f = MakeFeature(with("fg_encoded_default_value: '0'"), protos::FG_NONE, &info, &keep);
    ParsedBatch out;
    f.ParseEncoded(batch, &out);
    const auto& sv = out.sparse.at("click_50_seq__id_feat");
    EXPECT_THAT(sv.values, ElementsAre(1, 2, 0, 3, 4, 5, 6, 0));
    EXPECT_THAT(sv.key_lengths, ElementsAre(1, 1, 1, 1, 2, 1, 1));
    EXPECT_THAT(sv.lengths, ElementsAre(2, 1, 1, 2, 1));
    // Slicing rows keeps steps and ids together.
    out.size = 5;
    ParsedBatch tail = out.Slice(3, 5);
    EXPECT_THAT(tail.sparse.at("click_50_seq__id_feat").values, ElementsAre(4, 5, 6, 0));
    EXPECT_THAT(tail.sparse.at("click_50_seq__id_feat").key_lengths, ElementsAre(2, 1, 1));
  }
  {
    Feature f = MakeFeature(
        "feature_configs { id_feature { feature_name: 'w' expression: 'user:w' embedding_dim: 4 "
        "num_buckets: 10 weighted: true fg_encoded_default_value: '0' } }",
        protos::FG_NONE, &info, &keep);
    auto weighted = fg::testing::Batch(
        {fg::testing::TextColumn("w", {"1:0.1\x03" "2:0.2\x03" "3:0.3", "", std::nullopt, "4:0.4"})});
    ParsedBatch out;
    f.ParseEncoded(weighted, &out);
    const auto& sv = out.sparse.at("w");
    EXPECT_THAT(sv.values, ElementsAre(1, 2, 3, 0, 0, 4));
    EXPECT_THAT(sv.lengths, ElementsAre(3, 1, 1, 1));
    EXPECT_THAT(sv.weights, ElementsAre(0.1f, 0.2f, 0.3f, 1.0f, 1.0f, 0.4f));
  }
}

}  // namespace
}  // namespace tzrec
