#include "tzrec/tools/create_fg_json.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <utility>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/struct.pb.h>

#include "tzrec/common/error.h"
#include "tzrec/common/flags.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/fg/feature_info.h"
#include "tzrec/fg/proto_fields.h"
#include "tzrec/protos/feature.pb.h"

namespace tzrec {

// ------------------------------------------------------------------------------------- MD5
// RFC 1321. Hand-written because none of the project's dependencies offers MD5: OpenSSL's
// libcrypto is not among the Debian packages scripts/install_deps.sh installs or CMake links,
// and a new link dependency for one digest of small asset files is not worth it. Checked
// against the RFC's test suite (tests/fg/create_fg_json_test.cc).
std::string Md5Hex(std::string_view data) {
  static constexpr uint32_t kSines[64] = {
      0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613,
      0xfd469501, 0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193,
      0xa679438e, 0x49b40821, 0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d,
      0x02441453, 0xd8a1e681, 0xe7d3fbc8, 0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed,
      0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a, 0xfffa3942, 0x8771f681, 0x6d9d6122,
      0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70, 0x289b7ec6, 0xeaa127fa,
      0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665, 0xf4292244,
      0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
      0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb,
      0xeb86d391};
  static constexpr int kShifts[64] = {7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
                                      5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20,
                                      4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
                                      6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21};
  uint32_t state[4] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476};
  auto block = [&](const unsigned char* p) {
    uint32_t m[16];
    for (int i = 0; i < 16; ++i) {
      m[i] = uint32_t{p[4 * i]} | uint32_t{p[4 * i + 1]} << 8 | uint32_t{p[4 * i + 2]} << 16 |
             uint32_t{p[4 * i + 3]} << 24;
    }
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
    for (int i = 0; i < 64; ++i) {
      uint32_t f;
      int g;
      if (i < 16) {
        f = (b & c) | (~b & d);
        g = i;
      } else if (i < 32) {
        f = (d & b) | (~d & c);
        g = (5 * i + 1) % 16;
      } else if (i < 48) {
        f = b ^ c ^ d;
        g = (3 * i + 5) % 16;
      } else {
        f = c ^ (b | ~d);
        g = (7 * i) % 16;
      }
      f += a + kSines[i] + m[g];
      a = d;
      d = c;
      c = b;
      b += (f << kShifts[i]) | (f >> (32 - kShifts[i]));
    }
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
  };
  const auto* bytes = reinterpret_cast<const unsigned char*>(data.data());
  size_t full = data.size() / 64 * 64;
  for (size_t i = 0; i < full; i += 64) block(bytes + i);
  // Tail: the rest, 0x80, zeros, then the bit length little-endian (one or two blocks).
  unsigned char tail[128] = {0};
  size_t rest = data.size() - full;
  std::copy(bytes + full, bytes + data.size(), tail);
  tail[rest] = 0x80;
  size_t tail_size = rest + 1 + 8 <= 64 ? 64 : 128;
  uint64_t bits = static_cast<uint64_t>(data.size()) * 8;
  for (int i = 0; i < 8; ++i) tail[tail_size - 8 + i] = static_cast<unsigned char>(bits >> (8 * i));
  for (size_t i = 0; i < tail_size; i += 64) block(tail + i);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (uint32_t word : state) {
    for (int i = 0; i < 4; ++i) {
      unsigned byte = (word >> (8 * i)) & 0xff;
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    }
  }
  return out;
}

namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using Json = nlohmann::ordered_json;
using fg::FeatureInfo;

// FG's default multi-value separator; `separator` is written only when it differs.
const char* const kDefaultSeparator = "\x1d";

// ---------------------------------------------------------------- reflection helpers
uint64_t Uint(const Message& msg, const char* name) {
  const FieldDescriptor* f = fg::FieldOf(msg, name);
  if (!f) return 0;
  const auto* r = msg.GetReflection();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_UINT32: return r->GetUInt32(msg, f);
    case FieldDescriptor::CPPTYPE_UINT64: return r->GetUInt64(msg, f);
    case FieldDescriptor::CPPTYPE_INT32: return static_cast<uint64_t>(r->GetInt32(msg, f));
    case FieldDescriptor::CPPTYPE_INT64: return static_cast<uint64_t>(r->GetInt64(msg, f));
    default: return 0;
  }
}
std::vector<std::string> Strs(const Message& msg, const char* name) {
  std::vector<std::string> out;
  const FieldDescriptor* f = fg::FieldOf(msg, name);
  if (!f || !f->is_repeated()) return out;
  for (int i = 0; i < msg.GetReflection()->FieldSize(msg, f); ++i) {
    out.push_back(msg.GetReflection()->GetRepeatedString(msg, f, i));
  }
  return out;
}
// Repeated float fields (boundaries) as Python sees them: float32 widened to double, so
// 0.1 is written 0.10000000149011612 exactly as TorchEasyRec's json.dump does.
Json Floats(const Message& msg, const char* name) {
  Json out = Json::array();
  const FieldDescriptor* f = fg::FieldOf(msg, name);
  if (!f) return out;
  for (int i = 0; i < msg.GetReflection()->FieldSize(msg, f); ++i) {
    out.push_back(static_cast<double>(msg.GetReflection()->GetRepeatedFloat(msg, f, i)));
  }
  return out;
}

