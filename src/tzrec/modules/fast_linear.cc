#include "tzrec/modules/fast_linear.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <ATen/core/grad_mode.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/sum.h>
#include <oneapi/dnnl/dnnl.hpp>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "tzrec/common/error.h"
#include "tzrec/common/logging.h"
#include "tzrec/kernels/cpu_kernels.h"

namespace tzrec {
namespace {

thread_local GemmPrecision t_gemm_precision = GemmPrecision::kFloat32;

// FastLinearGemmMilliseconds' sum, in nanoseconds.
std::atomic<int64_t> g_gemm_nanos{0};

// Adds the wall time of its scope (one GEMM call) to g_gemm_nanos; two clock reads per GEMM
// of at least thousands of flops.
class GemmTimer {
 public:
  GemmTimer() : start_(std::chrono::steady_clock::now()) {}
  ~GemmTimer() {
    g_gemm_nanos.fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count(),
        std::memory_order_relaxed);
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

// Row-major C[M,N] = op(A) op(B) (C is overwritten).
void Sgemm(char trans_a, char trans_b, int64_t m, int64_t n, int64_t k, const float* a,
           int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
  GemmTimer timer;
  dnnl_status_t status =
      dnnl_sgemm(trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  TZREC_CHECK(status == dnnl_success, "dnnl_sgemm failed with status ", status);
}

// Row-major C[M,N] (fp32) = op(A) op(B) [+ bias[N]] [then ReLU] with A and B bfloat16 (trans:
// the operand is stored transposed, as for sgemm), on oneDNN's matmul primitive; bias and
// ReLU run inside the GEMM's tiles, saving a pass over C. Primitives are made once per shape
// and kept (making one costs more than running a small one); oneDNN primitives may execute
// on several threads at once.
// `c_bf16`: C is written as bfloat16 (rounded to nearest even after bias and ReLU; `c` then
// points to uint16 storage).
void Bf16Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const at::BFloat16* a,
              const at::BFloat16* b, void* c, const float* bias = nullptr, bool relu = false,
              bool c_bf16 = false) {
  GemmTimer timer;
  using dnnl::memory;
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, bool, bool, bool>;
  static std::mutex mutex;
  static std::map<Key, dnnl::matmul>* primitives = new std::map<Key, dnnl::matmul>();
  static const dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  const memory::desc a_desc({m, k}, memory::data_type::bf16,
                            trans_a ? memory::dims{1, m} : memory::dims{k, 1});
  const memory::desc b_desc({k, n}, memory::data_type::bf16,
                            trans_b ? memory::dims{1, k} : memory::dims{n, 1});
  const memory::desc c_desc({m, n}, c_bf16 ? memory::data_type::bf16 : memory::data_type::f32, memory::dims{n, 1});
  const memory::desc bias_desc({1, n}, memory::data_type::f32, memory::dims{n, 1});
  dnnl::matmul primitive;
  {
    std::lock_guard<std::mutex> lock(mutex);
    const Key key{trans_a, trans_b, m, n, k, bias != nullptr, relu, c_bf16};
    auto it = primitives->find(key);
    if (it == primitives->end()) {
      // Serving batches come in many sizes: keep the cache bounded (a primitive holds JIT code).
      if (primitives->size() >= 512) primitives->clear();
      dnnl::primitive_attr attr;
      if (relu) {
        dnnl::post_ops ops;
        ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
        attr.set_post_ops(ops);
      }
      const dnnl::matmul::desc desc = bias ? dnnl::matmul::desc(a_desc, b_desc, bias_desc, c_desc)
                                           : dnnl::matmul::desc(a_desc, b_desc, c_desc);
      it = primitives->emplace(key, dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, *engine))).first;
    }
    primitive = it->second;
  }
  dnnl::stream stream(*engine);
  memory a_mem(a_desc, *engine, const_cast<at::BFloat16*>(a));
  memory b_mem(b_desc, *engine, const_cast<at::BFloat16*>(b));
  memory c_mem(c_desc, *engine, c);
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}};
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(bias_desc, *engine, const_cast<float*>(bias)));
  primitive.execute(stream, args);
  stream.wait();
}

