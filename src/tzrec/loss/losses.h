// Loss functions with TorchEasyRec's semantics.
#pragma once

#include <ATen/core/Tensor.h>

namespace tzrec {

// BCE with logits. Label smoothing maps y to y*(1-s) + 0.5*s. With sample weights (defined
// tensor) the loss is mean(loss_i * w_i / mean(w)), otherwise mean(loss_i).
at::Tensor BinaryCrossEntropyLoss(const at::Tensor& logits, const at::Tensor& labels,
                                  const at::Tensor& sample_weights, double label_smoothing);

}  // namespace tzrec
