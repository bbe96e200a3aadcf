// Helpers for feature-generation tests: configs from text, hand-built record batches.
#pragma once

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "tzrec/data/record_batch.h"
#include "tzrec/fg/feature_generator.h"
#include "tzrec/protos/pipeline.pb.h"

namespace tzrec::fg::testing {

using Cells = std::vector<std::optional<std::string>>;

inline Column TextColumn(const std::string& name, const Cells& cells) {
  Column c;
  c.name = name;
  for (const auto& cell : cells) c.AppendString(cell ? *cell : std::string(), cell.has_value());
  return c;
}

inline Column IntColumn(const std::string& name, const std::vector<std::optional<int64_t>>& cells) {
  Column c;
  c.name = name;
  c.type = ColumnType::kInt64;
  for (const auto& cell : cells) {
    c.valid.push_back(cell.has_value());
    c.ints.push_back(cell.value_or(0));
  }
  return c;
}

inline Column DoubleColumn(const std::string& name, const std::vector<std::optional<double>>& cells) {
  Column c;
  c.name = name;
  c.type = ColumnType::kDouble;
  for (const auto& cell : cells) {
    c.valid.push_back(cell.has_value());
    c.doubles.push_back(cell.value_or(0));
  }
  return c;
}

// A Parquet-style LIST column: items joined by \x1d (depth 1) or sub-lists by ';' (depth 2).
inline Column ListColumn(const std::string& name, const Cells& cells, int depth = 1) {
  Column c = TextColumn(name, cells);
  c.list_depth = depth;
  c.list_separator = "\x1d";
  if (depth > 1) c.nested_separator = ";";
  return c;
}

inline RecordBatch Batch(std::vector<Column> columns) {
  RecordBatch batch;
  batch.source = "test.csv";
  size_t rows = 0;
  for (const auto& c : columns) rows = std::max(rows, c.size());
  for (size_t i = 0; i < rows; ++i) batch.line_numbers.push_back(static_cast<int64_t>(i) + 2);
  batch.columns = std::move(columns);
  return batch;
}

// Feature configs from the text of `feature_configs { ... }` blocks.
inline protos::EasyRecConfig Config(const std::string& text) {
  protos::EasyRecConfig config;
  google::protobuf::TextFormat::Parser parser;
  parser.AllowPartialMessage(true);  // a pipeline config's other required parts are absent
  EXPECT_TRUE(parser.ParseFromString(text, &config)) << text;
  return config;
}

// Runs FG over `batch` for the features of `config_text`.
inline ParsedBatch Generate(const std::string& config_text, const RecordBatch& batch,
                           protos::FgMode mode = protos::FG_NORMAL) {
  static thread_local std::vector<protos::EasyRecConfig> keep_alive;
  keep_alive.push_back(Config(config_text));
  const auto& config = keep_alive.back();
  FeatureGenerator generator(DescribeFeatures(config.feature_configs(), mode), mode);
  ParsedBatch out;
  generator.Generate(batch, &out);
  return out;
}

}  // namespace tzrec::fg::testing
