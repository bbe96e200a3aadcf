// Negative samplers (data_config's `sampler` oneof), in process, reading TorchEasyRec's
// GraphLearn table formats from local files (no LibTorch, no GraphLearn).
//
// Tables are CSV files (tab-separated unless the sampler sets field_delimiter) whose header
// names the columns as `name:type`, or Parquet files with those column names, matched by the
// same comma-separated globs as datasets:
//   item (node) table   id:int64 | weight:float | attrs:string (attr_fields joined by
//                       attr_delimiter, in attr_fields order)
//   user table          id:int64 | weight:float
//   edge tables         userid:int64 | itemid:int64 | weight:float
// A sampler draws items for one batch from the batch's item (and user) ids and returns their
// attribute text; the dataset parses them into the `__NEG__` data group after the batch's own
// rows. Samplers register under their config name (SamplerRegistry()) with the fields they
// honour.
//
// Memory: an item costs 44 bytes (id, weight, alias entry, text offset, sorted index, file and
// line for error messages) plus 4 per attribute and its attribute text: a 1M-item table with 6
// attributes took 0.37 s to load and about 100 MB (bench/sampler_throughput.sh). Edges cost
// 8 bytes plus 16 per distinct user. Tables are loaded once per process for identical sampler
// configs (train and eval datasets share them).
//
// Thread safety: a Sampler is immutable after construction; Sample() may run on any number of
// threads at once, each with its own random engine.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tzrec/common/registry.h"
#include "tzrec/data/record_batch.h"
#include "tzrec/protos/data.pb.h"

namespace tzrec {

// Row `row` of `column` as an int64 id (integers, integral doubles, or integer text); anything
// else fails naming the row and `what` (e.g. "column 'id:int64'").
int64_t IdAt(const RecordBatch& records, const Column& column, size_t row, const std::string& what);

// Vose's alias method: O(1) draws from a fixed discrete distribution.
class AliasTable {
 public:
  AliasTable() = default;
  // Weights must be finite and >= 0 with a positive sum (the caller names the table on error).
  explicit AliasTable(const std::vector<float>& weights);
  size_t size() const { return prob_.size(); }
  uint32_t Draw(std::mt19937_64& rng) const;

 private:
  std::vector<float> prob_;
  std::vector<uint32_t> alias_;
};

// An item (node) table: ids, weights and attribute text per item, in file order.
class SamplerItemTable {
 public:
  // Reads every file of `input_path` (globs, comma-separated). `attr_count` is how many
  // attributes each item's attrs hold (attr_fields' size); `where` names the config field.
  SamplerItemTable(const std::string& input_path, const std::string& field_delimiter,
            const std::string& attr_delimiter, size_t attr_count, const std::string& where);

  size_t size() const { return ids_.size(); }
  int64_t id(uint32_t index) const { return ids_[index]; }
  float weight(uint32_t index) const { return weights_[index]; }
  const std::vector<float>& weights() const { return weights_; }
  // Index of item `id`, or -1 when the table does not hold it.
  int64_t Find(int64_t id) const;
  // Attribute `attr` of item `index` (text between attr_delimiters).
  std::string_view Attr(uint32_t index, size_t attr) const;
  // Rows for `items` (indices): one string column per wanted attribute, named by `names`
  // (attribute positions `attrs`), lines pointing into the item table for error messages.
  RecordBatch AttrRows(const std::vector<uint32_t>& items, const std::vector<size_t>& attrs,
                       const std::vector<std::string>& names) const;
  // AttrRows of the attributes named `attr_fields` (in the table's order) that are among
  // `input_columns`; the others are left out (TorchEasyRec ignores them).
  RecordBatch InputAttrRows(const std::vector<uint32_t>& items, const std::vector<std::string>& attr_fields,
                            const std::vector<std::string>& input_columns) const;

