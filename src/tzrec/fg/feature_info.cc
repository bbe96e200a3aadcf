#include "tzrec/fg/feature_info.h"

#include <algorithm>
#include <map>
#include <set>

#include <google/protobuf/descriptor.h>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/fg/proto_fields.h"
#include "tzrec/fg/tokenizer.h"

namespace tzrec::fg {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

std::vector<std::string> Strs(const Message& msg, const char* name) {
  std::vector<std::string> out;
  const FieldDescriptor* f = FieldOf(msg, name);
  if (!f) return out;
  if (!f->is_repeated()) {
    if (msg.GetReflection()->HasField(msg, f) || f->has_default_value()) out.push_back(StringField(msg, name));
    return out;
  }
  for (int i = 0; i < msg.GetReflection()->FieldSize(msg, f); ++i) {
    out.push_back(msg.GetReflection()->GetRepeatedString(msg, f, i));
  }
  return out;
}
// Input fields per type, in the order the op reads them; `raw` = whole value, not split.
struct InputField {
  const char* field;
  bool raw;
};
const std::map<std::string, std::vector<InputField>>& InputFields() {
  static const std::map<std::string, std::vector<InputField>> kFields = {
      {"id_feature", {{"expression", false}}},
      {"raw_feature", {{"expression", false}}},
      {"combo_feature", {{"expression", false}}},
      {"lookup_feature", {{"map", false}, {"key", false}}},
      {"match_feature", {{"nested_map", true}, {"pkey", false}, {"skey", false}}},
      {"expr_feature", {{"variables", false}}},
      {"overlap_feature", {{"query", false}, {"title", false}}},
      {"tokenize_feature", {{"expression", true}}},
      {"custom_feature", {{"expression", false}}},
      {"kv_dot_product", {{"query", false}, {"document", false}}},
      {"bool_mask_feature", {{"expression", false}}},
      {"combine_feature", {{"expression", false}}},
  };
  return kFields;
}

bool SparseByType(const std::string& type, const Message& msg, const Bucketizer& b) {
  if (type == "id_feature" || type == "combo_feature" || type == "bool_mask_feature" ||
      type == "tokenize_feature") {
    return true;
  }
  if (type == "raw_feature" || type == "overlap_feature" || type == "kv_dot_product") {
    return HasField(msg, "boundaries");
  }
  if (type == "expr_feature") {
    return HasField(msg, "hash_bucket_size") || HasField(msg, "num_buckets") || HasField(msg, "boundaries");
  }
  if (type == "combine_feature") return HasField(msg, "num_buckets") || HasField(msg, "boundaries");
  // lookup, match, custom: any bucketizer. (TorchEasyRec's match_feature ignores a lone
  // vocab_dict here yet bucketizes with it in FG; we treat it as sparse, consistently.)
  return b.active();
}

int ValueDim(const std::string& type, const Message& msg, bool is_sequence, bool sparse,
             const std::string& where) {
  const bool has = HasField(msg, "value_dim");
  const uint32_t raw = FieldOf(msg, "value_dim") ? UInt32Field(msg, "value_dim") : 0;
  if (raw > static_cast<uint32_t>(kMaxValueDim)) {
    Fail(where, ".value_dim ", raw, " is larger than ", kMaxValueDim);
  }
  const int configured = has ? static_cast<int>(raw) : 0;
  if (type == "id_feature" || type == "combo_feature" || type == "bool_mask_feature" ||
      type == "expr_feature") {
    if (has) return configured;
    return is_sequence ? 1 : 0;
  }
  if (type == "raw_feature") return static_cast<int>(UInt32Field(msg, "value_dim"));
  if (type == "lookup_feature" || type == "match_feature" || type == "custom_feature") {
    return has ? configured : 1;
  }
  if (type == "tokenize_feature") return 0;
  return 1;  // overlap, kv_dot_product, combine
}

// Feature options FG and the embedding engine do not implement (init_fn is checked by the
// config validator).
void CheckUnsupported(const Message& msg, const std::string& where) {
  if (BoolField(msg, "use_mask")) Fail(where, ".use_mask: not supported yet");
}

}  // namespace

FeatureInput ParseInput(const std::string& expression, const std::string& where) {
  FeatureInput input;
  size_t colon = expression.find(':');
  if (colon == std::string::npos) {
    Fail(where, ": input '", expression, "' must be side:name with side one of user, item, context, feature, const");
  }
  std::string side = expression.substr(0, colon);
  input.name = expression.substr(colon + 1);
  if (side == "user") input.side = Side::kUser;
  else if (side == "item") input.side = Side::kItem;
  else if (side == "context") input.side = Side::kContext;
  else if (side == "feature") input.side = Side::kFeature;
  else if (side == "const") input.side = Side::kConst;
  else Fail(where, ": input '", expression, "': unknown side '", side, "' (user, item, context, feature, const)");
  if (input.name.empty()) Fail(where, ": input '", expression, "' has an empty name");
  input.column = input.name;
  return input;
}