std::string Lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// os.path.splitext of a basename: the extension starts at the last dot that has a non-dot
// before it, and keeps its dot.
std::pair<std::string, std::string> SplitExt(const std::string& base) {
  size_t dot = base.rfind('.');
  if (dot == std::string::npos) return {base, ""};
  for (size_t i = 0; i < dot; ++i) {
    if (base[i] != '.') return {base.substr(0, dot), base.substr(dot)};
  }
  return {base, ""};
}

Json StructValueToJson(const google::protobuf::Value& value);
Json StructToJson(const google::protobuf::Struct& s) {
  // Protobuf maps have no order; sort for a stable fg.json.
  std::map<std::string, const google::protobuf::Value*> sorted;
  for (const auto& kv : s.fields()) sorted[kv.first] = &kv.second;
  Json out = Json::object();
  for (const auto& kv : sorted) out[kv.first] = StructValueToJson(*kv.second);
  return out;
}
// As json_format.MessageToDict: numbers are doubles (so 1 is written 1.0).
Json StructValueToJson(const google::protobuf::Value& value) {
  switch (value.kind_case()) {
    case google::protobuf::Value::kNumberValue: return value.number_value();
    case google::protobuf::Value::kStringValue: return value.string_value();
    case google::protobuf::Value::kBoolValue: return value.bool_value();
    case google::protobuf::Value::kStructValue: return StructToJson(value.struct_value());
    case google::protobuf::Value::kListValue: {
      Json out = Json::array();
      for (const auto& item : value.list_value().values()) out.push_back(StructValueToJson(item));
      return out;
    }
    default: return nullptr;
  }
}

// Which bucketizer key a cfg got.
enum class Bucketize { kNone, kHash, kNumBuckets, kVocabList, kVocabDict, kVocabFile, kBoundaries };

// Builds the fg.json entries of one feature, following TorchEasyRec's per-type `_fg_json()`
// and `BaseFeature.fg_json()`.
class FgJsonBuilder {
 public:
  FgJsonBuilder(const protos::EasyRecConfig& config, std::vector<FgAsset>* assets)
      : assets_(assets), output_delim_(config.data_config().fg_encoded_multival_sep()) {}

  std::vector<Json> Build(const FeatureInfo& info) {
    const Message& msg = *info.config;
    std::vector<Json> cfgs;
    const std::string& type = info.type;
    if (type == "id_feature" || type == "combo_feature" || type == "bool_mask_feature") {
      cfgs = IdLike(info, msg);
    } else if (type == "raw_feature") {
      cfgs = Raw(info, msg);
    } else if (type == "lookup_feature") {
      cfgs = Lookup(info, msg);
    } else if (type == "match_feature") {
      cfgs = Match(info, msg);
    } else if (type == "expr_feature") {
      cfgs = Expr(info, msg);
    } else if (type == "overlap_feature") {
      cfgs = Overlap(info, msg);
    } else if (type == "kv_dot_product") {
      cfgs = KvDotProduct(info, msg);
    } else if (type == "tokenize_feature") {
      cfgs = Tokenize(info, msg);
    } else if (type == "custom_feature") {
      cfgs = Custom(info, msg);
    } else if (type == "combine_feature") {
      cfgs = Combine(info, msg);
    } else {
      Fail(info.config_path, ": not supported yet by create_fg_json");
    }
    if (type == "tokenize_feature" && fg::BoolField(msg, "tokens_as_sequence")) {
      // A plain tokenize cfg whose token list is the sequence (no sequence_ wrapper).
      if (info.is_sequence) {
        Fail(info.config_path, ".tokens_as_sequence is only valid with tokenize_feature, not ",
             "sequence_tokenize_feature or a grouped sequence");
      }
      for (Json& cfg : cfgs) {
        if (!cfg.contains("default_value") || cfg["default_value"] == "") {
          cfg["default_value"] = "0";
        }
      }
    } else if (info.is_sequence) {
      // Sequences do not support an empty default: TorchEasyRec resets it to "0" in every cfg.
      const bool empty_default = fg::FieldOf(msg, "default_value") && fg::StringField(msg, "default_value").empty();
      for (Json& cfg : cfgs) {
        if (empty_default) cfg["default_value"] = "0";
        if (!info.grouped) {
          cfg["sequence_delim"] = info.sequence_delim;
          cfg["sequence_length"] = info.sequence_length;
          cfg["feature_type"] = "sequence_" + cfg["feature_type"].get<std::string>();
        }
      }
    }
    return cfgs;
  }