// x rounded to bfloat16, in parallel (a batch's activations are megabytes).
at::Tensor ToBf16(const at::Tensor& x) {
  at::Tensor out = at::empty(x.sizes(), x.options().dtype(at::kBFloat16));
  const float* in = x.data_ptr<float>();
  auto* o = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  const CpuKernels& kernels = ActiveCpuKernels();
  at::parallel_for(0, x.numel(), 65536, [&](int64_t begin, int64_t end) {
    kernels.float_to_bf16(in + begin, o + begin, end - begin);
  });
  return out;
}

// One layer's forward: y = act(x W^T + b) [batch, out], fp32, or bfloat16 with `y_bf16` (BF16
// only: a hidden layer of a chain). `x` is fp32, or already bfloat16 in BF16 (the previous
// layer's output in a chain); `w` is the weight as the GEMMs take it (bfloat16 in BF16).
at::Tensor LayerForward(const at::Tensor& x, const at::Tensor& w, const float* bias, bool relu, bool bf16,
                        bool y_bf16 = false) {
  const int64_t batch = x.size(0), in = x.size(1), out = w.size(0);
  at::Tensor y = at::empty({batch, out}, x.options().dtype(y_bf16 ? at::kBFloat16 : at::kFloat));
  if (bf16) {
    if (batch > 0) {
      Bf16Gemm(false, true, batch, out, in, x.data_ptr<at::BFloat16>(), w.data_ptr<at::BFloat16>(),
               y_bf16 ? static_cast<void*>(y.data_ptr<at::BFloat16>()) : y.data_ptr<float>(), bias, relu, y_bf16);
    }
    return y;
  }
  float* yp = y.data_ptr<float>();
  if (batch > 0) Sgemm('N', 'T', batch, out, in, x.data_ptr<float>(), in, w.data_ptr<float>(), in, yp, out);
  if (bias || relu) {
    const CpuKernels& kernels = ActiveCpuKernels();
    at::parallel_for(0, batch, 256, [&](int64_t begin, int64_t end) {
      kernels.add_bias_relu(yp + begin * out, bias, end - begin, out, relu);
    });
  }
  return y;
}

struct LayerGrads {
  at::Tensor dx, dw, db;
};

// One layer's backward from its output gradient `dz` (fp32 [batch, out]) with the tensors its
// forward saved: x and w as its GEMMs took them, y its output (fp32, bfloat16, or undefined
// without ReLU). One pass over dz makes the ReLU mask (into a fresh buffer: grads may be
// shared), BF16's rounded copy for its GEMMs and the bias gradient as per-chunk column sums
// added in chunk order (the same for any thread count); then the dx and dw GEMMs.
LayerGrads LayerBackward(at::Tensor dz, const at::Tensor& x, const at::Tensor& w, const at::Tensor& y, bool bf16,
                         bool want_dx, bool want_dw, bool want_db) {
  const int64_t batch = x.size(0), in = x.size(1), out = w.size(0);
  const bool relu = y.defined();
  const CpuKernels& kernels = ActiveCpuKernels();
  LayerGrads g;
  at::Tensor dz_bf16, masked;
  if (bf16 || relu || want_db) {
    constexpr int64_t kChunkRows = 256;
    const int64_t chunks = std::max<int64_t>(1, (batch + kChunkRows - 1) / kChunkRows);
    // relu_mask_bf16 always adds into sums.
    at::Tensor partial = want_db || bf16 ? at::zeros({chunks, out}, dz.options()) : at::Tensor();
    float* pp = partial.defined() ? partial.data_ptr<float>() : nullptr;
    const float* gp = dz.data_ptr<float>();
    const bool y_is_bf16 = relu && y.scalar_type() == at::kBFloat16;
    const float* yp = relu && !y_is_bf16 ? y.data_ptr<float>() : nullptr;
    const uint16_t* yb = y_is_bf16 ? reinterpret_cast<const uint16_t*>(y.data_ptr<at::BFloat16>()) : nullptr;
    uint16_t* mb = nullptr;
    float* mp = nullptr;
    if (bf16) {
      dz_bf16 = at::empty(dz.sizes(), dz.options().dtype(at::kBFloat16));
      mb = reinterpret_cast<uint16_t*>(dz_bf16.data_ptr<at::BFloat16>());
    } else if (relu) {
      masked = at::empty_like(dz);
      mp = masked.data_ptr<float>();
    }
    at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        const int64_t row = c * kChunkRows, rows = std::min(kChunkRows, batch - row);
        if (rows <= 0) continue;
        const int64_t offset = row * out;
        if (yb) {
          kernels.relu_mask_bf16_of_bf16(yb + offset, gp + offset, mb + offset, rows, out, pp + c * out);
        } else if (bf16) {
          kernels.relu_mask_bf16(yp ? yp + offset : nullptr, gp + offset, mb + offset, rows, out, pp + c * out);
        } else {
          kernels.relu_mask(yp ? yp + offset : nullptr, gp + offset, mp ? mp + offset : nullptr, rows, out,
                            want_db ? pp + c * out : nullptr);
        }
      }
    });
    if (want_db) g.db = partial.sum(0);
    if (masked.defined()) dz = masked;
  }
  if (want_dx) {
    g.dx = at::empty({batch, in}, dz.options());
    if (batch == 0) {
      g.dx.zero_();
    } else if (bf16) {
      Bf16Gemm(false, false, batch, in, out, dz_bf16.data_ptr<at::BFloat16>(), w.data_ptr<at::BFloat16>(),
               g.dx.data_ptr<float>());
    } else {
      Sgemm('N', 'N', batch, in, out, dz.data_ptr<float>(), out, w.data_ptr<float>(), in, g.dx.data_ptr<float>(), in);
    }
  }
  if (want_dw) {
    g.dw = at::empty({out, in}, dz.options());
    if (batch == 0) {
      g.dw.zero_();
    } else if (bf16) {
      Bf16Gemm(true, false, out, in, batch, dz_bf16.data_ptr<at::BFloat16>(), x.data_ptr<at::BFloat16>(),
               g.dw.data_ptr<float>());
    } else {
      Sgemm('T', 'N', out, in, batch, dz.data_ptr<float>(), out, x.data_ptr<float>(), in, g.dw.data_ptr<float>(), in);
    }
  }
  return g;
}

