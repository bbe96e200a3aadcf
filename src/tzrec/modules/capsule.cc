#include "tzrec/modules/capsule.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/modules/mlp.h"

namespace tzrec {
namespace {

// |v| over the last dim as both forms compute it.
at::Tensor LastDimNorm(const at::Tensor& x) { return at::norm(x, 2, {-1}, /*keepdim=*/true); }

}  // namespace

CapsuleLayerImpl::CapsuleLayerImpl(const protos::B2ICapsule& config, int64_t input_dim, const std::string& where)
    : max_k_(CheckedCount(config.max_k(), 1, kMaxModuleCount, where + ".max_k")),
      max_seq_len_(CheckedWidth(config.max_seq_len(), where + ".max_seq_len")),
      high_dim_(CheckedWidth(config.high_dim(), where + ".high_dim")),
      num_iters_(CheckedCount(config.num_iters(), 1, 100, where + ".num_iters")),
      logits_scale_(config.routing_logits_scale()),
      logits_stddev_(config.routing_logits_stddev()),
      squash_pow_(config.squash_pow()),
      const_caps_num_(config.const_caps_num()) {
  const std::string& init = config.routing_init_method();
  if (init != "normal" && init != "zeros") {
    Fail(where, ".routing_init_method: '", init, "' (normal or zeros)");
  }
  zeros_init_ = init == "zeros";
  for (const auto& [value, field] : {std::make_pair(logits_scale_, ".routing_logits_scale"),
                                     std::make_pair(logits_stddev_, ".routing_logits_stddev"),
                                     std::make_pair(squash_pow_, ".squash_pow")}) {
    if (!std::isfinite(value)) Fail(where, field, " must be finite, got ", value);
  }
  CheckLinearSize(input_dim, high_dim_, where);
  // N(0, 1), as TorchEasyRec initialises it.
  bilinear_ = register_parameter("bilinear_matrix", at::randn({input_dim, high_dim_}));
  routing_logits_ = register_buffer("routing_logits", at::randn({max_seq_len_, max_k_}));
}

CapsuleOutput CapsuleLayerImpl::forward(const at::Tensor& inputs, const at::Tensor& lengths) {
  const int64_t batch = inputs.size(0);
  at::Tensor x = inputs.slice(1, 0, max_seq_len_);
  if (x.size(1) < max_seq_len_) x = at::constant_pad_nd(x, {0, 0, 0, max_seq_len_ - x.size(1)}, 0.0);
  const at::Tensor seq_mask = at::arange(max_seq_len_, lengths.options()).unsqueeze(0) < lengths.unsqueeze(1);
  x = x * seq_mask.unsqueeze(2).to(x.scalar_type());
  at::Tensor num_capsules = const_caps_num_ ? at::full({batch}, static_cast<double>(max_k_), x.options())
                                            : at::clamp(at::log2(lengths.to(x.scalar_type())), 1.0, static_cast<double>(max_k_));
  const at::Tensor capsule_mask = at::arange(max_k_, x.options()).unsqueeze(0) < num_capsules.unsqueeze(1);

  at::Tensor logits;
  if (zeros_init_) {
    logits = at::zeros({batch, max_seq_len_, max_k_}, x.options());
  } else if (is_training()) {
    logits = at::randn({batch, max_seq_len_, max_k_}, x.options()) * logits_stddev_;
  } else {
    logits = routing_logits_.unsqueeze(0).expand({batch, max_seq_len_, max_k_}) * logits_stddev_;
  }
  const at::Tensor inactive = capsule_mask.logical_not().unsqueeze(1);  // [B, 1, K]
  const at::Tensor step_weight = seq_mask.unsqueeze(2).to(x.scalar_type());
  const at::Tensor low = at::matmul(x, bilinear_);  // [B, S, H]
  const at::Tensor low_detached = low.detach();
  const at::Tensor low_direction = low_detached / at::clamp_min(LastDimNorm(low_detached), 1e-12);
  at::Tensor high;
  for (int64_t iter = 0; iter < num_iters_; ++iter) {
    logits = logits.masked_fill(inactive, -std::numeric_limits<double>::infinity());
    logits = at::softmax(logits * logits_scale_, 2) * step_weight;
    if (iter + 1 < num_iters_) {
      high = at::bmm(logits.transpose(1, 2), low_detached);                // [B, K, H]
      logits = logits + at::bmm(low_direction, high.transpose(1, 2));      // [B, S, K]
    } else {
      high = at::bmm(logits.transpose(1, 2), low);
      const at::Tensor norm = at::clamp_min(LastDimNorm(high), 1e-7);
      const at::Tensor square = norm * norm;
      high = at::pow(square / (square + 1), squash_pow_) / norm * high;
    }
  }
  return {high * capsule_mask.unsqueeze(2).to(high.scalar_type()), capsule_mask};
}

std::pair<std::string, std::string> CapsuleLayerImpl::Script(ScriptWriter& w, const std::string& inputs,
                                                             const std::string& lengths, const std::string& name) const {
  const std::string s = std::to_string(max_seq_len_), k = std::to_string(max_k_);
  std::string x = w.Let(name + "_steps", inputs + "[:, 0:" + s + "]");
  x = w.Let(name + "_padded", "torch.constant_pad_nd(" + x + ", [0, 0, 0, " + s + " - " + x + ".size(1)], 0.0)");
  const std::string seq_mask =
      w.Let(name + "_seq_mask", "torch.arange(" + s + ", dtype=4).unsqueeze(0) < " + lengths + ".unsqueeze(1)");
  const std::string step_weight = w.Let(name + "_step_weight", seq_mask + ".unsqueeze(2).float()");
  x = w.Let(name + "_masked", x + " * " + step_weight);
  const std::string num_capsules =
      const_caps_num_ ? w.Let(name + "_num", "torch.full([" + x + ".size(0)], " + ScriptFloat(max_k_) + ")")
                      : w.Let(name + "_num", "torch.clamp(torch.log2(" + lengths + ".float()), 1.0, " + ScriptFloat(max_k_) + ")");
  const std::string capsule_mask =
      w.Let(name + "_mask", "torch.arange(" + k + ", dtype=6).unsqueeze(0) < " + num_capsules + ".unsqueeze(1)");
  const std::string inactive = w.Let(name + "_inactive", "torch.logical_not(" + capsule_mask + ").unsqueeze(1)");
  std::string logits;
  if (zeros_init_) {
    logits = w.Let(name + "_logits", "torch.zeros([" + x + ".size(0), " + s + ", " + k + "])");
  } else {
    const std::string init = w.Tensor(name + "_routing_logits", routing_logits_);
    logits = w.Let(name + "_logits", init + ".unsqueeze(0).expand([" + x + ".size(0), " + s + ", " + k + "]) * " +
                                         ScriptFloat(logits_stddev_));
  }
  const std::string bilinear = w.Tensor(name + "_bilinear_matrix", bilinear_);
  const std::string low = w.Let(name + "_low", "torch.matmul(" + x + ", " + bilinear + ")");
  const std::string direction = w.Let(
      name + "_low_direction", "torch.div(" + low + ", torch.clamp_min(torch.norm(" + low + ", 2.0, [-1], True), 1e-12))");
  std::string high;
  for (int64_t iter = 0; iter < num_iters_; ++iter) {
    logits = w.Let(name + "_logits", "torch.softmax(" + logits + ".masked_fill(" + inactive + ", float(\"-inf\")) * " +
                                         ScriptFloat(logits_scale_) + ", 2) * " + step_weight);
    high = w.Let(name + "_high", "torch.bmm(" + logits + ".transpose(1, 2), " + low + ")");
    if (iter + 1 < num_iters_) {
      logits = w.Let(name + "_logits", logits + " + torch.bmm(" + direction + ", " + high + ".transpose(1, 2))");
    }
  }
  const std::string norm = w.Let(name + "_norm", "torch.clamp_min(torch.norm(" + high + ", 2.0, [-1], True), 1e-7)");
  const std::string square = w.Let(name + "_square", norm + " * " + norm);
  high = w.Let(name + "_squashed", "torch.pow(" + square + " / (" + square + " + 1.0), " + ScriptFloat(squash_pow_) +
                                       ") / " + norm + " * " + high);
  return {w.Let(name + "_interests", high + " * " + capsule_mask + ".unsqueeze(2).float()"), capsule_mask};
}

}  // namespace tzrec
