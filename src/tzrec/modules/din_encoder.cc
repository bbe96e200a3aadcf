// din_encoder: DIN target attention (Zhou et al. 2018). Each step s of the sequence is scored
// by an MLP over [q, s, q - s, q * s] and Linear(->1); padded steps get -2^31 + 1; the scores
// are softmaxed over the steps (no scaling) and weight the steps' sum.
//
// The attention MLP reads [B*T, 4*Ds] rows, which is what TorchEasyRec's MLP(dim=3) computes:
// BatchNorm / Dice over channels with every step, padded ones included, in the statistics.
// Without such batch statistics a row's score depends on its step alone, and a padded step's
// score is replaced by the padding score anyway, so the fast path scores the valid steps only
// (in a batch padded to its longest history, typically half the work) with the same outputs
// and gradients.
#include <ATen/ops/bmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/where.h>
#include <torch/nn/modules/linear.h>

#include <algorithm>
#include <cstdlib>

#include "tzrec/common/error.h"
#include "tzrec/modules/fast_linear.h"
#include "tzrec/modules/mlp.h"
#include "tzrec/modules/sequence_encoder.h"

namespace tzrec {
namespace {

// TZREC_FAST_DIN=0 computes the attention MLP on the plain concatenation of every step, padded
// ones included (the reference path).
bool FastDinEnabled() {
  const char* flag = std::getenv("TZREC_FAST_DIN");
  return !(flag && std::string(flag) == "0");
}

class DinEncoder : public SequenceEncoder {
 public:
  DinEncoder(const std::string& input, int64_t query_dim, int64_t sequence_dim,
             const protos::MLP& attn_mlp, int64_t max_seq_length, const std::string& where)
      : SequenceEncoder(input),
        dim_(sequence_dim),
        max_seq_length_(max_seq_length),
        rows_independent_(MlpRowsAreIndependent(attn_mlp)) {
    CheckQueryDim(query_dim, sequence_dim, where);
    if (max_seq_length < 0) Fail(where, ".max_seq_length must be >= 0, got ", max_seq_length);
    mlp_ = register_module("mlp", MLP(4 * sequence_dim, attn_mlp, where + ".attn_mlp"));
    linear_ = register_module("linear", torch::nn::Linear(mlp_->output_dim(), 1));
  }
  int64_t output_dim() const override { return dim_; }

  // The reference path (PlainAttentionMlp) as TorchScript.
  std::string Script(ScriptWriter& w, const std::string& query_in, const std::string& sequence_in,
                     const std::string& lengths_in, const std::string& name) const override {
    std::string sequence = sequence_in, lengths = lengths_in;
    ScriptTruncateSteps(w, max_seq_length_, &sequence, &lengths);
    const std::string d = std::to_string(dim_);
    const std::string rows = w.Let(name + "_rows", sequence + ".size(0)");
    const std::string steps = w.Let(name + "_steps", sequence + ".size(1)");
    const std::string query = w.Let(name + "_query", "torch.constant_pad_nd(" + query_in + ", [0, " + d + " - " +
                                                         query_in + ".size(1)], 0.0).unsqueeze(1).expand([" + rows +
                                                         ", " + steps + ", " + d + "])");
    const std::string attn_in = w.Let(name + "_attn_in", "torch.cat([" + query + ", " + sequence + ", " + query + " - " +
                                                             sequence + ", " + query + " * " + sequence + "], 2).reshape([" +
                                                             rows + " * " + steps + ", 4 * " + d + "])");
    const std::string hidden = mlp_->Script(w, attn_in, name + "_attn_mlp");
    const std::string scores = w.Let(name + "_scores", ScriptLinear(w, *linear_, hidden, name + "_attn_linear") +
                                                           ".view([" + rows + ", " + steps + "])");
    const std::string mask = w.Let(name + "_mask", "torch.arange(" + steps + ", dtype=4).unsqueeze(0) < " + lengths +
                                                       ".to(4).unsqueeze(1)");
    const std::string weights = w.Let(name + "_weights", "torch.softmax(torch.where(" + mask + ", " + scores +
                                                             ", torch.full_like(" + scores + ", " +
                                                             ScriptFloat(kPaddingScore) + ")), -1)");
    return w.Let(name, "torch.bmm(" + weights + ".unsqueeze(1), " + sequence + ").squeeze(1)");
  }

  at::Tensor Encode(const SequenceInputs& raw) override {
    const SequenceInputs in = TruncateSteps(raw, max_seq_length_);
    const int64_t rows = in.sequence.size(0), steps = in.sequence.size(1);
    at::Tensor scores;
    if (!FastDinEnabled()) {
      scores = MaskedSoftmaxInput(PlainAttentionMlp(in, rows, steps), in, rows, steps);
    } else if (rows_independent_) {
      scores = ValidStepScores(in, rows, steps);
    } else {
      at::Tensor query = PadQuery(in.query, dim_);
      scores = MaskedSoftmaxInput(SplitAttentionMlp(query, in.sequence, at::Tensor()), in, rows, steps);
    }
    at::Tensor weights = at::softmax(scores, -1);
    return at::bmm(weights.unsqueeze(1), in.sequence).squeeze(1);
  }

