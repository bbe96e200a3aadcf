// simple_attention: softmax over the valid steps of <step, query>, then the weighted sum of
// the steps (no parameters; query and sequence must be equally wide).
#include <ATen/ops/bmm.h>

#include "tzrec/common/error.h"
#include "tzrec/modules/sequence_encoder.h"

namespace tzrec {
namespace {

class SimpleAttention : public SequenceEncoder {
 public:
  SimpleAttention(const protos::SimpleAttention& config, int64_t query_dim, int64_t sequence_dim,
                  const std::string& where)
      : SequenceEncoder(config.input()), dim_(sequence_dim), max_seq_length_(config.max_seq_length()) {
    if (query_dim != sequence_dim) {
      Fail(where, ": simple attention needs query and sequence features of one width, got ",
           query_dim, " and ", sequence_dim);
    }
    if (max_seq_length_ < 0) Fail(where, ".max_seq_length must be >= 0, got ", max_seq_length_);
  }
  int64_t output_dim() const override { return dim_; }
  std::string Script(ScriptWriter& w, const std::string& query, const std::string& sequence_in,
                     const std::string& lengths_in, const std::string& name) const override {
    std::string sequence = sequence_in, lengths = lengths_in;
    ScriptTruncateSteps(w, max_seq_length_, &sequence, &lengths);
    const std::string scores = w.Let(name + "_scores", "torch.bmm(" + sequence + ", " + query + ".unsqueeze(2)).squeeze(2)");
    const std::string mask = w.Let(name + "_mask", "torch.arange(" + sequence + ".size(1), dtype=4).unsqueeze(0) < " +
                                                       lengths + ".to(4).unsqueeze(1)");
    const std::string weights = w.Let(name + "_weights", "torch.softmax(torch.where(" + mask + ", " + scores +
                                                             ", torch.full_like(" + scores + ", " +
                                                             ScriptFloat(kPaddingScore) + ")), -1)");
    return w.Let(name, "torch.bmm(" + weights + ".unsqueeze(1), " + sequence + ").squeeze(1)");
  }
  at::Tensor Encode(const SequenceInputs& raw) override {
    const SequenceInputs in = TruncateSteps(raw, max_seq_length_);
    at::Tensor scores = at::bmm(in.sequence, in.query.unsqueeze(2)).squeeze(2);  // [B, T]
    at::Tensor weights = MaskedSoftmax(scores, StepMask(in.lengths, in.sequence.size(1)));
    return at::bmm(weights.unsqueeze(1), in.sequence).squeeze(1);
  }

 private:
  int64_t dim_;
  int64_t max_seq_length_;
};

std::shared_ptr<SequenceEncoder> Make(const SequenceEncoderContext& c) {
  return std::make_shared<SimpleAttention>(c.config->simple_attention(), c.query_dim, c.sequence_dim, c.where);
}

}  // namespace

TZREC_REGISTER(SequenceEncoderRegistry(), "simple_attention", Make, "name", "input", "max_seq_length");

}  // namespace tzrec
