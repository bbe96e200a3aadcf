// Pooled embedding lookups of one storage, with backward fused into the sparse optimizer.
//
// All lookups that share a storage (same embedding dim) run in one call: forward writes
// [bags, L*dim] (lookup l in columns [l*dim, (l+1)*dim)), sum or mean pooled, empty bags 0.
// Backward de-duplicates the touched rows over all lookups of the batch (a persistent
// row -> slot map, no hashing), sums each row's gradient in a fixed order (deterministic),
// and applies the optimizer to that row right away - no gradient tensor for the tables ever
// exists. Rows of frozen tables (trainable: false) are never updated.
//
// PooledLookupKernels has two implementations with identical results up to float rounding:
// the fused one (multithreaded, prefetching) and a plain reference (reference_kernels.cc),
// selected by TZREC_EMBEDDING_REFERENCE=1 for comparisons and used by the kernel tests.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

#include "tzrec/embedding/embedding_storage.h"
#include "tzrec/kernels/cpu_kernels.h"  // LookupArgs

namespace tzrec {

struct PooledLookupKernels {
  void (*forward)(const float* data, int row_width, int dim, const std::vector<LookupArgs>& lookups,
                  int64_t bags, float* out);
  // grad: [bags, L*dim]. `iteration` is the 1-based optimizer step (Adam bias correction).
  void (*backward_update)(EmbeddingStorage* storage, const std::vector<LookupArgs>& lookups,
                          int64_t bags, const float* grad, int64_t iteration);
  // forward over INT8 row-wise rows (inference storages; CpuKernels::pooled_forward_int8).
  void (*forward_int8)(const uint8_t* data, int64_t row_bytes, int dim,
                       const std::vector<LookupArgs>& lookups, int64_t bags, float* out);
  // forward over FP16 rows (CpuKernels::pooled_forward_fp16); backward_update handles them.
  void (*forward_fp16)(const float* data, int row_width, int dim, const std::vector<LookupArgs>& lookups,
                       int64_t bags, float* out);
  // forward over BF16 rows (CpuKernels::pooled_forward_bf16).
  void (*forward_bf16)(const float* data, int row_width, int dim, const std::vector<LookupArgs>& lookups,
                       int64_t bags, float* out);
};

const PooledLookupKernels& FusedKernels();
const PooledLookupKernels& ReferenceKernels();
// Reference when TZREC_EMBEDDING_REFERENCE=1, else fused.
const PooledLookupKernels& SelectedKernels();

// Forward of `lookups` over `storage` in its row format (fp32, FP16, BF16 or INT8) with the selected
// kernels: out [bags, L*dim].
void StorageForward(EmbeddingStorage* storage, const std::vector<LookupArgs>& lookups, int64_t bags, float* out);

// The backward's update of `lookups` (grad: [bags, L*dim] as backward_update) with the selected
// kernels; while the storage's optimizer defers updates (gradient accumulation), each touched
// row's summed gradient is kept in the storage instead.
void UpdateRows(EmbeddingStorage* storage, const std::vector<LookupArgs>& lookups, int64_t bags,
                const float* grad);
// Applies the gradients kept while deferring as one optimizer update per touched row (the
// sum over the deferred backwards), then forgets them.
void ApplyDeferredRowGradients(EmbeddingStorage* storage, float factor = 1.0f);

struct LookupTensors {
  at::Tensor values;   // int64 [N]
  at::Tensor offsets;  // int64 [bags + 1]
  const EmbeddingTable* table;
  bool mean;
  at::Tensor weights;  // float [N] for weighted features, else undefined
};

// A sequence (unpooled) lookup is a pooled lookup with one bag per step: `offsets` are the
// steps' key offsets [steps + 1], so a step with several ids (multi-value sequence elements)
// is pooled by the feature's pooling and an empty step gives 0. Its output is [steps, dim].

// Data-parallel training across processes: called in every backward of every storage, on
// every rank in the same order, with this rank's touched rows (global row in the storage,
// int64 [n]) and their summed gradients (float [n, dim]); must replace both with the union
// over all ranks (gradients summed), identical on every rank. The optimizer then applies the
// merged gradients, so all ranks keep identical tables.
using SparseGradientExchange = std::function<void(at::Tensor* rows, at::Tensor* grads)>;

// Returns [bags, L*dim]. With `training`, records an autograd node whose backward updates the
// storage with its optimizer (merging gradients over ranks first through `exchange` when it is
// set; it must outlive the backward); otherwise a plain forward.
at::Tensor StoragePooledLookup(EmbeddingStorage* storage, const std::vector<LookupTensors>& lookups,
                               int64_t bags, bool training,
                               const SparseGradientExchange* exchange = nullptr);

// A second storage read with the same ids as some pooled lookups of a call (the kernels'
// CompanionRows): pooled lookup k also reads companion table tables[k] (null: none), pooled
// into column block positions[k] of the companion output [bags, count * companion dim]. Each
// companion table is read by one lookup and trains exactly when that lookup's table does
// (EmbeddingCollection pairs a feature's WIDE table with its DEEP one so). Results are those
// of two separate calls (the same sums in the same order; at most a last-bit difference where
// the compiler fuses a multiply-add differently); the pair saves the second pass over the ids.
struct CompanionLookups {
  EmbeddingStorage* storage = nullptr;
  std::vector<const EmbeddingTable*> tables;
  std::vector<int32_t> positions;
  int64_t count = 0;
};

// All lookups of one storage in one call: `pooled` ones of `bags` bags each and `sequences`
// (each with its own step count). Returns {[bags, Lp*dim] (undefined without pooled lookups),
// then [steps_j, dim] per sequence lookup}. One autograd node: its backward de-duplicates the
// ids of every lookup together, so each touched row gets exactly one optimizer update per
// step, whether pooled or sequence lookups (or both) reached it. With `companion`, its output
// [bags, count * dim] comes last and the same node updates its rows.
std::vector<at::Tensor> StorageLookup(EmbeddingStorage* storage,
                                      const std::vector<LookupTensors>& pooled,
                                      const std::vector<LookupTensors>& sequences, int64_t bags,
                                      bool training, const SparseGradientExchange* exchange = nullptr,
                                      const CompanionLookups* companion = nullptr);

}  // namespace tzrec
