#include "tzrec/embedding/fused_lookup.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "tzrec/common/error.h"

namespace tzrec {
namespace {

void FusedForward(const float* data, int row_width, int dim, const std::vector<LookupArgs>& lookups,
                  int64_t bags, float* out) {
  const CpuKernels& kernels = ActiveCpuKernels();
  at::parallel_for(0, bags, 32, [&](int64_t begin, int64_t end) {
    kernels.pooled_forward(data, row_width, dim, lookups.data(), static_cast<int>(lookups.size()),
                           begin, end, out);
  });
}

RowUpdateParams MakeRowUpdateParams(const SparseOptimizerSpec& spec, int64_t iteration) {
  RowUpdateParams p;
  using Kind = SparseOptimizerSpec::Kind;
  using Mode = SparseOptimizerSpec::WeightDecayMode;
  p.kind = spec.kind == Kind::kSgd              ? RowUpdateParams::kSgd
           : spec.kind == Kind::kAdagrad        ? RowUpdateParams::kAdagrad
           : spec.kind == Kind::kRowwiseAdagrad ? RowUpdateParams::kRowwiseAdagrad
                                                : RowUpdateParams::kAdam;
  p.weight_decay_mode = spec.weight_decay_mode == Mode::kL2         ? RowUpdateParams::kL2
                        : spec.weight_decay_mode == Mode::kDecouple ? RowUpdateParams::kDecouple
                                                                    : RowUpdateParams::kNone;
  p.lr = spec.lr;
  p.eps = spec.eps;
  p.beta1 = spec.beta1;
  p.beta2 = spec.beta2;
  p.weight_decay = spec.weight_decay;
  p.gradient_clipping = spec.gradient_clipping;
  p.max_gradient = spec.max_gradient;
  p.bias_correction1 = 1.0f - std::pow(spec.beta1, static_cast<float>(iteration));
  p.bias_correction2 = 1.0f - std::pow(spec.beta2, static_cast<float>(iteration));
  return p;
}

// One partition of the backward: the rows with RowPartition(row) == part. Partitions own
// disjoint rows, so they run in parallel on the shared slot map without locks, and each
// row's gradient is summed in occurrence order (deterministic for any thread count).
void BackwardPartition(EmbeddingStorage* storage, const std::vector<LookupArgs>& lookups,
                       int64_t bags, const float* grad, int64_t iteration, int64_t part,
                       int64_t parts) {
  const int dim = storage->dim();
  const int row_width = storage->row_width();
  const int64_t num_lookups = static_cast<int64_t>(lookups.size());
  int32_t* slots = storage->slots();
  auto in_partition = [&](int64_t row) {
    // Fibonacci hash, then a multiply-shift range reduction (a 64-bit modulo per id costs
    // more than the rest of this loop).
    const uint64_t hash = (static_cast<uint64_t>(row) * 0x9E3779B97F4A7C15ULL) >> 32;
    return parts == 1 || static_cast<int64_t>((hash * static_cast<uint64_t>(parts)) >> 32) == part;
  };
  // 1) De-duplicate rows; remember each occurrence's slot and where its gradient comes from.
  int64_t total = 0;
  for (const LookupArgs& l : lookups) {
    if (l.trainable) total += l.offsets[bags];
  }
  const int64_t expected = total / parts + 64;
  std::vector<int64_t> unique_rows;
  unique_rows.reserve(expected);
  std::vector<int32_t> occurrence_slot;
  occurrence_slot.reserve(expected);
  std::vector<GradOccurrence> occurrence;
  occurrence.reserve(expected);
  for (int64_t k = 0; k < num_lookups; ++k) {
    const LookupArgs& l = lookups[k];
    if (!l.trainable) continue;
    const int64_t last_id = l.offsets[bags];
    for (int64_t b = 0; b < bags; ++b) {
      const int64_t first = l.offsets[b], last = l.offsets[b + 1];
      if (first == last) continue;
      const float scale = l.mean ? 1.0f / static_cast<float>(last - first) : 1.0f;
      for (int64_t i = first; i < last; ++i) {
        const int64_t row = l.first_row + l.values[i];
        if (!in_partition(row)) continue;
        // The slot map is large and randomly accessed: fetch a few ids ahead.
        if (i + 16 < last_id) __builtin_prefetch(slots + l.first_row + l.values[i + 16], 1);
        int32_t slot = slots[row];
        if (slot < 0) {
          slot = static_cast<int32_t>(unique_rows.size());
          slots[row] = slot;
          unique_rows.push_back(row);
        }
        occurrence_slot.push_back(slot);
        occurrence.push_back({b * num_lookups + k, scale});
      }
    }
  }
  const int64_t unique = static_cast<int64_t>(unique_rows.size());
  const int64_t occurrences = static_cast<int64_t>(occurrence_slot.size());
  // 2) Counting sort of occurrences by slot (stable, so sums keep a fixed order).
  std::vector<int64_t> start(unique + 1, 0);
  for (int32_t s : occurrence_slot) ++start[s + 1];
  for (int64_t s = 0; s < unique; ++s) start[s + 1] += start[s];
  std::vector<GradOccurrence> sorted(occurrences);
  {
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t n = 0; n < occurrences; ++n) sorted[fill[occurrence_slot[n]]++] = occurrence[n];
  }
  // 3) Per unique row: sum its gradient, then update the row in place.
  std::vector<float> scratch(dim);
  ActiveCpuKernels().sum_and_update_rows(
      storage->data(), row_width, dim, unique_rows.data(), unique, start.data(), sorted.data(), grad,
      MakeRowUpdateParams(storage->optimizer().spec(), iteration), scratch.data());
  // 4) Free this partition's slots for the next batch.
  for (int64_t row : unique_rows) slots[row] = -1;
}

void FusedBackwardUpdate(EmbeddingStorage* storage, const std::vector<LookupArgs>& lookups,
                         int64_t bags, const float* grad, int64_t iteration) {
  storage->slots();  // allocate before the threads share it
  int64_t total = 0;
  for (const LookupArgs& l : lookups) total += l.offsets[bags];
  // Small batches are not worth a second pass over the ids.
  const int64_t parts = total < 8192 ? 1 : at::get_num_threads();
  at::parallel_for(0, parts, 1, [&](int64_t begin, int64_t end) {
    for (int64_t part = begin; part < end; ++part) {
      BackwardPartition(storage, lookups, bags, grad, iteration, part, parts);
    }
  });
}

struct StorageLookupFunction : public torch::autograd::Function<StorageLookupFunction> {
  // `anchor` requires grad so autograd records this node; the storage is not a variable.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor anchor,
                            int64_t storage_address, std::vector<at::Tensor> values,
                            std::vector<at::Tensor> offsets, std::vector<int64_t> meta,
                            int64_t bags);
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads);
};

