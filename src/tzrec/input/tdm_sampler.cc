#include "tzrec/input/tdm_sampler.h"

#include <algorithm>
#include <cmath>

#include "tzrec/common/error.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"

namespace tzrec {

TdmSampler::TdmSampler(const protos::TDMSampler& config, const std::string& where, TdmTreeUse use)
    : where_(where), item_id_field_(config.item_id_field()) {
  if (item_id_field_.empty()) Fail(where, ".item_id_field is required");
  attr_fields_.assign(config.attr_fields().begin(), config.attr_fields().end());
  if (attr_fields_.empty() || attr_fields_[0] != "tree_level") attr_fields_.insert(attr_fields_.begin(), "tree_level");
  if (attr_fields_.size() < 2 || attr_fields_[1] != item_id_field_) attr_fields_.insert(attr_fields_.begin() + 1, item_id_field_);
  layer_num_sample_.assign(config.layer_num_sample().begin(), config.layer_num_sample().end());
  const int levels = static_cast<int>(layer_num_sample_.size());
  if (levels < 2) Fail(where, ".layer_num_sample: one entry per tree level (at least 2), got ", levels);
  if (layer_num_sample_[0] != 0) Fail(where, ".layer_num_sample[0] must be 0 (the root has no negatives)");
  if (use == TdmTreeUse::kTrain && config.num_eval_sample() > 0) {
    LOG_WARNING << where << ".num_eval_sample has no effect: the tdm_sampler draws layer_num_sample in evaluation too "
                << "(as TorchEasyRec's)";
  }
  remain_ratio_ = config.remain_ratio();
  if (!(remain_ratio_ > 0 && remain_ratio_ <= 1)) Fail(where, ".remain_ratio must be in (0, 1], got ", remain_ratio_);
  const int middle = levels - 2;
  const std::string& type = config.probability_type();
  for (int i = 1; i <= middle; ++i) {
    if (type == "UNIFORM") {
      level_probability_.push_back(1.0);
    } else if (type == "ARITHMETIC") {
      level_probability_.push_back(i);
    } else if (type == "RECIPROCAL") {
      level_probability_.push_back(1.0 / (levels - 1 - i));
    } else {
      Fail(where, ".probability_type: '", type, "' (UNIFORM, ARITHMETIC or RECIPROCAL)");
    }
  }

  nodes_ = LoadItemTable(config.item_input_path(), config.field_delimiter(), config.attr_delimiter(),
                         attr_fields_.size(), where + ".item_input_path");
  levels_.resize(nodes_->size());
  level_nodes_.resize(levels);
  for (uint32_t n = 0; n < nodes_->size(); ++n) {
    int64_t level = 0;
    if (!ParseInt64(Trim(nodes_->Attr(n, 0)), &level) || level < -1) {
      Fail(where, ".item_input_path: node ", nodes_->id(n), " has tree_level '", nodes_->Attr(n, 0),
           "', not a level (the first attribute of the feature column is the node's level)");
    }
    if (level >= levels) {
      Fail(where, ": node ", nodes_->id(n), " is on level ", level, " but layer_num_sample has ", levels,
           " entries (one per level of the tree)");
    }
    levels_[n] = static_cast<int>(level);
    if (level >= 0) level_nodes_[level].push_back(n);
  }
  const int64_t entry = nodes_->Find(-1);
  if (use == TdmTreeUse::kRetrieve) {
    if (entry < 0 || levels_[entry] != -1) {
      Fail(where, ".item_input_path: no entry node -1 on level -1 (tdm_init_tree writes it; retrieval starts there)");
    }
    entry_node_ = static_cast<uint32_t>(entry);
    if (config.predict_edge_input_path().empty()) Fail(where, ".predict_edge_input_path is required for retrieval");
    children_ = LoadEdgeTable(config.predict_edge_input_path(), config.field_delimiter(), nodes_, "",
                              where + ".predict_edge_input_path");
    for (int level = 0; level < levels; ++level) {
      if (level_nodes_[level].empty()) {
        Fail(where, ": the tree has no node on level ", level, " but layer_num_sample has ", levels, " entries");
      }
    }
    size_t roots = 0;
    const uint32_t* root = Children(entry_node_, &roots);
    if (roots != 1 || levels_[root[0]] != 0) {
      Fail(where, ".predict_edge_input_path: the entry node -1 needs exactly one child, the root on level 0 (it has ",
           roots, " children)");
    }
    return;
  }
  for (int level = 0; level < levels; ++level) {
    if (level_nodes_[level].empty()) {
      Fail(where, ": the tree has no node on level ", level, " but layer_num_sample has ", levels, " entries");
    }
    std::vector<float> weights;
    int64_t drawable = 0;
    for (uint32_t n : level_nodes_[level]) {
      weights.push_back(nodes_->weight(n));
      drawable += nodes_->weight(n) > 0;
    }
    if (level > 0 && layer_num_sample_[level] > 0 && drawable < layer_num_sample_[level] + 1) {
      Fail(where, ".layer_num_sample[", level, "] = ", layer_num_sample_[level], ": level ", level, " has ", drawable,
           " nodes of positive weight; distinct negatives besides the row's own node need at least ",
           layer_num_sample_[level] + 1);
    }
    level_alias_.emplace_back(drawable > 0 ? AliasTable(weights) : AliasTable());
  }
  edges_ = LoadEdgeTable(config.edge_input_path(), config.field_delimiter(), nodes_, "", where + ".edge_input_path");
}

std::vector<int> TdmSampler::KeptLevels(std::mt19937_64& rng) const {
  const int middle = num_levels() - 2;
  std::vector<int> kept;
  if (remain_ratio_ >= 1.0) {
    for (int i = 1; i <= middle; ++i) kept.push_back(i);
    return kept;
  }
  // round() half to even, as Python's; levels drawn one by one without replacement.
  const int count = static_cast<int>(std::nearbyint(remain_ratio_ * middle));
  std::vector<double> weights = level_probability_;
  for (int k = 0; k < count; ++k) {
    std::discrete_distribution<int> pick(weights.begin(), weights.end());
    const int chosen = pick(rng);
    kept.push_back(chosen + 1);
    weights[chosen] = 0.0;
  }
  std::sort(kept.begin(), kept.end());
  return kept;
}

TdmSample TdmSampler::Sample(const std::vector<int64_t>& leaf_ids, std::mt19937_64& rng) const {
  const int levels = num_levels();
  const int leaf_level = levels - 1;
  TZREC_CHECK(edges_ != nullptr, "TdmSampler::Sample needs a sampler built for training");
  TdmSample out;
  out.kept_levels = KeptLevels(rng);
  std::vector<int> negative_levels = out.kept_levels;
  negative_levels.push_back(leaf_level);
  out.positives_per_row = static_cast<int64_t>(out.kept_levels.size());
  for (int level : negative_levels) out.negatives_per_row += layer_num_sample_[level];
  out.positives.reserve(leaf_ids.size() * out.positives_per_row);
  out.negatives.reserve(leaf_ids.size() * out.negatives_per_row);
  std::vector<int64_t> ancestor(levels, -1);
  std::vector<uint32_t> chosen;
  for (int64_t id : leaf_ids) {
    const int64_t leaf = nodes_->Find(id);
    if (leaf < 0 || levels_[leaf] != leaf_level) {
      Fail(where_, ": item ", id, " is not a leaf of the tree (", leaf < 0 ? "not in the node table" : "a node on level " +
           std::to_string(levels_[leaf]), "); every item of the data must be a leaf");
    }
    std::fill(ancestor.begin(), ancestor.end(), -1);
    size_t count = 0;
    const uint32_t* edges = edges_->Begin(id, &count);
    for (size_t e = 0; e < count; ++e) {
      const int level = levels_[edges[e]];
      if (level > 0 && level < leaf_level) ancestor[level] = edges[e];
    }
    for (int level = 1; level < leaf_level; ++level) {
      if (ancestor[level] < 0) {
        Fail(where_, ".edge_input_path: leaf ", id, " has no ancestor on level ", level,
             " (each leaf needs an edge to every ancestor but the root)");
      }
    }
    for (int level : out.kept_levels) out.positives.push_back(static_cast<uint32_t>(ancestor[level]));
    for (int level : negative_levels) {
      const int64_t wanted = layer_num_sample_[level];
      const uint32_t own = level == leaf_level ? static_cast<uint32_t>(leaf) : static_cast<uint32_t>(ancestor[level]);
      const std::vector<uint32_t>& candidates = level_nodes_[level];
      chosen.clear();
      while (static_cast<int64_t>(chosen.size()) < wanted) {
        const uint32_t node = candidates[level_alias_[level].Draw(rng)];
        if (node == own || std::find(chosen.begin(), chosen.end(), node) != chosen.end()) continue;
        chosen.push_back(node);
      }
      out.negatives.insert(out.negatives.end(), chosen.begin(), chosen.end());
    }
  }
  return out;
}

const uint32_t* TdmSampler::Children(uint32_t index, size_t* count) const {
  TZREC_CHECK(children_ != nullptr, "TdmSampler::Children needs a sampler built for retrieval");
  return children_->Begin(nodes_->id(index), count);
}

RecordBatch TdmSampler::NodeRows(const std::vector<uint32_t>& nodes, const std::vector<std::string>& input_columns) const {
  return nodes_->InputAttrRows(nodes, attr_fields_, input_columns);
}

namespace {

// The tdm_sampler grows batches instead of adding negatives of another data group: the Dataset
// builds its TdmSampler itself; as a negative sampler there is none.
std::shared_ptr<const Sampler> NoNegativeSampler(const SamplerContext&) { return nullptr; }

}  // namespace

TZREC_REGISTER(SamplerRegistry(), "tdm_sampler", NoNegativeSampler, "item_input_path", "edge_input_path",
               "predict_edge_input_path", "attr_fields", "item_id_field", "layer_num_sample", "attr_delimiter",
               "num_eval_sample", "field_delimiter", "remain_ratio", "probability_type");

}  // namespace tzrec
