// libFuzzer target for --edit_config_json: any bytes applied to a real TorchEasyRec config
// (dlrm_criteo) must edit it or fail with tzrec::Error; crashes, sanitizer reports, other
// exceptions and stack exhaustion are bugs. An edited config must print and load again.
//
// Built and run by tests/fuzz/run_config_fuzz.sh; not part of the CMake build.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <google/protobuf/stubs/logging.h>

#include "tzrec/common/error.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/config/pipeline_config.h"

namespace {

const tzrec::protos::EasyRecConfig& BaseConfig() {
  static const tzrec::protos::EasyRecConfig config = [] {
    const char* path = std::getenv("TZREC_FUZZ_BASE_CONFIG");
    return tzrec::LoadPipelineConfig(path ? path : "tests/data/reference_configs/dlrm_criteo.config");
  }();
  return config;
}

}  // namespace

// protobuf logs every rejected text-format value; the errors we throw are what matters.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tzrec::protos::EasyRecConfig config = BaseConfig();
  try {
    tzrec::EditConfigJson(&config, std::string(reinterpret_cast<const char*>(data), size));
  } catch (const tzrec::Error&) {
    return 0;
  }
  const std::string text = tzrec::PipelineConfigToText(config);
  auto again = tzrec::ParsePipelineConfigText(text, "reprinted");
  if (again.SerializePartialAsString() != config.SerializePartialAsString()) __builtin_trap();
  return 0;
}
