// softmax_cross_entropy: cross entropy of `logits` [B, num_class] against class-index labels,
// with label_smoothing as torch.nn.CrossEntropyLoss.
#include <ATen/TensorOperators.h>
#include <ATen/ops/cross_entropy_loss.h>

#include "tzrec/common/error.h"
#include "tzrec/loss/loss.h"
#include "tzrec/protos/loss.pb.h"

namespace tzrec {
namespace {

class SoftmaxCrossEntropyLoss : public Loss {
 public:
  explicit SoftmaxCrossEntropyLoss(const LossContext& ctx)
      : label_smoothing_(static_cast<const protos::SoftmaxCrossEntropy&>(*ctx.config).label_smoothing()),
        num_class_(ctx.num_class), where_(ctx.where) {
    if (num_class_ < 2) {
      Fail(ctx.where, ": num_class must be > 1 for softmax_cross_entropy (got ", num_class_, ")");
    }
    if (label_smoothing_ < 0 || label_smoothing_ > 1) {
      Fail(ctx.where, ".label_smoothing must be in [0, 1], got ", label_smoothing_);
    }
  }
  LabelDomain label_domain() const override { return {0.0, static_cast<double>(num_class_ - 1), true}; }
  void AddPredictions(const at::Tensor& output, const std::string& suffix,
                      Predictions* out) const override {
    AddSoftmaxPredictions(output, suffix, out);
  }
  void ScriptPredictions(ScriptWriter& w, const std::string& output, int num_class,
                         const std::string& suffix) const override {
    ScriptSoftmaxPredictions(w, output, num_class, suffix);
  }
  at::Tensor Compute(const Predictions& predictions, const std::string& suffix,
                     const at::Tensor& label, const at::Tensor& weight,
                     const Batch&) const override {
    const at::Tensor& logits = PredictionOf(predictions, "logits", suffix);
    at::Tensor target = ClassIndexLabels(label, num_class_, where_);
    at::Tensor per_row = at::cross_entropy_loss(logits, target, {}, at::Reduction::None, -100,
                                                label_smoothing_);
    return ReduceLoss(per_row, weight);
  }

 private:
  double label_smoothing_;
  int64_t num_class_;
  std::string where_;
};

std::unique_ptr<Loss> Make(const LossContext& ctx) {
  return std::make_unique<SoftmaxCrossEntropyLoss>(ctx);
}

}  // namespace

TZREC_REGISTER(LossRegistry(), "softmax_cross_entropy", Make, "label_smoothing");

}  // namespace tzrec