 private:
  // Resolves an asset path (asset_dir applied), reads it and returns what fg.json refers to:
  // the copied `<stem>_<md5><ext>` name, or the resolved path when not copying.
  std::string Asset(const FeatureInfo& info, const Message& msg, const std::string& field,
                    const std::string& configured) {
    std::string path = configured;
    const std::string asset_dir = fg::StringField(msg, "asset_dir");
    if (!asset_dir.empty() && !path.empty() && path[0] != '/') path = JoinPath(asset_dir, path);
    if (!assets_) return path;
    if (!PathExists(path) || IsDirectory(path)) {
      Fail(info.config_path, ".", field, ": asset file '", path, "' not found");
    }
    std::string content = ReadFileToString(path);
    std::string name = AssetCopyName(path, content);
    bool known = false;
    for (const FgAsset& asset : *assets_) known = known || asset.name == name;
    if (!known) assets_->push_back({path, name, std::move(content)});
    return name;
  }

  static void AddSeparator(const Message& msg, Json* cfg) {
    if (fg::FieldOf(msg, "separator") && fg::StringField(msg, "separator") != kDefaultSeparator) {
      (*cfg)["separator"] = fg::StringField(msg, "separator");
    }
  }
  static void AddNormalizer(const Message& msg, Json* cfg) {
    if (!fg::StringField(msg, "normalizer").empty()) (*cfg)["normalizer"] = fg::StringField(msg, "normalizer");
  }
  static void AddBoundaries(const Message& msg, Json* cfg) {
    if (fg::HasField(msg, "boundaries")) (*cfg)["boundaries"] = Floats(msg, "boundaries");
  }
  static void AddStubType(const Message& msg, Json* cfg) {
    if (fg::HasField(msg, "stub_type")) (*cfg)["stub_type"] = fg::BoolField(msg, "stub_type");
  }
  // The inputs that carry the sequence, when they are not the defaults (item side / the only
  // input). TorchEasyRec's newest tests expect this for simple sequences too.
  static void AddSequenceFields(const FeatureInfo& info, const Message& msg, Json* cfg) {
    if (info.is_sequence && fg::HasField(msg, "sequence_fields")) {
      (*cfg)["sequence_fields"] = Strs(msg, "sequence_fields");
    }
  }

  // The bucketizer keys, first match wins: zch / dynamicemb (as hash_bucket_size 2^63 - 1), hash_bucket_size, num_buckets, vocab_list,
  // vocab_dict, vocab_file, boundaries. This is the bucketizer's precedence (fg/bucketizer.h),
  // so fg.json bucketizes as training did and fits the embedding table. (TorchEasyRec's
  // id_feature.fg_json() tries num_buckets after the vocabularies while its num_embeddings
  // takes num_buckets first; the two only differ for a config that sets both.)
  // Vocabularies are the effective ones the bucketizer uses: without default_bucketize_value
  // the list gets [default_value, "<OOV>"] in front and the dict {default_value: 0}.
  Bucketize AddBucketizer(const FeatureInfo& info, const Message& msg, Json* cfg) {
    const bool has_dbv = fg::HasField(msg, "default_bucketize_value");
    const uint64_t dbv = has_dbv ? Uint(msg, "default_bucketize_value") : 1;
    const std::string default_value = fg::StringField(msg, "default_value");
    if (info.zch || info.dynamicemb) {
      // Raw ids over the whole int64 range; the managed-collision index picks the rows.
      (*cfg)["hash_bucket_size"] = static_cast<uint64_t>(fg::kZchHashBuckets);
      return Bucketize::kHash;
    }
    if (fg::HasField(msg, "hash_bucket_size")) {
      (*cfg)["hash_bucket_size"] = Uint(msg, "hash_bucket_size");
      return Bucketize::kHash;
    }
    if (fg::HasField(msg, "num_buckets")) {
      (*cfg)["num_buckets"] = Uint(msg, "num_buckets");
      return Bucketize::kNumBuckets;
    }
    if (fg::HasField(msg, "vocab_list")) {
      Json list = Json::array();
      if (!has_dbv) list = Json::array({default_value, "<OOV>"});
      for (const std::string& word : Strs(msg, "vocab_list")) list.push_back(word);
      (*cfg)["vocab_list"] = std::move(list);
      (*cfg)["default_bucketize_value"] = dbv;
      return Bucketize::kVocabList;
    }
    if (fg::HasField(msg, "vocab_dict")) {
      const FieldDescriptor* field = fg::FieldOf(msg, "vocab_dict");
      std::vector<std::pair<std::string, uint64_t>> entries;
      for (int i = 0; i < msg.GetReflection()->FieldSize(msg, field); ++i) {
        const Message& entry = msg.GetReflection()->GetRepeatedMessage(msg, field, i);
        entries.emplace_back(fg::StringField(entry, "key"), Uint(entry, "value"));
      }
      // Protobuf maps have no order; sorted as the bucketizer does, the default added last
      // (or overriding the entry in place, as Python's dict assignment does).
      std::sort(entries.begin(), entries.end());
      Json dict = Json::object();
      for (const auto& entry : entries) dict[entry.first] = entry.second;
      if (!has_dbv) dict[default_value] = 0;
      (*cfg)["vocab_dict"] = std::move(dict);
      (*cfg)["default_bucketize_value"] = dbv;
      return Bucketize::kVocabDict;
    }
    if (!fg::StringField(msg, "vocab_file").empty()) {
      (*cfg)["vocab_file"] = Asset(info, msg, "vocab_file", fg::StringField(msg, "vocab_file"));
      (*cfg)["default_bucketize_value"] = dbv;
      return Bucketize::kVocabFile;
    }
    if (fg::HasField(msg, "boundaries")) {
      (*cfg)["boundaries"] = Floats(msg, "boundaries");
      return Bucketize::kBoundaries;
    }
    return Bucketize::kNone;
  }

