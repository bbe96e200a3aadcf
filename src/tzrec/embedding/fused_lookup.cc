#include "tzrec/embedding/fused_lookup.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "tzrec/common/error.h"
#include "tzrec/embedding/row_gradient_sum.h"

namespace tzrec {
namespace {

// Bags split over the intra-op threads, each range pooled by `kernel` (a CpuKernels member).
template <typename Data, typename Stride>
void ParallelPooledForward(void (*kernel)(const Data*, Stride, int, const LookupArgs*, int, int64_t, int64_t, float*),
                           const Data* data, Stride stride, int dim, const std::vector<LookupArgs>& lookups,
                           int64_t bags, float* out) {
  at::parallel_for(0, bags, 32, [&](int64_t begin, int64_t end) {
    kernel(data, stride, dim, lookups.data(), static_cast<int>(lookups.size()), begin, end, out);
  });
}

void FusedForward(const float* data, int row_width, int dim, const std::vector<LookupArgs>& lookups,
                  int64_t bags, float* out) {
  ParallelPooledForward(ActiveCpuKernels().pooled_forward, data, row_width, dim, lookups, bags, out);
}

void FusedForwardFp16(const float* data, int row_width, int dim, const std::vector<LookupArgs>& lookups,
                      int64_t bags, float* out) {
  ParallelPooledForward(ActiveCpuKernels().pooled_forward_fp16, data, row_width, dim, lookups, bags, out);
}

void FusedForwardBf16(const float* data, int row_width, int dim, const std::vector<LookupArgs>& lookups,
                      int64_t bags, float* out) {
  ParallelPooledForward(ActiveCpuKernels().pooled_forward_bf16, data, row_width, dim, lookups, bags, out);
}

void FusedForwardInt8(const uint8_t* data, int64_t row_bytes, int dim,
                      const std::vector<LookupArgs>& lookups, int64_t bags, float* out) {
  ParallelPooledForward(ActiveCpuKernels().pooled_forward_int8, data, row_bytes, dim, lookups, bags, out);
}

RowUpdateParams MakeRowUpdateParams(const SparseOptimizerSpec& spec, int64_t iteration) {
  RowUpdateParams p;
  using Kind = SparseOptimizerSpec::Kind;
  using Mode = SparseOptimizerSpec::WeightDecayMode;
  switch (spec.kind) {
    case Kind::kSgd: p.kind = RowUpdateParams::kSgd; break;
    case Kind::kAdagrad: p.kind = RowUpdateParams::kAdagrad; break;
    case Kind::kRowwiseAdagrad: p.kind = RowUpdateParams::kRowwiseAdagrad; break;
    case Kind::kAdam: p.kind = RowUpdateParams::kAdam; break;
    case Kind::kLarsSgd: p.kind = RowUpdateParams::kLarsSgd; break;
    case Kind::kLamb: p.kind = RowUpdateParams::kLamb; break;
    case Kind::kPartialRowwiseLamb: p.kind = RowUpdateParams::kPartialRowwiseLamb; break;
    case Kind::kPartialRowwiseAdam: p.kind = RowUpdateParams::kPartialRowwiseAdam; break;
    case Kind::kAdadelta: p.kind = RowUpdateParams::kAdadelta; break;
    case Kind::kRmsprop: p.kind = RowUpdateParams::kRmsprop; break;
  }
  p.weight_decay_mode = spec.weight_decay_mode == Mode::kL2         ? RowUpdateParams::kL2
                        : spec.weight_decay_mode == Mode::kDecouple ? RowUpdateParams::kDecouple
                                                                    : RowUpdateParams::kNone;
  p.lr = spec.lr;
  p.eps = spec.eps;
  p.beta1 = spec.beta1;
  p.beta2 = spec.beta2;
  p.weight_decay = spec.weight_decay;
  p.momentum = spec.momentum;
  p.eta = spec.eta;
  p.rho = spec.rho;
  p.alpha = spec.alpha;
  p.gradient_clipping = spec.gradient_clipping;
  p.max_gradient = spec.max_gradient;
  p.bias_correction1 = 1.0f - std::pow(spec.beta1, static_cast<float>(iteration));
  p.bias_correction2 = 1.0f - std::pow(spec.beta2, static_cast<float>(iteration));
  p.rounding_seed = RoundingSeedOfStep(iteration);
  return p;
}

void FusedBackwardUpdate(EmbeddingStorage* storage, const std::vector<LookupArgs>& lookups,
                         int64_t bags, const float* grad, int64_t iteration) {
  int64_t total = 0;
  for (const LookupArgs& l : lookups) {
    if (l.trainable) total += l.offsets[l.own_bags >= 0 ? l.own_bags : bags];
  }
  if (total == 0) return;
  // Small batches are not worth a second pass over the ids.
  const int64_t parts = total < 8192 ? 1 : at::get_num_threads();
  int32_t* slots = storage->slots();  // allocated before the threads share it
  std::vector<EmbeddingStorage::BackwardScratch>& scratch = storage->backward_scratch(parts);
  for (auto& s : scratch) {
    // Grown, never shrunk: re-allocating megabytes every step costs page faults.
    if (static_cast<int64_t>(s.unique_rows.size()) < total) {
      s.unique_rows.resize(total);
      s.grad_sums.resize(total * storage->dim());
      if (parts > 1) s.entries.resize(total);
    }
    if (parts > 1 && static_cast<int64_t>(s.entries.size()) < total) s.entries.resize(total);
  }
  const RowUpdateParams params = MakeRowUpdateParams(storage->optimizer().spec(), iteration);
  const CpuKernels& kernels = ActiveCpuKernels();
  const auto update = storage->row_format() == RowFormat::kFloat16    ? kernels.backward_update_partition_fp16
                      : storage->row_format() == RowFormat::kBFloat16 ? kernels.backward_update_partition_bf16
                                                                      : kernels.backward_update_partition;
  at::parallel_for(0, parts, 1, [&](int64_t begin, int64_t end) {
    for (int64_t part = begin; part < end; ++part) {
      update(
          storage->data(), storage->row_width(), storage->dim(), slots, lookups.data(),
          static_cast<int>(lookups.size()), bags, grad, params, part, parts,
          scratch[part].unique_rows.data(), scratch[part].grad_sums.data(), scratch[part].entries.data());
    }
  });
}

// Each touched row's gradient summed over the lookups: rows int64 [n] (global rows of the
// storage), sums float [n, dim].
std::pair<at::Tensor, at::Tensor> RowGradientSums(int dim, const std::vector<LookupArgs>& lookups,
                                                  int64_t bags, const float* grad) {
  int64_t shared = 0;  // lookups in the shared [bags, shared * dim] gradient, in order
  for (const LookupArgs& l : lookups) shared += l.own_bags < 0 ? 1 : 0;
  const int64_t width = shared * dim;
  int64_t ids = 0;
  for (const LookupArgs& l : lookups) {
    if (l.trainable) ids += l.offsets[l.own_bags >= 0 ? l.own_bags : bags];
  }
  RowGradientSum sum(dim, ids);
  int64_t shared_index = -1;
  for (size_t k = 0; k < lookups.size(); ++k) {
    const LookupArgs& l = lookups[k];
    const bool own = l.own_bags >= 0;
    if (!own) ++shared_index;
    if (!l.trainable) continue;
    const int64_t lookup_bags = own ? l.own_bags : bags;
    for (int64_t b = 0; b < lookup_bags; ++b) {
      const int64_t begin = l.offsets[b], end = l.offsets[b + 1];
      const float scale = l.mean && end > begin ? 1.0f / static_cast<float>(end - begin) : 1.0f;
      const float* g = own ? l.own_grad + b * l.own_grad_stride : grad + b * width + shared_index * dim;
      for (int64_t i = begin; i < end; ++i) {
        sum.Add(l.first_row + l.values[i], g, l.weights ? scale * l.weights[i] : scale);
      }
    }
  }
  return sum.Tensors();
}

// The optimizer applied to distinct `rows` with their gradients, as one single-id bag per row.
void UpdateDistinctRows(EmbeddingStorage* storage, at::Tensor rows, at::Tensor grads) {
  const int64_t n = rows.numel();
  if (n == 0) return;
  rows = rows.contiguous();
  grads = grads.contiguous();
  std::vector<int64_t> offsets(n + 1);
  for (int64_t i = 0; i <= n; ++i) offsets[i] = i;
  LookupArgs all;
  all.values = rows.data_ptr<int64_t>();
  all.offsets = offsets.data();
  all.first_row = 0;
  all.table_rows = storage->total_rows();
  all.mean = false;
  all.trainable = true;
  SelectedKernels().backward_update(storage, {all}, n, grads.data_ptr<float>(),
                                    storage->optimizer().step() + 1);
}

// Data-parallel backward: this rank's summed gradient per touched row, merged over ranks by
// `exchange`, then updated (or kept, while the optimizer defers).
void ExchangedBackwardUpdate(const SparseGradientExchange& exchange, EmbeddingStorage* storage,
                             const std::vector<LookupArgs>& lookups, int64_t bags, const float* grad) {
  auto [rows, grads] = RowGradientSums(storage->dim(), lookups, bags, grad);
  // Hash-stored tables number their rows by first touch, differently on every rank: the
  // exchange speaks ids.
  storage->SlotRowsToIdRows(&rows);
  exchange(&rows, &grads);
  storage->IdRowsToSlotRows(&rows);
  if (storage->optimizer().defers_updates()) {
    storage->deferred_gradients().emplace_back(rows, grads);
  } else {
    UpdateDistinctRows(storage, rows, grads);
  }
}

struct StorageLookupFunction : public torch::autograd::Function<StorageLookupFunction> {
  // `anchor` requires grad so autograd records this node; the storage is not a variable.
  static torch::autograd::variable_list forward(
      torch::autograd::AutogradContext* ctx, at::Tensor anchor, int64_t storage_address,
      int64_t exchange_address, std::vector<at::Tensor> values, std::vector<at::Tensor> offsets,
      std::vector<int64_t> meta, std::vector<at::Tensor> weights, int64_t bags);
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads);
};

constexpr int kMetaPerLookup = 5;

// meta per lookup: first_row, table_rows, mean, trainable, own bags (-1: pooled, the call's
// shared layout; >= 0: a sequence lookup's steps).
std::vector<LookupArgs> MakeArgs(const std::vector<at::Tensor>& values,
                                 const std::vector<at::Tensor>& offsets,
                                 const std::vector<int64_t>& meta,
                                 const std::vector<at::Tensor>& weights) {
  std::vector<LookupArgs> args(values.size());
  for (size_t k = 0; k < values.size(); ++k) {
    // An empty tensor stands for "no weights" (autograd saved data cannot hold undefined ones).
    args[k].weights = weights[k].numel() > 0 ? weights[k].data_ptr<float>() : nullptr;
    args[k].values = values[k].data_ptr<int64_t>();
    args[k].offsets = offsets[k].data_ptr<int64_t>();
    const int64_t* m = meta.data() + kMetaPerLookup * k;
    args[k].first_row = m[0];
    args[k].table_rows = m[1];
    args[k].mean = m[2] != 0;
    args[k].trainable = m[3] != 0;
    args[k].own_bags = m[4];
  }
  return args;
}

// Pooled lookups (shared layout) into one [bags, Lp*dim] tensor, then each sequence lookup into
// its own [steps, dim].
torch::autograd::variable_list RunForward(EmbeddingStorage* storage, const std::vector<LookupArgs>& args,
                                          int64_t bags) {
  std::vector<LookupArgs> pooled;
  for (const LookupArgs& a : args) {
    if (a.own_bags < 0) pooled.push_back(a);
  }
  const auto options = at::TensorOptions().dtype(at::kFloat);
  torch::autograd::variable_list outputs;
  at::Tensor pooled_out = at::empty({bags, static_cast<int64_t>(pooled.size()) * storage->dim()}, options);
  auto forward = [&](const std::vector<LookupArgs>& lookups, int64_t count, float* out) {
    StorageForward(storage, lookups, count, out);
  };
  if (!pooled.empty()) forward(pooled, bags, pooled_out.data_ptr<float>());
  outputs.push_back(pooled_out);
  for (const LookupArgs& a : args) {
    if (a.own_bags < 0) continue;
    at::Tensor out = at::empty({a.own_bags, storage->dim()}, options);
    LookupArgs single = a;
    single.own_bags = -1;
    forward({single}, a.own_bags, out.data_ptr<float>());
    outputs.push_back(out);
  }
  return outputs;
}

torch::autograd::variable_list StorageLookupFunction::forward(
    torch::autograd::AutogradContext* ctx, at::Tensor anchor, int64_t storage_address,
    int64_t exchange_address, std::vector<at::Tensor> values, std::vector<at::Tensor> offsets,
    std::vector<int64_t> meta, std::vector<at::Tensor> weights, int64_t bags) {
  RECORD_USER_SCOPE("tzrec::embedding_lookup");  // named in is_profiling traces
  auto* storage = reinterpret_cast<EmbeddingStorage*>(storage_address);
  torch::autograd::variable_list out = RunForward(storage, MakeArgs(values, offsets, meta, weights), bags);
  ctx->saved_data["storage"] = storage_address;
  ctx->saved_data["exchange"] = exchange_address;
  ctx->saved_data["values"] = values;
  ctx->saved_data["offsets"] = offsets;
  ctx->saved_data["meta"] = meta;
  ctx->saved_data["weights"] = weights;
  ctx->saved_data["bags"] = bags;
  return out;
}

torch::autograd::variable_list StorageLookupFunction::backward(
    torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
  auto* storage = reinterpret_cast<EmbeddingStorage*>(ctx->saved_data["storage"].toInt());
  auto values = ctx->saved_data["values"].toTensorVector();
  auto offsets = ctx->saved_data["offsets"].toTensorVector();
  auto meta = ctx->saved_data["meta"].toIntVector();
  auto weights = ctx->saved_data["weights"].toTensorVector();
  const int64_t bags = ctx->saved_data["bags"].toInt();
  std::vector<LookupArgs> args = MakeArgs(values, offsets, meta, weights);
  // An output the loss does not depend on has no gradient: its lookups update nothing.
  std::vector<at::Tensor> keep_alive;
  float no_gradient = 0.0f;
  const float* pooled_grad = &no_gradient;
  if (grads[0].defined()) {
    keep_alive.push_back(grads[0].contiguous());
    pooled_grad = keep_alive.back().data_ptr<float>();
  }
  size_t output = 1;
  for (LookupArgs& a : args) {
    if (a.own_bags < 0) {
      if (!grads[0].defined()) a.trainable = false;
      continue;
    }
    const at::Tensor& g = grads[output++];
    if (!g.defined()) {
      a.trainable = false;
      continue;
    }
    keep_alive.push_back(g.contiguous());
    a.own_grad = keep_alive.back().data_ptr<float>();
    a.own_grad_stride = storage->dim();
  }
  const auto* exchange =
      reinterpret_cast<const SparseGradientExchange*>(ctx->saved_data["exchange"].toInt());
  if (exchange && *exchange) {
    ExchangedBackwardUpdate(*exchange, storage, args, bags, pooled_grad);
  } else {
    UpdateRows(storage, args, bags, pooled_grad);
  }
  return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
          at::Tensor(), at::Tensor()};
}

