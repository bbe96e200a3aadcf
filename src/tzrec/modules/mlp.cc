#include "tzrec/modules/mlp.h"

#include <ATen/ops/relu.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/zeros.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cmath>
#include <map>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/modules/fast_linear.h"

namespace tzrec {
namespace {

// Parses "nn.Name(k=v, k=v)" into name and arguments.
void ParseActivation(const std::string& text, std::string* name,
                     std::map<std::string, double>* args, const std::string& where) {
  std::string spec(Trim(text));
  if (StartsWith(spec, "torch.")) spec = spec.substr(6);
  size_t paren = spec.find('(');
  *name = spec.substr(0, paren);
  if (paren == std::string::npos) return;
  if (spec.back() != ')') Fail(where, ".activation: malformed '", text, "'");
  std::string inner = spec.substr(paren + 1, spec.size() - paren - 2);
  for (auto piece : SplitView(inner, ",")) {
    std::string item(Trim(piece));
    if (item.empty()) continue;
    size_t eq = item.find('=');
    double value;
    if (eq == std::string::npos || !ParseDouble(item.substr(eq + 1), &value)) {
      Fail(where, ".activation: argument '", item, "' of '", text,
           "' not supported yet (only numeric keyword arguments)");
    }
    (*args)[std::string(Trim(item.substr(0, eq)))] = value;
  }
}

double TakeArg(std::map<std::string, double>* args, const std::string& key, double fallback) {
  auto it = args->find(key);
  if (it == args->end()) return fallback;
  double value = it->second;
  args->erase(it);
  return value;
}

}  // namespace

int64_t CheckedWidth(int64_t value, const std::string& field) {
  if (value < 1 || value > kMaxLayerWidth) {
    Fail(field, " must be in [1, ", kMaxLayerWidth, "], got ", value);
  }
  return value;
}

void CheckLinearSize(int64_t in_features, int64_t out_features, const std::string& where) {
  if (in_features > 0 && out_features > kMaxLayerParameters / in_features) {
    Fail(where, ": a ", in_features, " x ", out_features, " layer has more than ",
         kMaxLayerParameters, " weights");
  }
}

int64_t CheckedCount(int64_t count, int64_t min, int64_t max, const std::string& field) {
  if (count < min || count > max) Fail(field, " must be in [", min, ", ", max, "], got ", count);
  return count;
}

DiceImpl::DiceImpl(int64_t hidden_size) {
  bn_ = register_module("bn", torch::nn::BatchNorm1d(hidden_size));
  alpha_ = register_parameter("alpha", at::zeros({hidden_size}));
}

at::Tensor DiceImpl::forward(const at::Tensor& input) {
  at::Tensor p = at::sigmoid(bn_->forward(input));
  return p * input + alpha_ * (1 - p) * input;
}

bool MlpRowsAreIndependent(const protos::MLP& config) {
  return !config.use_bn() && Trim(config.activation()) != "Dice";
}

torch::nn::AnyModule CreateActivation(const std::string& activation, int64_t hidden_size,
                                      const std::string& where) {
  if (Trim(activation) == "Dice") return torch::nn::AnyModule(Dice(hidden_size));
  std::string name;
  std::map<std::string, double> args;
  ParseActivation(activation, &name, &args, where);
  for (const auto& [key, value] : args) {
    if (!std::isfinite(value)) Fail(where, ".activation: argument ", key, " of '", activation, "' is not finite");
  }
  torch::nn::AnyModule module;
  if (name == "nn.ReLU") {
    module = torch::nn::AnyModule(torch::nn::ReLU());
  } else if (name == "nn.Sigmoid") {
    module = torch::nn::AnyModule(torch::nn::Sigmoid());
  } else if (name == "nn.Tanh") {
    module = torch::nn::AnyModule(torch::nn::Tanh());
  } else if (name == "nn.GELU") {
    module = torch::nn::AnyModule(torch::nn::GELU());
  } else if (name == "nn.SiLU") {
    module = torch::nn::AnyModule(torch::nn::SiLU());
  } else if (name == "nn.ELU") {
    module = torch::nn::AnyModule(torch::nn::ELU(torch::nn::ELUOptions().alpha(TakeArg(&args, "alpha", 1.0))));
  } else if (name == "nn.LeakyReLU") {
    module = torch::nn::AnyModule(torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(
                                      TakeArg(&args, "negative_slope", 0.01))));
  } else if (name == "nn.PReLU") {
    // One slope, or one per channel of this layer; PReLU broadcasts nothing else.
    const double count = TakeArg(&args, "num_parameters", 1);
    if (count != 1 && count != static_cast<double>(hidden_size)) {
      Fail(where, ".activation: num_parameters of '", activation, "' must be 1 or the layer width ",
           hidden_size);
    }
    module = torch::nn::AnyModule(torch::nn::PReLU(torch::nn::PReLUOptions()
                                  .num_parameters(static_cast<int64_t>(count))
                                  .init(TakeArg(&args, "init", 0.25))));
  } else {
    Fail(where, ".activation: '", activation,
         "' not supported yet (supported: nn.ReLU, nn.Sigmoid, nn.Tanh, nn.GELU, nn.SiLU, "
         "nn.ELU, nn.LeakyReLU, nn.PReLU, Dice)");
  }
  if (!args.empty()) {
    Fail(where, ".activation: argument '", args.begin()->first, "' of '", activation,
         "' not supported yet");
  }
  return module;
}

