// `train_eval` and `eval`: the training loop, evaluation and result files (inventory §7).
//
// Step semantics follow TorchEasyRec: steps are counted from 0; a checkpoint named
// model.ckpt-S holds the model after training step S; saves happen when
// S > 0 && S % save_checkpoints_steps == 0 (or every save_checkpoints_epochs epochs) and once
// at the end; evaluation runs after every save when an eval path is set and appends
// {"global_step": S, <metric>: value, ...} to model_dir/train_eval_result_v2.txt.
#pragma once

#include <map>
#include <string>

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

}  // namespace tzrec
