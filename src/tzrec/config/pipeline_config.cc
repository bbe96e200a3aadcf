#include "tzrec/config/pipeline_config.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/dynamic_message.h>

#include <functional>
#include <memory>
#include <set>

#include "tzrec/common/error.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"

namespace tzrec {
namespace {

// Collects the first text-format error with its position (protobuf reports 0-based).
class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (!has_error_) {
      has_error_ = true;
      error_ = StrCat("line ", line + 1, ", column ", column + 1, ": ", message);
    }
  }
  void AddWarning(int line, google::protobuf::io::ColumnNumber column,
                  const std::string& message) override {
    LOG_WARNING << "config line " << line + 1 << ", column " << column + 1 << ": " << message;
  }
  bool has_error() const { return has_error_; }
  const std::string& error() const { return error_; }

 private:
  bool has_error_ = false;
  std::string error_;
};

// JSON parsing in protobuf 3.21 rejects missing `required` fields and has no switch to allow
// them. So JSON is parsed against a copy of the schema with every field optional, and the
// (identical) binary encoding is then read into the real message.
const google::protobuf::Descriptor* RelaxedConfigDescriptor() {
  static google::protobuf::DescriptorPool* pool = [] {
    auto* relaxed = new google::protobuf::DescriptorPool();
    std::vector<const google::protobuf::FileDescriptor*> order;
    std::set<const google::protobuf::FileDescriptor*> seen;
    std::function<void(const google::protobuf::FileDescriptor*)> visit =
        [&](const google::protobuf::FileDescriptor* file) {
          if (!seen.insert(file).second) return;
          for (int i = 0; i < file->dependency_count(); ++i) visit(file->dependency(i));
          order.push_back(file);
        };
    visit(protos::EasyRecConfig::descriptor()->file());
    std::function<void(google::protobuf::DescriptorProto*)> relax =
        [&](google::protobuf::DescriptorProto* message) {
          for (auto& field : *message->mutable_field()) {
            if (field.label() == google::protobuf::FieldDescriptorProto::LABEL_REQUIRED) {
              field.set_label(google::protobuf::FieldDescriptorProto::LABEL_OPTIONAL);
            }
          }
          for (auto& nested : *message->mutable_nested_type()) relax(&nested);
        };
    for (const auto* file : order) {
      google::protobuf::FileDescriptorProto proto;
      file->CopyTo(&proto);
      for (auto& message : *proto.mutable_message_type()) relax(&message);
      TZREC_CHECK(relaxed->BuildFile(proto) != nullptr, "relaxing ", file->name());
    }
    return relaxed;
  }();
  return pool->FindMessageTypeByName(protos::EasyRecConfig::descriptor()->full_name());
}

void ParseJsonConfig(const std::string& content, const std::string& path,
                     protos::EasyRecConfig* config) {
  static google::protobuf::DynamicMessageFactory factory;
  std::unique_ptr<google::protobuf::Message> relaxed(
      factory.GetPrototype(RelaxedConfigDescriptor())->New());
  CheckJsonNesting(content, StrCat("pipeline config '", path, "'"));
  auto status = google::protobuf::util::JsonStringToMessage(content, relaxed.get());
  if (!status.ok()) Fail("cannot parse pipeline config '", path, "' (JSON): ", status.ToString());
  if (!config->ParsePartialFromString(relaxed->SerializePartialAsString())) {
    Fail("cannot parse pipeline config '", path, "' (JSON)");
  }
}

}  // namespace

void CheckJsonNesting(const std::string& json, const std::string& what) {
  int depth = 0;
  bool in_string = false;
  int64_t line = 1;
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (c == '\n') ++line;
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxConfigNesting) {
        Fail(what, ": JSON nests deeper than ", kMaxConfigNesting, " levels (line ", line,
             ", offset ", i, ")");
      }
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
}

protos::EasyRecConfig ParsePipelineConfigText(const std::string& text,
                                              const std::string& source_name) {
  auto parse = [&](bool merge, protos::EasyRecConfig* config, FirstErrorCollector* errors) {
    google::protobuf::TextFormat::Parser parser;
    // TorchEasyRec's configs omit fields its .proto marks required (e.g. id_feature.expression
    // under FG_NONE); Python's text_format accepts that, so we do too.
    parser.AllowPartialMessage(true);
    // Nesting is bounded by the schema except through recursive messages; a bound keeps a
    // crafted config from exhausting the stack (protobuf's own default is INT_MAX).
    parser.SetRecursionLimit(kMaxConfigNesting);
    parser.RecordErrorsTo(errors);
    return merge ? parser.MergeFromString(text, config) : parser.ParseFromString(text, config);
  };
  protos::EasyRecConfig config;
  FirstErrorCollector errors;
  if (parse(false, &config, &errors)) return config;
  // TorchEasyRec loads configs with text_format.Merge: a singular field given twice keeps the
  // last value (mind_mock.config sets attr_delimiter twice). A strict parse first names the
  // first repetition in a warning, so the overwrite is not silent.
  if (errors.error().find("is specified multiple times") != std::string::npos) {
    LOG_WARNING << "pipeline config '" << source_name << "' " << errors.error()
                << "; the last value wins, as in TorchEasyRec";
    config.Clear();
    FirstErrorCollector merge_errors;
    if (parse(true, &config, &merge_errors)) return config;
    Fail("cannot parse pipeline config '", source_name, "': ",
         merge_errors.has_error() ? merge_errors.error() : std::string("invalid text format"));
  }
  Fail("cannot parse pipeline config '", source_name, "': ",
       errors.has_error() ? errors.error() : std::string("invalid text format"));
}

protos::EasyRecConfig LoadPipelineConfig(const std::string& path) {
  if (!PathExists(path)) Fail("pipeline config '", path, "' does not exist");
  if (IsDirectory(path)) Fail("pipeline config '", path, "' is a directory, not a config file");
  std::string content = ReadFileToString(path);
  protos::EasyRecConfig config;
  if (EndsWith(path, ".json")) {
    ParseJsonConfig(content, path, &config);
  } else {
    config = ParsePipelineConfigText(content, path);
  }
  ApplyFgModeCompat(&config);
  return config;
}

std::string PipelineConfigToText(const protos::EasyRecConfig& config) {
  google::protobuf::TextFormat::Printer printer;
  printer.SetUseUtf8StringEscaping(true);
  std::string text;
  printer.PrintToString(config, &text);
  return text;
}

void SavePipelineConfig(const protos::EasyRecConfig& config, const std::string& path) {
  WriteFileAtomic(path, PipelineConfigToText(config));
}

void ApplyFgModeCompat(protos::EasyRecConfig* config) {
  auto* data = config->mutable_data_config();
  if (!data->has_fg_encoded()) return;
  LOG_WARNING << "data_config.fg_encoded will be deprecated, please use data_config.fg_mode.";
  if (data->fg_encoded()) {
    data->set_fg_mode(protos::FG_NONE);
  } else if (data->fg_threads() > 0) {
    data->set_fg_mode(protos::FG_DAG);
  } else {
    data->set_fg_mode(protos::FG_NORMAL);
  }
  data->clear_fg_encoded();
}

}  // namespace tzrec