  // id_feature, combo_feature (expression list) and bool_mask_feature (no need_prefix, and no
  // value_type unless fg_value_type is set).
  std::vector<Json> IdLike(const FeatureInfo& info, const Message& msg) {
    const bool bool_mask = info.type == "bool_mask_feature";
    Json cfg;
    cfg["feature_type"] = info.type;
    cfg["feature_name"] = info.config_name;
    cfg["default_value"] = fg::StringField(msg, "default_value");
    if (fg::FieldOf(msg, "expression")->is_repeated()) {
      cfg["expression"] = Strs(msg, "expression");
    } else {
      cfg["expression"] = fg::StringField(msg, "expression");
    }
    if (!bool_mask) {
      cfg["value_type"] = "string";
      cfg["need_prefix"] = false;
    }
    AddSeparator(msg, &cfg);
    AddBucketizer(info, msg, &cfg);
    if (fg::BoolField(msg, "weighted")) cfg["weighted"] = true;
    cfg["value_dim"] = info.value_dim;
    if (fg::HasField(msg, "fg_value_type")) cfg["value_type"] = fg::StringField(msg, "fg_value_type");
    AddStubType(msg, &cfg);
    AddSequenceFields(info, msg, &cfg);
    return {cfg};
  }

  std::vector<Json> Raw(const FeatureInfo& info, const Message& msg) {
    Json cfg;
    cfg["feature_type"] = "raw_feature";
    cfg["feature_name"] = info.config_name;
    cfg["default_value"] = fg::StringField(msg, "default_value");
    cfg["expression"] = fg::StringField(msg, "expression");
    cfg["value_type"] = "float";
    const uint64_t value_dim = Uint(msg, "value_dim");
    if (value_dim > 1) {
      AddSeparator(msg, &cfg);
      cfg["value_dim"] = value_dim;
    }
    AddNormalizer(msg, &cfg);
    AddBoundaries(msg, &cfg);
    AddStubType(msg, &cfg);
    AddSequenceFields(info, msg, &cfg);
    return {cfg};
  }

  std::vector<Json> Lookup(const FeatureInfo& info, const Message& msg) {
    Json cfg;
    cfg["feature_type"] = "lookup_feature";
    cfg["feature_name"] = info.config_name;
    cfg["map"] = fg::StringField(msg, "map");
    cfg["key"] = fg::StringField(msg, "key");
    cfg["default_value"] = fg::StringField(msg, "default_value");
    cfg["value_type"] = "float";
    cfg["needDiscrete"] = fg::BoolField(msg, "need_discrete");
    cfg["needKey"] = fg::BoolField(msg, "need_key");
    cfg["combiner"] = Lower(fg::StringField(msg, "combiner"));
    if (Uint(msg, "value_dim") > 1) {
      // A multi-value lookup: a stub lookup returning the raw value text, split by a raw_feature
      // on value_separator.
      const std::string stub_name = info.config_name + "__lookup";
      cfg["feature_name"] = stub_name;
      cfg["default_value"] = "";
      cfg["value_type"] = "string";
      cfg["value_dim"] = 1;
      cfg["needDiscrete"] = true;
      cfg["combiner"] = "";
      cfg["stub_type"] = true;
      Json raw;
      raw["feature_type"] = "raw_feature";
      raw["feature_name"] = info.config_name;
      raw["default_value"] = fg::StringField(msg, "default_value");
      raw["expression"] = "feature:" + stub_name;
      raw["separator"] = fg::StringField(msg, "value_separator");
      raw["value_dim"] = Uint(msg, "value_dim");
      raw["value_type"] = "float";
      AddNormalizer(msg, &raw);
      AddBoundaries(msg, &raw);
      AddSequenceFields(info, msg, &cfg);
      if (info.is_sequence) raw["sequence_fields"] = Json::array({stub_name});
      return {cfg, raw};
    }
    AddSeparator(msg, &cfg);
    AddNormalizer(msg, &cfg);
    Bucketize kind = AddBucketizer(info, msg, &cfg);
    if (kind != Bucketize::kNone && kind != Bucketize::kBoundaries) cfg["value_type"] = "string";
    if (fg::HasField(msg, "fg_value_type")) cfg["value_type"] = fg::StringField(msg, "fg_value_type");
    if (cfg["value_type"] == "string") cfg["needDiscrete"] = true;
    if (cfg["needDiscrete"] == true) cfg["combiner"] = "";
    if (cfg["combiner"] == "") cfg["value_dim"] = info.value_dim;
    AddStubType(msg, &cfg);
    AddSequenceFields(info, msg, &cfg);
    return {cfg};
  }

