#include "tzrec/features/feature.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <google/protobuf/descriptor.h>

#include "tzrec/common/error.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"
#include "tzrec/fg/proto_fields.h"

namespace tzrec {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using fg::FieldOf;
using fg::HasField;
using fg::StringField;

Feature::Feature(const fg::FeatureInfo& info, FeatureContext context)
    : context_(std::move(context)) {
  data_group_ = context_.data_group;
  const Message& msg = *info.config;
  name_ = info.name;
  type_ = info.type;
  is_sparse_ = info.is_sparse;
  is_sequence_ = info.is_sequence;
  sequence_delim_ = info.sequence_delim;
  weighted_ = info.weighted;
  const FieldDescriptor* trainable = FieldOf(msg, "trainable");
  trainable_ = !trainable || msg.GetReflection()->GetBool(msg, trainable);
  // TorchEasyRec knows FP32 (its default) and FP16 tables; BF16 is ours (fp32's range in the
  // same two bytes). It has no effect without a table.
  if (FieldOf(msg, "data_type")) {
    const std::string data_type = StringField(msg, "data_type");
    if (data_type == "FP16") {
      table_data_type_ = TableDataType::kFP16;
    } else if (data_type == "BF16") {
      table_data_type_ = TableDataType::kBF16;
    } else if (data_type != "FP32") {
      Fail(config_path(), ".data_type: '", data_type, "' is not one of FP32, FP16, BF16");
    }
  }
  const std::string fg_encoded_default = StringField(msg, "fg_encoded_default_value");
  if (is_sparse_) {
    num_embeddings_ = info.num_embeddings;
    zch_ = info.zch;
    dynamicemb_ = info.dynamicemb;
    // zch / dynamicemb ids are raw (FG hashes into [0, 2^63 - 1)); their index maps them to rows.
    id_limit_ = zch_ || dynamicemb_ ? fg::kZchHashBuckets : num_embeddings_;
    const FieldDescriptor* dim = FieldOf(msg, "embedding_dim");
    const uint32_t configured_dim = dim ? msg.GetReflection()->GetUInt32(msg, dim) : 0;
    // Widths feed int32 tensor shapes and products (rows * dim); wider is surely a typo.
    if (configured_dim > static_cast<uint32_t>(kMaxEmbeddingDim)) {
      Fail(config_path(), ".embedding_dim ", configured_dim, " is larger than ", kMaxEmbeddingDim);
    }
    embedding_dim_ = static_cast<int>(configured_dim);
    std::string embedding_name = StringField(msg, "embedding_name");
    embedding_name_ = embedding_name.empty() ? name_ + "_emb" : embedding_name;
    if (FieldOf(msg, "pooling")) pooling_ = StringField(msg, "pooling");
    if (pooling_ != "sum" && pooling_ != "mean") {
      Fail(config_path(), ".pooling: '", pooling_, "' is not one of sum, mean");
    }
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
        if (id < 0 || id >= id_limit_) {
          Fail(config_path(), ".fg_encoded_default_value: id ", id, " out of range [0, ",
               id_limit_, ")");
        }
        default_ids_.push_back(id);
      }
    }
  } else {
    value_dim_ = std::max(info.value_dim, 1);
    if (HasField(msg, "autodis") || HasField(msg, "mlp")) {
      ParseDenseEmbedding(msg);
    } else if (info.type == "raw_feature" && HasField(msg, "embedding_dim")) {
      // TorchEasyRec ignores it too: a dense feature only gets an embedding via autodis/mlp.
      LOG_WARNING << config_path() << ".embedding_dim has no effect without boundaries, "
                  << "autodis or mlp; the feature is used as raw dense values";
    }
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
}