PerceptronImpl::PerceptronImpl(int64_t in_features, int64_t out_features,
                               const std::string& activation, bool use_bn, bool bias,
                               double dropout_ratio, bool use_ln, const std::string& where) {
  if (use_bn && use_ln) Fail(where, ": use_bn and use_ln cannot both be true");
  CheckLinearSize(in_features, out_features, where);
  if (!(dropout_ratio >= 0.0 && dropout_ratio < 1.0)) {
    Fail(where, ".dropout_ratio must be in [0, 1), got ", dropout_ratio);
  }
  linear_ = torch::nn::Linear(
      torch::nn::LinearOptions(in_features, out_features).bias(use_bn ? false : bias));
  perceptron_->push_back(linear_);
  const std::string act(Trim(activation));
  fused_relu_ = act == "nn.ReLU" || act == "torch.nn.ReLU";
  fused_ = !use_bn && !use_ln && (act.empty() || fused_relu_);
  if (use_bn) perceptron_->push_back(torch::nn::BatchNorm1d(out_features));
  if (use_ln) {
    perceptron_->push_back(torch::nn::LayerNorm(torch::nn::LayerNormOptions({out_features})));
  }
  if (!activation.empty()) {
    perceptron_->push_back(CreateActivation(activation, out_features, where));
  }
  if (dropout_ratio > 0.0) {
    dropout_ = torch::nn::Dropout(dropout_ratio);
    perceptron_->push_back(dropout_);
  }
  register_module("perceptron", perceptron_);
}

at::Tensor PerceptronImpl::forward(const at::Tensor& input) {
  if (!fused_) return perceptron_->forward(input);
  at::Tensor y = FastLinear(input.contiguous(), linear_->weight, linear_->bias, fused_relu_);
  return dropout_ ? dropout_->forward(y) : y;
}

bool PerceptronImpl::Chainable() const {
  return fused_ && linear_->bias.defined() && (!dropout_ || !dropout_->is_training());
}

at::Tensor PerceptronImpl::AfterLinear(const at::Tensor& y) {
  if (fused_) {
    at::Tensor out = fused_relu_ ? at::relu(y) : y;
    return dropout_ ? dropout_->forward(out) : out;
  }
  at::Tensor out = y;
  for (auto it = perceptron_->begin() + 1; it != perceptron_->end(); ++it) out = it->forward(out);
  return out;
}

