// binary_cross_entropy: BCE with logits on `logits`; label_smoothing maps y to y(1-s) + s/2.
#include <ATen/TensorOperators.h>
#include <ATen/ops/binary_cross_entropy_with_logits.h>

#include "tzrec/common/error.h"
#include "tzrec/loss/loss.h"
#include "tzrec/protos/loss.pb.h"

namespace tzrec {
namespace {

class BinaryCrossEntropyLoss : public Loss {
 public:
  explicit BinaryCrossEntropyLoss(const LossContext& ctx)
      : label_smoothing_(static_cast<const protos::BinaryCrossEntropy&>(*ctx.config).label_smoothing()) {
    if (ctx.num_class != 1) {
      Fail(ctx.where, ": num_class must be 1 for binary_cross_entropy (got ", ctx.num_class, ")");
    }
    if (label_smoothing_ < 0 || label_smoothing_ >= 1) {
      Fail(ctx.where, ".label_smoothing must be in [0, 1), got ", label_smoothing_);
    }
  }
  LabelDomain label_domain() const override { return {0.0, 1.0, false}; }
  void AddPredictions(const at::Tensor& output, const std::string& suffix,
                      Predictions* out) const override {
    AddBinaryPredictions(output, suffix, out);
  }
  void ScriptPredictions(ScriptWriter& w, const std::string& output, int,
                         const std::string& suffix) const override {
    ScriptBinaryPredictions(w, output, suffix);
  }
  at::Tensor Compute(const Predictions& predictions, const std::string& suffix,
                     const at::Tensor& label, const at::Tensor& weight,
                     const Batch&) const override {
    const at::Tensor& logits = PredictionOf(predictions, "logits", suffix);
    at::Tensor target = label.to(logits.scalar_type());
    if (label_smoothing_ > 0) target = target * (1.0 - label_smoothing_) + 0.5 * label_smoothing_;
    if (!weight.defined()) return at::binary_cross_entropy_with_logits(logits, target);
    return ReduceLoss(at::binary_cross_entropy_with_logits(logits, target, {}, {}, at::Reduction::None),
                      weight);
  }

 private:
  double label_smoothing_;
};

std::unique_ptr<Loss> Make(const LossContext& ctx) {
  return std::make_unique<BinaryCrossEntropyLoss>(ctx);
}

}  // namespace

TZREC_REGISTER(LossRegistry(), "binary_cross_entropy", Make, "label_smoothing");

}  // namespace tzrec
