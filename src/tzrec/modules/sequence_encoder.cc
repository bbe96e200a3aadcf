#include "tzrec/modules/sequence_encoder.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/clamp_max.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/where.h>

#include "tzrec/common/error.h"

namespace tzrec {

Registry<SequenceEncoderFactory>& SequenceEncoderRegistry() {
  static Registry<SequenceEncoderFactory> registry(
      "sequence encoder", {ConfigSlot{"tzrec.protos.SeqEncoderConfig", "seq_module"}});
  return registry;
}

namespace {

const google::protobuf::Message& Member(const protos::SeqEncoderConfig& config, const std::string& where,
                                        std::string* name) {
  const auto* descriptor = config.GetDescriptor();
  const auto* oneof = descriptor->FindOneofByName("seq_module");
  const auto* field = config.GetReflection()->GetOneofFieldDescriptor(config, oneof);
  if (field == nullptr) Fail(where, ": no encoder set (one of: ", SequenceEncoderRegistry().JoinNames(), ")");
  *name = field->name();
  return config.GetReflection()->GetMessage(config, field);
}

}  // namespace

std::string SequenceEncoderInput(const protos::SeqEncoderConfig& config, const std::string& where) {
  std::string name;
  const google::protobuf::Message& member = Member(config, where, &name);
  const auto* input = member.GetDescriptor()->FindFieldByName("input");
  TZREC_CHECK(input != nullptr, "encoder ", name, " has no input field");
  return member.GetReflection()->GetString(member, input);
}

void SetSequenceEncoderInput(protos::SeqEncoderConfig* config, const std::string& input) {
  std::string name;
  Member(*config, "sequence_encoders", &name);
  const auto* field = config->GetDescriptor()->FindFieldByName(name);
  google::protobuf::Message* member = config->GetReflection()->MutableMessage(config, field);
  member->GetReflection()->SetString(member, member->GetDescriptor()->FindFieldByName("input"), input);
}

std::shared_ptr<SequenceEncoder> CreateSequenceEncoder(const SequenceEncoderContext& context) {
  std::string name;
  Member(*context.config, context.where, &name);
  SequenceEncoderContext named = context;
  named.where = context.where + "." + name;
  return SequenceEncoderRegistry().Get(name)(named);
}

SequenceInputs TruncateSteps(const SequenceInputs& inputs, int64_t max_seq_length) {
  if (max_seq_length <= 0 || inputs.sequence.size(1) <= max_seq_length) {
    if (max_seq_length <= 0) return inputs;
    return {inputs.query, inputs.sequence, at::clamp_max(inputs.lengths, max_seq_length)};
  }
  return {inputs.query, inputs.sequence.narrow(1, 0, max_seq_length),
          at::clamp_max(inputs.lengths, max_seq_length)};
}

at::Tensor StepMask(const at::Tensor& lengths, int64_t steps) {
  at::Tensor positions = at::arange(steps, lengths.options().dtype(at::kLong));
  return positions.unsqueeze(0) < lengths.to(at::kLong).unsqueeze(1);
}

at::Tensor MaskedSoftmax(const at::Tensor& scores, const at::Tensor& mask) {
  at::Tensor padded = at::where(mask, scores, at::full_like(scores, kPaddingScore));
  return at::softmax(padded, -1);
}

at::Tensor PadQuery(const at::Tensor& query, int64_t dim) {
  const int64_t have = query.size(1);
  if (have == dim) return query;
  TZREC_CHECK(have < dim, "query of ", have, " columns is wider than the sequence's ", dim);
  return at::constant_pad_nd(query, {0, dim - have}, 0.0);
}

void CheckQueryDim(int64_t query_dim, int64_t sequence_dim, const std::string& where) {
  if (query_dim > sequence_dim) {
    Fail(where, ": the query features are ", query_dim, " wide but the sequence features only ",
         sequence_dim, "; the query is zero-padded to the sequence width, so it may not be wider ",
         "(list a sequence feature for every query feature, extra sequence-only features last)");
  }
}

std::string SequenceEncoder::Script(ScriptWriter&, const std::string&, const std::string&, const std::string&,
                                    const std::string&) const {
  ScriptWriter::Unsupported("sequence encoder of '" + input_ + "' has no TorchScript form yet");
}

void ScriptTruncateSteps(ScriptWriter& w, int64_t max_seq_length, std::string* sequence, std::string* lengths) {
  if (max_seq_length <= 0) return;
  const std::string limit = std::to_string(max_seq_length);
  *sequence = w.Let("truncated", *sequence + "[:, :" + limit + "]");
  *lengths = w.Let("truncated_lengths", "torch.clamp(" + *lengths + ", max=" + limit + ")");
}

}  // namespace tzrec