void Feature::ParseDenseEmbedding(const Message& msg) {
  const bool autodis = HasField(msg, "autodis");
  const std::string field = config_path() + (autodis ? ".autodis" : ".mlp");
  if (is_sequence_) {
    // TorchEasyRec skips dense embeddings of sequence features (raw values go in); a config
    // written for it (dssm_v2_mlpemb_fg_mock) must mean the same here, so say so and do that.
    LOG_WARNING << field << " has no effect on a sequence feature (as in TorchEasyRec): its "
                << "steps go in as raw values";
    return;
  }
  const FieldDescriptor* dim = FieldOf(msg, "embedding_dim");
  const uint32_t configured_dim = dim ? msg.GetReflection()->GetUInt32(msg, dim) : 0;
  if (configured_dim == 0 || configured_dim > static_cast<uint32_t>(kMaxEmbeddingDim)) {
    Fail(config_path(), ".embedding_dim: ", configured_dim, " (", field,
         " needs an embedding_dim in [1, ", kMaxEmbeddingDim, "])");
  }
  embedding_dim_ = static_cast<int>(configured_dim);
  if (!autodis) {
    dense_embedding_.kind = DenseEmbeddingSpec::Kind::kMlp;
    return;
  }
  const Message& config = msg.GetReflection()->GetMessage(msg, FieldOf(msg, "autodis"));
  const auto* reflection = config.GetReflection();
  const auto* descriptor = config.GetDescriptor();
  dense_embedding_.kind = DenseEmbeddingSpec::Kind::kAutoDis;
  dense_embedding_.num_channels = static_cast<int>(reflection->GetUInt32(config, descriptor->FindFieldByName("num_channels")));
  dense_embedding_.temperature = reflection->GetFloat(config, descriptor->FindFieldByName("temperature"));
  dense_embedding_.keep_prob = reflection->GetFloat(config, descriptor->FindFieldByName("keep_prob"));
  // AutoDis discretises one number: its meta-embeddings weigh a scalar.
  if (value_dim_ != 1) Fail(field, ": needs value_dim 1, the feature has ", value_dim_);
  if (dense_embedding_.num_channels <= 0 || dense_embedding_.num_channels > 4096) {
    Fail(field, ".num_channels: ", dense_embedding_.num_channels, " (must be in [1, 4096])");
  }
  if (!(dense_embedding_.temperature > 0)) Fail(field, ".temperature: ", dense_embedding_.temperature, " must be > 0");
  if (!std::isfinite(dense_embedding_.keep_prob)) Fail(field, ".keep_prob must be a number");
}

void Feature::FailRow(const RecordBatch& batch, size_t row, const std::string& what) const {
  Fail(batch.RowLocation(row), ": column '", name_, "' (", config_path(), "): ", what);
}

void Feature::ParseEncoded(const RecordBatch& batch, ParsedBatch* out) const {
  const Column* column = batch.Find(name_);
  if (!column) Fail(batch.source, ": column '", name_, "' for ", config_path(), " is missing");
  if (is_sparse_) {
    SparseValues& sparse = out->sparse[name_];
    sparse.sequence = is_sequence_;
    ParseSparse(batch, *column, &sparse);
  } else {
    auto& dense = out->dense[name_];
    dense.dim = value_dim_;
    dense.sequence = is_sequence_;
    ParseDense(batch, *column, &dense);
  }
}

