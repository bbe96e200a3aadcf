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
#include "tzrec/common/strings.h"
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

  std::string Script(ScriptWriter& w, const std::string& query_in, const std::string& sequence,
                     const std::string& lengths_in, const std::string& name) const override {
    const std::string d = std::to_string(dim_), total = std::to_string(total_);
    const std::string rows = w.Let(name + "_rows", sequence + ".size(0)");
    const std::string steps = w.Let(name + "_steps", sequence + ".size(1)");
    const std::string lengths = w.Let(name + "_lengths", lengths_in + ".to(4)");
    const std::string query = w.Let(name + "_query", "torch.constant_pad_nd(" + query_in + ", [0, " + d + " - " +
                                                         query_in + ".size(1)], 0.0)");
    const std::string expanded = w.Let(name + "_expanded", query + ".unsqueeze(1).expand([" + rows + ", " + steps + ", " + d + "])");
    const std::string attn_in = w.Let(name + "_attn_in", "torch.cat([" + sequence + ", " + expanded + " * " + sequence +
                                                             ", " + expanded + "], 2).reshape([" + rows + " * " + steps +
                                                             ", 3 * " + d + "])");
    const std::string linear = ScriptLinear(w, *linear_, mlp_->Script(w, attn_in, name + "_attn_mlp"), name + "_attn_linear");
    const std::string weights = w.Let(name + "_weights", "torch.prelu(" + linear + ", " +
                                                             w.Tensor(name + "_prelu_weight", active_->weight) + ").view([" +
                                                             rows + ", " + steps + ", 1])");
    const std::string mask = w.Let(name + "_mask", "(torch.arange(" + steps + ", dtype=4).unsqueeze(0) < " + lengths +
                                                       ".unsqueeze(1)).unsqueeze(2).to(6)");
    std::string weighted = w.Let(name + "_weighted", weights + " * " + mask + " * " + sequence);
    // Steps padded or cut to the windows' total, as Encode does.
    weighted = w.Let(name + "_windowed", "torch.constant_pad_nd(" + weighted + ", [0, 0, 0, " + total + " - " + steps +
                                             "], 0.0) if " + steps + " < " + total + " else " + weighted + "[:, :" +
                                             total + "]");
    std::vector<std::string> parts;
    for (size_t i = 0; i < windows_.size(); ++i) {
      const std::string begin = std::to_string(window_begin_[i]), width = std::to_string(windows_[i]);
      const std::string sum = w.Let(name + "_sum", "torch.sum(" + weighted + "[:, " + begin + ":" + begin + " + " + width + "], [1])");
      parts.push_back(w.Let(name + "_window", sum + " / torch.clamp(" + lengths + " - " + begin + ", " + "min=1, max=" +
                                                  width + ").to(6).unsqueeze(1)"));
    }
    parts.push_back(query);
    return w.Let(name, "torch.cat([" + Join(parts, ", ") + "], 1)");
  }

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
