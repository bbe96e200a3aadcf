// `train_eval` and `eval`: the Trainer (training step, evaluation, save), and the commands'
// loops and result files (inventory §7).
//
// Step semantics follow TorchEasyRec: steps are counted from 0; a checkpoint named
// model.ckpt-S holds the model after training step S; saves happen when
// S > 0 && S % save_checkpoints_steps == 0 (or every save_checkpoints_epochs epochs) and once
// at the end; evaluation runs after every save when an eval path is set and appends
// {"global_step": S, <metric>: value, ...} to model_dir/train_eval_result_v2.txt.
//
// Distributed: the Trainer gets its communication explicitly (DistContext). Ranks step together
// (RanksWithBatch, written once): a training epoch ends for all when one rank's data ends;
// an evaluation with model-parallel tables runs until every rank's data has ended, ranks
// without a batch joining the lookups' collectives empty-handed.
//
// Streams (KafkaDataset) never end: such a run trains to num_steps or until SIGTERM, which
// saves a last checkpoint (no evaluation) and returns; with save_checkpoints_timestamp_*
// checkpoints also follow the data's event time (train/event_time_saves.h).
// Not thread-safe: one Trainer per process, used by its main thread.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tzrec/batch/batch.h"
#include "tzrec/pipeline/pipeline.h"
#include "tzrec/protos/pipeline.pb.h"

namespace tzrec {

struct TrainEvalOptions {
  std::string pipeline_config_path;
  std::string model_dir;
  std::string train_input_path;
  std::string eval_input_path;
  std::string fine_tune_checkpoint;
  std::string edit_config_json;
  bool continue_train = false;
  bool ignore_restore_optimizer = false;
};

void TrainAndEvaluate(const TrainEvalOptions& options);

struct EvalOptions {
  std::string pipeline_config_path;
  std::string checkpoint_path;  // default: latest in model_dir
  std::string eval_input_path;
  std::string eval_result_filename = "eval_result.txt";
};

// Returns the metrics it also appends to model_dir/<eval_result_filename>.
std::map<std::string, double> Evaluate(const EvalOptions& options);

// Loads the config, applies CLI overrides and --edit_config_json, and checks every set field
// is supported.
protos::EasyRecConfig LoadTrainConfig(const TrainEvalOptions& options);

class Trainer {
 public:
  // `pipeline` is built (BuildModel) in the matching mode; both must outlive the Trainer.
  Trainer(Pipeline* pipeline, DistContext* dist);

  struct StepResult {
    NamedLosses losses;  // this rank's batch (detached)
    at::Tensor total;
  };
  // One training step: forward, losses, backward (tables update inside it), gradients merged
  // over ranks, clipped (grad_clipping), dense optimizer step, dense EMA update, train metrics.
  // With gradient_accumulation_steps N > 1 a step's loss is divided by N, dense gradients
  // and table-row gradients accumulate, and every N-th step applies them all as one update.
  StepResult TrainStep(const Batch& batch, int64_t step, int64_t epoch);
  // Applies gradients accumulated by steps since the last update (nothing when none are
  // pending): called before a checkpoint, so a checkpoint never leaves half a cycle behind
  // and a run continued from it updates exactly as the uninterrupted one. `step` names errors.
  void ApplyAccumulatedGradients(int64_t step);
  struct LossValues {
    std::vector<std::pair<std::string, double>> losses;
    double total = 0.0;
  };
  // Losses of the global batch: the mean of the ranks' local means (a collective), so the curve
  // reads the same whatever the number of ranks.
  LossValues GlobalLosses(const StepResult& local) const;

  // Evaluates on `dataset` (every rank its share; metrics combined over ranks); logs and, when
  // `result_file` is set, rank 0 appends {"global_step": step, ...}.
  std::map<std::string, double> Evaluate(const Dataset& dataset, int64_t global_step, int64_t epoch,
                                         const std::string& result_file);

  // How many ranks have a batch this step (a collective with more than one rank).
  int RanksWithBatch(bool has_batch) const;
  // The same for a training step, in the same collective: how many ranks have a batch and
  // how many were asked to stop (SIGTERM).
  struct StepVote {
    int with_batch;
    int stopping;
  };
  StepVote Vote(bool has_batch, bool stop) const;
  // Every rank's `value`, by rank (a collective with more than one rank).
  std::vector<double> GatherFromRanks(double value) const;

  // L2 norms of the dense parameters' gradients of the last step, by parameter name (tables
  // have none: they update inside the backward), for tensorboard_summaries gradient_norm and
  // global_gradient_norm (the norm of these norms).
  std::vector<std::pair<std::string, double>> GradientNorms() const;

  // Mean wall ms per step of TrainStep's phases since the last call ("forward 23.10, loss
  // 0.20, backward 37.30, ...; of these, FastLinear GEMMs 48.00", plus ", collectives 9.10"
  // in a distributed job; backward includes the tables' fused updates); resets.
  std::string TakePhaseReport();

 private:
  double CollectiveMilliseconds() const;
  // Stop a step that went non-finite, naming the step and its losses / the parameter.
  void CheckFiniteLoss(const at::Tensor& total, const NamedLosses& losses, int64_t step) const;
  void CheckFiniteGradients(int64_t step) const;

  // train_config.grad_clipping of the dense gradients (after merging over ranks).
  void ClipGradients();

  Pipeline* pipeline_;
  DistContext* dist_;
  std::vector<at::Tensor> dense_params_;
  int64_t accumulation_steps_ = 1;
  int64_t accumulated_ = 0;  // steps whose gradients wait for the next update
  enum class Clipping { kNone, kNorm, kValue } clipping_ = Clipping::kNone;
  double max_gradient_ = 1.0;
  double norm_type_ = 2.0;
  bool eval_uses_ema_ = false;
  // TakePhaseReport's sums: ms per phase (in step order) over phase_steps_ steps.
  std::vector<std::pair<std::string, double>> phase_ms_;
  int64_t phase_steps_ = 0;
  double phase_gemm_ms_ = 0.0;  // FastLinear's GEMM time over the same steps
  double phase_collective_ms_ = 0.0;  // time in collectives over the same steps (distributed)
};

}  // namespace tzrec
