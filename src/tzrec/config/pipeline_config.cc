#include "tzrec/config/pipeline_config.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/type_resolver_util.h>

#include <memory>

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

}  // namespace

protos::EasyRecConfig ParsePipelineConfigText(const std::string& text,
                                              const std::string& source_name) {
  protos::EasyRecConfig config;
  google::protobuf::TextFormat::Parser parser;
  // TorchEasyRec's configs omit fields its .proto marks required (e.g. id_feature.expression
  // under FG_NONE); Python's text_format accepts that, so we do too.
  parser.AllowPartialMessage(true);
  FirstErrorCollector errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &config)) {
    Fail("cannot parse pipeline config '", source_name, "': ",
         errors.has_error() ? errors.error() : std::string("invalid text format"));
  }
  return config;
}

protos::EasyRecConfig LoadPipelineConfig(const std::string& path) {
  if (!PathExists(path)) Fail("pipeline config '", path, "' does not exist");
  std::string content = ReadFileToString(path);
  protos::EasyRecConfig config;
  if (EndsWith(path, ".json")) {
    // Through the binary form so that missing `required` fields are accepted, as above.
    std::unique_ptr<google::protobuf::util::TypeResolver> resolver(
        google::protobuf::util::NewTypeResolverForDescriptorPool(
            "type.googleapis.com", google::protobuf::DescriptorPool::generated_pool()));
    std::string binary;
    auto status = google::protobuf::util::JsonToBinaryString(
        resolver.get(), "type.googleapis.com/" + config.GetDescriptor()->full_name(), content,
        &binary);
    if (!status.ok() || !config.ParsePartialFromString(binary)) {
      Fail("cannot parse pipeline config '", path, "' (JSON): ", status.ToString());
    }
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