 private:
  std::vector<int64_t> ids_;
  std::vector<float> weights_;
  std::string attr_text_;                 // every item's attrs, back to back
  std::vector<uint64_t> attr_offsets_;    // [items + 1] into attr_text_
  std::vector<uint32_t> attr_starts_;     // [items * attr_count]: start of each attribute
  size_t attr_count_ = 0;
  std::string attr_delimiter_;
  std::vector<uint32_t> sorted_;          // item indices sorted by id (Find)
  std::vector<int64_t> lines_;            // 1-based line of each item in its file
  std::vector<uint32_t> file_of_;         // file index of each item
  std::vector<std::string> files_;
};

// A user table's ids (TorchEasyRec's v2 and hard-negative samplers require one; edges must
// name its users).
std::vector<int64_t> ReadUserIds(const std::string& input_path, const std::string& field_delimiter,
                                 const std::string& where);

// user -> items edges (positive or hard-negative), items as indices into an SamplerItemTable.
class SamplerEdgeTable {
 public:
  // Edges naming an item that `items` does not hold are errors (file and line); so are users
  // missing from `users` when it is not empty.
  SamplerEdgeTable(const std::string& input_path, const std::string& field_delimiter,
            const SamplerItemTable& items, const std::vector<int64_t>& users, const std::string& where);
  // The items of user `user` in table order (empty when it has none).
  const uint32_t* Begin(int64_t user, size_t* count) const;
  // Whether the edge (user, item) exists.
  bool Has(int64_t user, uint32_t item) const;
  size_t num_edges() const { return items_.size(); }

 private:
  std::vector<int64_t> users_;      // distinct users, sorted
  std::vector<uint64_t> offsets_;   // [users + 1] into items_
  std::vector<uint32_t> items_;     // per user, in table order
  std::vector<uint32_t> sorted_;    // per user, sorted (Has)
};

// One batch's ids as the sampler reads them (item and user id columns, one per row).
struct SamplerInput {
  std::vector<int64_t> item_ids;
  std::vector<int64_t> user_ids;  // samplers with user_id_field only
};

// What a sampler drew for one batch.
struct SampledItems {
  // Item indices: `num_negatives` regular negatives, then the hard negatives.
  std::vector<uint32_t> items;
  int64_t num_negatives = 0;
  // Per hard negative: (batch row, slot) flattened, TorchEasyRec's HARD_NEG_INDICES.
  std::vector<int32_t> hard_neg_indices;
};

class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual SampledItems Sample(const SamplerInput& input, std::mt19937_64& rng) const = 0;

  // The config fields of the batch's id columns (user_id_field empty when not read).
  const std::string& item_id_field() const { return item_id_field_; }
  const std::string& user_id_field() const { return user_id_field_; }
  // attr_fields in config order.
  const std::vector<std::string>& attr_fields() const { return attr_fields_; }
  const SamplerItemTable& items() const { return *items_; }
  // Regular negatives per batch (num_sample, or in evaluation num_eval_sample when set).
  int64_t num_sample() const { return num_sample_; }

  // The sampled rows as attribute columns: attr_fields present in `input_columns` (the others
  // are left out, as TorchEasyRec ignores them).
  RecordBatch AttrRows(const SampledItems& sampled, const std::vector<std::string>& input_columns) const;

 protected:
  std::string item_id_field_;
  std::string user_id_field_;
  std::vector<std::string> attr_fields_;
  std::shared_ptr<const SamplerItemTable> items_;
  int64_t num_sample_ = 0;
};

struct SamplerContext {
  const google::protobuf::Message* config = nullptr;  // the oneof member, e.g. NegativeSampler
  std::string where;                                  // "data_config.negative_sampler"
  bool eval = false;                                  // evaluation: num_eval_sample applies
};

using SamplerFactory = std::function<std::shared_ptr<const Sampler>(const SamplerContext&)>;
// Slot tzrec.protos.DataConfig / sampler.
Registry<SamplerFactory>& SamplerRegistry();

// The sampler data_config configures (null when none) for training or evaluation.
std::shared_ptr<const Sampler> CreateSampler(const protos::DataConfig& data_config, bool eval);

// Shared by the samplers: tables loaded once per process per (kind, path, options) key.
std::shared_ptr<const SamplerItemTable> LoadItemTable(const std::string& input_path,
                                               const std::string& field_delimiter,
                                               const std::string& attr_delimiter,
                                               size_t attr_count, const std::string& where);
std::shared_ptr<const SamplerEdgeTable> LoadEdgeTable(const std::string& input_path,
                                               const std::string& field_delimiter,
                                               std::shared_ptr<const SamplerItemTable> items,
                                               const std::string& user_input_path,
                                               const std::string& where);

}  // namespace tzrec
