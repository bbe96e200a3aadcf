#include "tzrec/embedding/fused_lookup.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
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

// Ids of the trainable lookups of a backward.
int64_t TrainableIds(const std::vector<LookupArgs>& lookups, int64_t bags) {
  int64_t total = 0;
  for (const LookupArgs& l : lookups) {
    if (l.trainable) total += l.offsets[l.own_bags >= 0 ? l.own_bags : bags];
  }
  return total;
}

// Small batches are not worth a second pass over the ids.
int64_t BackwardPartitions(int64_t ids) { return ids < 8192 ? 1 : at::get_num_threads(); }

// The fused backward's per-partition scratch for `ids` ids (companion_dim > 0: a paired one),
// grown, never shrunk: re-allocating megabytes every step costs page faults.
std::vector<EmbeddingStorage::BackwardScratch>& ScratchFor(EmbeddingStorage* storage, int64_t parts, int64_t ids,
                                                           int companion_dim = 0) {
  std::vector<EmbeddingStorage::BackwardScratch>& scratch = storage->backward_scratch(parts);
  auto grow = [](auto& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  };
  for (auto& s : scratch) {
    grow(s.unique_rows, ids);
    grow(s.grad_sums, ids * storage->dim());
    if (parts > 1) companion_dim > 0 ? grow(s.paired_entries, ids) : grow(s.entries, ids);
    if (companion_dim > 0) {
      grow(s.companion_rows, ids);
      grow(s.companion_sums, ids * companion_dim);
    }
  }
  return scratch;
}

