#include "tzrec/fg/dynamic_emb_spec.h"

#include <cmath>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/fg/bucketizer.h"
#include "tzrec/protos/feature.pb.h"

namespace tzrec::fg {
namespace {

// DynamicEmbInitializerArgs as TorchEasyRec resolves them: an unset mode is UNIFORM (CONSTANT
// for `constant_default` initialisers: evaluation and ids not admitted); UNIFORM bounds default
// to +-1/sqrt(max_capacity) (TorchRec's default), NORMAL's std_dev to 1/sqrt(embedding_dim)
// (resolved per table), TRUNCATED_NORMAL's bounds to dynamicemb's [0, 1] (TorchEasyRec passes
// bounds for UNIFORM only).
DynamicEmbInit ParseInit(const protos::DynamicEmbInitializerArgs& args, bool constant_default, int64_t max_capacity,
                         const std::string& where) {
  DynamicEmbInit init;
  const std::string mode = args.has_mode() ? args.mode() : (constant_default ? "CONSTANT" : "UNIFORM");
  const double bound = 1.0 / std::sqrt(static_cast<double>(max_capacity));
  if (mode == "UNIFORM") {
    init.mode = DynamicEmbInit::Mode::kUniform;
    init.lower = args.has_lower() ? args.lower() : -bound;
    init.upper = args.has_upper() ? args.upper() : bound;
  } else if (mode == "NORMAL" || mode == "TRUNCATED_NORMAL") {
    init.mode = mode == "NORMAL" ? DynamicEmbInit::Mode::kNormal : DynamicEmbInit::Mode::kTruncatedNormal;
    init.mean = args.mean();
    init.std_dev = args.has_std_dev() ? args.std_dev() : -1.0;
    if (args.has_std_dev() && !(args.std_dev() > 0)) Fail(where, ".std_dev ", args.std_dev(), " must be > 0");
    init.lower = args.has_lower() ? args.lower() : 0.0;
    init.upper = args.has_upper() ? args.upper() : 1.0;
  } else if (mode == "CONSTANT") {
    init.mode = DynamicEmbInit::Mode::kConstant;
    init.value = args.value();
  } else {
    Fail(where, ".mode '", mode, "' is not one of NORMAL, TRUNCATED_NORMAL, UNIFORM, CONSTANT");
  }
  for (double v : {init.mean, init.std_dev, init.lower, init.upper, init.value}) {
    if (!std::isfinite(v)) Fail(where, ": every value must be a finite number");
  }
  if (init.mode != DynamicEmbInit::Mode::kConstant && init.mode != DynamicEmbInit::Mode::kNormal &&
      !(init.lower < init.upper)) {
    Fail(where, ": lower ", init.lower, " must be below upper ", init.upper);
  }
  return init;
}

// Evaluation and not-yet-admitted ids read one constant here (a shared row); per-id random
// values for ids that own no row would need a row per id, which is what admission avoids.
double ConstantOnly(const protos::DynamicEmbInitializerArgs& args, int64_t max_capacity, const std::string& where) {
  const DynamicEmbInit init = ParseInit(args, /*constant_default=*/true, max_capacity, where);
  if (init.mode != DynamicEmbInit::Mode::kConstant) {
    Fail(where, ".mode '", args.mode(), "': ids without a row read one CONSTANT value in tzrec-cpp; ",
         "random values per such id are not supported");
  }
  return init.value;
}

}  // namespace

std::string DynamicEmbSpec::Describe() const {
  const char* names[] = {"STEP", "TIMESTAMP", "LFU", "NO_EVICTION"};
  std::string out = StrCat(names[static_cast<int>(score)], ", ", max_capacity, " rows");
  if (admission_threshold > 0) out += StrCat(", admission after ", admission_threshold);
  return out;
}

std::optional<DynamicEmbSpec> ParseDynamicEmbSpec(const google::protobuf::Message& feature, const std::string& where) {
  const auto* field = feature.GetDescriptor()->FindFieldByName("dynamicemb");
  if (!field || !feature.GetReflection()->HasField(feature, field)) return std::nullopt;
  const auto* config =
      dynamic_cast<const protos::DynamicEmbedding*>(&feature.GetReflection()->GetMessage(feature, field));
  TZREC_CHECK(config != nullptr, where, ".dynamicemb is not a DynamicEmbedding");
  const std::string at = where + ".dynamicemb";
  DynamicEmbSpec spec;
  if (config->max_capacity() == 0 || config->max_capacity() > static_cast<uint64_t>(kMaxBuckets)) {
    Fail(at, ".max_capacity ", config->max_capacity(), " must be in [1, ", kMaxBuckets, "]");
  }
  spec.max_capacity = static_cast<int64_t>(config->max_capacity());
  const std::string& score = config->score_strategy();
  if (score == "STEP") {
    spec.score = DynamicEmbSpec::Score::kStep;
  } else if (score == "TIMESTAMP") {
    spec.score = DynamicEmbSpec::Score::kTimestamp;
  } else if (score == "LFU") {
    spec.score = DynamicEmbSpec::Score::kLfu;
  } else if (score == "NO_EVICTION") {
    spec.score = DynamicEmbSpec::Score::kNoEviction;
  } else if (score == "CUSTOMIZED") {
    Fail(at, ".score_strategy CUSTOMIZED needs scores set by Python code before each forward; "
             "tzrec-cpp runs no Python: use STEP, TIMESTAMP, LFU or NO_EVICTION");
  } else {
    Fail(at, ".score_strategy '", score, "' is not one of STEP, TIMESTAMP, LFU, NO_EVICTION, CUSTOMIZED");
  }
  spec.init = ParseInit(config->initializer_args(), /*constant_default=*/false, spec.max_capacity,
                        at + ".initializer_args");
  spec.eval_value = ConstantOnly(config->eval_initializer_args(), spec.max_capacity, at + ".eval_initializer_args");
  if (config->has_init_table()) {
    Fail(at, ".init_table: loading a dynamicemb dump is not supported; train from scratch or restore a ",
         "tzrec-cpp checkpoint (fine_tune_checkpoint)");
  }
  if (config->has_frequency_admission_strategy()) {
    const auto& admission = config->frequency_admission_strategy();
    const std::string adm = at + ".frequency_admission_strategy";
    if (admission.threshold() > static_cast<uint64_t>(INT64_MAX)) Fail(adm, ".threshold is too large");
    spec.admission_threshold = static_cast<int64_t>(admission.threshold());
    spec.unadmitted_value = ConstantOnly(admission.initializer_args(), spec.max_capacity, adm + ".initializer_args");
    const uint64_t counter = admission.has_counter_capacity() ? admission.counter_capacity() : config->max_capacity();
    if (counter == 0 || counter > static_cast<uint64_t>(kMaxBuckets)) {
      Fail(adm, ".counter_capacity ", counter, " must be in [1, ", kMaxBuckets, "]");
    }
    spec.counter_capacity = static_cast<int64_t>(counter);
  }
  // cache_load_factor, bucket_capacity, init_capacity_per_rank and counter_bucket_capacity shape
  // dynamicemb's GPU hash table (HBM share, bucket size, first allocation): on CPU rows live in
  // host memory as ids are admitted and eviction ranks the whole table, as one bucket would.
  return spec;
}

}  // namespace tzrec::fg
