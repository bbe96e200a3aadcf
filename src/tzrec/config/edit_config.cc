#include "tzrec/config/edit_config.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/text_format.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/config/pipeline_config.h"

namespace tzrec {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// One selected place in the config: a whole field (index < 0) or one element of a repeated
// field.
struct FieldRef {
  Message* parent;
  const FieldDescriptor* field;
  int index;
};

// Splits "a.b[x.y=1].c" on dots that are outside brackets.
std::vector<std::string> SplitPath(const std::string& path) {
  std::vector<std::string> parts;
  std::string current;
  int depth = 0;
  for (char c : path) {
    // Conditions nest (a[b[c=1].d=2]) and are resolved recursively.
    if (c == '[' && ++depth > kMaxConfigNesting) {
      Fail("--edit_config_json: '", path.substr(0, 80), "...' nests selectors deeper than ",
           kMaxConfigNesting, " levels");
    }
    if (c == ']') --depth;
    if (c == '.' && depth == 0) {
      if (!Trim(current).empty()) parts.emplace_back(Trim(current));
      current.clear();
    } else {
      current += c;
    }
  }
  if (!Trim(current).empty()) parts.emplace_back(Trim(current));
  return parts;
}

std::string FormatScalar(const Message& msg, const FieldDescriptor* field, int index) {
  std::string text;
  google::protobuf::TextFormat::PrintFieldValueToString(msg, field, index, &text);
  return text;
}

bool ParseBoolText(const std::string& text, bool* out) {
  if (text == "true" || text == "True") return *out = true, true;
  if (text == "false" || text == "False") return *out = false, true;
  return false;
}

// Sets a scalar field (or element) from a text value, casting to the field's type.
void SetScalar(Message* msg, const FieldDescriptor* field, int index, const std::string& raw,
               const std::string& path) {
  const Reflection* r = msg->GetReflection();
  std::string value(Trim(raw));
  bool repeated = index >= 0;
  auto bad = [&]() {
    Fail("--edit_config_json: cannot set ", path, " (", field->type_name(), ") to '", value,
         "'");
  };
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_BOOL: {
      bool v;
      if (!ParseBoolText(value, &v)) bad();
      repeated ? r->SetRepeatedBool(msg, field, index, v) : r->SetBool(msg, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64: {
      int64_t v;
      if (!ParseInt64(value, &v)) {
        double d;  // Python's int("3.0") fails too, but JSON numbers like 3.0 are common.
        if (!ParseDouble(value, &d) || d != static_cast<double>(static_cast<int64_t>(d))) bad();
        v = static_cast<int64_t>(d);
      }
      bool is_unsigned = field->cpp_type() == FieldDescriptor::CPPTYPE_UINT32 ||
                         field->cpp_type() == FieldDescriptor::CPPTYPE_UINT64;
      if (is_unsigned && v < 0) bad();
      switch (field->cpp_type()) {
        case FieldDescriptor::CPPTYPE_INT32:
          repeated ? r->SetRepeatedInt32(msg, field, index, v) : r->SetInt32(msg, field, v);
          break;
        case FieldDescriptor::CPPTYPE_INT64:
          repeated ? r->SetRepeatedInt64(msg, field, index, v) : r->SetInt64(msg, field, v);
          break;
        case FieldDescriptor::CPPTYPE_UINT32:
          repeated ? r->SetRepeatedUInt32(msg, field, index, v) : r->SetUInt32(msg, field, v);
          break;
        default:
          repeated ? r->SetRepeatedUInt64(msg, field, index, v) : r->SetUInt64(msg, field, v);
      }
      break;
    }
    case FieldDescriptor::CPPTYPE_FLOAT:
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      double v;
      if (!ParseDouble(value, &v)) bad();
      if (field->cpp_type() == FieldDescriptor::CPPTYPE_FLOAT) {
        repeated ? r->SetRepeatedFloat(msg, field, index, static_cast<float>(v))
                 : r->SetFloat(msg, field, static_cast<float>(v));
      } else {
        repeated ? r->SetRepeatedDouble(msg, field, index, v) : r->SetDouble(msg, field, v);
      }
      break;
    }
    case FieldDescriptor::CPPTYPE_STRING:
      repeated ? r->SetRepeatedString(msg, field, index, raw) : r->SetString(msg, field, raw);
      break;
    case FieldDescriptor::CPPTYPE_ENUM: {
      const auto* enum_value = field->enum_type()->FindValueByName(value);
      int64_t number;
      if (!enum_value && ParseInt64(value, &number)) {
        enum_value = field->enum_type()->FindValueByNumber(static_cast<int>(number));
      }
      if (!enum_value) bad();
      repeated ? r->SetRepeatedEnum(msg, field, index, enum_value)
               : r->SetEnum(msg, field, enum_value);
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      bad();
  }
}

void ParseInto(Message* msg, const std::string& text, const std::string& path) {
  std::string body(Trim(text));
  if (body.size() >= 2 && body.front() == '{' && body.back() == '}') {
    body = body.substr(1, body.size() - 2);
  }
  google::protobuf::TextFormat::Parser parser;
  parser.AllowPartialMessage(true);
  parser.SetRecursionLimit(kMaxConfigNesting);
  if (!parser.MergeFromString(body, msg)) {
    Fail("--edit_config_json: value for ", path, " is not a valid text-format ",
         msg->GetDescriptor()->full_name(), ": ", text);
  }
}

// Compares the value found at `key_path` inside `element` with `want` using `op`.
bool ConditionHolds(Message* element, const std::string& key_path, const std::string& op,
                    const std::string& want, const std::string& full_path);

std::vector<FieldRef> Resolve(Message* root, const std::vector<std::string>& tokens,
                              const std::string& full_path) {
  std::vector<Message*> objects{root};
  std::vector<FieldRef> refs;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const std::string& token = tokens[t];
    refs.clear();
    std::vector<Message*> next;
    size_t bracket = token.find('[');
    std::string name = bracket == std::string::npos ? token : token.substr(0, bracket);
    for (Message* obj : objects) {
      const FieldDescriptor* field = obj->GetDescriptor()->FindFieldByName(name);
      if (!field) {
        Fail("--edit_config_json: ", full_path, ": ", obj->GetDescriptor()->full_name(),
             " has no field '", name, "'");
      }
      const Reflection* r = obj->GetReflection();
      bool is_message = field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
      if (bracket == std::string::npos) {
        refs.push_back({obj, field, -1});
        if (is_message && !field->is_repeated()) next.push_back(r->MutableMessage(obj, field));
        continue;
      }
      if (!field->is_repeated() || token.back() != ']') {
        Fail("--edit_config_json: ", full_path, ": '", token,
             "' selects elements of a non-repeated field or is malformed");
      }
      std::string cond = token.substr(bracket + 1, token.size() - bracket - 2);
      int size = r->FieldSize(*obj, field);
      std::vector<int> picked;
      size_t colon = cond.find(':');
      int64_t index;
      if (cond == ":") {
        for (int i = 0; i < size; ++i) picked.push_back(i);
      } else if (colon != std::string::npos && cond.find('=') == std::string::npos &&
                 cond.find('<') == std::string::npos && cond.find('>') == std::string::npos) {
        int64_t begin = 0, end = size;
        std::string b(Trim(cond.substr(0, colon))), e(Trim(cond.substr(colon + 1)));
        if ((!b.empty() && !ParseInt64(b, &begin)) || (!e.empty() && !ParseInt64(e, &end))) {
          Fail("--edit_config_json: ", full_path, ": bad slice [", cond, "]");
        }
        if (begin < 0) begin += size;
        if (end < 0) end += size;
        for (int64_t i = std::max<int64_t>(begin, 0); i < std::min<int64_t>(end, size); ++i) {
          picked.push_back(static_cast<int>(i));
        }
      } else if (ParseInt64(cond, &index)) {
        if (index < 0) index += size;
        if (index < 0 || index >= size) {
          Fail("--edit_config_json: ", full_path, ": index ", cond, " out of range (", name,
               " has ", size, " elements)");
        }
        picked.push_back(static_cast<int>(index));
      } else {
        std::string op;
        size_t pos = std::string::npos;
        for (const char* candidate : {">=", "<=", ">", "<", "="}) {
          pos = cond.rfind(candidate);
          if (pos != std::string::npos) {
            op = candidate;
            break;
          }
        }
        if (op.empty()) Fail("--edit_config_json: ", full_path, ": invalid condition [", cond, "]");
        if (!is_message) {
          Fail("--edit_config_json: ", full_path, ": conditions need a repeated message field");
        }
        std::string key(Trim(cond.substr(0, pos)));
        std::string want(Trim(cond.substr(pos + op.size())));
        for (int i = 0; i < size; ++i) {
          Message* element = r->MutableRepeatedMessage(obj, field, i);
          if (ConditionHolds(element, key, op, want, full_path)) picked.push_back(i);
        }
      }
      for (int i : picked) {
        refs.push_back({obj, field, i});
        if (is_message) next.push_back(r->MutableRepeatedMessage(obj, field, i));
      }
    }
    objects = std::move(next);
    if (objects.empty() && t + 1 < tokens.size()) {
      Fail("--edit_config_json: ", full_path, ": '", token,
           "' selects no message to continue the path into");
    }
  }
  return refs;
}

bool ConditionHolds(Message* element, const std::string& key_path, const std::string& op,
                    const std::string& want, const std::string& full_path) {
  // Walked read-only: resolving through an unset message would create it, and for a oneof
  // (feature_configs[id_feature.x>1] on a raw_feature) that silently replaces the other case.
  const std::vector<std::string> keys = SplitPath(key_path);
  if (keys.empty()) Fail("--edit_config_json: ", full_path, ": condition without a key");
  Message* holder = element;
  for (size_t k = 0; k + 1 < keys.size(); ++k) {
    const FieldDescriptor* step = holder->GetDescriptor()->FindFieldByName(keys[k]);
    if (!step || step->is_repeated() || step->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
      Fail("--edit_config_json: ", full_path, ": condition key '", key_path,
           "' must be a dotted path of singular messages ending in a value");
    }
    if (!holder->GetReflection()->HasField(*holder, step)) return false;
    holder = holder->GetReflection()->MutableMessage(holder, step);
  }
  auto refs = Resolve(holder, {keys.back()}, full_path);
  if (refs.empty()) return false;
  const FieldRef& ref = refs.back();
  const FieldDescriptor* field = ref.field;
  if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    Fail("--edit_config_json: ", full_path, ": condition key '", key_path, "' is a message");
  }
  std::string have = FormatScalar(*ref.parent, field, ref.index);
  int cmp;
  if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
    // The printed form is quoted; compare raw contents.
    const Reflection* r = ref.parent->GetReflection();
    std::string raw = ref.index >= 0 ? r->GetRepeatedString(*ref.parent, field, ref.index)
                                     : r->GetString(*ref.parent, field);
    cmp = raw.compare(want);
  } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_ENUM) {
    const Reflection* r = ref.parent->GetReflection();
    int have_num = ref.index >= 0 ? r->GetRepeatedEnumValue(*ref.parent, field, ref.index)
                                  : r->GetEnumValue(*ref.parent, field);
    const auto* want_value = field->enum_type()->FindValueByName(want);
    int64_t want_num;
    if (want_value) {
      want_num = want_value->number();
    } else if (!ParseInt64(want, &want_num)) {
      Fail("--edit_config_json: ", full_path, ": '", want, "' is not a value of ",
           field->enum_type()->name());
    }
    cmp = have_num < want_num ? -1 : (have_num > want_num ? 1 : 0);
  } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_BOOL) {
    bool w;
    if (!ParseBoolText(want, &w)) Fail("--edit_config_json: ", full_path, ": bad bool '", want, "'");
    bool h = have == "true";
    cmp = h == w ? 0 : (h ? 1 : -1);
  } else {
    double h, w;
    if (!ParseDouble(have, &h) || !ParseDouble(want, &w)) {
      Fail("--edit_config_json: ", full_path, ": cannot compare '", have, "' with '", want, "'");
    }
    cmp = h < w ? -1 : (h > w ? 1 : 0);
  }
  if (op == "=") return cmp == 0;
  if (op == ">=") return cmp >= 0;
  if (op == "<=") return cmp <= 0;
  if (op == ">") return cmp > 0;
  return cmp < 0;
}

