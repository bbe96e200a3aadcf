// binary_focal_loss: BCE with logits weighted per row by the (detached) focal factor
// alpha*y*(1-p)^gamma + (1-alpha)*(1-y)*p^gamma, p = sigmoid(logits), mean over rows.
#include <ATen/TensorOperators.h>
#include <ATen/ops/binary_cross_entropy_with_logits.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/sigmoid.h>

#include "tzrec/common/error.h"
#include "tzrec/loss/loss.h"
#include "tzrec/protos/loss.pb.h"

namespace tzrec {
namespace {

class BinaryFocalLoss : public Loss {
 public:
  explicit BinaryFocalLoss(const LossContext& ctx) {
    const auto& c = static_cast<const protos::BinaryFocalLoss&>(*ctx.config);
    gamma_ = c.gamma();
    alpha_ = c.alpha();
    if (ctx.num_class != 1) {
      Fail(ctx.where, ": num_class must be 1 for binary_focal_loss (got ", ctx.num_class, ")");
    }
    if (gamma_ < 0) Fail(ctx.where, ".gamma must be >= 0, got ", gamma_);
    if (!(alpha_ > 0 && alpha_ < 1)) Fail(ctx.where, ".alpha must be in (0, 1), got ", alpha_);
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
    at::Tensor y = label.to(logits.scalar_type());
    at::Tensor p = at::sigmoid(logits).detach();
    at::Tensor focal = alpha_ * y * at::pow(1 - p, gamma_) + (1 - alpha_) * (1 - y) * at::pow(p, gamma_);
    at::Tensor per_row =
        at::binary_cross_entropy_with_logits(logits, y, focal, {}, at::Reduction::None);
    return ReduceLoss(per_row, weight);
  }

 private:
  double gamma_ = 2.0;
  double alpha_ = 0.5;
};

std::unique_ptr<Loss> Make(const LossContext& ctx) { return std::make_unique<BinaryFocalLoss>(ctx); }

}  // namespace

TZREC_REGISTER(LossRegistry(), "binary_focal_loss", Make, "gamma", "alpha");

}  // namespace tzrec