  std::vector<Json> Match(const FeatureInfo& info, const Message& msg) {
    Json cfg;
    cfg["feature_type"] = "match_feature";
    cfg["feature_name"] = info.config_name;
    cfg["user"] = fg::StringField(msg, "nested_map");
    cfg["category"] = fg::StringField(msg, "pkey");
    cfg["item"] = fg::StringField(msg, "skey");
    cfg["matchType"] = fg::StringField(msg, "pkey") == "ALL" || fg::StringField(msg, "skey") == "ALL" ? "multihit" : "hit";
    cfg["default_value"] = fg::StringField(msg, "default_value");
    cfg["value_type"] = "float";
    cfg["needDiscrete"] = fg::BoolField(msg, "need_discrete");
    cfg["show_category"] = fg::BoolField(msg, "show_pkey");
    cfg["show_item"] = fg::BoolField(msg, "show_skey");
    AddSeparator(msg, &cfg);
    AddNormalizer(msg, &cfg);
    Bucketize kind = AddBucketizer(info, msg, &cfg);
    if (kind != Bucketize::kNone && kind != Bucketize::kBoundaries) {
      cfg["value_type"] = "string";
      cfg["needDiscrete"] = true;
    }
    if (fg::HasField(msg, "fg_value_type")) cfg["value_type"] = fg::StringField(msg, "fg_value_type");
    if (cfg["needDiscrete"] == true) cfg["value_dim"] = info.value_dim;
    AddStubType(msg, &cfg);
    AddSequenceFields(info, msg, &cfg);
    return {cfg};
  }

  std::vector<Json> Expr(const FeatureInfo& info, const Message& msg) {
    Json cfg;
    cfg["feature_type"] = "expr_feature";
    cfg["feature_name"] = info.config_name;
    cfg["expression"] = fg::StringField(msg, "expression");
    cfg["variables"] = Strs(msg, "variables");
    cfg["default_value"] = fg::StringField(msg, "default_value");
    cfg["value_type"] = "float";
    AddSeparator(msg, &cfg);
    if (fg::HasField(msg, "fill_missing")) {
      const auto& expr = static_cast<const protos::ExprFeature&>(msg);
      cfg["fill_missing"] = static_cast<double>(expr.fill_missing());
    }
    if (fg::HasField(msg, "hash_bucket_size")) {
      cfg["hash_bucket_size"] = Uint(msg, "hash_bucket_size");  // hashes the float's text
    } else if (fg::HasField(msg, "num_buckets")) {
      cfg["num_buckets"] = Uint(msg, "num_buckets");
      cfg["value_type"] = "int64";
    } else {
      AddBoundaries(msg, &cfg);
    }
    // pyfg needs value_dim for sequences (bool_mask consumers).
    if (fg::HasField(msg, "value_dim") || info.is_sequence) cfg["value_dim"] = info.value_dim;
    if (fg::HasField(msg, "fg_value_type")) {
      const std::string value_type = fg::StringField(msg, "fg_value_type");
      if (StartsWith(value_type, "int") &&
          (fg::HasField(msg, "boundaries") || fg::HasField(msg, "hash_bucket_size"))) {
        Fail(info.config_path, ".fg_value_type '", value_type,
             "' cannot be combined with boundaries or hash_bucket_size");
      }
      cfg["value_type"] = value_type;
    }
    AddStubType(msg, &cfg);
    AddSequenceFields(info, msg, &cfg);
    return {cfg};
  }

  std::vector<Json> Overlap(const FeatureInfo& info, const Message& msg) {
    static const std::set<std::string> kMethods = {
        "is_equal",           "is_contain",         "index_of",
        "query_common_ratio", "title_common_ratio", "proximity_min_dist",
        "proximity_max_dist", "proximity_avg_dist", "proximity_min_cover"};
    const std::string method = fg::StringField(msg, "method");
    if (!kMethods.count(method)) {
      Fail(info.config_path, ".method: invalid method '", method, "' (known: ",
           Join(std::vector<std::string>(kMethods.begin(), kMethods.end()), ", "), ")");
    }
    Json cfg;
    cfg["feature_type"] = "overlap_feature";
    cfg["feature_name"] = info.config_name;
    cfg["query"] = fg::StringField(msg, "query");
    cfg["title"] = fg::StringField(msg, "title");
    cfg["method"] = method;
    cfg["value_type"] = "float";
    cfg["separator"] = fg::StringField(msg, "separator");  // always written for overlap
    AddNormalizer(msg, &cfg);
    AddBoundaries(msg, &cfg);
    AddStubType(msg, &cfg);
    AddSequenceFields(info, msg, &cfg);
    return {cfg};
  }

