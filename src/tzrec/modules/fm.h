// Second-order factorization machine term over per-feature embeddings.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "tzrec/script/script_writer.h"

namespace tzrec {

// x: [B, N, D] -> [B, D] with 0.5 * ((sum_n x)^2 - sum_n x^2).
at::Tensor FactorizationMachine(const at::Tensor& x);
// The same as TorchScript over local `x`; returns the output local.
std::string ScriptFactorizationMachine(ScriptWriter& w, const std::string& x);

}  // namespace tzrec