int32_t Feature::AppendIds(const RecordBatch& batch, size_t row, std::string_view text,
                           std::string_view separator, SparseValues* out) const {
  // Most cells hold one plain decimal id: read it digit by digit here. Anything else (a
  // separator, sign, space, weight or 19+ digits) takes the general path, which reads such a
  // cell to the same id; a separator made of digits would split it, so it disables this.
  if (!weighted_ && !text.empty() && text.size() <= 18 &&
      std::none_of(separator.begin(), separator.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    int64_t id = 0;
    size_t i = 0;
    for (; i < text.size(); ++i) {
      const unsigned digit = static_cast<unsigned char>(text[i]) - static_cast<unsigned>('0');
      if (digit > 9) break;
      id = id * 10 + static_cast<int64_t>(digit);
    }
    if (i == text.size()) {
      if (id >= id_limit_) FailRow(batch, row, StrCat("id ", id, " out of range [0, ", id_limit_, ")"));
      out->values.push_back(id);
      return 1;
    }
  }
  int32_t count = 0;
  ForEachPiece(text, separator, [&](std::string_view piece) {
    if (piece.empty()) return;
    float weight = 1.0f;
    if (weighted_) {
      size_t colon = piece.rfind(':');
      if (colon == std::string_view::npos || !ParseFloat(piece.substr(colon + 1), &weight)) {
        FailRow(batch, row, StrCat("'", Printable(piece), "' is not id:weight"));
      }
      piece = piece.substr(0, colon);
    }
    int64_t id;
    if (!ParseInt64(piece, &id)) FailRow(batch, row, StrCat("'", Printable(piece), "' is not an integer id"));
    if (id < 0 || id >= id_limit_) {
      FailRow(batch, row, StrCat("id ", id, " out of range [0, ", id_limit_, ")"));
    }
    out->values.push_back(id);
    if (weighted_) out->weights.push_back(weight);
    ++count;
  });
  return count;
}

int32_t Feature::AppendFloats(const RecordBatch& batch, size_t row, std::string_view text,
                              std::string_view separator, DenseValues* out) const {
  int32_t count = 0;
  ForEachPiece(text, separator, [&](std::string_view piece) {
    float value;
    if (!ParseFloat(piece, &value)) FailRow(batch, row, StrCat("'", Printable(piece), "' is not a number"));
    out->values.push_back(value);
    ++count;
  });
  if (count != value_dim_) FailRow(batch, row, StrCat(count, " values but value_dim is ", value_dim_));
  return count;
}

void Feature::ParseSparse(const RecordBatch& batch, const Column& column, SparseValues* out) const {
  const size_t rows = column.size();
  out->lengths.reserve(out->lengths.size() + rows);
  // Parquet lists arrive as text joined by the column's own separators.
  const std::string_view item_sep = column.list_depth == 1 && !is_sequence_ ? column.list_separator
                                    : column.list_depth == 2                 ? column.list_separator
                                                                             : context_.multival_sep;
  const std::string_view step_sep = column.list_depth == 2   ? column.nested_separator
                                    : column.list_depth == 1 ? column.list_separator
                                                             : sequence_delim_;
  auto add_default = [&]() {
    out->values.insert(out->values.end(), default_ids_.begin(), default_ids_.end());
    if (weighted_) out->weights.insert(out->weights.end(), default_ids_.size(), 1.0f);
    return static_cast<int32_t>(default_ids_.size());
  };
  for (size_t row = 0; row < rows; ++row) {
    bool null = column.IsNull(row);
    if (!null && column.type == ColumnType::kString && column.StringAt(row).empty()) null = true;
    if (null) {
      if (!has_default_) {
        out->lengths.push_back(0);
      } else if (is_sequence_) {
        out->key_lengths.push_back(add_default());
        out->lengths.push_back(1);
      } else {
        out->lengths.push_back(add_default());
      }
      continue;
    }
    if (column.type != ColumnType::kString) {
      int64_t id;
      if (column.type == ColumnType::kInt64) {
        id = column.ints[row];
      } else {
        double value = column.doubles[row];
        if (value != std::floor(value)) FailRow(batch, row, StrCat("'", value, "' is not an id"));
        id = static_cast<int64_t>(value);
      }
      if (id < 0 || id >= id_limit_) {
        FailRow(batch, row, StrCat("id ", id, " out of range [0, ", id_limit_, ")"));
      }
      out->values.push_back(id);
      if (weighted_) out->weights.push_back(1.0f);
      if (is_sequence_) out->key_lengths.push_back(1);
      out->lengths.push_back(1);
      continue;
    }
    std::string_view text = column.StringAt(row);
    if (!is_sequence_) {
      out->lengths.push_back(AppendIds(batch, row, text, item_sep, out));
      continue;
    }
    int32_t steps = 0;
    ForEachPiece(text, step_sep, [&](std::string_view step) {
      int32_t n = step.empty() && has_default_ ? add_default() : AppendIds(batch, row, step, item_sep, out);
      out->key_lengths.push_back(n);
      ++steps;
    });
    out->lengths.push_back(steps);
  }
}

void Feature::ParseDense(const RecordBatch& batch, const Column& column, DenseValues* out) const {
  const size_t rows = column.size();
  out->values.reserve(out->values.size() + rows * value_dim_);
  const std::string_view item_sep =
      column.list_depth >= 1 && !(is_sequence_ && column.list_depth == 1) ? column.list_separator
                                                                         : context_.multival_sep;
  const std::string_view step_sep = column.list_depth == 2   ? column.nested_separator
                                    : column.list_depth == 1 ? column.list_separator
                                                             : sequence_delim_;
  for (size_t row = 0; row < rows; ++row) {
    bool null = column.IsNull(row);
    if (!null && column.type == ColumnType::kString && column.StringAt(row).empty()) null = true;
    if (null) {
      if (!has_default_) {
        if (is_sequence_) {
          out->lengths.push_back(0);
          continue;
        }
        FailRow(batch, row, "null value; set fg_encoded_default_value to fill nulls");
      }
      out->values.insert(out->values.end(), default_floats_.begin(), default_floats_.end());
      if (is_sequence_) out->lengths.push_back(1);
      continue;
    }
    if (column.type != ColumnType::kString) {
      if (value_dim_ != 1) {
        FailRow(batch, row, StrCat("one number given but value_dim is ", value_dim_));
      }
      out->values.push_back(column.type == ColumnType::kInt64
                                ? static_cast<float>(column.ints[row])
                                : static_cast<float>(column.doubles[row]));
      if (is_sequence_) out->lengths.push_back(1);
      continue;
    }
    std::string_view text = column.StringAt(row);
    if (!is_sequence_) {
      AppendFloats(batch, row, text, item_sep, out);
      continue;
    }
    int32_t steps = 0;
    ForEachPiece(text, step_sep, [&](std::string_view step) {
      if (step.empty() && has_default_) {
        out->values.insert(out->values.end(), default_floats_.begin(), default_floats_.end());
      } else {
        AppendFloats(batch, row, step, item_sep, out);
      }
      ++steps;
    });
    out->lengths.push_back(steps);
  }
}

std::vector<std::unique_ptr<Feature>> CreateFeatures(
    const google::protobuf::RepeatedPtrField<protos::FeatureConfig>& configs,
    const protos::DataConfig& data_config) {
  std::set<std::string> neg_fields;
  const auto* sampler_oneof = data_config.GetDescriptor()->FindOneofByName("sampler");
  const FieldDescriptor* sampler = data_config.GetReflection()->GetOneofFieldDescriptor(data_config, sampler_oneof);
  if (sampler && sampler->name() != "tdm_sampler") {
    const Message& sampler_config = data_config.GetReflection()->GetMessage(data_config, sampler);
    const FieldDescriptor* attr_fields = sampler_config.GetDescriptor()->FindFieldByName("attr_fields");
    const int n = sampler_config.GetReflection()->FieldSize(sampler_config, attr_fields);
    for (int i = 0; i < n; ++i) {
      neg_fields.insert(sampler_config.GetReflection()->GetRepeatedString(sampler_config, attr_fields, i));
    }
  }
  const bool fg_inputs = data_config.fg_mode() == protos::FG_NORMAL || data_config.fg_mode() == protos::FG_DAG;
  std::vector<std::unique_ptr<Feature>> features;
  for (const fg::FeatureInfo& info : fg::DescribeFeatures(configs, data_config.fg_mode())) {
    if (info.stub) continue;  // FG intermediates are not model inputs
    FeatureContext context;
    context.fg_mode = data_config.fg_mode();
    context.multival_sep = data_config.fg_encoded_multival_sep();
    context.config_path = info.config_path;
    // TorchEasyRec's feature.inputs: the feature's own name without FG, else its inputs' names.
    bool negative = false;
    if (!fg_inputs) {
      negative = neg_fields.count(info.name) > 0;
    } else {
      for (const fg::FeatureInput& input : info.inputs) {
        if (input.side != fg::Side::kConst && neg_fields.count(input.column)) negative = true;
      }
    }
    context.negative = negative;
    context.data_group = negative && !data_config.force_base_data_group() ? kNegDataGroup : "__BASE__";
    features.push_back(std::make_unique<Feature>(info, context));
  }
  return features;
}

}  // namespace tzrec
