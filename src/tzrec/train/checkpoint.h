// Checkpoints: `model.ckpt-<step>/` directories under model_dir.
//
// Layout (each file a pickled {name: tensor} dict that Python's torch.load can read, except the
// LibTorch optimizer archive):
//   model.pt            dense parameters/buffers by module path
//   embedding/<table>.pt  one file per embedding table: {"weight": [rows, dim], plus the sparse
//                       optimizer state, e.g. "sum"}; logical (unsharded) tables, written one
//                       at a time so saving needs at most one table's worth of extra memory
//   dense_optimizer.pt  LibTorch optimizer archive of the dense optimizer
//   part_optimizer_<i>.pt  the same for dense_optimizer.part_optimizers[i] (those in use)
//   dense_ema.pt        dense_optimizer.ema: the averages by parameter path and "__n_averaged__"
//   train_state.pt      torch CPU generator state and the sparse optimizer step count
//   meta.json           {"format": ..., "global_step": step, "files": {name: {size, crc32}}}
// A checkpoint is written into a hidden temp directory (every file and the directory fsync'ed)
// and renamed into place, so neither a crash nor a power loss leaves a half checkpoint that
// looks complete; one with a NaN or inf weight is never written.
#pragma once

#include "tzrec/data/data_position.h"

#include <torch/optim/optimizer.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tzrec/embedding/embedding_storage.h"
#include "tzrec/models/model.h"
#include "tzrec/optim/dense_ema.h"
#include "tzrec/optim/grad_scaler.h"

namespace tzrec {

struct CheckpointRef {
  std::string path;
  int64_t step = 0;
};

// Checkpoints of a model_dir sorted by step.
std::vector<CheckpointRef> ListCheckpoints(const std::string& model_dir);
// `path` may be a model_dir (latest checkpoint in it) or a checkpoint directory itself.
std::optional<CheckpointRef> LatestCheckpoint(const std::string& path);

struct TrainingState {
  Model* model = nullptr;
  SparseOptimizer* sparse_optimizer = nullptr;
  torch::optim::Optimizer* dense_optimizer = nullptr;
  // dense_optimizer.ema (training with ema only).
  DenseEma* dense_ema = nullptr;
  // train_config.grad_scaler (training with it only): its scale and streak go in train_state.pt.
  GradScaler* grad_scaler = nullptr;
  // dense_optimizer.part_optimizers in use: (index in the config, optimizer).
  std::vector<std::pair<int, torch::optim::Optimizer*>> part_optimizers;
  // Saved as dataloader_state.json when set (train only).
  const DataloaderState* dataloader_state = nullptr;
  // Saved as plan.json when set: where each table lived (dist/sharding_plan.h). Tables are
  // saved logical (unsharded) regardless, so any world size can continue from them.
  const std::string* sharding_plan_json = nullptr;
};

// The step with the best `metric` among `steps` in an evaluation results file (JSON lines
// {"global_step": S, <metric>: v, ...}, e.g. train_eval_result_v2.txt), or nullopt when none
// of them was evaluated. Fails naming the file and line on a malformed line or one without
// `metric`.
std::optional<int64_t> BestEvaluatedStep(const std::string& results_file, const std::string& metric,
                                         bool larger_is_better, const std::vector<int64_t>& steps);

// Saves and prunes to the newest `keep_checkpoint_max` (0 keeps all) plus `keep_step` (the best
// one, when export_config.exporter_type is "best"; -1 for none). Collective when the model
// has model-parallel tables (they are gathered table by table): every rank calls it, and only
// the one with `write` (rank 0) writes. Returns the path.
std::string SaveCheckpoint(const std::string& model_dir, int64_t step, const TrainingState& state,
                           int keep_checkpoint_max, bool write = true, int64_t keep_step = -1);

struct RestoreOptions {
  bool restore_optimizer = true;
  bool restore_rng = true;
  // --continue_train: every state the model has must be in the checkpoint (a missing table
  // file is an error, not a silent re-initialisation). Fine-tuning only warns.
  bool require_all = false;
  // Evaluation / export with use_dense_ema: the dense parameters take their averages from
  // dense_ema.pt (a warning and the plain weights when the checkpoint has none).
  bool use_dense_ema = false;
  // train_config.fine_tune_ckpt_param_map: model state name -> the checkpoint's name for it.
  std::map<std::string, std::string> param_map;
};

// Reads a fine_tune_ckpt_param_map file: one "<model name> <checkpoint name>" pair per line
// (blank lines skipped); a malformed line is an error naming the file and line.
std::map<std::string, std::string> ReadCheckpointParamMap(const std::string& path);
// Every tensor of a checkpoint by logical name: dense ones by module path, tables as
// "embedding_group.<table>.weight" and their optimizer state as "...weight.<state>".
std::map<std::string, at::Tensor> LoadCheckpointTensors(const std::string& checkpoint_path);

// Restores weights (missing tensors are skipped with a warning unless require_all; a shape or
// dtype mismatch is an error) and, when asked and present, optimizer and RNG state. Files
// listed in meta.json are verified (size, CRC-32) before they are parsed, every tensor record
// is bounds-checked, and non-finite weights are an error.
void RestoreCheckpoint(const std::string& checkpoint_path, const TrainingState& state,
                       const RestoreOptions& options);

}  // namespace tzrec
