#include "tzrec/heads/pareto.h"

#include <ATen/ops/linalg_pinv.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <functional>
#include <numeric>

#include "tzrec/common/error.h"

namespace tzrec {

std::vector<double> ProjectOntoSimplex(const std::vector<double>& v, double total) {
  const size_t n = v.size();
  std::vector<double> out(n, 0.0);
  if (n == 0 || total <= 0) return out;
  std::vector<double> sorted = v;
  std::sort(sorted.begin(), sorted.end(), std::greater<double>());
  // theta: the shift that makes the positive parts sum to `total` (Held et al. 1974).
  double cumulative = 0.0, theta = 0.0;
  for (size_t j = 0; j < n; ++j) {
    cumulative += sorted[j];
    const double candidate = (cumulative - total) / static_cast<double>(j + 1);
    if (sorted[j] - candidate > 0) theta = candidate;
  }
  for (size_t i = 0; i < n; ++i) out[i] = std::max(v[i] - theta, 0.0);
  return out;
}

std::vector<double> ParetoLossWeights(const at::Tensor& ggt, const std::vector<double>& min_weights) {
  const int64_t k = static_cast<int64_t>(min_weights.size());
  TZREC_CHECK(ggt.dim() == 2 && ggt.size(0) == k && ggt.size(1) == k);
  const double c_sum = std::accumulate(min_weights.begin(), min_weights.end(), 0.0);
  TZREC_CHECK(c_sum >= 0 && c_sum < 1.0, "pareto_min_loss_weight sum must be in [0, 1)");
  at::Tensor g = ggt.to(at::kDouble);
  at::Tensor m = at::zeros({k + 1, k + 1}, at::kDouble);
  m.narrow(0, 0, k).narrow(1, 0, k).copy_(g);
  m.narrow(0, 0, k).select(1, k).fill_(1.0);
  m.select(0, k).narrow(0, 0, k).fill_(1.0);
  at::Tensor c = at::zeros({k, 1}, at::kDouble);
  for (int64_t i = 0; i < k; ++i) c[i][0] = min_weights[i];
  at::Tensor z = at::zeros({k + 1, 1}, at::kDouble);
  z.narrow(0, 0, k).copy_(-at::matmul(g, c));
  z[k][0] = 1.0 - c_sum;
  at::Tensor solution = at::matmul(at::linalg_pinv(m), z);
  std::vector<double> hat(k);
  for (int64_t i = 0; i < k; ++i) hat[i] = solution[i][0].item<double>();
  std::vector<double> x = ProjectOntoSimplex(hat, 1.0 - c_sum);
  for (int64_t i = 0; i < k; ++i) x[i] += min_weights[i];
  return x;
}

}  // namespace tzrec