  std::vector<Json> KvDotProduct(const FeatureInfo& info, const Message& msg) {
    Json cfg;
    cfg["feature_type"] = "kv_dot_product";
    cfg["feature_name"] = info.config_name;
    cfg["default_value"] = fg::StringField(msg, "default_value");
    cfg["query"] = fg::StringField(msg, "query");
    cfg["document"] = fg::StringField(msg, "document");
    AddSeparator(msg, &cfg);
    if (fg::HasField(msg, "kv_delimiter")) {
      const std::string delimiter = fg::StringField(msg, "kv_delimiter");
      if (delimiter.size() != 1) {
        Fail(info.config_path, ".kv_delimiter: invalid kv_delimiter '", delimiter,
             "' (one character)");
      }
      cfg["kv_delimiter"] = delimiter;
    }
    AddNormalizer(msg, &cfg);
    AddBoundaries(msg, &cfg);
    AddStubType(msg, &cfg);
    AddSequenceFields(info, msg, &cfg);
    return {cfg};
  }

  std::vector<Json> Tokenize(const FeatureInfo& info, const Message& msg) {
    const auto& tok = static_cast<const protos::TokenizeFeature&>(msg);
    std::vector<Json> cfgs;
    std::string expression = tok.expression();
    const std::string norm_name = info.config_name + "__text_norm";
    const bool normalized = tok.has_text_normalizer();
    if (normalized) {
      // A text_normalizer stub feeding the tokenizer.
      const auto& norm = tok.text_normalizer();
      expression = "feature:" + norm_name;
      Json cfg;
      cfg["feature_type"] = "text_normalizer";
      cfg["feature_name"] = norm_name;
      cfg["expression"] = tok.expression();
      cfg["is_gbk_input"] = false;
      cfg["is_gbk_output"] = false;
      cfg["stub_type"] = true;
      if (norm.has_max_length()) cfg["max_length"] = norm.max_length();
      if (!norm.stop_char_file().empty()) {
        cfg["stop_char_file"] =
            Asset(info, msg, "text_normalizer.stop_char_file", norm.stop_char_file());
      }
      if (norm.norm_options_size() > 0) {
        int parameter = 0;
        for (int option : norm.norm_options()) {
          switch (option) {
            case protos::TEXT_LOWER2UPPER: parameter += 2; break;
            case protos::TEXT_UPPER2LOWER: parameter += 4; break;
            case protos::TEXT_SBC2DBC: parameter += 8; break;
            case protos::TEXT_CHT2CHS: parameter += 16; break;
            case protos::TEXT_FILTER: parameter += 32; break;
            case protos::TEXT_SPLITCHRS: parameter += 512; break;
            case protos::TEXT_REMOVE_SPACE: cfg["remove_space"] = true; break;
            default: break;
          }
        }
        cfg["parameter"] = parameter;
      }
      AddSequenceFields(info, msg, &cfg);
      cfgs.push_back(std::move(cfg));
    }
    if (tok.tokenizer_type() != "bpe" && tok.tokenizer_type() != "sentencepiece") {
      Fail(info.config_path, ".tokenizer_type: '", tok.tokenizer_type(),
           "' (known: bpe, sentencepiece)");
    }
    Json cfg;
    cfg["feature_type"] = "tokenize_feature";
    cfg["feature_name"] = info.config_name;
    cfg["default_value"] = tok.default_value();
    cfg["vocab_file"] = Asset(info, msg, "vocab_file", tok.vocab_file());
    cfg["expression"] = expression;
    cfg["tokenizer_type"] = tok.tokenizer_type();
    cfg["output_type"] = "word_id";
    cfg["output_delim"] = output_delim_;
    AddStubType(msg, &cfg);
    if (normalized) {
      if (info.is_sequence) cfg["sequence_fields"] = Json::array({norm_name});
    } else {
      AddSequenceFields(info, msg, &cfg);
    }
    cfgs.push_back(std::move(cfg));
    return cfgs;
  }

