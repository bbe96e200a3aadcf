// Intervention of DC2VR (TorchEasyRec's modules/intervention.py): a tower's representation
// `base` corrected by what other towers' representations `source` say, through a shared
// low-rank space: out = (base Wb - stop_grad(source) Ws) Wb^T + base, then dropout.
//
// Wb [base_dim, r] and Ws [source_dim, r] have orthonormal columns throughout training, kept
// so as torch.nn.utils.parametrizations.orthogonal keeps a tall matrix (its Householder map
// with trivialisation): the trained parameter X starts at -I; W = B · householder(tril(X, -1))
// with the reflections' signs from X's (never trained) diagonal, and B a fixed orthogonal
// [n, n] completion of the initial orthogonal W. Modules are used by one thread at a time.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/dropout.h>

#include <string>

namespace tzrec {

class ScriptWriter;

class OrthogonalWeightImpl : public torch::nn::Module {
 public:
  // rows > cols (checked by the caller, who names the config field).
  OrthogonalWeightImpl(int64_t rows, int64_t cols);
  // The current [rows, cols] weight (differentiable in the parameter).
  at::Tensor forward() const;

 private:
  at::Tensor original_;  // X, [rows, cols]
  at::Tensor base_;      // B, [rows, rows] buffer
};
TORCH_MODULE(OrthogonalWeight);

class InterventionImpl : public torch::nn::Module {
 public:
  // `where` names the tower config for errors (low_rank_dim must be below both widths).
  InterventionImpl(int64_t base_dim, int64_t source_dim, int64_t low_rank_dim, double dropout_ratio,
                   const std::string& where);
  at::Tensor forward(const at::Tensor& base, const at::Tensor& source);
  int64_t output_dim() const { return base_dim_; }
  // Inference forward as TorchScript (the weights as constants); returns the output local.
  std::string Script(ScriptWriter& w, const std::string& base, const std::string& source,
                     const std::string& name) const;

 private:
  int64_t base_dim_;
  OrthogonalWeight base_rotate_{nullptr};
  OrthogonalWeight source_rotate_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
};
TORCH_MODULE(Intervention);

}  // namespace tzrec