// meta per lookup: first_row, table_rows, mean, trainable.
std::vector<LookupArgs> MakeArgs(const std::vector<at::Tensor>& values,
                                 const std::vector<at::Tensor>& offsets,
                                 const std::vector<int64_t>& meta) {
  std::vector<LookupArgs> args(values.size());
  for (size_t k = 0; k < values.size(); ++k) {
    args[k].values = values[k].data_ptr<int64_t>();
    args[k].offsets = offsets[k].data_ptr<int64_t>();
    args[k].first_row = meta[4 * k];
    args[k].table_rows = meta[4 * k + 1];
    args[k].mean = meta[4 * k + 2] != 0;
    args[k].trainable = meta[4 * k + 3] != 0;
  }
  return args;
}

at::Tensor RunForward(EmbeddingStorage* storage, const std::vector<LookupArgs>& args, int64_t bags) {
  at::Tensor out = at::empty({bags, static_cast<int64_t>(args.size()) * storage->dim()},
                             at::TensorOptions().dtype(at::kFloat));
  SelectedKernels().forward(storage->data(), storage->row_width(), storage->dim(), args, bags,
                            out.data_ptr<float>());
  return out;
}

at::Tensor StorageLookupFunction::forward(torch::autograd::AutogradContext* ctx, at::Tensor anchor,
                                          int64_t storage_address, std::vector<at::Tensor> values,
                                          std::vector<at::Tensor> offsets,
                                          std::vector<int64_t> meta, int64_t bags) {
  auto* storage = reinterpret_cast<EmbeddingStorage*>(storage_address);
  at::Tensor out = RunForward(storage, MakeArgs(values, offsets, meta), bags);
  ctx->saved_data["storage"] = storage_address;
  ctx->saved_data["values"] = values;
  ctx->saved_data["offsets"] = offsets;
  ctx->saved_data["meta"] = meta;
  ctx->saved_data["bags"] = bags;
  return out;
}

torch::autograd::variable_list StorageLookupFunction::backward(
    torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
  auto* storage = reinterpret_cast<EmbeddingStorage*>(ctx->saved_data["storage"].toInt());
  auto values = ctx->saved_data["values"].toTensorVector();
  auto offsets = ctx->saved_data["offsets"].toTensorVector();
  auto meta = ctx->saved_data["meta"].toIntVector();
  const int64_t bags = ctx->saved_data["bags"].toInt();
  at::Tensor grad = grads[0].contiguous();
  SelectedKernels().backward_update(storage, MakeArgs(values, offsets, meta), bags,
                                    grad.data_ptr<float>(), storage->optimizer().step() + 1);
  return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
}

at::Tensor Anchor() {
  static thread_local at::Tensor anchor =
      at::zeros({}, at::TensorOptions().dtype(at::kFloat)).set_requires_grad(true);
  return anchor;
}

}  // namespace

const PooledLookupKernels& FusedKernels() {
  static const PooledLookupKernels kernels{FusedForward, FusedBackwardUpdate};
  return kernels;
}

const PooledLookupKernels& SelectedKernels() {
  // Read on every call (cheap next to a kernel) so tests can switch engines in one process.
  const char* flag = std::getenv("TZREC_EMBEDDING_REFERENCE");
  return flag && std::strcmp(flag, "1") == 0 ? ReferenceKernels() : FusedKernels();
}

at::Tensor StoragePooledLookup(EmbeddingStorage* storage, const std::vector<LookupTensors>& lookups,
                               int64_t bags, bool training) {
  std::vector<at::Tensor> values, offsets;
  std::vector<int64_t> meta;
  bool any_trainable = false;
  for (const auto& l : lookups) {
    TZREC_CHECK(l.table->storage() == storage);
    TZREC_CHECK(l.offsets.numel() == bags + 1);
    values.push_back(l.values);
    offsets.push_back(l.offsets);
    meta.insert(meta.end(), {l.table->first_row(), l.table->rows(), l.mean ? 1 : 0,
                             l.table->trainable() ? 1 : 0});
    any_trainable = any_trainable || l.table->trainable();
  }
  if (!training || !any_trainable) {
    return RunForward(storage, MakeArgs(values, offsets, meta), bags);
  }
  return StorageLookupFunction::apply(Anchor(), reinterpret_cast<int64_t>(storage), values, offsets,
                                      meta, bags);
}

}  // namespace tzrec
