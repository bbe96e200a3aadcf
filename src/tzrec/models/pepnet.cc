// PEPNet (model_config.pepnet, Parameter and Embedding Personalized Network), as TorchEasyRec
// computes it. The "all" feature group is the main input. With a "domain" group, EPNet scales
// it by a gate of [domain, stop_grad(main)]; with a "uia" group, PPNet gives each task its own
// stack of Linear -> activation -> x gate([uia, stop_grad(main)]) -> dropout layers (otherwise
// every task reads the main input). A gate (GateNU) is gamma * sigmoid(Linear(relu(Linear(x)))).
// Each task tower is an optional MLP + Linear(num_class) — one per domain with
// `domain_input_name`: inference then outputs "<prediction>_<tower>_<domain>" for every domain,
// and losses and metrics read each row's own domain's output (its domain is the label field
// `domain_input_name`, in [0, task_domain_num)). Exports get a scripted model with the same
// per-domain outputs.
#include <ATen/ops/cat.h>
#include <ATen/ops/stack.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/models/model.h"
#include "tzrec/modules/mlp.h"
#include "tzrec/modules/task_tower.h"
#include "tzrec/protos/models/multi_task_rank.pb.h"

namespace tzrec {
namespace {

class GateNUImpl : public torch::nn::Module {
 public:
  GateNUImpl(int64_t in_features, int64_t hidden, int64_t out_features, double gamma) : gamma_(gamma) {
    layers_ = register_module("dense_layers", torch::nn::Sequential(torch::nn::Linear(in_features, hidden),
                                                                    torch::nn::ReLU(),
                                                                    torch::nn::Linear(hidden, out_features),
                                                                    torch::nn::Sigmoid()));
  }
  at::Tensor forward(const at::Tensor& x) { return layers_->forward(x) * gamma_; }
  std::string Script(ScriptWriter& w, const std::string& input, const std::string& name) const {
    std::string x = input;
    int i = 0;
    for (const auto& layer : layers_->children()) x = ScriptLayer(w, *layer, x, StrCat(name, "_", i++));
    return w.Let("gate", x + " * " + ScriptFloat(gamma_));
  }

 private:
  double gamma_;
  torch::nn::Sequential layers_{nullptr};
};
TORCH_MODULE(GateNU);

class PEPNet : public Model {
 public:
  explicit PEPNet(const ModelContext& context) : Model(context) {
    const auto& config = this->config().pepnet();
    const std::string where = "model_config.pepnet";
    AddTowerHeads(TaskTowers(config), where + ".task_towers");
    InitInput();
    const auto& groups = embedding_group().group_names();
    auto has_group = [&](const std::string& name) { return std::find(groups.begin(), groups.end(), name) != groups.end(); };
    if (!has_group("all")) Fail("model_config.feature_groups: pepnet needs a DEEP group named 'all' (its main input)");
    const int64_t main_dim = InputDim("all");
    int64_t task_dim = main_dim;
    if (has_group("domain")) {
      const int64_t hidden = config.has_epnet_hidden_unit() ? config.epnet_hidden_unit() : main_dim;
      if (hidden <= 0) Fail(where, ".epnet_hidden_unit must be > 0");
      epnet_ = register_module("epnet_gate_nu", GateNU(InputDim("domain") + main_dim, hidden, main_dim, config.epnet_gamma()));
    }
    const int num_tasks = config.task_towers_size();
    if (has_group("uia")) {
      if (config.ppnet_hidden_units().empty()) Fail(where, ".ppnet_hidden_units: set them for the 'uia' group's PPNet");
      const int layers = config.ppnet_hidden_units_size();
      std::vector<double> dropout(layers, 0.0);
      if (config.ppnet_dropout_ratio_size() == 1) {
        dropout.assign(layers, config.ppnet_dropout_ratio(0));
      } else if (config.ppnet_dropout_ratio_size() == layers) {
        dropout.assign(config.ppnet_dropout_ratio().begin(), config.ppnet_dropout_ratio().end());
      } else if (config.ppnet_dropout_ratio_size() != 0) {
        Fail(where, ".ppnet_dropout_ratio has ", config.ppnet_dropout_ratio_size(), " values for ", layers,
             " ppnet_hidden_units (give 1 or one per layer)");
      }
      const int64_t uia_dim = InputDim("uia");
      ppnet_linears_ = register_module("ppnet_linears", torch::nn::ModuleList());
      ppnet_activations_ = register_module("ppnet_activations", torch::nn::Sequential());
      ppnet_gates_ = register_module("ppnet_gate_nus", torch::nn::ModuleList());
      for (int t = 0; t < num_tasks; ++t) {
        int64_t in = main_dim;
        for (int j = 0; j < layers; ++j) {
          const int64_t hidden = config.ppnet_hidden_units(j);
          if (hidden <= 0) Fail(where, ".ppnet_hidden_units[", j, "] must be > 0");
          ppnet_linears_->push_back(torch::nn::Linear(in, hidden));
          ppnet_activations_->push_back(
              CreateActivation(config.ppnet_activation(), hidden, where + ".ppnet_activation"));
          ppnet_gates_->push_back(GateNU(main_dim + uia_dim, hidden, hidden, config.ppnet_gamma()));
          in = hidden;
        }
      }
      for (int j = 0; j < layers; ++j) {
        if (dropout[j] < 0 || dropout[j] >= 1) Fail(where, ".ppnet_dropout_ratio[", j, "] must be in [0, 1)");
        dropout_.push_back(dropout[j]);
      }
      task_dim = config.ppnet_hidden_units(layers - 1);
    }
    if (config.has_domain_input_name()) {
      domain_label_ = config.domain_input_name();
      domains_ = static_cast<int>(config.task_domain_num());
      if (domains_ <= 0) Fail(where, ".task_domain_num must be > 0");
      if (context.heads.needs_labels) {
        const auto& labels = context.heads.label_fields;
        if (std::find(labels.begin(), labels.end(), domain_label_) == labels.end()) {
          Fail(where, ".domain_input_name '", domain_label_, "' must be one of data_config.label_fields (each row's ",
               "domain index, as TorchEasyRec reads it)");
        }
      }
    }
    task_towers_ = register_module("task_tower", torch::nn::ModuleList());
    for (int t = 0; t < num_tasks; ++t) {
      const auto& tower = config.task_towers(t);
      for (int d = 0; d < domains_; ++d) {
        task_towers_->push_back(TaskTower(task_dim, tower.num_class(), tower.has_mlp() ? &tower.mlp() : nullptr,
                                          StrCat(where, ".task_towers[", t, "]")));
      }
    }
  }

