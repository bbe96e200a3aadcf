#include "tzrec/features/feature.h"

#include <cmath>
#include <set>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"

namespace tzrec {

Registry<FeatureFactory>& FeatureRegistry() {
  static Registry<FeatureFactory> registry("feature type");
  return registry;
}

void Feature::InitSparse(const std::string& name, int64_t num_embeddings, int embedding_dim,
                         const std::string& embedding_name, const std::string& pooling,
                         const std::string& fg_encoded_default, bool trainable) {
  name_ = name;
  is_sparse_ = true;
  trainable_ = trainable;
  num_embeddings_ = num_embeddings;
  embedding_dim_ = embedding_dim;
  embedding_name_ = embedding_name.empty() ? name + "_emb" : embedding_name;
  pooling_ = pooling;
  if (pooling_ != "sum" && pooling_ != "mean") {
    Fail(config_path(), ".pooling: '", pooling_, "' is not one of sum, mean");
  }
  if (embedding_dim_ <= 0) Fail(config_path(), ".embedding_dim must be set and > 0");
  if (num_embeddings_ <= 0) {
    Fail(config_path(), ": needs hash_bucket_size or num_buckets (bucket count > 0)");
  }
  if (!fg_encoded_default.empty()) {
    has_default_ = true;
    for (auto piece : SplitView(fg_encoded_default, context_.multival_sep)) {
      int64_t id;
      if (!ParseInt64(piece, &id)) {
        Fail(config_path(), ".fg_encoded_default_value: '", Printable(fg_encoded_default),
             "' is not a list of integer ids");
      }
      if (id < 0 || id >= num_embeddings_) {
        Fail(config_path(), ".fg_encoded_default_value: id ", id, " out of range [0, ",
             num_embeddings_, ")");
      }
      default_ids_.push_back(id);
    }
  }
}

void Feature::InitDense(const std::string& name, int value_dim,
                        const std::string& fg_encoded_default) {
  name_ = name;
  is_sparse_ = false;
  value_dim_ = value_dim;
  if (value_dim_ <= 0) Fail(config_path(), ".value_dim must be > 0 for a dense feature");
  if (!fg_encoded_default.empty()) {
    has_default_ = true;
    for (auto piece : SplitView(fg_encoded_default, context_.multival_sep)) {
      float value;
      if (!ParseFloat(piece, &value)) {
        Fail(config_path(), ".fg_encoded_default_value: '", Printable(fg_encoded_default),
             "' is not a list of numbers");
      }
      default_floats_.push_back(value);
    }
    if (static_cast<int>(default_floats_.size()) != value_dim_) {
      Fail(config_path(), ".fg_encoded_default_value has ", default_floats_.size(),
           " values but value_dim is ", value_dim_);
    }
  }
}

void Feature::FailRow(const RecordBatch& batch, size_t row, const std::string& what) const {
  Fail(batch.RowLocation(row), ": column '", name_, "' (", config_path(), "): ", what);
}

void Feature::ParseEncoded(const RecordBatch& batch, ParsedBatch* out) const {
  const Column* column = batch.Find(name_);
  if (!column) Fail(batch.source, ": column '", name_, "' for ", config_path(), " is missing");
  if (is_sparse_) {
    ParseSparse(batch, *column, &out->sparse[name_]);
  } else {
    auto& dense = out->dense[name_];
    dense.dim = value_dim_;
    ParseDense(batch, *column, &dense);
  }
}

void Feature::ParseSparse(const RecordBatch& batch, const Column& column,
                          SparseValues* out) const {
  const size_t rows = column.size();
  out->lengths.reserve(out->lengths.size() + rows);
  auto add_id = [&](size_t row, int64_t id) {
    if (id < 0 || id >= num_embeddings_) {
      FailRow(batch, row, StrCat("id ", id, " out of range [0, ", num_embeddings_, ")"));
    }
    out->values.push_back(id);
  };
  for (size_t row = 0; row < rows; ++row) {
    bool null = column.IsNull(row);
    if (!null && column.type == ColumnType::kString && column.StringAt(row).empty()) null = true;
    if (null) {
      if (has_default_) {
        out->values.insert(out->values.end(), default_ids_.begin(), default_ids_.end());
        out->lengths.push_back(static_cast<int32_t>(default_ids_.size()));
      } else {
        out->lengths.push_back(0);
      }
      continue;
    }
    switch (column.type) {
      case ColumnType::kInt64:
        add_id(row, column.ints[row]);
        out->lengths.push_back(1);
        break;
      case ColumnType::kDouble: {
        double value = column.doubles[row];
        if (value != std::floor(value)) FailRow(batch, row, StrCat("'", value, "' is not an id"));
        add_id(row, static_cast<int64_t>(value));
        out->lengths.push_back(1);
        break;
      }
      case ColumnType::kString: {
        int32_t count = 0;
        ForEachPiece(column.StringAt(row), context_.multival_sep, [&](std::string_view piece) {
          int64_t id;
          if (!ParseInt64(piece, &id)) {
            FailRow(batch, row, StrCat("'", Printable(piece), "' is not an integer id"));
          }
          add_id(row, id);
          ++count;
        });
        out->lengths.push_back(count);
        break;
      }
    }
  }
}

void Feature::ParseDense(const RecordBatch& batch, const Column& column,
                         DenseValues* out) const {
  const size_t rows = column.size();
  out->values.reserve(out->values.size() + rows * value_dim_);
  for (size_t row = 0; row < rows; ++row) {
    bool null = column.IsNull(row);
    if (!null && column.type == ColumnType::kString && column.StringAt(row).empty()) null = true;
    if (null) {
      if (!has_default_) {
        FailRow(batch, row, "null value; set fg_encoded_default_value to fill nulls");
      }
      out->values.insert(out->values.end(), default_floats_.begin(), default_floats_.end());
      continue;
    }
    if (column.type != ColumnType::kString) {
      if (value_dim_ != 1) {
        FailRow(batch, row, StrCat("one number given but value_dim is ", value_dim_));
      }
      out->values.push_back(column.type == ColumnType::kInt64
                                ? static_cast<float>(column.ints[row])
                                : static_cast<float>(column.doubles[row]));
      continue;
    }
    int count = 0;
    ForEachPiece(column.StringAt(row), context_.multival_sep, [&](std::string_view piece) {
      float value;
      if (!ParseFloat(piece, &value)) {
        FailRow(batch, row, StrCat("'", Printable(piece), "' is not a number"));
      }
      out->values.push_back(value);
      ++count;
    });
    if (count != value_dim_) {
      FailRow(batch, row, StrCat(count, " values but value_dim is ", value_dim_));
    }
  }
}

std::vector<std::unique_ptr<Feature>> CreateFeatures(
    const google::protobuf::RepeatedPtrField<protos::FeatureConfig>& configs,
    const protos::DataConfig& data_config) {
  std::vector<std::unique_ptr<Feature>> features;
  std::set<std::string> names;
  for (int i = 0; i < configs.size(); ++i) {
    const auto& config = configs.Get(i);
    const auto* oneof = config.GetDescriptor()->FindOneofByName("feature");
    const auto* which = config.GetReflection()->GetOneofFieldDescriptor(config, oneof);
    std::string base_path = StrCat("feature_configs[", i, "]");
    if (!which) Fail(base_path, ": no feature type set");
    if (!FeatureRegistry().Has(which->name())) {
      Fail(base_path, ".", which->name(), ": not supported yet");
    }
    FeatureContext context;
    context.fg_mode = data_config.fg_mode();
    context.multival_sep = data_config.fg_encoded_multival_sep();
    context.config_path = base_path + "." + which->name();
    auto feature = FeatureRegistry().Get(which->name())(config, context);
    if (!names.insert(feature->name()).second) {
      Fail(context.config_path, ".feature_name: duplicate feature name '", feature->name(), "'");
    }
    features.push_back(std::move(feature));
  }
  return features;
}

}  // namespace tzrec
