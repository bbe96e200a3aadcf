#include "tzrec/loss/losses.h"

#include <ATen/ops/binary_cross_entropy_with_logits.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/mean.h>

namespace tzrec {

at::Tensor BinaryCrossEntropyLoss(const at::Tensor& logits, const at::Tensor& labels,
                                  const at::Tensor& sample_weights, double label_smoothing) {
  at::Tensor target = labels.to(logits.scalar_type());
  if (label_smoothing > 0) target = target * (1.0 - label_smoothing) + 0.5 * label_smoothing;
  if (!sample_weights.defined()) {
    return at::binary_cross_entropy_with_logits(logits, target);
  }
  at::Tensor per_sample = at::binary_cross_entropy_with_logits(
      logits, target, /*weight=*/{}, /*pos_weight=*/{}, at::Reduction::None);
  return at::mean(per_sample * sample_weights / at::mean(sample_weights));
}

}  // namespace tzrec
