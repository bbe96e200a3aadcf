// din_encoder: DIN target attention (Zhou et al. 2018). Each step s of the sequence is scored
// by an MLP over [q, s, q - s, q * s] and Linear(->1); padded steps get -2^31 + 1; the scores
// are softmaxed over the steps (no scaling) and weight the steps' sum.
//
// The attention MLP reads [B*T, 4*Ds] rows, which is what TorchEasyRec's MLP(dim=3) computes:
// BatchNorm / Dice over channels with every step, padded ones included, in the statistics.
#include <ATen/ops/bmm.h>
#include <ATen/ops/cat.h>
#include <torch/nn/modules/linear.h>

#include "tzrec/common/error.h"
#include "tzrec/modules/mlp.h"
#include "tzrec/modules/sequence_encoder.h"

namespace tzrec {
namespace {

class DinEncoder : public SequenceEncoder {
 public:
  DinEncoder(const std::string& input, int64_t query_dim, int64_t sequence_dim,
             const protos::MLP& attn_mlp, int64_t max_seq_length, const std::string& where)
      : SequenceEncoder(input), dim_(sequence_dim), max_seq_length_(max_seq_length) {
    CheckQueryDim(query_dim, sequence_dim, where);
    if (max_seq_length < 0) Fail(where, ".max_seq_length must be >= 0, got ", max_seq_length);
    mlp_ = register_module("mlp", MLP(4 * sequence_dim, attn_mlp, where + ".attn_mlp"));
    linear_ = register_module("linear", torch::nn::Linear(mlp_->output_dim(), 1));
  }
  int64_t output_dim() const override { return dim_; }

  at::Tensor Encode(const SequenceInputs& raw) override {
    const SequenceInputs in = TruncateSteps(raw, max_seq_length_);
    const int64_t rows = in.sequence.size(0), steps = in.sequence.size(1);
    at::Tensor query = PadQuery(in.query, dim_).unsqueeze(1).expand({rows, steps, dim_});
    at::Tensor attn_in = at::cat({query, in.sequence, query - in.sequence, query * in.sequence}, 2);
    at::Tensor hidden = mlp_->forward(attn_in.reshape({rows * steps, 4 * dim_}));
    at::Tensor scores = linear_->forward(hidden).view({rows, steps});
    at::Tensor weights = MaskedSoftmax(scores, StepMask(in.lengths, steps));
    return at::bmm(weights.unsqueeze(1), in.sequence).squeeze(1);
  }

 private:
  int64_t dim_;
  int64_t max_seq_length_;
  MLP mlp_{nullptr};
  torch::nn::Linear linear_{nullptr};
};

std::shared_ptr<SequenceEncoder> Make(const SequenceEncoderContext& c) {
  const auto& din = c.config->din_encoder();
  return MakeDinEncoder(din.input(), c.query_dim, c.sequence_dim, din.attn_mlp(), din.max_seq_length(), c.where);
}

}  // namespace

std::shared_ptr<SequenceEncoder> MakeDinEncoder(const std::string& input, int64_t query_dim,
                                                int64_t sequence_dim, const protos::MLP& attn_mlp,
                                                int64_t max_seq_length, const std::string& where) {
  return std::make_shared<DinEncoder>(input, query_dim, sequence_dim, attn_mlp, max_seq_length, where);
}

TZREC_REGISTER(SequenceEncoderRegistry(), "din_encoder", Make, "name", "input", "attn_mlp.*",
               "max_seq_length");

}  // namespace tzrec
