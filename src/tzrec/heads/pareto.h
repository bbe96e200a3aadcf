// Pareto-efficient loss weights for multi-task training (Lin et al., "A Pareto-Efficient
// Algorithm for Multiple Objective Optimization in E-Commerce Recommendation", 2019), as
// TorchEasyRec's ParetoEfficientMultiTaskLoss computes them each step:
//   1. with G the K x M matrix of the K losses' gradients over the dense parameters and
//      c the lower bounds (sum c < 1), solve the least-squares system
//      [[G Gᵀ, 1], [1ᵀ, 0]] [w; λ] = [-G Gᵀ c; 1 - Σc] (pseudo-inverse) for ŵ;
//   2. project ŵ onto {x >= 0, Σx = 1 - Σc} (TorchEasyRec runs SLSQP on this Euclidean
//      projection; it has the closed form used here);
//   3. the weights are x + c.
// Pure functions; thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace tzrec {

// `ggt`: [K, K] (any float type) = G Gᵀ. Returns K weights, each >= its lower bound, summing
// to 1.
std::vector<double> ParetoLossWeights(const at::Tensor& ggt, const std::vector<double>& min_weights);

// Euclidean projection of `v` onto the simplex {x >= 0, Σx = total} (total >= 0).
std::vector<double> ProjectOntoSimplex(const std::vector<double>& v, double total);

}  // namespace tzrec