MLPImpl::MLPImpl(int64_t in_features, const protos::MLP& config, const std::string& where) {
  const int layers = config.hidden_units_size();
  if (layers == 0) Fail(where, ".hidden_units is empty");
  if (in_features < 1) Fail(where, ": the input is empty (", in_features, " values; an empty feature group?)");
  std::vector<double> dropout(layers, 0.0);
  if (config.dropout_ratio_size() == 1) {
    dropout.assign(layers, config.dropout_ratio(0));
  } else if (config.dropout_ratio_size() > 1) {
    if (config.dropout_ratio_size() != layers) {
      Fail(where, ".dropout_ratio has ", config.dropout_ratio_size(),
           " entries but hidden_units has ", layers);
    }
    for (int i = 0; i < layers; ++i) dropout[i] = config.dropout_ratio(i);
  }
  int64_t in = in_features;
  for (int i = 0; i < config.dropout_ratio_size(); ++i) {
    const double ratio = config.dropout_ratio(i);
    if (!(ratio >= 0.0 && ratio < 1.0)) {  // NaN too
      Fail(where, ".dropout_ratio[", i, "] must be in [0, 1), got ", ratio);
    }
  }
  for (int i = 0; i < layers; ++i) {
    int64_t out = CheckedWidth(config.hidden_units(i), StrCat(where, ".hidden_units[", i, "]"));
    mlp_->push_back(Perceptron(in, out, config.activation(), config.use_bn(), config.bias(),
                               dropout[i], config.use_ln(), where));
    layer_dims_.push_back(out);
    in = out;
  }
  output_dim_ = in;
  register_module("mlp", mlp_);
}

const torch::nn::Linear& MLPImpl::first_linear() {
  return mlp_[0]->as<PerceptronImpl>()->linear();
}

at::Tensor MLPImpl::ForwardFromFirstLinear(const at::Tensor& linear_output) {
  at::Tensor net = mlp_[0]->as<PerceptronImpl>()->AfterLinear(linear_output);
  for (size_t i = 1; i < mlp_->size(); ++i) net = mlp_[i]->as<PerceptronImpl>()->forward(net);
  return net;
}

at::Tensor MLPImpl::forward(const at::Tensor& input) {
  // BF16: consecutive fused layers as one chain, hidden activations in bfloat16.
  if (CurrentGemmPrecision() == GemmPrecision::kBFloat16 && mlp_->size() > 1) {
    std::vector<at::Tensor> weights, biases;
    std::vector<bool> relu;
    for (const auto& layer : *mlp_) {
      const auto* perceptron = layer->as<PerceptronImpl>();
      if (!perceptron->Chainable()) break;
      weights.push_back(perceptron->linear()->weight);
      biases.push_back(perceptron->linear()->bias);
      relu.push_back(perceptron->has_relu());
    }
    if (weights.size() == mlp_->size()) return FastLinearChain(input.contiguous(), weights, biases, relu);
  }
  at::Tensor net = input;
  for (const auto& layer : *mlp_) net = layer->as<PerceptronImpl>()->forward(net);
  return net;
}

std::vector<at::Tensor> MLPImpl::ForwardLayers(const at::Tensor& input) {
  std::vector<at::Tensor> outputs;
  at::Tensor net = input;
  for (const auto& layer : *mlp_) {
    net = layer->as<PerceptronImpl>()->forward(net);
    outputs.push_back(net);
  }
  return outputs;
}

std::string ScriptLayerNorm(ScriptWriter& w, const torch::nn::LayerNormImpl& ln, const std::string& input,
                            const std::string& hint) {
  const std::string weight = ln.weight.defined() ? w.Tensor(hint + "_weight", ln.weight) : "None";
  const std::string bias = ln.bias.defined() ? w.Tensor(hint + "_bias", ln.bias) : "None";
  return w.Let("ln", "torch.layer_norm(" + input + ", " + ScriptIntList(ln.options.normalized_shape()) + ", " +
                         weight + ", " + bias + ", " + ScriptFloat(ln.options.eps()) + ")");
}

std::string ScriptLinear(ScriptWriter& w, const torch::nn::LinearImpl& linear, const std::string& input,
                         const std::string& hint) {
  std::string call = "torch.linear(" + input + ", " + w.Tensor(hint + "_weight", linear.weight);
  if (linear.bias.defined()) call += ", " + w.Tensor(hint + "_bias", linear.bias);
  return w.Let(hint, call + ")");
}

namespace {

// Eval-mode batch norm over `input` ([B, C]) with the module's running statistics.
std::string ScriptBatchNorm(ScriptWriter& w, const torch::nn::BatchNorm1dImpl& bn, const std::string& input,
                            const std::string& name) {
  if (!bn.options.track_running_stats()) ScriptWriter::Unsupported("BatchNorm1d without running statistics");
  const std::string weight = bn.weight.defined() ? w.Tensor(name + "_weight", bn.weight) : "None";
  const std::string bias = bn.bias.defined() ? w.Tensor(name + "_bias", bn.bias) : "None";
  return w.Let("bn", "torch.batch_norm(" + input + ", " + weight + ", " + bias + ", " +
                         w.Tensor(name + "_running_mean", bn.running_mean) + ", " +
                         w.Tensor(name + "_running_var", bn.running_var) + ", False, 0.0, " +
                         ScriptFloat(bn.options.eps()) + ", False)");
}

}  // namespace