at::Tensor Anchor() {
  static thread_local at::Tensor anchor =
      at::zeros({}, at::TensorOptions().dtype(at::kFloat)).set_requires_grad(true);
  return anchor;
}

}  // namespace

void StorageForward(EmbeddingStorage* storage, const std::vector<LookupArgs>& lookups, int64_t bags, float* out) {
  const PooledLookupKernels& kernels = SelectedKernels();
  if (storage->int8_rows()) {
    kernels.forward_int8(storage->int8_data(), storage->row_bytes(), storage->dim(), lookups, bags, out);
  } else if (storage->row_format() == RowFormat::kFloat16) {
    kernels.forward_fp16(storage->data(), storage->row_width(), storage->dim(), lookups, bags, out);
  } else if (storage->row_format() == RowFormat::kBFloat16) {
    kernels.forward_bf16(storage->data(), storage->row_width(), storage->dim(), lookups, bags, out);
  } else {
    kernels.forward(storage->data(), storage->row_width(), storage->dim(), lookups, bags, out);
  }
}

void UpdateRows(EmbeddingStorage* storage, const std::vector<LookupArgs>& lookups, int64_t bags,
                const float* grad) {
  if (storage->optimizer().defers_updates()) {
    storage->deferred_gradients().push_back(RowGradientSums(storage->dim(), lookups, bags, grad));
    return;
  }
  SelectedKernels().backward_update(storage, lookups, bags, grad, storage->optimizer().step() + 1);
}

