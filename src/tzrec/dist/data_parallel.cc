#include "tzrec/dist/data_parallel.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>

#include <vector>

#include "tzrec/common/error.h"
#include "tzrec/embedding/hash_row_index.h"

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
  HashRowIndex slot_of;  // open addressing: std::unordered_map's node per row cost more than the sums
  slot_of.Reserve(total);
  std::vector<float> merged;
  merged.reserve(static_cast<size_t>(total * dim));
  const float scale = 1.0f / static_cast<float>(world);
  for (int r = 0; r < world; ++r) {
    for (int64_t i = 0; i < rank_counts[r]; ++i) {
      const int64_t at = r * longest + i;
      bool inserted = false;
      const int64_t slot = slot_of.FindOrInsert(rp[at], &inserted);
      if (inserted) merged.resize(merged.size() + dim, 0.0f);
      float* out = merged.data() + slot * dim;
      const float* g = gp + at * dim;
      for (int64_t d = 0; d < dim; ++d) out[d] += g[d];
    }
  }
  for (float& v : merged) v *= scale;
  const std::vector<int64_t>& merged_rows = slot_of.ids();
  const int64_t m = static_cast<int64_t>(merged_rows.size());
  *rows = at::empty({m}, at::kLong);
  *grads = at::empty({m, dim}, at::kFloat);
  std::copy(merged_rows.begin(), merged_rows.end(), rows->data_ptr<int64_t>());
  std::copy(merged.begin(), merged.end(), grads->data_ptr<float>());
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
