// multi_window_din_encoder: DIN-style weights per step, PReLU(Linear(MLP([s, q * s, q]))) with
// no softmax, summed over consecutive windows of `windows_len` steps, each divided by its
// number of valid steps (at least 1), then the query appended: [B, (windows + 1) * Ds]. Steps
// past sum(windows_len) are dropped.
#include <ATen/ops/cat.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/sum.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>

#include "tzrec/common/error.h"
#include "tzrec/modules/mlp.h"
#include "tzrec/modules/sequence_encoder.h"

namespace tzrec {
namespace {

class MultiWindowDinEncoder : public SequenceEncoder {
 public:
  MultiWindowDinEncoder(const protos::MultiWindowDINEncoder& config, int64_t query_dim,
                        int64_t sequence_dim, const std::string& where)
      : SequenceEncoder(config.input()), dim_(sequence_dim) {
    CheckQueryDim(query_dim, sequence_dim, where);
    if (config.windows_len_size() == 0) Fail(where, ".windows_len is empty");
    for (int i = 0; i < config.windows_len_size(); ++i) {
      const int64_t w = CheckedCount(config.windows_len(i), 1, int64_t{1} << 20, StrCat(where, ".windows_len[", i, "]"));
      window_begin_.push_back(total_);
      windows_.push_back(w);
      total_ += w;
    }
    mlp_ = register_module("mlp", MLP(3 * sequence_dim, config.attn_mlp(), where + ".attn_mlp"));
    linear_ = register_module("linear", torch::nn::Linear(mlp_->output_dim(), 1));
    active_ = register_module("active", torch::nn::PReLU());
  }
  int64_t output_dim() const override { return dim_ * static_cast<int64_t>(windows_.size() + 1); }

  at::Tensor Encode(const SequenceInputs& in) override {
    const int64_t rows = in.sequence.size(0), steps = in.sequence.size(1);
    at::Tensor query = PadQuery(in.query, dim_);
    at::Tensor expanded = query.unsqueeze(1).expand({rows, steps, dim_});
    at::Tensor attn_in = at::cat({in.sequence, expanded * in.sequence, expanded}, 2);
    at::Tensor weights = active_->forward(
        linear_->forward(mlp_->forward(attn_in.reshape({rows * steps, 3 * dim_}))).view({rows, steps, 1}));
    at::Tensor mask = StepMask(in.lengths, steps).unsqueeze(2).to(weights.scalar_type());
    at::Tensor weighted = weights * mask * in.sequence;  // [B, T, D]
    if (steps < total_) {
      weighted = at::constant_pad_nd(weighted, {0, 0, 0, total_ - steps}, 0.0);
    } else if (steps > total_) {
      weighted = weighted.narrow(1, 0, total_);
    }
    std::vector<at::Tensor> parts;
    for (size_t w = 0; w < windows_.size(); ++w) {
      at::Tensor sum = at::sum(weighted.narrow(1, window_begin_[w], windows_[w]), 1);
      at::Tensor valid = at::clamp(in.lengths - window_begin_[w], 1, windows_[w]).to(sum.scalar_type());
      parts.push_back(sum / valid.unsqueeze(1));
    }
    parts.push_back(query);
    return at::cat(parts, 1);
  }

 private:
  int64_t dim_;
  std::vector<int64_t> windows_, window_begin_;
  int64_t total_ = 0;
  MLP mlp_{nullptr};
  torch::nn::Linear linear_{nullptr};
  torch::nn::PReLU active_{nullptr};
};

std::shared_ptr<SequenceEncoder> Make(const SequenceEncoderContext& c) {
  return std::make_shared<MultiWindowDinEncoder>(c.config->multi_window_din_encoder(), c.query_dim,
                                                 c.sequence_dim, c.where);
}

}  // namespace

TZREC_REGISTER(SequenceEncoderRegistry(), "multi_window_din_encoder", Make, "name", "input",
               "attn_mlp.*", "windows_len");

}  // namespace tzrec