struct FastLinearFunction : public torch::autograd::Function<FastLinearFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor x, at::Tensor weight,
                            c10::optional<at::Tensor> maybe_bias, bool relu) {
    RECORD_USER_SCOPE("tzrec::fast_linear");  // named in is_profiling traces
    // Optional because autograd cannot take an undefined tensor as an input.
    at::Tensor bias = maybe_bias.has_value() ? *maybe_bias : at::Tensor();
    const bool bf16 = t_gemm_precision == GemmPrecision::kBFloat16;
    // BF16: the rounded copies are what the backward's GEMMs need too, and half the size.
    at::Tensor x_saved = bf16 ? ToBf16(x) : x;
    at::Tensor w_saved = bf16 ? ToBf16(weight) : weight;
    at::Tensor y = LayerForward(x_saved, w_saved, bias.defined() ? bias.data_ptr<float>() : nullptr, relu, bf16);
    ctx->save_for_backward({x_saved, w_saved, relu ? y : at::Tensor()});
    ctx->saved_data["bf16"] = bf16;
    ctx->saved_data["has_bias"] = bias.defined();
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const bool bias_grad_needed = ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2);
    LayerGrads g = LayerBackward(grads[0].contiguous(), saved[0], saved[1], saved[2], ctx->saved_data["bf16"].toBool(),
                                 ctx->needs_input_grad(0), ctx->needs_input_grad(1), bias_grad_needed);
    return {g.dx, g.dw, g.db, at::Tensor()};
  }
};

