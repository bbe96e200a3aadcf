// Hot CPU loops, compiled once per instruction set and chosen for the running CPU.
//
// The embedding lookup/update, DLRM interaction and MLP bias/ReLU loops are compiled three
// times (cpu_kernels_{baseline,avx2,avx512}.cc include cpu_kernels_impl.inc with different
// -march flags) and the widest one the CPU supports is used: one binary runs on any x86-64
// and still gets 512-bit vectors where they exist (an embedding row of dim 16 is one AVX-512
// register). The code here takes plain pointers only - no LibTorch and no std templates in
// the per-ISA files, whose inline copies could otherwise be merged by the linker with copies
// compiled for a narrower CPU.
#pragma once

#include <cstdint>

namespace tzrec {

// One lookup (feature) into a fused embedding storage.
struct LookupArgs {
  const int64_t* values;   // ids local to the table
  const int64_t* offsets;  // [bags + 1]
  int64_t first_row;       // table offset inside the storage
  int64_t table_rows;
  bool mean;
  bool trainable;
  const float* weights = nullptr;  // per id (weighted features): pooled sum of w * row; null = 1
  // A lookup with a layout of its own (sequence lookups: one bag per step, so their bag count
  // differs from the call's): `own_bags` bags whose gradient rows start at `own_grad` and are
  // `own_grad_stride` floats apart. The backward then de-duplicates its ids together with
  // the call's other lookups, so a row shared by pooled and sequence lookups is updated once.
  // own_bags < 0: the call's shared layout: the S lookups without a layout of their own, in
  // order, bag b of the j-th of them at grad + b * S * dim + j * dim.
  int64_t own_bags = -1;
  const float* own_grad = nullptr;
  int64_t own_grad_stride = 0;
};

// Sparse optimizer math for one step, flattened for the kernels (see sparse_optimizer.h).
struct RowUpdateParams {
  enum Kind : int {
    kSgd = 0,
    kAdagrad = 1,
    kRowwiseAdagrad = 2,
    kAdam = 3,
    kLarsSgd = 4,
    kLamb = 5,
    kPartialRowwiseLamb = 6,
    kPartialRowwiseAdam = 7,
    kAdadelta = 8,
    kRmsprop = 9,
  };
  enum WeightDecayMode : int { kNone = 0, kL2 = 1, kDecouple = 2 };
  int kind = kSgd;
  int weight_decay_mode = kNone;
  float lr = 0, eps = 0, beta1 = 0, beta2 = 0, weight_decay = 0;
  float momentum = 0, eta = 0, rho = 0, alpha = 0;  // LARS; Adadelta; RMSprop
  bool gradient_clipping = false;
  float max_gradient = 0;
  float bias_correction1 = 1, bias_correction2 = 1;  // Adam: 1 - beta^t
  // FP16 / BF16 rows: the step's seed of the stochastic rounding (StochasticRoundingRandom).
  uint32_t rounding_seed = 0;
};

// One id of a partition's share of a batch, compacted before it is accumulated
// (backward_update_partition with several partitions).
struct PartitionEntry {
  int64_t row;
  const float* grad;
  float factor;
};

// One id of a paired call's partition share (backward_update_partition_paired): PartitionEntry
// plus the id's companion row and its gradient (companion_row < 0: the lookup has none).
struct PairedPartitionEntry {
  int64_t row;
  const float* grad;
  float factor;
  int64_t companion_row;
  const float* companion_grad;
};

// A second fp32 storage read with a call's own ids: a feature looked up in two tables (its
// WIDE table beside its DEEP one, same ids, same bags) is pooled and updated in the same pass
// as its first table, so each id's two rows are fetched together instead of in two passes over
// the batch. Lookup k of the call has a companion when first_row[k] >= 0: the rows at
// data + (first_row[k] + id) * row_width, `dim` weights each (then their optimizer state),
// pooled with the lookup's weights and mean into columns [position[k] * dim, +dim) of `out`
// (forward) and updated from the same columns of `grad` (backward). A companion table is read
// by one lookup only and trains exactly when the lookup's table does, so the companion row of
// each slot is a function of its first table's row.
struct CompanionRows {
  float* data = nullptr;
  int row_width = 0;
  int dim = 0;
  const int64_t* first_row = nullptr;   // per lookup of the call; -1: none
  const int32_t* position = nullptr;    // per lookup
  int64_t width = 0;                    // floats per bag in out / grad
  float* out = nullptr;                 // forward: [bags, width]
  const float* grad = nullptr;          // backward: [bags, width]
  RowUpdateParams params;               // backward: the companion storage's optimizer step
};

// One dense Adam / AdamW step's constants (optim/fused_adam.h; torch.optim's formulas).
struct AdamStepParams {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps;
  float l2;        // Adam: weight decay added to the gradient (0: none)
  float keep;      // AdamW: the weights scaled by 1 - lr * weight_decay first (1: none)
  float sqrt_bc2;  // sqrt(1 - beta2^t)
  float neg_step;  // -lr / (1 - beta1^t)
};

struct CpuKernels {
  const char* isa;  // "baseline", "avx2" or "avx512"