void FusedBackwardUpdate(EmbeddingStorage* storage, const std::vector<LookupArgs>& lookups,
                         int64_t bags, const float* grad, int64_t iteration) {
  const int64_t total = TrainableIds(lookups, bags);
  if (total == 0) return;
  const int64_t parts = BackwardPartitions(total);
  int32_t* slots = storage->slots();  // allocated before the threads share it
  std::vector<EmbeddingStorage::BackwardScratch>& scratch = ScratchFor(storage, parts, total);
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

// A call's CompanionLookups as the kernels and the unpaired fallback read it: per pooled
// lookup (the call's first lookups) the companion table's first row (-1: none), output
// position and rows.
struct ResolvedCompanion {
  EmbeddingStorage* storage = nullptr;
  int64_t count = 0;
  std::vector<int64_t> first_row;
  std::vector<int32_t> position;
  std::vector<int64_t> table_rows;
};

// How autograd keeps a ResolvedCompanion: {count, then (first_row, position, rows) per lookup}.
std::vector<int64_t> CompanionMeta(const ResolvedCompanion& c) {
  std::vector<int64_t> meta = {c.count};
  for (size_t k = 0; k < c.first_row.size(); ++k) meta.insert(meta.end(), {c.first_row[k], c.position[k], c.table_rows[k]});
  return meta;
}

ResolvedCompanion CompanionFromMeta(int64_t address, const std::vector<int64_t>& meta) {
  ResolvedCompanion c;
  c.storage = reinterpret_cast<EmbeddingStorage*>(address);
  c.count = meta[0];
  for (size_t i = 1; i + 2 < meta.size(); i += 3) {
    c.first_row.push_back(meta[i]);
    c.position.push_back(static_cast<int32_t>(meta[i + 1]));
    c.table_rows.push_back(meta[i + 2]);
  }
  return c;
}

// The companion's own lookups (in its output's order) read from the call's pooled ones.
std::vector<LookupArgs> CompanionArgs(const std::vector<LookupArgs>& args, const ResolvedCompanion& c) {
  std::vector<LookupArgs> out(c.count);
  for (size_t k = 0; k < c.first_row.size(); ++k) {
    if (c.first_row[k] < 0) continue;
    LookupArgs l = args[k];
    l.first_row = c.first_row[k];
    l.table_rows = c.table_rows[k];
    out[c.position[k]] = l;
  }
  return out;
}

// Whether the paired kernels serve a call (else it runs as two unpaired ones): the fused
// kernels are selected and both storages hold fp32 rows.
bool PairedKernelsServe(const EmbeddingStorage& storage, const ResolvedCompanion& c) {
  auto fp32 = [](const EmbeddingStorage& s) { return s.row_format() == RowFormat::kFloat32 && !s.int8_rows(); };
  return &SelectedKernels() == &FusedKernels() && fp32(storage) && fp32(*c.storage);
}

// The kernels' view of `c` for a call of `lookups` lookups (those past the pooled ones, the
// call's sequence lookups, have no companion).
CompanionRows KernelCompanion(ResolvedCompanion& c, size_t lookups) {
  c.first_row.resize(std::max(lookups, c.first_row.size()), -1);
  c.position.resize(c.first_row.size(), 0);
  c.table_rows.resize(c.first_row.size(), 0);
  CompanionRows rows;
  rows.data = c.storage->data();
  rows.row_width = c.storage->row_width();
  rows.dim = c.storage->dim();
  rows.first_row = c.first_row.data();
  rows.position = c.position.data();
  rows.width = c.count * c.storage->dim();
  return rows;
}

// The paired backward: `lookups`' rows and their companions', one pass (see CompanionRows).
void FusedPairedBackwardUpdate(EmbeddingStorage* storage, const std::vector<LookupArgs>& lookups, int64_t bags,
                               const float* grad, ResolvedCompanion c, const float* companion_grad) {
  const int64_t total = TrainableIds(lookups, bags);
  if (total == 0) return;
  const int64_t parts = BackwardPartitions(total);
  int32_t* slots = storage->slots();
  std::vector<EmbeddingStorage::BackwardScratch>& scratch = ScratchFor(storage, parts, total, c.storage->dim());
  const RowUpdateParams params = MakeRowUpdateParams(storage->optimizer().spec(), storage->optimizer().step() + 1);
  CompanionRows companion = KernelCompanion(c, lookups.size());
  companion.grad = companion_grad;
  companion.params = MakeRowUpdateParams(c.storage->optimizer().spec(), c.storage->optimizer().step() + 1);
  const CpuKernels& kernels = ActiveCpuKernels();
  at::parallel_for(0, parts, 1, [&](int64_t begin, int64_t end) {
    for (int64_t part = begin; part < end; ++part) {
      auto& s = scratch[part];
      kernels.backward_update_partition_paired(
          storage->data(), storage->row_width(), storage->dim(), slots, lookups.data(),
          static_cast<int>(lookups.size()), bags, grad, params, part, parts, s.unique_rows.data(),
          s.grad_sums.data(), s.paired_entries.data(), &companion, s.companion_rows.data(), s.companion_sums.data());
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
  // companion_address 0: no companion (companion_meta then unused; see CompanionMeta).
  static torch::autograd::variable_list forward(
      torch::autograd::AutogradContext* ctx, at::Tensor anchor, int64_t storage_address,
      int64_t exchange_address, std::vector<at::Tensor> values, std::vector<at::Tensor> offsets,
      std::vector<int64_t> meta, std::vector<at::Tensor> weights, int64_t bags, int64_t companion_address,
      std::vector<int64_t> companion_meta);
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
// its own [steps, dim], then (with a companion) the companion's [bags, count*dim].
torch::autograd::variable_list RunForward(EmbeddingStorage* storage, const std::vector<LookupArgs>& args,
                                          int64_t bags, ResolvedCompanion* companion = nullptr) {
  std::vector<LookupArgs> pooled;
  for (const LookupArgs& a : args) {
    if (a.own_bags < 0) pooled.push_back(a);
  }
  const auto options = at::TensorOptions().dtype(at::kFloat);
  torch::autograd::variable_list outputs;
  at::Tensor pooled_out = at::empty({bags, static_cast<int64_t>(pooled.size()) * storage->dim()}, options);
  at::Tensor companion_out;
  if (companion) {
    companion_out = at::empty({bags, companion->count * companion->storage->dim()}, options);
    if (PairedKernelsServe(*storage, *companion)) {
      const CompanionRows rows = [&] {
        CompanionRows r = KernelCompanion(*companion, pooled.size());
        r.out = companion_out.data_ptr<float>();
        return r;
      }();
      const CpuKernels& kernels = ActiveCpuKernels();
      float* out = pooled_out.data_ptr<float>();
      at::parallel_for(0, bags, 32, [&](int64_t begin, int64_t end) {
        kernels.pooled_forward_paired(storage->data(), storage->row_width(), storage->dim(), pooled.data(),
                                      static_cast<int>(pooled.size()), begin, end, out, &rows);
      });
    } else {
      StorageForward(storage, pooled, bags, pooled_out.data_ptr<float>());
      StorageForward(companion->storage, CompanionArgs(pooled, *companion), bags, companion_out.data_ptr<float>());
    }
  } else if (!pooled.empty()) {
    StorageForward(storage, pooled, bags, pooled_out.data_ptr<float>());
  }
  outputs.push_back(pooled_out);
  for (const LookupArgs& a : args) {
    if (a.own_bags < 0) continue;
    at::Tensor out = at::empty({a.own_bags, storage->dim()}, options);
    LookupArgs single = a;
    single.own_bags = -1;
    StorageForward(storage, {single}, a.own_bags, out.data_ptr<float>());
    outputs.push_back(out);
  }
  if (companion) outputs.push_back(companion_out);
  return outputs;
}

torch::autograd::variable_list StorageLookupFunction::forward(
    torch::autograd::AutogradContext* ctx, at::Tensor anchor, int64_t storage_address,
    int64_t exchange_address, std::vector<at::Tensor> values, std::vector<at::Tensor> offsets,
    std::vector<int64_t> meta, std::vector<at::Tensor> weights, int64_t bags, int64_t companion_address,
    std::vector<int64_t> companion_meta) {
  RECORD_USER_SCOPE("tzrec::embedding_lookup");  // named in is_profiling traces
  auto* storage = reinterpret_cast<EmbeddingStorage*>(storage_address);
  ResolvedCompanion companion;
  if (companion_address) companion = CompanionFromMeta(companion_address, companion_meta);
  torch::autograd::variable_list out =
      RunForward(storage, MakeArgs(values, offsets, meta, weights), bags, companion_address ? &companion : nullptr);
  ctx->saved_data["storage"] = storage_address;
  ctx->saved_data["exchange"] = exchange_address;
  ctx->saved_data["values"] = values;
  ctx->saved_data["offsets"] = offsets;
  ctx->saved_data["meta"] = meta;
  ctx->saved_data["weights"] = weights;
  ctx->saved_data["bags"] = bags;
  ctx->saved_data["companion"] = companion_address;
  ctx->saved_data["companion_meta"] = companion_meta;
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
  const int64_t companion_address = ctx->saved_data["companion"].toInt();
  std::vector<LookupArgs> args = MakeArgs(values, offsets, meta, weights);
  // An output the loss does not depend on has no gradient: its lookups update nothing.
  std::vector<at::Tensor> keep_alive;
  float no_gradient = 0.0f;
  const float* pooled_grad = &no_gradient;
  if (grads[0].defined()) {
    keep_alive.push_back(grads[0].contiguous());
    pooled_grad = keep_alive.back().data_ptr<float>();
  }
  // The companion's lookups as they would be without the pair (before `args` lose trainable).
  ResolvedCompanion companion;
  std::vector<LookupArgs> companion_args;
  const float* companion_grad = nullptr;
  if (companion_address) {
    companion = CompanionFromMeta(companion_address, ctx->saved_data["companion_meta"].toIntVector());
    companion_args = CompanionArgs(args, companion);
    if (grads.back().defined()) {
      keep_alive.push_back(grads.back().contiguous());
      companion_grad = keep_alive.back().data_ptr<float>();
    }
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
    if (companion_grad) ExchangedBackwardUpdate(*exchange, companion.storage, companion_args, bags, companion_grad);
  } else if (companion_grad && grads[0].defined() && PairedKernelsServe(*storage, companion) &&
             !storage->optimizer().defers_updates() && !companion.storage->optimizer().defers_updates()) {
    FusedPairedBackwardUpdate(storage, args, bags, pooled_grad, companion, companion_grad);
  } else {
    UpdateRows(storage, args, bags, pooled_grad);
    if (companion_grad) UpdateRows(companion.storage, companion_args, bags, companion_grad);
  }
  return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
          at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
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
                                      bool training, const SparseGradientExchange* exchange,
                                      const CompanionLookups* companion) {
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
  ResolvedCompanion resolved;
  if (companion) {
    TZREC_CHECK(companion->tables.size() == pooled.size() && companion->positions.size() == pooled.size());
    resolved.storage = companion->storage;
    resolved.count = companion->count;
    int64_t covered = 0;
    for (size_t k = 0; k < pooled.size(); ++k) {
      const EmbeddingTable* t = companion->tables[k];
      TZREC_CHECK(!t || (t->storage() == companion->storage && t->trainable() == pooled[k].table->trainable() &&
                         companion->positions[k] >= 0 && companion->positions[k] < companion->count));
      resolved.first_row.push_back(t ? t->first_row() : -1);
      resolved.position.push_back(t ? companion->positions[k] : 0);
      resolved.table_rows.push_back(t ? t->rows() : 0);
      covered += t ? 1 : 0;
    }
    TZREC_CHECK(covered == companion->count, "every companion lookup needs one lookup to ride with");
  }
  std::vector<at::Tensor> out;
  if (!training || !any_trainable) {
    out = RunForward(storage, MakeArgs(values, offsets, meta, weights), bags, companion ? &resolved : nullptr);
  } else {
    TZREC_CHECK(storage->has_optimizer(), "training lookup of an embedding storage without optimizer");
    TZREC_CHECK(!companion || companion->storage->has_optimizer());
    out = StorageLookupFunction::apply(Anchor(), reinterpret_cast<int64_t>(storage),
                                       reinterpret_cast<int64_t>(exchange), values, offsets, meta,
                                       weights, bags, reinterpret_cast<int64_t>(companion ? companion->storage : nullptr),
                                       companion ? CompanionMeta(resolved) : std::vector<int64_t>{});
  }
  return out;
}

at::Tensor StoragePooledLookup(EmbeddingStorage* storage, const std::vector<LookupTensors>& lookups,
                               int64_t bags, bool training, const SparseGradientExchange* exchange) {
  return StorageLookup(storage, lookups, {}, bags, training, exchange)[0];
}

}  // namespace tzrec