std::string DiceImpl::Script(ScriptWriter& w, const std::string& input, const std::string& name) const {
  const std::string p = w.Let("dice_p", "torch.sigmoid(" + ScriptBatchNorm(w, *bn_, input, name + "_bn") + ")");
  return w.Let("dice", p + " * " + input + " + " + w.Tensor(name + "_alpha", alpha_) + " * (1.0 - " + p +
                           ") * " + input);
}

std::string ScriptLayer(ScriptWriter& w, const torch::nn::Module& layer, const std::string& input,
                        const std::string& name) {
  const torch::nn::Module* m = &layer;
  const std::string& x = input;
  if (auto* linear = dynamic_cast<const torch::nn::LinearImpl*>(m)) {
    std::string call = "torch.linear(" + x + ", " + w.Tensor(name + "_weight", linear->weight);
    if (linear->bias.defined()) call += ", " + w.Tensor(name + "_bias", linear->bias);
    return w.Let("linear", call + ")");
  }
  if (auto* bn = dynamic_cast<const torch::nn::BatchNorm1dImpl*>(m)) return ScriptBatchNorm(w, *bn, x, name + "_bn");
  if (auto* ln = dynamic_cast<const torch::nn::LayerNormImpl*>(m)) return ScriptLayerNorm(w, *ln, x, name + "_ln");
  if (dynamic_cast<const torch::nn::ReLUImpl*>(m)) return w.Let("relu", "torch.relu(" + x + ")");
  if (dynamic_cast<const torch::nn::SigmoidImpl*>(m)) return w.Let("sigmoid", "torch.sigmoid(" + x + ")");
  if (dynamic_cast<const torch::nn::TanhImpl*>(m)) return w.Let("tanh", "torch.tanh(" + x + ")");
  if (auto* gelu = dynamic_cast<const torch::nn::GELUImpl*>(m)) {
    return w.Let("gelu", "torch.gelu(" + x + ", approximate=\"" + gelu->options.approximate() + "\")");
  }
  if (dynamic_cast<const torch::nn::SiLUImpl*>(m)) return w.Let("silu", "torch.silu(" + x + ")");
  if (auto* elu = dynamic_cast<const torch::nn::ELUImpl*>(m)) {
    return w.Let("elu", "torch.elu(" + x + ", " + ScriptFloat(elu->options.alpha()) + ")");
  }
  if (auto* leaky = dynamic_cast<const torch::nn::LeakyReLUImpl*>(m)) {
    return w.Let("leaky_relu", "torch.leaky_relu(" + x + ", " + ScriptFloat(leaky->options.negative_slope()) + ")");
  }
  if (auto* prelu = dynamic_cast<const torch::nn::PReLUImpl*>(m)) {
    return w.Let("prelu", "torch.prelu(" + x + ", " + w.Tensor(name + "_prelu_weight", prelu->weight) + ")");
  }
  if (auto* dice = dynamic_cast<const DiceImpl*>(m)) return dice->Script(w, x, name + "_dice");
  if (dynamic_cast<const torch::nn::DropoutImpl*>(m)) return x;  // the identity at inference
  ScriptWriter::Unsupported("layer " + m->name() + " has no TorchScript form");
}

std::string PerceptronImpl::Script(ScriptWriter& w, const std::string& input, const std::string& name) const {
  std::string x = input;
  for (const auto& child : perceptron_->children()) x = ScriptLayer(w, *child, x, name);
  return x;
}

std::string MLPImpl::Script(ScriptWriter& w, const std::string& input, const std::string& name) const {
  std::string x = input;
  for (size_t i = 0; i < mlp_->size(); ++i) {
    x = mlp_->ptr(i)->as<PerceptronImpl>()->Script(w, x, name + "_" + std::to_string(i));
  }
  return x;
}

}  // namespace tzrec
