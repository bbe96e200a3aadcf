#include "tzrec/serving/scripted_model.h"

#include <ATen/ops/abs.h>
#include <ATen/ops/isfinite.h>
#include <torch/csrc/autograd/grad_mode.h>


#include "tzrec/common/error.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"

namespace tzrec {
namespace {

double MaxAbsDiff(const at::Tensor& a, const at::Tensor& b) {
  return at::abs(a.to(at::kDouble) - b.to(at::kDouble)).max().item<double>();
}

}  // namespace

torch::jit::Module BuildScriptedModule(const Model& model, const StoredTables& tables) {
  ScriptWriter w;
  model.WriteScript(w, tables);
  return ModuleFromScript(w);
}

torch::jit::Module ModuleFromScript(const ScriptWriter& w) {
  torch::jit::Module module("__torch__.tzrec.ScriptedModel");
  for (const auto& [name, tensor] : w.tensors()) {
    // Float tensors are parameters (what state_dict() users look for); ids, codes and fp16
    // scales are buffers.
    module.register_parameter(name, tensor, /*is_buffer=*/tensor.scalar_type() != at::kFloat);
  }
  try {
    module.define(w.Source());
  } catch (const std::exception& e) {
    Fail("scripted model: the generated TorchScript does not compile (a tzrec defect): ", e.what(),
         "\n", w.Source());
  }
  module.eval();
  return module;
}

std::map<std::string, at::Tensor> ScriptedInputs(const Batch& batch, const std::vector<const Feature*>& features) {
  std::map<std::string, at::Tensor> inputs;
  for (const Feature* feature : features) {
    const std::string& f = feature->name();
    // Inference batches hold the request's rows in every data group (no sampler runs).
    auto group = batch.data_groups.find(feature->data_group());
    if (group == batch.data_groups.end()) continue;
    const DataGroupBatch& base = group->second;
    if (feature->is_sparse() && !feature->is_sequence()) {
      auto it = base.sparse.find(f);
      if (it == base.sparse.end()) continue;
      inputs[f + ".values"] = it->second.values.to(at::kLong);
      inputs[f + ".lengths"] = it->second.lengths.to(at::kLong);
      if (it->second.weights.defined()) inputs[f + ".weights"] = it->second.weights;
    } else if (feature->is_sparse()) {
      auto it = base.sequences.find(f);
      if (it == base.sequences.end()) continue;
      inputs[f + ".values"] = it->second.values.to(at::kLong);
      inputs[f + ".lengths"] = it->second.step_lengths.to(at::kLong);
      inputs[f + ".key_lengths"] = it->second.key_lengths.to(at::kLong);
      if (it->second.weights.defined()) inputs[f + ".weights"] = it->second.weights;
    } else if (feature->is_sequence()) {
      auto it = base.dense_sequences.find(f);
      if (it == base.dense_sequences.end()) continue;
      inputs[f + ".values"] = it->second.values;
      inputs[f + ".lengths"] = it->second.step_lengths.to(at::kLong);
    } else {
      auto it = base.dense.find(f);
      if (it == base.dense.end()) continue;
      inputs[f + ".values"] = it->second;
    }
  }
  return inputs;
}

std::map<std::string, at::Tensor> RunScriptedModule(torch::jit::Module& module,
                                                    const std::map<std::string, at::Tensor>& inputs) {
  c10::Dict<std::string, at::Tensor> data;
  for (const auto& [name, tensor] : inputs) data.insert(name, tensor);
  c10::IValue result = module.forward({c10::IValue(data)});
  std::map<std::string, at::Tensor> out;
  for (const auto& item : result.toGenericDict()) out[item.key().toStringRef()] = item.value().toTensor();
  return out;
}

std::string WriteScriptedModel(Model& model, const std::vector<const Feature*>& features,
                               const StoredTables& fp32_tables, const StoredTables& tables,
                               const std::string& path) {
  c10::NoGradGuard no_grad;
  torch::jit::Module check;
  try {
    check = BuildScriptedModule(model, fp32_tables);
  } catch (const ScriptUnsupported& e) {
    return e.what();
  }
  const bool was_training = model.is_training();
  model.eval();
  const Batch batch = SyntheticBatch(features, 37, 20261204);
  const Predictions expected = model.Predict(batch);
  model.train(was_training);
  const std::map<std::string, at::Tensor> inputs = ScriptedInputs(batch, features);
  const auto got = RunScriptedModule(check, inputs);
  for (const auto& [name, tensor] : expected) {
    auto it = got.find(name);
    TZREC_CHECK(it != got.end(), "scripted model: prediction '" + name + "' is missing");
    TZREC_CHECK(it->second.sizes() == tensor.sizes(), "scripted model: prediction '" + name + "' has another shape");
    const double diff = MaxAbsDiff(it->second, tensor);
    TZREC_CHECK(diff <= 1e-5, StrCat("scripted model: prediction '", name, "' differs from the model by ", diff));
  }
  TZREC_CHECK(got.size() == expected.size(), "scripted model: extra predictions");
  torch::jit::Module module = BuildScriptedModule(model, tables);
  for (const auto& [name, tensor] : RunScriptedModule(module, inputs)) {
    TZREC_CHECK(expected.count(name) && at::isfinite(tensor).all().item<bool>(),
                "scripted model: prediction '" + name + "' with the exported tables is not finite");
  }
  module.save(path);
  return "";
}

}  // namespace tzrec