void ApplyDeferredRowGradients(EmbeddingStorage* storage, float factor) {
  auto& deferred = storage->deferred_gradients();
  if (deferred.empty()) return;
  // Sum the kept gradients per row (first-touch order over the backwards, as one backward
  // would), so each row gets one update however many accumulated steps touched it.
  RowGradientSum sum(storage->dim());
  for (const auto& [row_tensor, grad_tensor] : deferred) {
    const at::Tensor r = row_tensor.contiguous(), g = grad_tensor.contiguous();
    const int64_t* row = r.data_ptr<int64_t>();
    const float* grad = g.data_ptr<float>();
    for (int64_t i = 0; i < r.numel(); ++i) sum.Add(row[i], grad + i * storage->dim(), factor);
  }
  deferred.clear();
  auto [row_tensor, grad_tensor] = sum.Tensors();
  UpdateDistinctRows(storage, row_tensor, grad_tensor);
}

const PooledLookupKernels& FusedKernels() {
  static const PooledLookupKernels kernels{FusedForward, FusedBackwardUpdate, FusedForwardInt8, FusedForwardFp16,
                                           FusedForwardBf16};
  return kernels;
}

const PooledLookupKernels& SelectedKernels() {
  // Read on every call (cheap next to a kernel) so tests can switch engines in one process.
  const char* flag = std::getenv("TZREC_EMBEDDING_REFERENCE");
  return flag && std::strcmp(flag, "1") == 0 ? ReferenceKernels() : FusedKernels();
}