  // Pooled embedding forward of bags [begin, end): out row b = [lookup 0 | lookup 1 | ...],
  // each `dim` wide, summed (or averaged) over the bag's rows; empty bags give 0.
  void (*pooled_forward)(const float* data, int row_width, int dim, const LookupArgs* lookups,
                         int num_lookups, int64_t begin, int64_t end, float* out);

  // Fused backward + optimizer for the rows of one partition (rows whose hash picks `part` of
  // `parts`; partitions own disjoint rows, so they run in parallel without locks). Each
  // touched row gets a slot through `slots` (storage row -> slot, -1 when free; restored to
  // -1 before returning); its gradient is summed into grad_sums[slot] in occurrence order
  // (lookup, bag, id: deterministic for any thread count), then the optimizer updates the
  // row in place. Scratch capacity: one entry of unique_rows and `dim` floats of grad_sums
  // per trainable id of the batch, and with parts > 1 one `entries` element per trainable id
  // too. Lookups with `own_bags` >= 0 use their own layout (see LookupArgs). Returns the number
  // of rows updated.
  int64_t (*backward_update_partition)(float* data, int row_width, int dim, int32_t* slots,
                                       const LookupArgs* lookups, int num_lookups, int64_t bags,
                                       const float* grad, const RowUpdateParams& params,
                                       int64_t part, int64_t parts, int64_t* unique_rows,
                                       float* grad_sums, PartitionEntry* entries);

  // pooled_forward that also pools `companion`'s rows of the same ids (fp32 rows; see
  // CompanionRows); backward_update_partition that also updates them, with per-partition
  // scratch companion_rows (one per slot) and companion_sums (`companion->dim` floats per
  // slot), and PairedPartitionEntry entries. The same sums in the same order as two unpaired
  // calls (results equal up to the compiler's multiply-add fusion: the last bit at most).
  void (*pooled_forward_paired)(const float* data, int row_width, int dim, const LookupArgs* lookups,
                                int num_lookups, int64_t begin, int64_t end, float* out,
                                const CompanionRows* companion);
  int64_t (*backward_update_partition_paired)(float* data, int row_width, int dim, int32_t* slots,
                                              const LookupArgs* lookups, int num_lookups, int64_t bags,
                                              const float* grad, const RowUpdateParams& params,
                                              int64_t part, int64_t parts, int64_t* unique_rows,
                                              float* grad_sums, PairedPartitionEntry* entries,
                                              const CompanionRows* companion, int64_t* companion_rows,
                                              float* companion_sums);

  // DLRM interaction of samples [begin, end): x [B, n, dim] -> out [B, n(n-1)/2] with
  // out = <x_i, x_j> for i < j (row-major upper triangle). `scratch`: InteractionScratch(n, dim).
  void (*interaction_forward)(const float* x, int n, int dim, int64_t begin, int64_t end,
                              float* out, float* scratch);
  // dx_i = sum_{j != i} g_ij x_j (dx fully written). `scratch`: InteractionScratch(n, dim).
  void (*interaction_backward)(const float* x, const float* grad, int n, int dim, int64_t begin,
                               int64_t end, float* dx, float* scratch);

  // y[r, :] = relu?(y[r, :] + bias) for `rows` rows of `cols` (bias may be null).
  void (*add_bias_relu)(float* y, const float* bias, int64_t rows, int64_t cols, bool relu);
  // An fp32 layer's backward in one pass over `rows` x `cols` of its output gradient: the
  // ReLU-masked gradient out = y <= 0 ? 0 : grad (a NaN y passes the gradient, as ATen's
  // threshold_backward; y null: no mask and out is not written), added per column into
  // column_sums (its bias gradient; null: no sums).
  void (*relu_mask)(const float* y, const float* grad, float* out, int64_t rows, int64_t cols,
                    float* column_sums);

  // pooled_forward over INT8 row-wise rows (inference tables, embedding/table_quantization.h):
  // row r is `row_bytes` bytes at data + r * row_bytes: `dim` uint8 codes, then an fp16 scale
  // and an fp16 bias; each id adds weight * (code * scale + bias).
  void (*pooled_forward_int8)(const uint8_t* data, int64_t row_bytes, int dim,
                              const LookupArgs* lookups, int num_lookups, int64_t begin,
                              int64_t end, float* out);

