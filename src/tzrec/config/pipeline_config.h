// Loading and saving the pipeline config (EasyRecConfig) in protobuf text format or JSON.
//
// Parse errors name the file, line and column. ApplyFgModeCompat() maps the deprecated
// data_config.fg_encoded onto fg_mode exactly as TorchEasyRec does after loading.
#pragma once

#include <string>

#include "tzrec/protos/pipeline.pb.h"

namespace tzrec {

// The deepest nesting of messages (text format) or of objects and arrays (JSON) a config or an
// --edit_config_json may have; TorchEasyRec's deepest configs nest about 10 levels.
constexpr int kMaxConfigNesting = 100;

// Fails naming `what` when the JSON text nests objects/arrays deeper than kMaxConfigNesting
// (recursive parsers and printers would otherwise overflow the stack). Strings are skipped,
// so brackets inside them do not count; the JSON itself is not validated here.
void CheckJsonNesting(const std::string& json, const std::string& what);

// Loads a `.config` (text format) or `.json` pipeline config. Unknown fields are errors; a
// singular field given twice in text format keeps its last value (with a warning), as
// TorchEasyRec's text_format.Merge does. A directory path is an error.
protos::EasyRecConfig LoadPipelineConfig(const std::string& path);
// Parses text-format content; `source_name` is used in error messages.
protos::EasyRecConfig ParsePipelineConfigText(const std::string& text,
                                              const std::string& source_name);
std::string PipelineConfigToText(const protos::EasyRecConfig& config);
// Writes the config as text format, atomically.
void SavePipelineConfig(const protos::EasyRecConfig& config, const std::string& path);
void ApplyFgModeCompat(protos::EasyRecConfig* config);

}  // namespace tzrec