  Predictions Predict(const Batch& batch) override {
    auto grouped = BuildInput(batch);
    at::Tensor main = grouped.at("all");
    if (epnet_) main = epnet_->forward(at::cat({grouped.at("domain"), main.detach()}, 1)) * main;
    const size_t num_tasks = heads().size();
    std::vector<at::Tensor> task_inputs(num_tasks, main);
    if (ppnet_linears_) {
      const at::Tensor gate_input = at::cat({grouped.at("uia"), main.detach()}, 1);
      const size_t layers = dropout_.size();
      auto activation = ppnet_activations_->begin();
      for (size_t t = 0; t < num_tasks; ++t) {
        at::Tensor x = main;
        for (size_t j = 0; j < layers; ++j, ++activation) {
          const size_t k = t * layers + j;
          x = ppnet_linears_->ptr(k)->as<torch::nn::LinearImpl>()->forward(x);
          x = activation->forward(x);
          x = x * ppnet_gates_->ptr(k)->as<GateNUImpl>()->forward(gate_input);
          if (dropout_[j] > 0) x = torch::dropout(x, dropout_[j], is_training());
        }
        task_inputs[t] = x;
      }
    }
    if (domain_label_.empty()) {
      std::vector<at::Tensor> outputs;
      for (size_t t = 0; t < num_tasks; ++t) {
        outputs.push_back(task_towers_->ptr(t)->as<TaskTowerImpl>()->forward(task_inputs[t]));
      }
      return HeadPredictions(outputs);
    }
    Predictions predictions;
    for (size_t t = 0; t < num_tasks; ++t) {
      for (int d = 0; d < domains_; ++d) {
        Predictions one;
        heads()[t]->AddPredictions(task_towers_->ptr(t * domains_ + d)->as<TaskTowerImpl>()->forward(task_inputs[t]), &one);
        for (auto& [name, value] : one) predictions[StrCat(name, "_", d)] = value;
      }
    }
    return predictions;
  }