// FastLinearChain in BF16: every layer's forward and backward as FastLinearFunction's, with the
// hidden activations kept in bfloat16 (see fast_linear.h). Inputs: x, the weights, the biases
// (all defined), one ReLU flag per layer.
struct FastLinearChainFunction : public torch::autograd::Function<FastLinearChainFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::Tensor x,
                                                at::TensorList weights, at::TensorList biases,
                                                std::vector<int64_t> relu) {
    RECORD_USER_SCOPE("tzrec::fast_linear_chain");  // named in is_profiling traces
    const size_t layers = weights.size();
    torch::autograd::variable_list saved;  // per layer: input, weight, output (or undefined)
    at::Tensor input = ToBf16(x);
    at::Tensor y;
    for (size_t l = 0; l < layers; ++l) {
      at::Tensor w = ToBf16(weights[l]);
      const bool last = l + 1 == layers;
      y = LayerForward(input, w, biases[l].data_ptr<float>(), relu[l] != 0, /*bf16=*/true, /*y_bf16=*/!last);
      saved.insert(saved.end(), {input, w, relu[l] != 0 ? y : at::Tensor()});
      input = y;
    }
    ctx->save_for_backward(saved);
    return {y};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const size_t layers = saved.size() / 3;
    // Gradients in apply's order: x, every weight, every bias, the flags.
    torch::autograd::variable_list out(2 + 2 * layers);
    at::Tensor dz = grads[0].contiguous();
    for (size_t l = layers; l-- > 0;) {
      const bool want_dx = l > 0 || ctx->needs_input_grad(0);
      LayerGrads g = LayerBackward(dz, saved[3 * l], saved[3 * l + 1], saved[3 * l + 2], /*bf16=*/true, want_dx,
                                   ctx->needs_input_grad(1 + l), ctx->needs_input_grad(1 + layers + l));
      out[1 + l] = g.dw;
      out[1 + layers + l] = g.db;
      if (l == 0) out[0] = g.dx;
      dz = g.dx;
    }
    return out;
  }
};

}  // namespace

GemmPrecision CurrentGemmPrecision() { return t_gemm_precision; }

double FastLinearGemmMilliseconds() {
  return static_cast<double>(g_gemm_nanos.load(std::memory_order_relaxed)) / 1e6;
}

ScopedGemmPrecision::ScopedGemmPrecision(GemmPrecision precision) : previous_(t_gemm_precision) {
  t_gemm_precision = precision;
}

ScopedGemmPrecision::~ScopedGemmPrecision() { t_gemm_precision = previous_; }

bool NativeBf16GemmAvailable() {
  static const bool available = [] {
    const unsigned isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
    const unsigned bf16 = static_cast<unsigned>(dnnl_cpu_isa_avx512_core_bf16);
    return (isa & bf16) == bf16;
  }();
  return available;
}

GemmPrecision GemmPrecisionFor(const std::string& mixed_precision, const std::string& field) {
  if (mixed_precision.empty()) return GemmPrecision::kFloat32;
  if (mixed_precision == "BF16") {
    if (NativeBf16GemmAvailable()) return GemmPrecision::kBFloat16;
    static std::once_flag warned;
    std::call_once(warned, [&] {
      LOG_WARNING << field << ": BF16 runs in fp32 here: this CPU has no AVX512-BF16 for "
                  << "oneDNN's BF16 GEMMs (emulated ones would be slower than fp32)";
    });
    return GemmPrecision::kFloat32;
  }
  if (mixed_precision == "FP16") {
    static std::once_flag warned;
    std::call_once(warned, [&] {
      LOG_WARNING << field << ": FP16 runs in fp32 here: oneDNN 2.6 has no FP16 GEMM for CPUs "
                  << "(BF16 is the CPU's half-precision format)";
    });
    return GemmPrecision::kFloat32;
  }
  Fail(field, ": unknown value '", mixed_precision, "' (expected \"BF16\", \"FP16\" or empty)");
}

bool FastLinearEnabled() {
  static const bool enabled = [] {
    const char* flag = std::getenv("TZREC_FAST_LINEAR");
    return !(flag && std::strcmp(flag, "0") == 0);
  }();
  return enabled;
}