  std::vector<Json> Custom(const FeatureInfo& info, const Message& msg) {
    const auto& custom = static_cast<const protos::CustomFeature&>(msg);
    Json cfg;
    cfg["feature_type"] = "custom_feature";
    cfg["feature_name"] = info.config_name;
    cfg["default_value"] = custom.default_value();
    cfg["operator_name"] = custom.operator_name();
    // "pyfg/lib/..." names an operator bundled with the FG runtime: left as written.
    if (StartsWith(custom.operator_lib_file(), "pyfg/lib/")) {
      cfg["operator_lib_file"] = custom.operator_lib_file();
    } else {
      cfg["operator_lib_file"] = Asset(info, msg, "operator_lib_file", custom.operator_lib_file());
    }
    cfg["is_op_thread_safe"] = custom.is_op_thread_safe();
    cfg["expression"] = Strs(msg, "expression");
    cfg["value_type"] = "float";
    if (custom.has_operator_params()) {
      Json params = StructToJson(custom.operator_params());
      for (auto& [key, value] : params.items()) cfg[key] = value;
    }
    AddSeparator(msg, &cfg);
    AddNormalizer(msg, &cfg);
    Bucketize kind = AddBucketizer(info, msg, &cfg);
    if (kind == Bucketize::kNumBuckets) {
      cfg["value_type"] = "int64";
    } else if (kind != Bucketize::kNone && kind != Bucketize::kBoundaries) {
      cfg["value_type"] = "string";
    }
    cfg["value_dim"] = info.value_dim;
    AddStubType(msg, &cfg);
    AddSequenceFields(info, msg, &cfg);
    return {cfg};
  }

  std::vector<Json> Combine(const FeatureInfo& info, const Message& msg) {
    const auto& combine = static_cast<const protos::CombineFeature&>(msg);
    Json cfg;
    cfg["feature_type"] = "combine_feature";
    cfg["feature_name"] = info.config_name;
    cfg["default_value"] = combine.default_value();
    cfg["expression"] = combine.expression();
    cfg["value_type"] = "float";
    cfg["need_prefix"] = false;
    cfg["combiner"] = Lower(combine.combiner());
    AddSeparator(msg, &cfg);
    AddNormalizer(msg, &cfg);
    if (combine.value_map_size() > 0) {
      std::map<std::string, float> sorted(combine.value_map().begin(), combine.value_map().end());
      Json map = Json::object();
      for (const auto& kv : sorted) map[kv.first] = static_cast<double>(kv.second);
      cfg["value_map"] = std::move(map);
    }
    if (combine.has_num_buckets()) {
      cfg["value_type"] = "int64";
      cfg["num_buckets"] = combine.num_buckets();
    } else {
      AddBoundaries(msg, &cfg);
    }
    if (info.is_sparse) cfg["value_dim"] = 1;
    AddStubType(msg, &cfg);
    AddSequenceFields(info, msg, &cfg);
    return {cfg};
  }

  std::vector<FgAsset>* assets_;
  std::string output_delim_;
};

void RemoveBucketizer(Json* cfg) {
  for (const char* key :
       {"hash_bucket_size", "vocab_dict", "vocab_list", "boundaries", "num_buckets"}) {
    cfg->erase(key);
  }
  if ((*cfg)["feature_type"] != "tokenize_feature") cfg->erase("vocab_file");
}

bool ParseBoolWord(std::string text, bool* value) {
  text = Lower(text);
  if (text == "true" || text == "1") {
    *value = true;
    return true;
  }
  if (text == "false" || text == "0") {
    *value = false;
    return true;
  }
  return false;
}

}  // namespace

nlohmann::ordered_json BuildFgJson(const protos::EasyRecConfig& config, bool remove_bucketizer,
                                   std::vector<FgAsset>* assets) {
  // FG_DAG: every feature with its raw inputs; the input expressions written to fg.json are
  // the configured ones (grouped-sequence prefixes are pyfg's business).
  std::vector<FeatureInfo> infos = fg::DescribeFeatures(config.feature_configs(), protos::FG_DAG);
  FgJsonBuilder builder(config, assets);
  Json features = Json::array();
  std::map<std::string, size_t> sequence_blocks;
  for (const FeatureInfo& info : infos) {
    std::vector<Json> cfgs = builder.Build(info);
    if (remove_bucketizer) {
      for (Json& cfg : cfgs) RemoveBucketizer(&cfg);
    }
    if (!info.grouped) {
      for (Json& cfg : cfgs) features.push_back(std::move(cfg));
      continue;
    }
    auto it = sequence_blocks.find(info.sequence_name);
    if (it == sequence_blocks.end()) {
      Json block;
      block["sequence_name"] = info.sequence_name;
      block["sequence_length"] = info.sequence_length;
      block["sequence_delim"] = info.sequence_delim;
      block["sequence_pk"] = info.sequence_pk;
      block["features"] = Json::array();
      features.push_back(std::move(block));
      it = sequence_blocks.emplace(info.sequence_name, features.size() - 1).first;
    }
    for (Json& cfg : cfgs) features[it->second]["features"].push_back(std::move(cfg));
  }
  Json out;
  out["features"] = std::move(features);
  return out;
}

std::string AssetCopyName(const std::string& path, std::string_view content) {
  const size_t slash = path.rfind('/');
  auto [stem, ext] = SplitExt(slash == std::string::npos ? path : path.substr(slash + 1));
  return stem + "_" + Md5Hex(content) + ext;
}