  void WriteScript(ScriptWriter& w, const StoredTables& tables) const override {
    auto grouped = ScriptInput(w, tables);
    std::string main = grouped.at("all");
    if (epnet_) {
      const std::string in = w.Let("epnet_in", "torch.cat([" + grouped.at("domain") + ", " + main + "], 1)");
      main = w.Let("epnet", epnet_->Script(w, in, "epnet_gate_nu") + " * " + main);
    }
    const size_t num_tasks = heads().size();
    std::vector<std::string> task_inputs(num_tasks, main);
    if (ppnet_linears_) {
      const std::string gate_input = w.Let("ppnet_gate_in", "torch.cat([" + grouped.at("uia") + ", " + main + "], 1)");
      const size_t layers = dropout_.size();
      auto activation = ppnet_activations_->begin();
      for (size_t t = 0; t < num_tasks; ++t) {
        std::string x = main;
        for (size_t j = 0; j < layers; ++j, ++activation) {
          const size_t k = t * layers + j;
          x = ScriptLinear(w, *ppnet_linears_->ptr(k)->as<torch::nn::LinearImpl>(), x, StrCat("ppnet_linears_", k));
          x = ScriptLayer(w, *activation->ptr(), x, StrCat("ppnet_activations_", k));
          x = w.Let("ppnet", x + " * " + ppnet_gates_->ptr(k)->as<GateNUImpl>()->Script(w, gate_input, StrCat("ppnet_gate_nus_", k)));
        }
        task_inputs[t] = x;
      }
    }
    auto tower = [&](size_t k, size_t t) {
      return task_towers_->ptr(k)->as<TaskTowerImpl>()->Script(w, task_inputs[t], StrCat("task_tower_", k));
    };
    if (domain_label_.empty()) {
      std::vector<std::string> outputs;
      for (size_t t = 0; t < num_tasks; ++t) outputs.push_back(tower(t, t));
      ScriptHeadPredictions(w, outputs);
      return;
    }
    for (size_t t = 0; t < num_tasks; ++t) {
      for (int d = 0; d < domains_; ++d) {
        const std::vector<std::string> before = w.output_names();
        heads()[t]->ScriptPredictions(w, tower(t * domains_ + d, t));
        // The head's names, published per domain as Predict names them.
        for (const std::string& name : w.output_names()) {
          if (std::find(before.begin(), before.end(), name) == before.end()) {
            w.Output(StrCat(name, "_", d), w.TakeOutput(name));
          }
        }
      }
    }
  }

  std::map<std::string, std::vector<int64_t>> OutputShapes() const override {
    auto shapes = Model::OutputShapes();
    if (domain_label_.empty()) return shapes;
    std::map<std::string, std::vector<int64_t>> per_domain;
    for (const auto& [name, dims] : shapes) {
      for (int d = 0; d < domains_; ++d) per_domain[StrCat(name, "_", d)] = dims;
    }
    return per_domain;
  }

 protected:
  // Each row's own domain's predictions under the heads' names.
  Predictions HeadInputs(const Predictions& predictions, const Batch& batch) const override {
    if (domain_label_.empty()) return predictions;
    auto label = batch.labels.find(domain_label_);
    if (label == batch.labels.end()) Fail("pepnet: the batch has no label '", domain_label_, "' (domain_input_name)");
    const at::Tensor domain = label->second.to(at::kLong);
    if (domain.numel() > 0) {
      const int64_t low = domain.min().item<int64_t>(), high = domain.max().item<int64_t>();
      const at::Tensor exact = label->second.to(at::kDouble);
      if (low < 0 || high >= domains_ || !exact.eq(exact.floor()).all().item<bool>()) {
        Fail("pepnet: label '", domain_label_, "' (domain_input_name) holds ", low < 0 || high >= domains_ ? StrCat(low < 0 ? low : high) : "a non-integer",
             ", not a domain index in [0, ", domains_, ") (task_domain_num)");
      }
    }
    Predictions selected;
    Predictions names;
    for (const auto& head : heads()) head->AddPredictions(at::zeros({1, head->num_class()}), &names);
    for (const auto& [name, probe] : names) {
      std::vector<at::Tensor> options;
      for (int d = 0; d < domains_; ++d) options.push_back(predictions.at(StrCat(name, "_", d)));
      const at::Tensor stacked = at::stack(options, 1);  // [B, domains, ...]
      std::vector<int64_t> index_shape(stacked.dim(), 1);
      index_shape[0] = stacked.size(0);
      at::Tensor index = domain.reshape(index_shape);
      std::vector<int64_t> expanded = stacked.sizes().vec();
      expanded[1] = 1;
      selected[name] = stacked.gather(1, index.expand(expanded)).squeeze(1);
    }
    return selected;
  }

 private:
  GateNU epnet_{nullptr};
  torch::nn::ModuleList ppnet_linears_{nullptr};
  torch::nn::Sequential ppnet_activations_{nullptr};
  torch::nn::ModuleList ppnet_gates_{nullptr};
  std::vector<double> dropout_;
  std::string domain_label_;
  int domains_ = 1;
  torch::nn::ModuleList task_towers_{nullptr};
};

std::shared_ptr<Model> Make(const ModelContext& context) { return std::make_shared<PEPNet>(context); }

}  // namespace

TZREC_REGISTER(ModelRegistry(), "pepnet", Make, "epnet_hidden_unit", "epnet_gamma", "ppnet_hidden_units",
               "ppnet_activation", "ppnet_dropout_ratio", "ppnet_gamma", "domain_input_name", "task_domain_num",
               TZREC_TASK_TOWER_FIELDS);

}  // namespace tzrec
