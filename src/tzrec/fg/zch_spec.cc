#include "tzrec/fg/zch_spec.h"

#include <cmath>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/fg/bucketizer.h"
#include "tzrec/protos/feature.pb.h"

namespace tzrec::fg {
namespace {

std::string WithoutSpaces(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c != ' ' && c != '\t' && c != '\n') out += c;
  }
  return out;
}

// threshold_filtering_func: "<name>" or "partial(<name>[, [<param>=]<number>])".
void ParseFilter(const std::string& text, const std::string& where, ZchSpec* spec) {
  std::string body = WithoutSpaces(text);
  std::string name = body, argument;
  const bool partial = StartsWith(body, "partial(") || StartsWith(body, "functools.partial(");
  if (partial) {
    if (body.back() != ')') Fail(where, ": '", text, "' is not a call of functools.partial");
    body = body.substr(body.find('(') + 1, body.size() - body.find('(') - 2);
    const size_t comma = body.find(',');
    name = body.substr(0, comma);
    if (comma != std::string::npos) argument = body.substr(comma + 1);
  }
  std::string param;
  if (name == "average_threshold_filter") {
    spec->filter = ZchSpec::Filter::kAverage;
  } else if (name == "dynamic_threshold_filter") {
    spec->filter = ZchSpec::Filter::kDynamic;
    spec->filter_param = 10.0;
    param = "threshold_skew_multiplier";
  } else if (name == "probabilistic_threshold_filter") {
    spec->filter = ZchSpec::Filter::kProbabilistic;
    spec->filter_param = 0.01;
    param = "per_id_probability";
  } else {
    Fail(where, ": '", text, "' is not supported: tzrec-cpp runs no Python; use average_threshold_filter, ",
         "dynamic_threshold_filter or probabilistic_threshold_filter, optionally as ",
         "partial(<filter>, <parameter>=<number>)");
  }
  if (argument.empty()) return;
  if (param.empty()) Fail(where, ": ", name, " takes no parameter ('", text, "')");
  const size_t equals = argument.find('=');
  if (equals != std::string::npos) {
    if (argument.substr(0, equals) != param) {
      Fail(where, ": ", name, " has no parameter '", argument.substr(0, equals), "' (it takes ", param, ")");
    }
    argument = argument.substr(equals + 1);
  }
  double value;
  if (!ParseDouble(argument, &value) || !std::isfinite(value)) {
    Fail(where, ": ", param, " '", argument, "' is not a number");
  }
  if (spec->filter == ZchSpec::Filter::kProbabilistic && !(value > 0 && value <= 1)) {
    Fail(where, ": per_id_probability ", value, " must be in (0, 1]");
  }
  spec->filter_param = value;
}

}  // namespace

std::string ZchSpec::Describe() const {
  const char* names[] = {"lfu", "lru", "distance_lfu"};
  return StrCat(names[static_cast<int>(policy)], ", ", size, " rows, eviction every ", eviction_interval,
                " steps");
}

std::optional<ZchSpec> ParseZchSpec(const google::protobuf::Message& feature, const std::string& where) {
  const auto* field = feature.GetDescriptor()->FindFieldByName("zch");
  if (!field || !feature.GetReflection()->HasField(feature, field)) return std::nullopt;
  const auto* zch = dynamic_cast<const protos::ZeroCollisionHash*>(&feature.GetReflection()->GetMessage(feature, field));
  TZREC_CHECK(zch != nullptr, where, ".zch is not a ZeroCollisionHash");
  const std::string at = where + ".zch";
  ZchSpec spec;
  if (zch->zch_size() == 0 || zch->zch_size() > static_cast<uint64_t>(kMaxBuckets)) {
    Fail(at, ".zch_size ", zch->zch_size(), " must be in [1, ", kMaxBuckets, "]");
  }
  spec.size = static_cast<int64_t>(zch->zch_size());
  if (zch->eviction_interval() == 0) Fail(at, ".eviction_interval must be > 0");
  spec.eviction_interval = zch->eviction_interval();
  switch (zch->eviction_policy_case()) {
    case protos::ZeroCollisionHash::kLfu:
      spec.policy = ZchSpec::Policy::kLfu;
      break;
    case protos::ZeroCollisionHash::kLru:
      spec.policy = ZchSpec::Policy::kLru;
      spec.decay_exponent = zch->lru().decay_exponent();
      break;
    case protos::ZeroCollisionHash::kDistanceLfu:
      spec.policy = ZchSpec::Policy::kDistanceLfu;
      spec.decay_exponent = zch->distance_lfu().decay_exponent();
      break;
    default:
      Fail(at, ": needs an eviction policy: lfu {}, lru {} or distance_lfu {}");
  }
  if (!std::isfinite(spec.decay_exponent)) Fail(at, ": decay_exponent must be a number");
  if (zch->has_threshold_filtering_func()) {
    ParseFilter(zch->threshold_filtering_func(), at + ".threshold_filtering_func", &spec);
  }
  return spec;
}

}  // namespace tzrec::fg