std::string CreateFgJson(const protos::EasyRecConfig& config, const CreateFgJsonOptions& options) {
  if (options.fg_output_dir.empty()) Fail("create_fg_json: --fg_output_dir is required");
  const std::string resource =
      options.fg_resource_name.empty() ? "fg.json" : options.fg_resource_name;
  // Everything is built and read before anything is written.
  std::vector<FgAsset> assets;
  Json fg = BuildFgJson(config, options.remove_bucketizer, &assets);
  if (options.has_reserves) fg["reserves"] = options.reserves;
  std::string text;
  try {
    // ensure_ascii, as Python's json.dump: non-ASCII and control characters as \uXXXX.
    text = fg.dump(4, ' ', /*ensure_ascii=*/true) + "\n";
  } catch (const nlohmann::json::exception& e) {
    Fail("create_fg_json: cannot write fg.json: ", e.what());
  }
  MakeDirs(options.fg_output_dir);
  for (const FgAsset& asset : assets) {
    // The name holds the content's md5, so an existing file is the same file.
    std::string target = JoinPath(options.fg_output_dir, asset.name);
    if (!PathExists(target)) WriteFileAtomic(target, asset.content);
  }
  std::string path = JoinPath(options.fg_output_dir, resource);
  WriteFileAtomic(path, text);
  return path;
}

int CreateFgJsonMain(const std::vector<std::string>& args) {
  // --remove_bucketizer is a store_true switch in TorchEasyRec's newest tool and took a value
  // (type=bool) in older ones: accept `--remove_bucketizer`, `--remove_bucketizer=true|false`
  // and `--remove_bucketizer true|false`.
  bool remove_bucketizer = false;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--remove_bucketizer" || arg == "--remove-bucketizer") {
      remove_bucketizer = true;
      bool value;
      if (i + 1 < args.size() && ParseBoolWord(args[i + 1], &value)) {
        remove_bucketizer = value;
        ++i;
      }
      continue;
    }
    if (StartsWith(arg, "--remove_bucketizer=") || StartsWith(arg, "--remove-bucketizer=")) {
      std::string text = arg.substr(arg.find('=') + 1);
      if (!ParseBoolWord(text, &remove_bucketizer)) {
        Fail("flag --remove_bucketizer takes true or false, got '", text, "'");
      }
      continue;
    }
    rest.push_back(arg);
  }
  Flags flags("create_fg_json",
              "Writes the fg.json of a pipeline config's features (and the asset files it refers "
              "to, renamed <stem>_<md5><ext>) into fg_output_dir.",
              {{"pipeline_config_path", "pipeline config (.config text or .json)"},
               {"fg_output_dir", "directory for fg.json and the asset files"},
               {"reserves", "comma-separated columns passed through by offline FG, e.g. "
                            "label,request_id"},
               {"fg_resource_name", "file name of fg.json", false, "fg.json"},
               {"remove_bucketizer", "leave bucketizer parameters out of fg.json (also "
                                     "=true/false)", true},
               {"edit_config_json", "JSON object of config path -> value overrides (as for "
                                    "train_eval)"},
               {"odps_project_name", "upload fg.json to this ODPS project (not supported yet)"},
               {"odps_schema_name", "ODPS schema of the upload (not supported yet)"},
               {"force_update_resource", "replace an existing ODPS resource (ODPS only)"},
               {"debug", "read one batch with the features (not supported yet)", true}});
  if (!flags.Parse(rest)) return 0;
  if (flags.Get("pipeline_config_path").empty()) {
    Fail("create_fg_json: --pipeline_config_path is required");
  }
  if (flags.Get("fg_output_dir").empty()) Fail("create_fg_json: --fg_output_dir is required");
  if (flags.Has("odps_project_name")) {
    Fail("create_fg_json: --odps_project_name (uploading fg.json to ODPS): not supported yet");
  }
  if (flags.GetSwitch("debug")) Fail("create_fg_json: --debug: not supported yet");
  auto config = LoadPipelineConfig(flags.Get("pipeline_config_path"));
  if (!flags.Get("edit_config_json").empty()) {
    EditConfigJson(&config, flags.Get("edit_config_json"));
  }
  CreateFgJsonOptions options;
  options.fg_output_dir = flags.Get("fg_output_dir");
  options.fg_resource_name = flags.Get("fg_resource_name");
  options.remove_bucketizer = remove_bucketizer;
  if (flags.Has("reserves")) {
    options.has_reserves = true;
    for (const std::string& column : Split(flags.Get("reserves"), ",")) {
      std::string name(Trim(column));
      if (!name.empty()) options.reserves.push_back(name);
    }
  }
  std::string path = CreateFgJson(config, options);
  LOG_INFO << "create_fg_json: wrote " << path;
  return 0;
}

}  // namespace tzrec
