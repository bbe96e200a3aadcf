// Test helpers for models: building a model (with its features and tables) from config text,
// and batches from plain values. LibTorch tests only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tzrec/batch/batch.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/pipeline/pipeline.h"

namespace tzrec {
namespace testing {

// Parses `config_text`, builds features and the model, materialises the tables with an SGD
// sparse optimizer (lr 0.1) when `training` (else without optimizer state).
inline std::unique_ptr<Pipeline> BuildTestPipeline(const std::string& config_text,
                                                   bool training = true) {
  protos::EasyRecConfig config = ParsePipelineConfigText(config_text, "test");
  if (!config.train_config().has_sparse_optimizer()) {
    config.mutable_train_config()->mutable_sparse_optimizer()->mutable_sgd_optimizer()->set_lr(0.1f);
  }
  if (!config.train_config().has_dense_optimizer()) {
    config.mutable_train_config()->mutable_dense_optimizer()->mutable_sgd_optimizer()->set_lr(0.1f);
  }
  auto pipeline = BuildFeatures(config, training ? PipelineMode::kTrain : PipelineMode::kEval);
  BuildModel(pipeline.get(), nullptr);
  return pipeline;
}

// Single-id sparse features: ids[f][row]; dense features one value per row; labels.
struct SimpleRows {
  std::map<std::string, std::vector<std::vector<int64_t>>> sparse;
  std::map<std::string, std::vector<std::vector<float>>> dense;
  std::map<std::string, std::vector<float>> labels;
  std::map<std::string, std::vector<float>> weights;
  // Sequence features: [row][step] ids (sparse) or values (dense, value_dim each).
  std::map<std::string, std::vector<std::vector<std::vector<int64_t>>>> sequences;
  std::map<std::string, std::vector<std::vector<std::vector<float>>>> dense_sequences;
};

inline Batch MakeBatch(const SimpleRows& rows, int64_t size) {
  ParsedBatch parsed;
  parsed.size = size;
  for (const auto& [name, per_row] : rows.sparse) {
    SparseValues& sv = parsed.sparse[name];
    for (const auto& ids : per_row) {
      sv.values.insert(sv.values.end(), ids.begin(), ids.end());
      sv.lengths.push_back(static_cast<int32_t>(ids.size()));
    }
  }
  for (const auto& [name, per_row] : rows.dense) {
    DenseValues& dv = parsed.dense[name];
    dv.dim = per_row.empty() ? 1 : static_cast<int32_t>(per_row[0].size());
    for (const auto& v : per_row) dv.values.insert(dv.values.end(), v.begin(), v.end());
  }
  for (const auto& [name, per_row] : rows.sequences) {
    SparseValues& sv = parsed.sparse[name];
    sv.sequence = true;
    for (const auto& steps : per_row) {
      sv.lengths.push_back(static_cast<int32_t>(steps.size()));
      for (const auto& ids : steps) {
        sv.values.insert(sv.values.end(), ids.begin(), ids.end());
        sv.key_lengths.push_back(static_cast<int32_t>(ids.size()));
      }
    }
  }
  for (const auto& [name, per_row] : rows.dense_sequences) {
    DenseValues& dv = parsed.dense[name];
    dv.sequence = true;
    dv.dim = 1;
    for (const auto& steps : per_row) {
      dv.lengths.push_back(static_cast<int32_t>(steps.size()));
      for (const auto& v : steps) {
        dv.dim = static_cast<int32_t>(v.size());
        dv.values.insert(dv.values.end(), v.begin(), v.end());
      }
    }
  }
  parsed.labels = rows.labels;
  parsed.sample_weights = rows.weights;
  return ToBatch(std::move(parsed));
}

}  // namespace testing
}  // namespace tzrec
