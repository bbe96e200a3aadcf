// MLP as configured by `MLP {hidden_units, dropout_ratio, activation, use_bn, bias, use_ln}`.
//
// Each layer is Linear -> [BatchNorm1d] -> [LayerNorm] -> activation -> [Dropout]; with
// use_bn the Linear has no bias. Parameter names follow TorchEasyRec's module paths
// (mlp.<i>.perceptron.<j>.weight) so checkpoints read naturally.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <string>

#include "tzrec/protos/module.pb.h"
#include "tzrec/script/script_writer.h"

namespace torch::nn {
class LayerNormImpl;
}  // namespace torch::nn

namespace tzrec {

// The widest layer (hidden units, expert counts times widths, classes) a module accepts: far
// beyond any recommendation model, and small enough that in * out stays a sane allocation.
constexpr int64_t kMaxLayerWidth = int64_t{1} << 20;
// The most parameters one Linear layer may have (4 GiB of float weights).
constexpr int64_t kMaxLayerParameters = int64_t{1} << 30;

// `value` checked to be in [1, kMaxLayerWidth]; the error names `field` (a config path).
int64_t CheckedWidth(int64_t value, const std::string& field);
// Fails naming `where` when an in x out Linear would exceed kMaxLayerParameters.
void CheckLinearSize(int64_t in_features, int64_t out_features, const std::string& where);
// The most experts, mask blocks or similar repeated sub-modules of one module.
constexpr int64_t kMaxModuleCount = 1024;
// `count` checked to be in [min, max] (expert and block counts); the error names `field`.
int64_t CheckedCount(int64_t count, int64_t min, int64_t max, const std::string& field);

// Dice (DIN's data-adaptive activation): p = sigmoid(BatchNorm(x)), out = p * x + alpha *
// (1 - p) * x, per channel (alpha starts at 0). On [B*T, C] rows it is TorchEasyRec's dim=3
// Dice: statistics over every step. Parameters "bn.*" and "alpha".
class DiceImpl : public torch::nn::Module {
 public:
  explicit DiceImpl(int64_t hidden_size);
  at::Tensor forward(const at::Tensor& input);
  // Inference forward as TorchScript (script/script_writer.h); returns the output local.
  // `name` prefixes its tensors' attribute names.
  std::string Script(ScriptWriter& w, const std::string& input, const std::string& name) const;

 private:
  torch::nn::BatchNorm1d bn_{nullptr};
  at::Tensor alpha_;
};
TORCH_MODULE(Dice);

class PerceptronImpl : public torch::nn::Module {
 public:
  PerceptronImpl(int64_t in_features, int64_t out_features, const std::string& activation,
                 bool use_bn, bool bias, double dropout_ratio, bool use_ln,
                 const std::string& where);
  at::Tensor forward(const at::Tensor& input);
  const torch::nn::Linear& linear() const { return linear_; }
  // Whether the layer is Linear [+ ReLU] with a bias and no dropout acting now (a link of a
  // FastLinearChain), and whether it has the ReLU.
  bool Chainable() const;
  bool has_relu() const { return fused_relu_; }
  // Everything after the Linear (norm, activation, dropout), given the Linear's output.
  at::Tensor AfterLinear(const at::Tensor& linear_output);
  // Inference forward as TorchScript (dropout is the identity); returns the output local.
  std::string Script(ScriptWriter& w, const std::string& input, const std::string& name) const;

 private:
  torch::nn::Sequential perceptron_;
  // Linear [+ ReLU] [+ Dropout] runs as one fused FastLinear call (modules/fast_linear.h).
  bool fused_ = false;
  bool fused_relu_ = false;
  torch::nn::Linear linear_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
};
TORCH_MODULE(Perceptron);

class MLPImpl : public torch::nn::Module {
 public:
  // `where` names the config field for errors, e.g. "model_config.deepfm.deep".
  MLPImpl(int64_t in_features, const protos::MLP& config, const std::string& where);
  at::Tensor forward(const at::Tensor& input);
  // Every layer's output in order (the last is forward's).
  std::vector<at::Tensor> ForwardLayers(const at::Tensor& input);
  // Output width of each layer (its hidden_units).
  std::vector<int64_t> layer_dims() const { return layer_dims_; }
  int64_t output_dim() const { return output_dim_; }
  // The first layer's Linear, and the whole MLP given that Linear's output: for callers that
  // compute the first product in pieces (DIN's attention MLP over [q, s, q - s, q * s]).
  const torch::nn::Linear& first_linear();
  at::Tensor ForwardFromFirstLinear(const at::Tensor& linear_output);
  // Inference forward as TorchScript; returns the output local. `name` (e.g. "deep_mlp")
  // prefixes its tensors' attribute names ("deep_mlp_0_weight").
  std::string Script(ScriptWriter& w, const std::string& input, const std::string& name) const;

 private:
  torch::nn::ModuleList mlp_;
  std::vector<int64_t> layer_dims_;
  int64_t output_dim_;
};
TORCH_MODULE(MLP);

// torch.layer_norm with the module's shape, affine weights and eps; returns the output local.
std::string ScriptLayerNorm(ScriptWriter& w, const torch::nn::LayerNormImpl& ln, const std::string& input,
                            const std::string& hint);
// One layer of a Sequential (Linear, BatchNorm1d, LayerNorm, an activation CreateActivation
// builds, Dropout) as TorchScript at inference; returns the output local. `name` prefixes its
// tensors' attribute names. Other modules are ScriptUnsupported.
std::string ScriptLayer(ScriptWriter& w, const torch::nn::Module& layer, const std::string& input,
                        const std::string& name);
// torch.linear(input, weight, bias) as TorchScript; returns the output local.
std::string ScriptLinear(ScriptWriter& w, const torch::nn::LinearImpl& linear, const std::string& input,
                         const std::string& hint);

// Whether each output row of the MLP depends on its own input row only, in training too: no
// BatchNorm and no Dice (batch statistics). Dropout keeps rows independent.
bool MlpRowsAreIndependent(const protos::MLP& config);

// Builds an activation module from a TorchEasyRec activation string ("nn.ReLU",
// "torch.nn.LeakyReLU(negative_slope=0.1)", "Dice", ...) for a layer of `hidden_size`
// channels. Unknown ones fail naming `where`.
torch::nn::AnyModule CreateActivation(const std::string& activation, int64_t hidden_size,
                                      const std::string& where);

}  // namespace tzrec
