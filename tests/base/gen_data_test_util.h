// Shared by the gen_data tests: reference configs with edits, generation, and reading the
// written rows back through the Dataset (with feature generation for FG configs).
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "test_util.h"
#include "tzrec/common/fs.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/features/feature.h"
#include "tzrec/fg/feature_generator.h"
#include "tzrec/input/dataset.h"
#include "tzrec/tools/gen_data.h"

namespace tzrec {
namespace gen_data_test {

constexpr char kParquet[] = R"({"data_config.dataset_type": "ParquetDataset"})";
constexpr char kCsv[] =
    R"({"data_config.dataset_type": "CsvDataset", "data_config.with_header": true})";

inline protos::EasyRecConfig Config(const std::string& name, const std::string& edits) {
  auto config = LoadPipelineConfig(testing::ReferenceConfig(name));
  EditConfigJson(&config, edits);
  return config;
}

inline GenDataResult Generate(const protos::EasyRecConfig& config, const std::string& dir,
                       int64_t train_rows = 4000, int64_t eval_rows = 2000,
                       GenDataOptions gen = GenDataOptions()) {
  gen.output_dir = dir;
  gen.train_rows = train_rows;
  gen.eval_rows = eval_rows;
  gen.num_files = 2;
  return GenerateMockData(config, gen);
}

// A config's features (with its feature generator for FG configs) and an eval Dataset of
// them over `pattern`.
struct ConfigDataset {
  std::vector<std::unique_ptr<Feature>> features;
  std::vector<const Feature*> pointers;
  std::unique_ptr<Dataset> dataset;
  ConfigDataset(const protos::EasyRecConfig& config, const std::string& pattern) {
    const auto& data_config = config.data_config();
    features = CreateFeatures(config.feature_configs(), data_config);
    std::shared_ptr<const fg::FeatureGenerator> generator;
    if (data_config.fg_mode() != protos::FG_NONE) {
      generator = std::make_shared<fg::FeatureGenerator>(
          fg::DescribeFeatures(config.feature_configs(), data_config.fg_mode()),
          data_config.fg_mode(), data_config.fg_encoded_multival_sep());
    }
    for (const auto& f : features) pointers.push_back(f.get());
    dataset = std::make_unique<Dataset>(data_config, pointers, pattern, DatasetMode::kEval, 1, generator);
  }
};

// Rows read back through the Dataset (with feature generation for FG configs): labels by
// field and, per row, the ids of feature `key` (empty when not asked for); for each feature
// in `features`, per row, its ids (sparse; a sequence's in step order) and steps (sequences).
struct ReadRows {
  int64_t size = 0;
  std::map<std::string, std::vector<float>> labels;
  std::vector<std::vector<int64_t>> keys;
  std::map<std::string, std::vector<std::vector<int64_t>>> ids;
  std::map<std::string, std::vector<int32_t>> steps;
};

inline ReadRows ReadBack(const protos::EasyRecConfig& config, const std::string& pattern,
                  const std::string& key = "", const std::vector<std::string>& features = {}) {
  ConfigDataset data(config, pattern);
  auto stream = data.dataset->Open(0);
  ReadRows rows;
  ParsedBatch batch;
  while (stream->Next(&batch)) {
    rows.size += batch.size;
    for (const auto& [name, values] : batch.labels) {
      auto& all = rows.labels[name];
      EXPECT_EQ(static_cast<int64_t>(values.size()), batch.size) << name;
      all.insert(all.end(), values.begin(), values.end());
    }
    if (!key.empty()) {
      const SparseValues& sv = batch.sparse.at(key);
      size_t value = 0;
      for (int64_t r = 0; r < batch.size; ++r) {
        auto first = sv.values.begin() + value;
        rows.keys.emplace_back(first, first + sv.lengths[r]);
        value += sv.lengths[r];
      }
    }
    for (const auto& name : features) {
      auto dense = batch.dense.find(name);
      if (dense != batch.dense.end()) {
        for (int64_t r = 0; r < batch.size; ++r) {
          rows.ids[name].emplace_back();
          rows.steps[name].push_back(dense->second.lengths.empty() ? 1 : dense->second.lengths[r]);
        }
        continue;
      }
      const SparseValues& sv = batch.sparse.at(name);
      size_t value = 0, step = 0;
      for (int64_t r = 0; r < batch.size; ++r) {
        size_t n = 0;
        if (sv.key_lengths.empty()) {
          n = sv.lengths[r];
        } else {
          for (int32_t s = 0; s < sv.lengths[r]; ++s) n += sv.key_lengths[step++];
        }
        rows.ids[name].emplace_back(sv.values.begin() + value, sv.values.begin() + value + n);
        rows.steps[name].push_back(sv.key_lengths.empty() ? 1 : sv.lengths[r]);
        value += n;
      }
    }
    batch = ParsedBatch();
  }
  return rows;
}


}  // namespace gen_data_test
}  // namespace tzrec
