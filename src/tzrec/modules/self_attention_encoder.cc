// self_attention_encoder: Q/K/V Linear projections of the steps to `multihead_attn_dim`, then
// multi-head self-attention (torch.nn.MultiheadAttention semantics: its own in- and
// out-projections, `num_heads` heads, attention dropout) with padded steps masked as keys,
// then the mean of the outputs over the valid steps -> [B, multihead_attn_dim]. A row without
// steps gives zeros.
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>

#include "tzrec/common/error.h"
#include "tzrec/modules/mlp.h"
#include "tzrec/modules/sequence_encoder.h"

namespace tzrec {
namespace {

class SelfAttentionEncoder : public SequenceEncoder {
 public:
  SelfAttentionEncoder(const protos::SelfAttentionEncoder& config, int64_t sequence_dim, const std::string& where)
      : SequenceEncoder(config.input()), max_seq_length_(config.max_seq_length()) {
    dim_ = CheckedWidth(config.multihead_attn_dim(), where + ".multihead_attn_dim");
    const int64_t heads = CheckedCount(config.num_heads(), 1, kMaxModuleCount, where + ".num_heads");
    if (dim_ % heads != 0) {
      Fail(where, ".multihead_attn_dim (", dim_, ") must be divisible by num_heads (", heads, ")");
    }
    const double dropout = config.dropout();
    if (!(dropout >= 0.0 && dropout < 1.0)) Fail(where, ".dropout must be in [0, 1), got ", dropout);
    if (max_seq_length_ < 0) Fail(where, ".max_seq_length must be >= 0, got ", max_seq_length_);
    CheckLinearSize(sequence_dim, dim_, where);
    query_ = register_module("q", torch::nn::Linear(sequence_dim, dim_));
    key_ = register_module("k", torch::nn::Linear(sequence_dim, dim_));
    value_ = register_module("v", torch::nn::Linear(sequence_dim, dim_));
    attention_ = register_module(
        "multihead_attn",
        torch::nn::MultiheadAttention(torch::nn::MultiheadAttentionOptions(dim_, heads).dropout(dropout)));
  }
  int64_t output_dim() const override { return dim_; }

  at::Tensor Encode(const SequenceInputs& raw) override {
    const SequenceInputs in = TruncateSteps(raw, max_seq_length_);
    const int64_t steps = in.sequence.size(1);
    if (steps == 0) return at::zeros({in.sequence.size(0), dim_}, in.sequence.options());
    at::Tensor valid = StepMask(in.lengths, steps);  // [B, T]
    // A row without steps would mask every key (NaN softmax): let it attend to its padding,
    // whose outputs the mean below ignores anyway.
    at::Tensor empty = (in.lengths <= 0).unsqueeze(1);
    at::Tensor padding = (~valid) & (~empty);
    // LibTorch's MultiheadAttention takes [T, B, E].
    at::Tensor q = query_->forward(in.sequence).transpose(0, 1);
    at::Tensor k = key_->forward(in.sequence).transpose(0, 1);
    at::Tensor v = value_->forward(in.sequence).transpose(0, 1);
    at::Tensor out = std::get<0>(attention_->forward(q, k, v, padding)).transpose(0, 1);  // [B, T, E]
    at::Tensor mask = valid.unsqueeze(2).to(out.scalar_type());
    at::Tensor count = at::clamp_min(in.lengths.to(out.scalar_type()), 1.0).unsqueeze(1);
    return at::sum(out * mask, 1) / count;
  }

 private:
  int64_t dim_ = 0;
  int64_t max_seq_length_;
  torch::nn::Linear query_{nullptr}, key_{nullptr}, value_{nullptr};
  torch::nn::MultiheadAttention attention_{nullptr};
};

std::shared_ptr<SequenceEncoder> Make(const SequenceEncoderContext& c) {
  return std::make_shared<SelfAttentionEncoder>(c.config->self_attention_encoder(), c.sequence_dim, c.where);
}

}  // namespace

TZREC_REGISTER(SequenceEncoderRegistry(), "self_attention_encoder", Make, "name", "input",
               "multihead_attn_dim", "num_heads", "dropout", "max_seq_length");

}  // namespace tzrec
