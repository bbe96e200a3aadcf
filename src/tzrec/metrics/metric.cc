#include "tzrec/metrics/metric.h"

#include <google/protobuf/descriptor.h>

#include "tzrec/common/error.h"

namespace tzrec {

Registry<MetricFactory>& MetricRegistry() {
  static Registry<MetricFactory>* registry = new Registry<MetricFactory>(
      "metric", {ConfigSlot{"tzrec.protos.MetricConfig", "metric", ""}});
  return *registry;
}

Registry<MetricFactory>& TrainMetricRegistry() {
  static Registry<MetricFactory>* registry = new Registry<MetricFactory>(
      "train metric", {ConfigSlot{"tzrec.protos.TrainMetricConfig", "metric", ""}});
  return *registry;
}

MetricSpec BuildMetric(const Registry<MetricFactory>& registry,
                       const google::protobuf::Message& config, int num_class,
                       const std::string& where) {
  const google::protobuf::Descriptor* descriptor = config.GetDescriptor();
  const google::protobuf::OneofDescriptor* oneof = descriptor->FindOneofByName("metric");
  TZREC_CHECK(oneof != nullptr, descriptor->full_name(), " has no oneof 'metric'");
  const google::protobuf::Reflection* reflection = config.GetReflection();
  const google::protobuf::FieldDescriptor* member =
      reflection->GetOneofFieldDescriptor(config, oneof);
  if (member == nullptr) Fail(where, ": no metric set; known: ", registry.JoinNames());
  MetricContext ctx;
  ctx.config = &reflection->GetMessage(config, member);
  ctx.num_class = num_class;
  ctx.where = where;
  MetricSpec spec = registry.Get(member->name())(ctx);
  TZREC_CHECK(spec.metric != nullptr, member->name());
  return spec;
}

void CombineOverRanks(const std::vector<Metric*>& metrics, Collectives* comm) {
  if (comm == nullptr || comm->world_size() <= 1) return;
  std::vector<double> state;
  for (const Metric* metric : metrics) {
    if (metric->combine() == MetricCombine::kSum) metric->AppendState(&state);
  }
  // Same metrics on every rank, so the length agrees and either all ranks reduce or none.
  if (!state.empty()) {
    comm->AllReduceSum(&state);
    size_t offset = 0;
    for (Metric* metric : metrics) {
      if (metric->combine() == MetricCombine::kSum) metric->LoadState(state, &offset);
    }
    TZREC_CHECK(offset == state.size(), "metric states read ", offset, " of ", state.size());
  }
  for (Metric* metric : metrics) {
    if (metric->combine() == MetricCombine::kGather) {
      metric->LoadGathered(comm->AllGatherBytes(metric->SerializeValues()));
    }
  }
}

void MeanMetric::Update(const MetricInput& input) {
  const int64_t n = input.rows * input.pred_width;
  for (int64_t i = 0; i < n; ++i) Add(input.preds[i], 1.0);
}

double MeanMetric::Compute() const { return weight_ > 0.0 ? sum_ / weight_ : 0.0; }

void MeanMetric::AppendState(std::vector<double>* state) const {
  state->push_back(sum_);
  state->push_back(weight_);
}

void MeanMetric::LoadState(const std::vector<double>& state, size_t* offset) {
  sum_ = state.at((*offset)++);
  weight_ = state.at((*offset)++);
}

}  // namespace tzrec
