#include "tzrec/dist/data_parallel.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>

#include <tuple>
#include <vector>

#include "tzrec/common/error.h"
#include "tzrec/embedding/row_gradient_sum.h"

namespace tzrec {

void ExchangeSparseGradients(ProcessGroup& pg, at::Tensor* rows, at::Tensor* grads) {
  const int world = pg.world_size();
  const int64_t dim = grads->size(1);
  const int64_t n = rows->numel();
  at::Tensor counts = pg.AllGather(at::full({1}, n, at::kLong));
  int64_t longest = 0;
  for (int r = 0; r < world; ++r) longest = std::max(longest, counts[r].item<int64_t>());
  if (longest == 0) return;
  // Equal-size pieces for allgather: pad to the longest rank's count.
  at::Tensor padded_rows = at::full({longest}, -1, at::kLong);
  at::Tensor padded_grads = at::zeros({longest, dim}, at::kFloat);
  if (n > 0) {
    padded_rows.narrow(0, 0, n).copy_(*rows);
    padded_grads.narrow(0, 0, n).copy_(*grads);
  }
  at::Tensor all_rows = pg.AllGather(padded_rows);
  at::Tensor all_grads = pg.AllGather(padded_grads);
  // Merge in rank order: every rank computes the identical result.
  const int64_t* rp = all_rows.data_ptr<int64_t>();
  const float* gp = all_grads.data_ptr<float>();
  std::vector<int64_t> rank_counts(world);
  int64_t total = 0;
  for (int r = 0; r < world; ++r) total += rank_counts[r] = counts[r].item<int64_t>();
  RowGradientSum merged(static_cast<int>(dim), total);
  for (int r = 0; r < world; ++r) {
    for (int64_t i = 0; i < rank_counts[r]; ++i) {
      const int64_t at = r * longest + i;
      merged.Add(rp[at], gp + at * dim, 1.0f);
    }
  }
  std::tie(*rows, *grads) = merged.Tensors(1.0f / static_cast<float>(world));
}

void AllReduceDenseGradients(ProcessGroup& pg, const std::vector<at::Tensor>& params) {
  if (params.empty()) return;
  std::vector<at::Tensor> flat;
  for (const at::Tensor& p : params) {
    flat.push_back(p.grad().defined() ? p.grad().reshape({-1}) : at::zeros({p.numel()}, p.options()));
  }
  // One bucket: our dense parts are a few MB, well below where splitting pays.
  std::vector<at::Tensor> bucket = {at::cat(flat, 0)};
  pg.AllReduceSum(bucket);
  bucket[0].div_(static_cast<double>(pg.world_size()));
  int64_t offset = 0;
  for (const at::Tensor& p : params) {
    at::Tensor slice = bucket[0].narrow(0, offset, p.numel()).view(p.sizes());
    offset += p.numel();
    at::Tensor& grad = const_cast<at::Tensor&>(p).mutable_grad();
    if (grad.defined()) {
      grad.copy_(slice);
    } else {
      grad = slice.clone();
    }
  }
}

void BroadcastParameters(ProcessGroup& pg, const std::vector<at::Tensor>& params) {
  if (params.empty()) return;
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> flat;
  for (const at::Tensor& p : params) flat.push_back(p.detach().reshape({-1}));
  std::vector<at::Tensor> bucket = {at::cat(flat, 0)};
  pg.Broadcast(bucket, 0);
  int64_t offset = 0;
  for (const at::Tensor& p : params) {
    p.detach().copy_(bucket[0].narrow(0, offset, p.numel()).view(p.sizes()));
    offset += p.numel();
  }
}

}  // namespace tzrec
