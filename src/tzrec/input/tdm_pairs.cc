#include "tzrec/input/tdm_pairs.h"

#include <algorithm>
#include <map>
#include <set>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/input/dataset.h"

namespace tzrec {
namespace {

// Raw data columns `feature` reads, through FG_DAG producers (its own name under FG_NONE).
std::vector<std::string> RawColumnsOf(const Feature& feature, const fg::FeatureGenerator* generator) {
  if (!generator) return {feature.name()};
  std::map<std::string, const fg::FeatureInfo*> infos;
  for (const fg::FeatureInfo& info : generator->features()) infos[info.name] = &info;
  std::vector<std::string> columns;
  std::vector<std::string> pending = {feature.name()};
  std::set<std::string> visited;
  while (!pending.empty()) {
    const std::string name = pending.back();
    pending.pop_back();
    auto it = infos.find(name);
    if (it == infos.end() || !visited.insert(name).second) continue;
    for (const fg::FeatureInput& input : it->second->inputs) {
      if (input.side == fg::Side::kConst) continue;
      if (input.side == fg::Side::kFeature) {
        pending.push_back(input.column);
      } else if (std::find(columns.begin(), columns.end(), input.column) == columns.end()) {
        columns.push_back(input.column);
      }
    }
  }
  return columns;
}

// Moves `features` (present in `from`) into `to`.
void MoveFeatures(const std::vector<const Feature*>& features, ParsedBatch* from, ParsedBatch* to) {
  for (const Feature* feature : features) {
    if (feature->is_sparse()) {
      to->sparse[feature->name()] = std::move(from->sparse.at(feature->name()));
    } else {
      to->dense[feature->name()] = std::move(from->dense.at(feature->name()));
    }
  }
}

}  // namespace

TdmPairs::TdmPairs(std::shared_ptr<const TdmSampler> sampler, const std::vector<const Feature*>& features,
                   std::shared_ptr<const fg::FeatureGenerator> generator, std::vector<std::string> input_columns,
                   const std::string& where)
    : sampler_(std::move(sampler)), generator_(std::move(generator)), input_columns_(std::move(input_columns)) {
  const std::set<std::string> attrs(sampler_->attr_fields().begin(), sampler_->attr_fields().end());
  for (const Feature* feature : features) {
    std::vector<std::string> item_columns, other_columns;
    for (const std::string& column : RawColumnsOf(*feature, generator_.get())) {
      (attrs.count(column) ? item_columns : other_columns).push_back(column);
    }
    if (!item_columns.empty() && !other_columns.empty()) {
      Fail(where, ": feature '", feature->name(), "' reads the tree nodes' attributes (", Join(item_columns, ", "),
           ") and other columns (", Join(other_columns, ", "), "); sampled nodes repeat their row's other ",
           "columns, so a feature must read one kind only");
    }
    if (!item_columns.empty()) item_features_.push_back(feature);
  }
  if (item_features_.empty()) {
    Fail(where, ": its attr_fields and item_id_field are inputs of no feature, so tree nodes would have no features");
  }
}

ParsedBatch TdmPairs::NodeFeatures(const std::vector<uint32_t>& nodes) const {
  RecordBatch records = sampler_->NodeRows(nodes, input_columns_);
  // Columns the nodes do not have (the user's) are null there; only item features are kept.
  if (generator_) {
    for (const std::string& name : generator_->input_columns()) {
      if (records.Find(name)) continue;
      Column column;
      column.name = name;
      for (size_t i = 0; i < nodes.size(); ++i) column.AppendString({}, false);
      records.columns.push_back(std::move(column));
    }
  }
  ParsedBatch parsed = ParseFeatureRows(item_features_, generator_.get(), records);
  ParsedBatch items;
  items.size = parsed.size;
  MoveFeatures(item_features_, &parsed, &items);
  return items;
}

ParsedBatch TdmPairs::Pair(const ParsedBatch& batch, const std::vector<int64_t>& rows, ParsedBatch items) const {
  TZREC_CHECK(items.size == static_cast<int64_t>(rows.size()), "TdmPairs::Pair: one item row per pair");
  ParsedBatch paired = batch.TakeRows(rows);
  MoveFeatures(item_features_, &items, &paired);
  return paired;
}

}  // namespace tzrec
