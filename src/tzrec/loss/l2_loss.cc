// l2_loss: mean squared error of the regression prediction `y` against the label.
#include <ATen/TensorOperators.h>

#include "tzrec/common/error.h"
#include "tzrec/loss/loss.h"

namespace tzrec {
namespace {

class L2Loss : public Loss {
 public:
  explicit L2Loss(const LossContext& ctx) {
    if (ctx.num_class != 1) Fail(ctx.where, ": num_class must be 1 for l2_loss (got ", ctx.num_class, ")");
  }
  void AddPredictions(const at::Tensor& output, const std::string& suffix,
                      Predictions* out) const override {
    (*out)["y" + suffix] = output.squeeze(1);
  }
  void ScriptPredictions(ScriptWriter& w, const std::string& output, int,
                         const std::string& suffix) const override {
    w.Output("y" + suffix, w.Let("y" + suffix, "torch.squeeze(" + output + ", 1)"));
  }
  at::Tensor Compute(const Predictions& predictions, const std::string& suffix,
                     const at::Tensor& label, const at::Tensor& weight,
                     const Batch&) const override {
    const at::Tensor& y = PredictionOf(predictions, "y", suffix);
    at::Tensor diff = y - label.to(y.scalar_type());
    return ReduceLoss(diff * diff, weight);
  }
};

std::unique_ptr<Loss> Make(const LossContext& ctx) { return std::make_unique<L2Loss>(ctx); }

}  // namespace

TZREC_REGISTER(LossRegistry(), "l2_loss", Make);

}  // namespace tzrec
