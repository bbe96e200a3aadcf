// jrc_loss (Joint Relative Calibration, arXiv 2208.06164): alpha * CE + (1 - alpha) * GE on
// 2-class logits. GE makes each row compete within its session (rows with the same first id of
// the `session_name` feature): a positive row's positive-class logit against the positive-class
// logits of the session's negatives, a negative row's negative-class logit against those of the
// session's positives (softmax cross entropy with the row itself as target). TorchEasyRec builds
// this as masked [rows, B] matrices; here the same sums run per session (O(B) instead of
// O(B^2) memory), exactly equal up to float rounding. A session without competitors gives GE 0
// for its rows (TorchEasyRec's mean of an empty selection would be NaN).
#include <ATen/TensorOperators.h>
#include <ATen/ops/_unique2.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/full.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/log.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/select.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <limits>
#include <tuple>

#include "tzrec/common/error.h"
#include "tzrec/loss/loss.h"
#include "tzrec/protos/loss.pb.h"

namespace tzrec {
namespace {

// -log softmax of own logit `l` against the competitors' logits of the same session:
// -(l_i) + log(exp(l_i) + sum_{j in C(s_i)} exp(l_j)), computed with per-row shifts.
at::Tensor SessionSoftmaxLoss(const at::Tensor& l, const at::Tensor& competitor_mask,
                              const at::Tensor& session, int64_t sessions) {
  const at::Tensor idx = at::where(competitor_mask).front();
  const at::Tensor comp_session = at::index_select(session, 0, idx);
  const at::Tensor comp_logit = at::index_select(l, 0, idx);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  // Largest competitor logit per session: only a shift for stability (detached).
  // (A plain loop: ATen's scatter_reduce is "beta" in 1.13 and warns.)
  at::Tensor max_per_session = at::full({sessions}, neg_inf, l.options().dtype(at::kDouble));
  {
    const at::Tensor ids = comp_session.contiguous();
    const at::Tensor values = comp_logit.detach().to(at::kDouble).contiguous();
    const int64_t* id = ids.data_ptr<int64_t>();
    const double* v = values.data_ptr<double>();
    double* m = max_per_session.data_ptr<double>();
    for (int64_t i = 0; i < ids.numel(); ++i) m[id[i]] = std::max(m[id[i]], v[i]);
  }
  max_per_session = max_per_session.to(l.scalar_type());
  at::Tensor comp_max = at::index_select(max_per_session, 0, comp_session);
  at::Tensor sum_per_session = at::zeros({sessions}, l.options())
                                   .index_add(0, comp_session, at::exp(comp_logit - comp_max));
  at::Tensor row_max = at::index_select(max_per_session, 0, session);
  at::Tensor row_sum = at::index_select(sum_per_session, 0, session);
  at::Tensor shift = at::maximum(l.detach(), row_max);
  // exp(-inf - shift) = 0 where a session has no competitors.
  at::Tensor others = row_sum * at::exp(row_max - shift);
  return -(l - shift) + at::log(at::exp(l - shift) + others);
}

class JrcLoss : public Loss {
 public:
  explicit JrcLoss(const LossContext& ctx) : where_(ctx.where) {
    const auto& c = static_cast<const protos::JRCLoss&>(*ctx.config);
    session_name_ = c.session_name();
    alpha_ = c.alpha();
    if (ctx.num_class != 2) Fail(ctx.where, ": num_class must be 2 for jrc_loss (got ", ctx.num_class, ")");
    if (session_name_.empty()) Fail(ctx.where, ".session_name is required");
    if (!ctx.sparse_features.count(session_name_)) {
      Fail(ctx.where, ".session_name: '", session_name_, "' is not a (non-sequence) sparse feature");
    }
  }
  LabelDomain label_domain() const override { return {0.0, 1.0, true}; }
  void AddPredictions(const at::Tensor& output, const std::string& suffix,
                      Predictions* out) const override {
    AddSoftmaxPredictions(output, suffix, out);
  }
  void ScriptPredictions(ScriptWriter& w, const std::string& output, int num_class,
                         const std::string& suffix) const override {
    ScriptSoftmaxPredictions(w, output, num_class, suffix);
  }
  at::Tensor Compute(const Predictions& predictions, const std::string& suffix,
                     const at::Tensor& label, const at::Tensor& weight,
                     const Batch& batch) const override {
    const at::Tensor& logits = PredictionOf(predictions, "logits", suffix);
    at::Tensor target = ClassIndexLabels(label, 2, where_);
    at::Tensor ce = at::cross_entropy_loss(logits, target, {}, at::Reduction::None);
    at::Tensor session_ids = FirstIdPerRow(batch.Sparse(session_name_));
    at::Tensor session = std::get<1>(at::_unique2(session_ids, /*sorted=*/false, /*return_inverse=*/true));
    const int64_t sessions = session.numel() > 0 ? session.max().item<int64_t>() + 1 : 0;
    at::Tensor positive = target == 1;
    at::Tensor negative = target == 0;
    at::Tensor ge_pos = SessionSoftmaxLoss(at::select(logits, 1, 1), negative, session, sessions);
    at::Tensor ge_neg = SessionSoftmaxLoss(at::select(logits, 1, 0), positive, session, sessions);
    at::Tensor ge = at::where(positive, ge_pos, ge_neg);
    return ReduceLoss(alpha_ * ce + (1 - alpha_) * ge, weight);
  }

 private:
  std::string where_;
  std::string session_name_;
  double alpha_ = 0.5;
};

std::unique_ptr<Loss> Make(const LossContext& ctx) { return std::make_unique<JrcLoss>(ctx); }

}  // namespace

TZREC_REGISTER(LossRegistry(), "jrc_loss", Make, "session_name", "alpha");

}  // namespace tzrec