// Inference on a batch whose rows share most of their inputs, as a ranking request's do (one
// user's features beside each candidate item's): the shared columns' product with the weights
// is one matrix-vector product for the whole batch, and only the varying columns go through
// the GEMM. For the Criteo DeepFM served with 100 items, 400 of the first layer's 429 inputs
// are the user's, so that layer's work drops ~13x. Returns false (nothing done) unless at
// least half the columns are equal in every row; a column with a NaN counts as varying. The
// sum is split differently from one GEMM's, so outputs may differ from it in the last bits.
static bool SharedColumnsLinear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, bool relu,
                         at::Tensor* y) {
  const int64_t batch = x.size(0), in = x.size(1), out = weight.size(0);
  if (batch < 4 || in < 8) return false;
  const float* xp = x.data_ptr<float>();
  std::vector<uint8_t> shared(static_cast<size_t>(in), 1);
  uint8_t* sp = shared.data();
  int64_t shared_count = in;
  for (int64_t r = 1; r < batch; ++r) {
    const float* row = xp + r * in;
    // Branch-free so that it vectorises; counted on the first row (where a batch of unrelated
    // rows already fails) and every 8th after.
    for (int64_t j = 0; j < in; ++j) sp[j] &= static_cast<uint8_t>(row[j] == xp[j]);
    if (r == 1 || r % 8 == 0 || r == batch - 1) {
      shared_count = 0;
      for (int64_t j = 0; j < in; ++j) shared_count += sp[j];
      if (shared_count * 2 < in) return false;
    }
  }
  std::vector<int64_t> varying;
  for (int64_t j = 0; j < in; ++j) {
    if (!shared[j]) varying.push_back(j);
  }
  const int64_t n_var = static_cast<int64_t>(varying.size());
  const float* wp = weight.data_ptr<float>();
  // Shared part (with the bias): one row of x with the varying columns zeroed, times W^T.
  std::vector<float> first_row(xp, xp + in);
  for (int64_t j : varying) first_row[j] = 0.0f;
  at::Tensor offset = at::empty({out}, x.options());
  float* op = offset.data_ptr<float>();
  Sgemm('N', 'T', 1, out, in, first_row.data(), in, wp, in, op, out);
  if (bias.defined()) {
    const float* bp = bias.data_ptr<float>();
    for (int64_t o = 0; o < out; ++o) op[o] += bp[o];
  }
  *y = at::empty({batch, out}, x.options());
  float* yp = y->data_ptr<float>();
  if (n_var > 0) {
    std::vector<float> x_var(static_cast<size_t>(batch * n_var)), w_var(static_cast<size_t>(out * n_var));
    for (int64_t r = 0; r < batch; ++r) {
      for (int64_t k = 0; k < n_var; ++k) x_var[r * n_var + k] = xp[r * in + varying[k]];
    }
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t k = 0; k < n_var; ++k) w_var[o * n_var + k] = wp[o * in + varying[k]];
    }
    Sgemm('N', 'T', batch, out, n_var, x_var.data(), n_var, w_var.data(), n_var, yp, out);
  } else {
    std::fill(yp, yp + batch * out, 0.0f);
  }
  ActiveCpuKernels().add_bias_relu(yp, op, batch, out, relu);
  return true;
}

at::Tensor FastLinearChain(const at::Tensor& x, const std::vector<at::Tensor>& weights,
                           const std::vector<at::Tensor>& biases, const std::vector<bool>& relu) {
  TZREC_CHECK(weights.size() == biases.size() && weights.size() == relu.size() && !weights.empty());
  bool chained = FastLinearEnabled() && t_gemm_precision == GemmPrecision::kBFloat16 && weights.size() > 1 &&
                 x.dim() == 2 && x.scalar_type() == at::kFloat && x.device().is_cpu() && x.is_contiguous();
  for (size_t l = 0; chained && l < weights.size(); ++l) {
    chained = weights[l].scalar_type() == at::kFloat && weights[l].is_contiguous() && biases[l].defined() &&
              biases[l].scalar_type() == at::kFloat && biases[l].is_contiguous();
  }
  if (!chained) {
    at::Tensor net = x;
    for (size_t l = 0; l < weights.size(); ++l) net = FastLinear(net.contiguous(), weights[l], biases[l], relu[l]);
    return net;
  }
  std::vector<int64_t> flags(relu.begin(), relu.end());
  return FastLinearChainFunction::apply(x, at::TensorList(weights), at::TensorList(biases), flags)[0];
}

at::Tensor FastLinear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                      bool relu) {
  const bool eligible =
      FastLinearEnabled() && x.dim() == 2 && x.scalar_type() == at::kFloat &&
      weight.scalar_type() == at::kFloat && x.device().is_cpu() && x.is_contiguous() &&
      weight.is_contiguous() && (!bias.defined() || bias.is_contiguous());
  if (!eligible) {
    at::Tensor y = at::linear(x, weight, bias);
    return relu ? at::relu(y) : y;
  }
  if (!at::GradMode::is_enabled() && t_gemm_precision == GemmPrecision::kFloat32) {
    at::Tensor y;
    if (SharedColumnsLinear(x, weight, bias, relu, &y)) return y;
  }
  return FastLinearFunction::apply(
      x, weight, bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt, relu);
}

}  // namespace tzrec
