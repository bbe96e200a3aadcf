// CapsuleLayer: MIND's behaviour-to-interest (B2I) dynamic routing (TorchEasyRec's
// CapsuleLayer, config B2ICapsule). A user's behaviour sequence [B, T, low_dim] becomes up to
// max_k interest capsules [B, max_k, high_dim]:
//   - the sequence is cut or zero-padded to max_seq_len steps; steps past a row's length are 0;
//   - each row gets K_b = clamp(log2(length), 1, max_k) capsules (max_k with const_caps_num);
//     capsule k is active when k < K_b (a fractional K_b rounds up);
//   - low capsules u = x @ bilinear_matrix; routing logits start from N(0, 1) * stddev
//     ("normal") or 0 ("zeros"), inactive capsules at -inf; each of num_iters rounds takes a
//     softmax over capsules of logits * routing_logits_scale, masks padded steps, and, before
//     the last round, adds the agreement <high_k, normalize(u_s)> (computed on detached u);
//     the last round's capsules sum the (non-detached) u by the routing weights and are
//     squashed: v * (|v|^2 / (1 + |v|^2))^squash_pow / |v| (|v| at least 1e-7);
//   - inactive capsules are 0.
// As in TorchEasyRec the routing weights carry no gradient; only the last sum does.
//
// Training draws fresh N(0, 1) routing logits for every batch, as TorchEasyRec. In evaluation
// and inference TorchEasyRec draws them again for every call, so a user's interests change
// from call to call; we use one fixed draw instead (the buffer "routing_logits",
// [max_seq_len, max_k], drawn when the layer is built and stored with the weights), so that
// evaluation, predict, serving and the scripted model give the same interests every time.
//
// Thread safety: one thread at a time (a torch module).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <string>

#include "tzrec/protos/module.pb.h"
#include "tzrec/script/script_writer.h"

namespace tzrec {

struct CapsuleOutput {
  at::Tensor interests;  // [B, max_k, high_dim], 0 for inactive capsules
  at::Tensor mask;       // bool [B, max_k], true for active capsules
};

class CapsuleLayerImpl : public torch::nn::Module {
 public:
  // `where` names the config field (e.g. "model_config.mind.user_tower.capsule_config").
  CapsuleLayerImpl(const protos::B2ICapsule& config, int64_t input_dim, const std::string& where);
  // `inputs` [B, T, input_dim] (any T: cut or padded to max_seq_len), `lengths` int64 [B].
  CapsuleOutput forward(const at::Tensor& inputs, const at::Tensor& lengths);
  // Inference forward as TorchScript; returns the locals {interests, mask}.
  std::pair<std::string, std::string> Script(ScriptWriter& w, const std::string& inputs, const std::string& lengths,
                                             const std::string& name) const;
  int64_t max_k() const { return max_k_; }
  int64_t high_dim() const { return high_dim_; }

 private:
  int64_t max_k_;
  int64_t max_seq_len_;
  int64_t high_dim_;
  int64_t num_iters_;
  double logits_scale_;
  double logits_stddev_;
  double squash_pow_;
  bool const_caps_num_;
  bool zeros_init_;
  at::Tensor bilinear_;         // [input_dim, high_dim]
  at::Tensor routing_logits_;   // [max_seq_len, max_k] fixed N(0, 1) draw for evaluation
};
TORCH_MODULE(CapsuleLayer);

}  // namespace tzrec