namespace {

FeatureInfo Describe(const Message& msg, const std::string& type, const std::string& where,
                     bool simple_sequence, const protos::SequenceFeature* group,
                     protos::FgMode fg_mode) {
  if (!InputFields().count(type)) Fail(where, ": not supported yet");
  FeatureInfo info;
  info.type = type;
  info.config = &msg;
  info.config_path = where;
  info.config_name = StringField(msg, "feature_name");
  if (info.config_name.empty()) Fail(where, ".feature_name must be set");
  info.is_sequence = simple_sequence || group != nullptr;
  info.grouped = group != nullptr;
  if (group) {
    info.sequence_name = group->sequence_name();
    info.sequence_length = group->sequence_length();
    info.sequence_delim = group->sequence_delim();
    info.sequence_pk = group->has_sequence_pk() ? group->sequence_pk() : "user:" + group->sequence_name();
    info.name = group->sequence_name() + "__" + info.config_name;
  } else {
    info.name = info.config_name;
    if (simple_sequence) {
      info.sequence_name = info.name;
      info.sequence_length = HasField(msg, "sequence_length") ? UInt32Field(msg, "sequence_length") : 0;
      info.sequence_delim = StringField(msg, "sequence_delim");
      // Unset (or 0) means no truncation, as in TorchEasyRec.
    }
  }
  CheckUnsupported(msg, where);
  info.bucketizer = std::make_shared<Bucketizer>(Bucketizer::FromConfig(msg, where));
  info.is_sparse = SparseByType(type, msg, *info.bucketizer);
  info.num_embeddings = info.bucketizer->num_embeddings();
  info.zch = ParseZchSpec(msg, where);
  info.dynamicemb = ParseDynamicEmbSpec(msg, where);
  if (info.zch && info.dynamicemb) Fail(where, ": zch and dynamicemb exclude each other");
  if (type == "tokenize_feature") {
    // The tokenizer's vocabulary is the table size, in every fg_mode.
    std::string path = StringField(msg, "vocab_file");
    const std::string asset_dir = StringField(msg, "asset_dir");
    if (!asset_dir.empty() && !path.empty() && path[0] != '/') path = asset_dir + "/" + path;
    info.num_embeddings = Tokenizer::Load(path, StringField(msg, "tokenizer_type"), where)->vocab_size();
  }
  info.value_dim = ValueDim(type, msg, info.is_sequence, info.is_sparse, where);
  info.weighted = BoolField(msg, "weighted");
  info.stub = BoolField(msg, "stub_type");
  if (FieldOf(msg, "separator")) info.separator = StringField(msg, "separator");
  if (FieldOf(msg, "default_value")) info.default_value = StringField(msg, "default_value");
  // TorchEasyRec resets an empty default of a sparse sequence feature to "0".
  if (info.is_sequence && info.is_sparse && info.default_value.empty()) info.default_value = "0";
  info.has_default_value = !info.default_value.empty();
  if (info.is_sparse && !info.bucketizer->active() && type != "tokenize_feature" && !info.stub &&
      fg_mode != protos::FG_NONE) {
    Fail(where, ": a sparse feature needs hash_bucket_size, num_buckets, vocab_list, vocab_dict, "
         "vocab_file or boundaries");
  }
  if (info.is_sparse && info.num_embeddings <= 0 && fg_mode == protos::FG_NONE) {
    Fail(where, ": needs hash_bucket_size or num_buckets (bucket count > 0)");
  }

  // Inputs and which of them carry sequences.
  std::vector<std::string> sequence_fields = Strs(msg, "sequence_fields");
  std::set<std::string> seq_fields(sequence_fields.begin(), sequence_fields.end());
  for (const InputField& field : InputFields().at(type)) {
    for (const std::string& text : Strs(msg, field.field)) {
      if ((type == "match_feature") && text == "ALL" && std::string(field.field) != "nested_map") {
        FeatureInput all;
        all.is_all = true;
        all.name = all.column = "ALL";
        info.inputs.push_back(all);
        continue;
      }
      if (fg_mode == protos::FG_NONE || fg_mode == protos::FG_BUCKETIZE) continue;
      FeatureInput input = ParseInput(text, where + "." + field.field);
      input.raw_text = field.raw;
      info.inputs.push_back(input);
    }
  }
  if (fg_mode == protos::FG_NONE || fg_mode == protos::FG_BUCKETIZE) {
    // The data holds the feature's own column; raw inputs (often omitted then) are not read.
    info.inputs.clear();
    return info;
  }
  if (info.inputs.empty()) Fail(where, ": no inputs configured");
  size_t real_inputs = 0;
  for (const auto& input : info.inputs) real_inputs += input.is_all ? 0 : 1;
  for (FeatureInput& input : info.inputs) {
    if (input.is_all || input.side == Side::kConst) continue;
    if (!info.is_sequence) continue;
    bool sequence;
    if (!seq_fields.empty()) {
      sequence = seq_fields.count(input.name) > 0;
    } else if (real_inputs == 1) {
      sequence = input.side != Side::kFeature;
    } else {
      sequence = input.side == Side::kItem;
    }
    input.is_sequence = sequence;
    if (sequence && info.grouped && input.side != Side::kFeature) {
      input.column = info.sequence_name + "__" + input.name;
    }
  }
  // pyfg's sequence custom operators (SeqExpr: cur_time - clk_time_seq, both user-side) find
  // the sequence in inputs TorchEasyRec's rule above does not mark: when it marks none, every
  // input is split into steps (columns unchanged; the generator broadcasts one-step inputs).
  if (type == "custom_feature" && info.is_sequence && seq_fields.empty() &&
      std::none_of(info.inputs.begin(), info.inputs.end(), [](const FeatureInput& in) { return in.is_sequence; })) {
    for (FeatureInput& input : info.inputs) input.is_sequence = input.side != Side::kConst;
  }
  if (type == "bool_mask_feature" && info.inputs.size() != 2) {
    Fail(where, ".expression needs exactly 2 inputs (values, mask)");
  }
  if (type == "combo_feature" && info.inputs.size() < 2) Fail(where, ".expression needs >= 2 inputs");
  return info;
}

}  // namespace

