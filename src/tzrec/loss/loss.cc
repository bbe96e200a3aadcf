#include "tzrec/loss/loss.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/select.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/squeeze.h>

#include "tzrec/common/error.h"

namespace tzrec {

Registry<LossFactory>& LossRegistry() {
  static Registry<LossFactory> registry("loss", {ConfigSlot{"tzrec.protos.LossConfig", "loss"}});
  return registry;
}

at::Tensor ReduceLoss(const at::Tensor& per_row, const at::Tensor& weight) {
  return weight.defined() ? at::mean(per_row * weight) : at::mean(per_row);
}

void AddBinaryPredictions(const at::Tensor& output, const std::string& suffix, Predictions* out) {
  at::Tensor logits = at::squeeze(output, 1);
  (*out)["logits" + suffix] = logits;
  (*out)["probs" + suffix] = at::sigmoid(logits);
}

void AddSoftmaxPredictions(const at::Tensor& output, const std::string& suffix, Predictions* out) {
  at::Tensor probs = at::softmax(output, 1);
  (*out)["logits" + suffix] = output;
  (*out)["probs" + suffix] = probs;
  if (output.size(1) == 2) (*out)["probs1" + suffix] = at::select(probs, 1, 1);
}

void ScriptBinaryPredictions(ScriptWriter& w, const std::string& output, const std::string& suffix) {
  const std::string logits = w.Let("logits" + suffix, "torch.squeeze(" + output + ", 1)");
  w.Output("logits" + suffix, logits);
  w.Output("probs" + suffix, w.Let("probs" + suffix, "torch.sigmoid(" + logits + ")"));
}

void ScriptSoftmaxPredictions(ScriptWriter& w, const std::string& output, int num_class,
                              const std::string& suffix) {
  const std::string probs = w.Let("probs" + suffix, "torch.softmax(" + output + ", 1)");
  w.Output("logits" + suffix, output);
  w.Output("probs" + suffix, probs);
  if (num_class == 2) w.Output("probs1" + suffix, w.Let("probs1" + suffix, "torch.select(" + probs + ", 1, 1)"));
}

at::Tensor ClassIndexLabels(const at::Tensor& label, int64_t num_class, const std::string& where) {
  at::Tensor values = label.contiguous();
  const float* v = values.data_ptr<float>();
  for (int64_t i = 0; i < values.numel(); ++i) {
    if (!(v[i] >= 0 && v[i] < num_class) || v[i] != static_cast<float>(static_cast<int64_t>(v[i]))) {
      Fail(where, ": label ", v[i], " is not a class index in [0, ", num_class, ")");
    }
  }
  return values.to(at::kLong);
}

const at::Tensor& PredictionOf(const Predictions& predictions, const std::string& name,
                               const std::string& suffix) {
  auto it = predictions.find(name + suffix);
  if (it == predictions.end()) {
    std::string known;
    for (const auto& kv : predictions) known += (known.empty() ? "" : ", ") + kv.first;
    Fail("prediction '", name + suffix, "' was not produced (have: ", known, ")");
  }
  return it->second;
}

}  // namespace tzrec