  // pooled_forward and backward_update_partition over FP16 rows (tables with `data_type:
  // FP16`): row r at data + r * row_width floats is HalfWeightFloats(dim) floats holding `dim`
  // IEEE half weights, then the fp32 optimizer state. The backward widens a row to fp32, runs
  // the same optimizer math and narrows the weights with stochastic rounding (FBGEMM's choice
  // for half tables: small updates survive on average instead of rounding away); the random
  // bits come from StochasticRoundingRandom, so results depend on neither threads nor ranks.
  void (*pooled_forward_fp16)(const float* data, int row_width, int dim, const LookupArgs* lookups,
                              int num_lookups, int64_t begin, int64_t end, float* out);
  int64_t (*backward_update_partition_fp16)(float* data, int row_width, int dim, int32_t* slots,
                                            const LookupArgs* lookups, int num_lookups,
                                            int64_t bags, const float* grad,
                                            const RowUpdateParams& params, int64_t part,
                                            int64_t parts, int64_t* unique_rows,
                                            float* grad_sums, PartitionEntry* entries);
  // The same over BF16 rows (`data_type: BF16` tables): the same row layout with bfloat16
  // weights (fp32's exponent range, 8 bits of mantissa), rounded stochastically as well.
  void (*pooled_forward_bf16)(const float* data, int row_width, int dim, const LookupArgs* lookups,
                              int num_lookups, int64_t begin, int64_t end, float* out);
  int64_t (*backward_update_partition_bf16)(float* data, int row_width, int dim, int32_t* slots,
                                            const LookupArgs* lookups, int num_lookups,
                                            int64_t bags, const float* grad,
                                            const RowUpdateParams& params, int64_t part,
                                            int64_t parts, int64_t* unique_rows,
                                            float* grad_sums, PartitionEntry* entries);

  // Dense Adam over n elements in one pass: w (weights), g (gradient), m and v (moments),
  // vmax (amsgrad's running maximum of v, or null) updated in place.
  void (*adam_update)(const AdamStepParams& p, float* w, const float* g, float* m, float* v, float* vmax,
                      int64_t n);

  // out = bfloat16(in), rounded to nearest even (NaN stays NaN): BF16 GEMM inputs.
  void (*float_to_bf16)(const float* in, uint16_t* out, int64_t n);
  // A BF16 layer's backward in one pass over `rows` x `cols`: the ReLU-masked gradient (y
  // null: unmasked) rounded to bfloat16 into out_bf16 (its GEMMs' input), and added per
  // column into column_sums (its bias gradient).
  void (*relu_mask_bf16)(const float* y, const float* grad, uint16_t* out_bf16, int64_t rows,
                         int64_t cols, float* column_sums);
  // relu_mask_bf16 with the layer's output `y_bf16` in bfloat16 (required): a hidden layer of
  // a BF16 FastLinearChain, whose activations stay bfloat16.
  void (*relu_mask_bf16_of_bf16)(const uint16_t* y_bf16, const float* grad, uint16_t* out_bf16,
                                 int64_t rows, int64_t cols, float* column_sums);
};

// IEEE half-precision bits -> float, exactly (no F16C needed).
inline float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  float value;
  if (exponent == 0) {
    value = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // subnormal: m * 2^-24
    return sign ? -value : value;
  }
  const uint32_t bits = exponent == 31 ? (sign | 0x7f800000u | (mantissa << 13))
                                       : (sign | ((exponent + 112) << 23) | (mantissa << 13));
  __builtin_memcpy(&value, &bits, sizeof(value));
  return value;
}

// bfloat16 bits -> float, exactly.
inline float Bf16BitsToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float value;
  __builtin_memcpy(&value, &bits, sizeof(value));
  return value;
}

// Floats at the start of an FP16 or BF16 row that hold its `dim` 2-byte weights (the
// optimizer state follows them, 4-byte aligned).
inline int HalfWeightFloats(int dim) { return (dim + 1) / 2; }

// Random bits for stochastically rounding element `d` of a row to half precision (the top 13
// are used) or to bfloat16 (the top 16), from the value rounded towards zero (its 16 bits),
// the step's seed and d: a pure function of what every replica of a row holds, so data-parallel replicas (whose
// storage rows may differ) and any thread count round identically. One multiply (an odd
// constant permutes 32-bit values): the seed, a strong hash of the step, makes its input
// uniform from step to step, and its top bits carry all of the input's; the rounding loops
// vectorise around it (a three-multiply finaliser made the FP16 backward twice as slow).
__attribute__((always_inline)) inline uint32_t StochasticRoundingRandom(uint32_t truncated_half,
                                                                        uint32_t seed, uint32_t d) {
  return (truncated_half ^ seed ^ (d * 0x85EBCA77u + 0x165667B1u)) * 0x9E3779B1u;
}

// The stochastic-rounding seed of optimizer step `iteration` (RowUpdateParams::rounding_seed).
inline uint32_t RoundingSeedOfStep(int64_t iteration) {
  // splitmix64's finaliser: neighbouring steps get unrelated seeds.
  uint64_t z = static_cast<uint64_t>(iteration) + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return static_cast<uint32_t>((z ^ (z >> 31)) >> 32);
}

// Index of the first NaN or +-inf among `n` floats, or -1 when all are finite. A bit test, so
// it vectorises without fast-math (used on every step's gradients and every saved table).
int64_t FirstNonFinite(const float* values, int64_t n);

// Floats of scratch the interaction kernels need per calling thread.
int64_t InteractionScratch(int n, int dim);

// The kernels for the running CPU, or the ones TZREC_CPU_ISA (baseline|avx2|avx512) names.
const CpuKernels& ActiveCpuKernels();
// A specific variant, or nullptr when this CPU cannot run it (tests compare all of them).
const CpuKernels* CpuKernelsFor(const char* isa);
// Makes `isa` the active variant (tests and benchmarks); false if the CPU cannot run it.
bool SetActiveCpuKernels(const char* isa);

}  // namespace tzrec