std::vector<at::Tensor> StorageLookup(EmbeddingStorage* storage,
                                      const std::vector<LookupTensors>& pooled,
                                      const std::vector<LookupTensors>& sequences, int64_t bags,
                                      bool training, const SparseGradientExchange* exchange) {
  std::vector<at::Tensor> values, offsets, weights;
  std::vector<int64_t> meta;
  bool any_trainable = false;
  auto add = [&](const LookupTensors& l, int64_t own_bags) {
    TZREC_CHECK(l.table->storage() == storage);
    TZREC_CHECK(l.offsets.numel() == (own_bags >= 0 ? own_bags : bags) + 1);
    TZREC_CHECK(!l.weights.defined() || l.weights.numel() == l.values.numel());
    values.push_back(l.values);
    offsets.push_back(l.offsets);
    weights.push_back(l.weights.defined() ? l.weights.contiguous()
                                          : at::empty({0}, at::TensorOptions().dtype(at::kFloat)));
    meta.insert(meta.end(), {l.table->first_row(), l.table->rows(), l.mean ? 1 : 0,
                             l.table->trainable() ? 1 : 0, own_bags});
    any_trainable = any_trainable || l.table->trainable();
  };
  for (const auto& l : pooled) add(l, -1);
  for (const auto& l : sequences) add(l, l.offsets.numel() - 1);
  std::vector<at::Tensor> out;
  if (!training || !any_trainable) {
    out = RunForward(storage, MakeArgs(values, offsets, meta, weights), bags);
  } else {
    TZREC_CHECK(storage->has_optimizer(), "training lookup of an embedding storage without optimizer");
    out = StorageLookupFunction::apply(Anchor(), reinterpret_cast<int64_t>(storage),
                                       reinterpret_cast<int64_t>(exchange), values, offsets, meta,
                                       weights, bags);
  }
  return out;
}

at::Tensor StoragePooledLookup(EmbeddingStorage* storage, const std::vector<LookupTensors>& lookups,
                               int64_t bags, bool training, const SparseGradientExchange* exchange) {
  return StorageLookup(storage, lookups, {}, bags, training, exchange)[0];
}

}  // namespace tzrec
