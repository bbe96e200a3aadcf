// Loss: one configured loss of a task (LossConfig's `loss` oneof member), and the registry of
// TorchEasyRec's losses by config name.
//
// A loss type also decides what the task predicts (TorchEasyRec's _output_to_prediction_impl):
//   binary_cross_entropy, binary_focal_loss   logits [B], probs = sigmoid       (num_class 1)
//   softmax_cross_entropy                     logits, probs = softmax [B, C], probs1 if C == 2
//   jrc_loss                                  as softmax, num_class 2
//   l2_loss                                   y [B]
// Names get the task's suffix ("probs_ctr"). Compute() returns the batch loss: the mean over
// rows, or with a per-row weight (already normalised by the task head) mean(loss_i * w_i),
// which is TorchEasyRec's reduction="none" path.
//
// Thread safety: immutable after construction; Compute may run on any thread.
#pragma once

#include <ATen/core/Tensor.h>
#include <google/protobuf/message.h>

#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "tzrec/batch/batch.h"
#include "tzrec/common/registry.h"
#include "tzrec/script/script_writer.h"

namespace tzrec {

using Predictions = std::map<std::string, at::Tensor>;

struct LossContext {
  const google::protobuf::Message* config = nullptr;  // the oneof member, e.g. BinaryFocalLoss
  int num_class = 1;
  std::string where;  // config path for errors
  std::set<std::string> sparse_features;  // non-sequence sparse features (session ids)
};

// The labels a loss is defined for; the datasets check them row by row.
struct LabelDomain {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool integral = false;
};

class Loss {
 public:
  virtual ~Loss() = default;
  // Any finite value unless the loss says otherwise.
  virtual LabelDomain label_domain() const { return {}; }
  // Adds this loss type's predictions of the task output [B, num_class] to `out`.
  virtual void AddPredictions(const at::Tensor& output, const std::string& suffix,
                              Predictions* out) const = 0;
  // The same predictions as TorchScript outputs of local `output` ([B, num_class]).
  virtual void ScriptPredictions(ScriptWriter& w, const std::string& output, int num_class,
                                 const std::string& suffix) const = 0;
  // `label` float [B]; `weight` float [B] or undefined.
  virtual at::Tensor Compute(const Predictions& predictions, const std::string& suffix,
                             const at::Tensor& label, const at::Tensor& weight,
                             const Batch& batch) const = 0;
};

using LossFactory = std::function<std::unique_ptr<Loss>(const LossContext&)>;
// Slot tzrec.protos.LossConfig / loss.
Registry<LossFactory>& LossRegistry();

// Shared by the losses: mean(per_row), or mean(per_row * weight) with a weight.
at::Tensor ReduceLoss(const at::Tensor& per_row, const at::Tensor& weight);
// Predictions of a [B, 1] output: logits and sigmoid probs; of [B, C]: logits, softmax probs
// and probs1 when C == 2.
void AddBinaryPredictions(const at::Tensor& output, const std::string& suffix, Predictions* out);
void AddSoftmaxPredictions(const at::Tensor& output, const std::string& suffix, Predictions* out);
// The same as TorchScript outputs.
void ScriptBinaryPredictions(ScriptWriter& w, const std::string& output, const std::string& suffix);
void ScriptSoftmaxPredictions(ScriptWriter& w, const std::string& output, int num_class,
                              const std::string& suffix);
// `label` (float class indices) as int64, failing clearly (naming `where`) on values that are not
// classes of num_class.
at::Tensor ClassIndexLabels(const at::Tensor& label, int64_t num_class, const std::string& where);
// The prediction `name + suffix`, failing clearly when the model did not produce it.
const at::Tensor& PredictionOf(const Predictions& predictions, const std::string& name,
                               const std::string& suffix);

}  // namespace tzrec
