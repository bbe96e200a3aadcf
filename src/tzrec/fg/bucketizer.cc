#include "tzrec/fg/bucketizer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <set>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>

#include "tzrec/common/error.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/strings.h"
#include "tzrec/fg/proto_fields.h"

namespace tzrec::fg {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

int RepeatedSize(const Message& msg, const char* name) {
  const FieldDescriptor* field = FieldOf(msg, name);
  return field && field->is_repeated() ? msg.GetReflection()->FieldSize(msg, field) : 0;
}

std::string FormatNumber(double value) {
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

}  // namespace

Bucketizer Bucketizer::FromConfig(const Message& feature, const std::string& where) {
  Bucketizer b;
  // Ids index embedding rows; beyond kMaxBuckets the table could not be allocated anyway and
  // row counts times widths would overflow int64 (a uint64 above 2^63 even reads negative).
  auto bounded = [&](uint64_t value, const char* field) {
    if (value > static_cast<uint64_t>(kMaxBuckets)) {
      Fail(where, ".", field, " ", value, " is larger than ", kMaxBuckets, " (2^40)");
    }
    return static_cast<int64_t>(value);
  };
  const bool has_dbv = HasField(feature, "default_bucketize_value");
  const int64_t dbv = has_dbv ? bounded(UInt64Field(feature, "default_bucketize_value"), "default_bucketize_value") : 1;
  const std::string default_value = StringField(feature, "default_value");
  b.hash_kind_ = DefaultHashKind();
  if (HasField(feature, "zch") || HasField(feature, "dynamicemb")) {
    // TorchEasyRec's FG hashes into the whole int64 range; the managed-collision index
    // (embedding/zch_row_index.h) or the dynamic table (embedding/dynamic_row_index.h) maps
    // those ids to zch_size / max_capacity rows, which wins over the other bucketizer fields as
    // it does there.
    const bool zch = HasField(feature, "zch");
    const char* field = zch ? "zch_size" : "max_capacity";
    b.kind_ = Kind::kHash;
    b.buckets_ = static_cast<uint64_t>(kZchHashBuckets);
    b.num_embeddings_ = bounded(
        UInt64Field(feature.GetReflection()->GetMessage(feature, FieldOf(feature, zch ? "zch" : "dynamicemb")), field),
        zch ? "zch.zch_size" : "dynamicemb.max_capacity");
    if (b.num_embeddings_ == 0) Fail(where, zch ? ".zch" : ".dynamicemb", ".", field, " must be > 0");
  } else if (HasField(feature, "hash_bucket_size")) {
    b.kind_ = Kind::kHash;
    b.buckets_ = static_cast<uint64_t>(bounded(UInt64Field(feature, "hash_bucket_size"), "hash_bucket_size"));
    if (b.buckets_ == 0) Fail(where, ".hash_bucket_size must be > 0");
    b.num_embeddings_ = static_cast<int64_t>(b.buckets_);
  } else if (HasField(feature, "num_buckets")) {
    b.kind_ = Kind::kNumBuckets;
    b.buckets_ = static_cast<uint64_t>(bounded(UInt64Field(feature, "num_buckets"), "num_buckets"));
    if (b.buckets_ == 0) Fail(where, ".num_buckets must be > 0");
    b.num_embeddings_ = static_cast<int64_t>(b.buckets_);
  } else if (RepeatedSize(feature, "vocab_list") > 0) {
    b.kind_ = Kind::kVocab;
    const auto* field = FieldOf(feature, "vocab_list");
    if (!has_dbv) b.vocab_list_ = {default_value, "<OOV>"};
    for (int i = 0; i < feature.GetReflection()->FieldSize(feature, field); ++i) {
      b.vocab_list_.push_back(feature.GetReflection()->GetRepeatedString(feature, field, i));
    }
    // A later entry wins: a default_value listed again keeps its list position.
    for (size_t i = 0; i < b.vocab_list_.size(); ++i) b.vocab_[b.vocab_list_[i]] = static_cast<int64_t>(i);
    b.num_embeddings_ = static_cast<int64_t>(b.vocab_list_.size());
    if (has_dbv && dbv >= b.num_embeddings_) {
      Fail(where, ".default_bucketize_value ", dbv, " must be < the vocab_list size ", b.num_embeddings_);
    }
    b.oov_id_ = dbv;
  } else if (RepeatedSize(feature, "vocab_dict") > 0) {
    b.kind_ = Kind::kVocab;
    const auto* field = FieldOf(feature, "vocab_dict");
    const auto* reflection = feature.GetReflection();
    std::vector<std::pair<std::string, int64_t>> entries;
    for (int i = 0; i < reflection->FieldSize(feature, field); ++i) {
      const Message& entry = reflection->GetRepeatedMessage(feature, field, i);
      const auto* key = entry.GetDescriptor()->FindFieldByName("key");
      const auto* value = entry.GetDescriptor()->FindFieldByName("value");
      entries.emplace_back(entry.GetReflection()->GetString(entry, key),
                           bounded(entry.GetReflection()->GetUInt64(entry, value), "vocab_dict value"));
    }
    // Protobuf maps have no order; sort for a stable fg.json.
    std::sort(entries.begin(), entries.end());
    if (!has_dbv) entries.emplace_back(default_value, 0);
    int64_t max_id = 0;
    for (const auto& entry : entries) {
      b.vocab_[entry.first] = entry.second;
      max_id = std::max(max_id, entry.second);
    }
    b.vocab_dict_entries_ = entries;
    b.num_embeddings_ = std::max(max_id, has_dbv ? dbv : 1) + 1;
    b.oov_id_ = dbv;
  } else if (!StringField(feature, "vocab_file").empty() &&
             feature.GetDescriptor()->name() != "TokenizeFeature") {  // that one is the tokenizer
    b.kind_ = Kind::kVocab;
    if (!has_dbv) Fail(where, ".vocab_file needs default_bucketize_value");
    std::string path = StringField(feature, "vocab_file");
    const std::string asset_dir = StringField(feature, "asset_dir");
    if (!asset_dir.empty() && path[0] != '/') path = asset_dir + "/" + path;
    // An ifstream reads a directory as an empty file; say what it is.
    if (IsDirectory(path)) Fail(where, ".vocab_file: '", path, "' is a directory, not a vocabulary file");
    std::ifstream in(path);
    if (!in) Fail(where, ".vocab_file: cannot read '", path, "'");
    std::string line;
    int64_t line_number = 0, max_id = -1, next_id = 0;
    while (std::getline(in, line)) {
      ++line_number;
      std::string_view text = Trim(line);
      if (text.empty()) continue;
      size_t space = text.find_first_of(" \t");
      if (space == std::string_view::npos) {
        std::string word(text);
        if (!b.vocab_.count(word)) b.vocab_[word] = next_id++;
        max_id = std::max(max_id, next_id - 1);
      } else {
        int64_t id;
        if (!ParseInt64(Trim(text.substr(space + 1)), &id) || id < 0 || id > kMaxBuckets) {
          Fail(path, ":", line_number, ": expected 'token' or 'token id', got '", Printable(text), "'");
        }
        b.vocab_[std::string(text.substr(0, space))] = id;
        max_id = std::max(max_id, id);
      }
    }
    if (in.bad()) Fail(where, ".vocab_file: read error in '", path, "'");
    // Every value would land in the default bucket: surely the wrong file.
    if (b.vocab_.empty()) Fail(where, ".vocab_file: '", path, "' holds no tokens");
    b.num_embeddings_ = std::max(max_id, dbv) + 1;
    b.oov_id_ = dbv;
  } else if (RepeatedSize(feature, "boundaries") > 0) {
    b.kind_ = Kind::kBoundaries;
    const auto* field = FieldOf(feature, "boundaries");
    for (int i = 0; i < feature.GetReflection()->FieldSize(feature, field); ++i) {
      double value = feature.GetReflection()->GetRepeatedFloat(feature, field, i);
      // NaN compares false both ways, so the order check below would not see it.
      if (std::isnan(value)) Fail(where, ".boundaries[", i, "] is NaN");
      if (!b.boundaries_.empty() && !(b.boundaries_.back() < value)) {
        Fail(where, ".boundaries must be strictly increasing");
      }
      b.boundaries_.push_back(value);
    }
    b.num_embeddings_ = static_cast<int64_t>(b.boundaries_.size()) + 1;
  }
  return b;
}

bool Bucketizer::FromText(std::string_view text, int64_t* id, std::string* error) const {
  switch (kind_) {
    case Kind::kNone:
      *error = "no bucketizer";
      return false;
    case Kind::kHash:
      *id = HashToBucket(text, buckets_, hash_kind_);
      return true;
    case Kind::kNumBuckets: {
      int64_t value;
      if (!ParseInt64(text, &value)) {
        double number;
        if (!ParseDouble(text, &number) || number != std::floor(number)) {
          *error = StrCat("'", Printable(text), "' is not an integer id (num_buckets)");
          return false;
        }
        value = static_cast<int64_t>(number);
      }
      if (value < 0 || static_cast<uint64_t>(value) >= buckets_) {
        *error = StrCat("id ", value, " out of range [0, ", buckets_, ") (num_buckets)");
        return false;
      }
      *id = value;
      return true;
    }
    case Kind::kVocab: {
      auto it = vocab_.find(std::string(text));
      *id = it == vocab_.end() ? oov_id_ : it->second;
      return true;
    }
    case Kind::kBoundaries: {
      double value;
      if (!ParseDouble(text, &value)) {
        *error = StrCat("'", Printable(text), "' is not a number (boundaries)");
        return false;
      }
      return FromNumber(value, id, error);
    }
  }
  return false;
}

bool Bucketizer::FromNumber(double value, int64_t* id, std::string* error) const {
  switch (kind_) {
    case Kind::kHash:
      *id = HashFloatToBucket(static_cast<float>(value), buckets_, hash_kind_);
      return true;
    case Kind::kNumBuckets:
      if (std::isnan(value) || value != std::floor(value)) {
        *error = StrCat(value, " is not an integer id (num_buckets)");
        return false;
      }
      if (value < 0 || value >= static_cast<double>(buckets_)) {
        *error = StrCat("id ", value, " out of range [0, ", buckets_, ") (num_buckets)");
        return false;
      }
      *id = static_cast<int64_t>(value);
      return true;
    case Kind::kBoundaries:
      if (std::isnan(value)) {
        *error = "NaN cannot be bucketized (boundaries)";
        return false;
      }
      *id = std::upper_bound(boundaries_.begin(), boundaries_.end(), value) - boundaries_.begin();
      return true;
    case Kind::kVocab:
      return FromText(FormatNumber(value), id, error);
    case Kind::kNone:
      break;
  }
  *error = "no bucketizer";
  return false;
}

}  // namespace tzrec::fg