  // The reference: the attention MLP on the [B*T, 4*Ds] concatenation.
  at::Tensor PlainAttentionMlp(const SequenceInputs& in, int64_t rows, int64_t steps) {
    at::Tensor query = PadQuery(in.query, dim_).unsqueeze(1).expand({rows, steps, dim_});
    at::Tensor attn_in = at::cat({query, in.sequence, query - in.sequence, query * in.sequence}, 2);
    return mlp_->forward(attn_in.reshape({rows * steps, 4 * dim_}));
  }

  // [B, T] scores from the attention MLP's [B*T, H'] output, padded steps at the padding score.
  at::Tensor MaskedSoftmaxInput(const at::Tensor& hidden, const SequenceInputs& in, int64_t rows,
                                int64_t steps) {
    at::Tensor scores = linear_->forward(hidden).view({rows, steps});
    return at::where(StepMask(in.lengths, steps), scores, at::full_like(scores, kPaddingScore));
  }

  // The same first layer in pieces: W [q, s, q - s, q * s] = (W1 + W3) q + (W2 - W3) s + W4 (q * s),
  // so the query's part is computed once per row instead of once per step, and the 4*Ds-wide
  // concatenation (the largest tensor of the step) never exists: half the first layer's
  // FLOPs and a quarter of its input memory. `sequence` is [B, T, Ds] (every step) with
  // `row_of` undefined, or [M, Ds] steps with `row_of` [M] naming each one's row.
  at::Tensor SplitAttentionMlp(const at::Tensor& query, const at::Tensor& sequence, const at::Tensor& row_of) {
    const torch::nn::Linear& first = mlp_->first_linear();
    const at::Tensor& w = first->weight;  // [H, 4*Ds]
    const int64_t d = dim_, h = w.size(0);
    at::Tensor w_query = w.narrow(1, 0, d) + w.narrow(1, 2 * d, d);
    at::Tensor w_steps = at::cat({w.narrow(1, d, d) - w.narrow(1, 2 * d, d), w.narrow(1, 3 * d, d)}, 1);
    at::Tensor per_row = FastLinear(query.contiguous(), w_query.contiguous(), first->bias, false);  // [B, H]
    if (row_of.defined()) {
      at::Tensor step_in = at::cat({sequence, at::index_select(query, 0, row_of) * sequence}, 1);
      at::Tensor per_step = FastLinear(step_in, w_steps, at::Tensor(), false);  // [M, H]
      return mlp_->ForwardFromFirstLinear(per_step + at::index_select(per_row, 0, row_of));
    }
    const int64_t rows = sequence.size(0), steps = sequence.size(1);
    at::Tensor step_in = at::cat({sequence, query.unsqueeze(1) * sequence}, 2).reshape({rows * steps, 2 * d});
    at::Tensor per_step = FastLinear(step_in, w_steps, at::Tensor(), false);  // [B*T, H]
    return mlp_->ForwardFromFirstLinear(
        (per_step.view({rows, steps, h}) + per_row.unsqueeze(1)).reshape({rows * steps, h}));
  }

  // [B, T] scores with the attention MLP run on the valid steps only (gathered in row-major
  // order) and the padding score elsewhere.
  at::Tensor ValidStepScores(const SequenceInputs& in, int64_t rows, int64_t steps) {
    at::Tensor lengths = in.lengths.to(at::kCPU, at::kLong).contiguous();
    const int64_t* length = lengths.data_ptr<int64_t>();
    int64_t valid = 0;
    for (int64_t b = 0; b < rows; ++b) valid += std::clamp<int64_t>(length[b], 0, steps);
    at::Tensor flat = at::empty({valid}, lengths.options());
    at::Tensor row_of = at::empty({valid}, lengths.options());
    int64_t* flat_out = flat.data_ptr<int64_t>();
    int64_t* row_out = row_of.data_ptr<int64_t>();
    for (int64_t b = 0, k = 0; b < rows; ++b) {
      for (int64_t t = 0, n = std::clamp<int64_t>(length[b], 0, steps); t < n; ++t, ++k) {
        flat_out[k] = b * steps + t;
        row_out[k] = b;
      }
    }
    const at::Device device = in.sequence.device();
    flat = flat.to(device);
    row_of = row_of.to(device);
    at::Tensor values = at::index_select(in.sequence.reshape({rows * steps, dim_}), 0, flat);
    at::Tensor hidden = SplitAttentionMlp(PadQuery(in.query, dim_), values, row_of);
    at::Tensor valid_scores = linear_->forward(hidden).view({valid});
    at::Tensor scores = at::full({rows * steps}, kPaddingScore, valid_scores.options());
    return scores.index_copy(0, flat, valid_scores).view({rows, steps});
  }

 private:
  int64_t dim_;
  int64_t max_seq_length_;
  bool rows_independent_;  // no BatchNorm / Dice in the attention MLP: valid steps only
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
