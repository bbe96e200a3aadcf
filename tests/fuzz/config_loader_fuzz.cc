// libFuzzer target for the pipeline-config loader: any bytes, read as a text-format `.config`
// or as a `.json` config, must load or fail with tzrec::Error; crashes, sanitizer reports,
// other exceptions and stack exhaustion are bugs. A loaded config must print and load again.
//
// Built and run by tests/fuzz/run_config_fuzz.sh; not part of the CMake build.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include <google/protobuf/stubs/logging.h>

#include "tzrec/common/error.h"
#include "tzrec/config/pipeline_config.h"

namespace {

// One file per process and format: the loader picks the parser by the file's extension.
std::string ScratchPath(const char* extension) {
  return "/tmp/tzrec_config_fuzz_" + std::to_string(getpid()) + extension;
}

void LoadAndReprint(const std::string& bytes, const char* extension) {
  const std::string path = ScratchPath(extension);
  FILE* file = std::fopen(path.c_str(), "wb");
  if (!file) return;
  std::fwrite(bytes.data(), 1, bytes.size(), file);
  std::fclose(file);
  tzrec::protos::EasyRecConfig config;
  try {
    config = tzrec::LoadPipelineConfig(path);
  } catch (const tzrec::Error&) {
    return;
  }
  // What we print we must read back (configs are saved into model_dir and reloaded).
  const std::string text = tzrec::PipelineConfigToText(config);
  auto again = tzrec::ParsePipelineConfigText(text, "reprinted");
  if (again.SerializePartialAsString() != config.SerializePartialAsString()) __builtin_trap();
}

}  // namespace

// protobuf logs every rejected text-format value; the errors we throw are what matters.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks the format, so one corpus serves both parsers.
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  LoadAndReprint(bytes, data[0] & 1 ? ".json" : ".config");
  return 0;
}