std::vector<FeatureInfo> DescribeFeatures(
    const google::protobuf::RepeatedPtrField<protos::FeatureConfig>& configs,
    protos::FgMode fg_mode) {
  std::vector<FeatureInfo> out;
  std::set<std::string> names;
  auto add = [&](FeatureInfo info) {
    if (!names.insert(info.name).second) {
      Fail(info.config_path, ".feature_name: duplicate feature name '", info.name, "'");
    }
    if (info.stub && fg_mode == protos::FG_NORMAL) {
      Fail(info.config_path, ".stub_type is not allowed with fg_mode FG_NORMAL (use FG_DAG)");
    }
    out.push_back(std::move(info));
  };
  for (int i = 0; i < configs.size(); ++i) {
    const protos::FeatureConfig& config = configs.Get(i);
    const auto* oneof = config.GetDescriptor()->FindOneofByName("feature");
    const auto* which = config.GetReflection()->GetOneofFieldDescriptor(config, oneof);
    std::string base = StrCat("feature_configs[", i, "]");
    if (!which) Fail(base, ": no feature type set");
    std::string where = base + "." + which->name();
    const Message& msg = config.GetReflection()->GetMessage(config, which);
    if (which->name() == "sequence_feature") {
      const auto& group = config.sequence_feature();
      for (int j = 0; j < group.features_size(); ++j) {
        const auto& sub = group.features(j);
        const auto* sub_oneof = sub.GetDescriptor()->FindOneofByName("feature");
        const auto* sub_which = sub.GetReflection()->GetOneofFieldDescriptor(sub, sub_oneof);
        std::string sub_where = StrCat(where, ".features[", j, "]");
        if (!sub_which) Fail(sub_where, ": no feature type set");
        sub_where += "." + sub_which->name();
        add(Describe(sub.GetReflection()->GetMessage(sub, sub_which), sub_which->name(),
                     sub_where, false, &group, fg_mode));
      }
      continue;
    }
    std::string type = which->name();
    bool simple_sequence = StartsWith(type, "sequence_");
    if (simple_sequence) type = type.substr(9);
    add(Describe(msg, type, where, simple_sequence, nullptr, fg_mode));
  }
  return out;
}

std::vector<std::string> InputColumns(const FeatureInfo& info, protos::FgMode fg_mode) {
  if (fg_mode == protos::FG_NONE || fg_mode == protos::FG_BUCKETIZE) return {info.name};
  std::vector<std::string> columns;
  for (const FeatureInput& input : info.inputs) {
    if (input.is_all || input.side == Side::kConst) continue;
    if (input.side == Side::kFeature && fg_mode == protos::FG_DAG) continue;
    if (std::find(columns.begin(), columns.end(), input.column) == columns.end()) {
      columns.push_back(input.column);
    }
  }
  return columns;
}

}  // namespace tzrec::fg
