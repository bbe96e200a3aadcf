// Loading and saving the pipeline config (EasyRecConfig) in protobuf text format or JSON.
//
// Parse errors name the file, line and column. ApplyFgModeCompat() maps the deprecated
// data_config.fg_encoded onto fg_mode exactly as TorchEasyRec does after loading.
#pragma once

#include <string>

#include "tzrec/protos/pipeline.pb.h"

namespace tzrec {

// Loads a `.config` (text format) or `.json` pipeline config. Unknown fields are errors.
protos::EasyRecConfig LoadPipelineConfig(const std::string& path);
// Parses text-format content; `source_name` is used in error messages.
protos::EasyRecConfig ParsePipelineConfigText(const std::string& text,
                                              const std::string& source_name);
std::string PipelineConfigToText(const protos::EasyRecConfig& config);
// Writes the config as text format, atomically.
void SavePipelineConfig(const protos::EasyRecConfig& config, const std::string& path);
void ApplyFgModeCompat(protos::EasyRecConfig* config);

}  // namespace tzrec