// Python's str() of a JSON value, which is what TorchEasyRec feeds to the setter.
std::string PythonStr(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_boolean()) return value.get<bool>() ? "True" : "False";
  if (value.is_array()) {
    std::string text = "[";
    for (size_t i = 0; i < value.size(); ++i) {
      if (i) text += ", ";
      text += value[i].is_string() ? "'" + value[i].get<std::string>() + "'" : PythonStr(value[i]);
    }
    return text + "]";
  }
  return value.dump();
}

}  // namespace

void EditConfigField(Message* config, const std::string& path, const std::string& value) {
  auto refs = Resolve(config, SplitPath(path), path);
  if (refs.empty()) Fail("--edit_config_json: ", path, " selects nothing");
  for (const FieldRef& ref : refs) {
    Message* msg = ref.parent;
    const FieldDescriptor* field = ref.field;
    const Reflection* r = msg->GetReflection();
    bool is_message = field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
    if (ref.index >= 0) {
      if (is_message) {
        Message* element = r->MutableRepeatedMessage(msg, field, ref.index);
        element->Clear();
        ParseInto(element, value, path);
      } else {
        SetScalar(msg, field, ref.index, value, path);
      }
    } else if (field->is_repeated()) {
      r->ClearField(msg, field);
      // A single value or message is accepted as a one-element list.
      std::string text(Trim(value));
      if (!text.empty() && text.front() != '[') text = "[" + text + "]";
      google::protobuf::TextFormat::Parser parser;
      parser.AllowPartialMessage(true);
      parser.SetRecursionLimit(kMaxConfigNesting);
      std::string statement = field->name() + ": " + text;
      if (!parser.MergeFromString(statement, msg)) {
        Fail("--edit_config_json: value for ", path, " is not a valid list: ", value);
      }
    } else if (is_message) {
      Message* sub = r->MutableMessage(msg, field);
      sub->Clear();
      ParseInto(sub, value, path);
    } else {
      SetScalar(msg, field, -1, value, path);
    }
  }
}

void EditConfigJson(Message* config, const std::string& edit_json) {
  CheckJsonNesting(edit_json, "--edit_config_json");
  nlohmann::json edits;
  try {
    edits = nlohmann::json::parse(edit_json);
  } catch (const std::exception& e) {
    Fail("--edit_config_json is not valid JSON: ", e.what());
  }
  if (!edits.is_object()) Fail("--edit_config_json must be a JSON object of path -> value");
  for (auto it = edits.begin(); it != edits.end(); ++it) {
    auto keys = Split(it.key(), ";");
    auto values = Split(PythonStr(it.value()), ";");
    if (keys.size() != values.size()) {
      Fail("--edit_config_json: key '", it.key(), "' has ", keys.size(), " paths but ",
           values.size(), " values");
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      EditConfigField(config, std::string(Trim(keys[i])), std::string(Trim(values[i])));
    }
  }
}

}  // namespace tzrec
