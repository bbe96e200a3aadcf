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
#include "tzrec/script/script_writer.h"

#include <cmath>

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

  // MultiheadAttention written out in aten ops: in-projection per Q/K/V slice, scaled dot
  // products per head with padded keys at -inf, softmax, out-projection.
  std::string Script(ScriptWriter& w, const std::string& query_in, const std::string& sequence_in,
                     const std::string& lengths_in, const std::string& name) const override {
    std::string sequence = sequence_in, lengths = lengths_in;
    ScriptTruncateSteps(w, max_seq_length_, &sequence, &lengths);
    const auto& mha = *attention_;
    const int64_t heads = mha.options.num_heads(), head_dim = dim_ / heads;
    const std::string e = std::to_string(dim_), h = std::to_string(heads), hd = std::to_string(head_dim);
    const std::string rows = w.Let(name + "_rows", sequence + ".size(0)");
    const std::string steps = w.Let(name + "_steps", sequence + ".size(1)");
    auto project = [&](const torch::nn::Linear& outer, int64_t slice, const std::string& hint) {
      const std::string x = ScriptLinear(w, *outer, sequence, name + "_" + hint);
      const at::Tensor weight = mha.in_proj_weight.slice(0, slice * dim_, (slice + 1) * dim_);
      const at::Tensor bias = mha.in_proj_bias.slice(0, slice * dim_, (slice + 1) * dim_);
      const std::string projected = w.Let(name + "_" + hint + "_in", "torch.linear(" + x + ", " +
                                                                         w.Tensor(name + "_" + hint + "_in_weight", weight) +
                                                                         ", " + w.Tensor(name + "_" + hint + "_in_bias", bias) + ")");
      // [B, T, E] -> [B, H, T, hd]
      return w.Let(name + "_" + hint + "_heads", projected + ".reshape([" + rows + ", " + steps + ", " + h + ", " + hd +
                                                     "]).transpose(1, 2)");
    };
    const std::string q = project(query_, 0, "q"), k = project(key_, 1, "k"), v = project(value_, 2, "v");
    const std::string valid = w.Let(name + "_valid", "torch.arange(" + steps + ", dtype=4).unsqueeze(0) < " + lengths +
                                                         ".to(4).unsqueeze(1)");
    // Rows without steps attend to their padding (Encode's rule; the mean ignores it).
    const std::string padding = w.Let(name + "_padding", "torch.logical_and(torch.logical_not(" + valid + "), (" +
                                                             lengths + " > 0).unsqueeze(1))");
    const std::string scores = w.Let(name + "_scores", "torch.matmul(" + q + " * " + ScriptFloat(1.0 / std::sqrt(head_dim)) +
                                                           ", " + k + ".transpose(2, 3)).masked_fill(" + padding +
                                                           ".unsqueeze(1).unsqueeze(2), float(\"-inf\"))");
    const std::string attended = w.Let(name + "_attended", "torch.matmul(torch.softmax(" + scores + ", -1), " + v +
                                                               ").transpose(1, 2).reshape([" + rows + ", " + steps + ", " + e + "])");
    const std::string out = ScriptLinear(w, *mha.out_proj, attended, name + "_out");
    const std::string mask = w.Let(name + "_mask", valid + ".unsqueeze(2).to(6)");
    const std::string count = w.Let(name + "_count", "torch.clamp(" + lengths + ".to(6), min=1.0).unsqueeze(1)");
    return w.Let(name, "torch.sum(" + out + " * " + mask + ", 1) / " + count);
  }

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
