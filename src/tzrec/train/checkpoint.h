// Checkpoints: `model.ckpt-<step>/` directories under model_dir.
//
// Layout (each file a pickled {name: tensor} dict that Python's torch.load can read, except the
// LibTorch optimizer archive):
//   model.pt            dense parameters/buffers by module path, tables as
//                       "embedding_group.<table>.weight"
//   optimizer.pt        sparse optimizer state, "embedding_group.<table>.weight.<state>"
//   dense_optimizer.pt  LibTorch optimizer archive of the dense optimizer
//   train_state.pt      torch CPU generator state and the sparse optimizer step count
//   meta.json           {"format": ..., "global_step": step}
// A checkpoint is written into a hidden temp directory and renamed into place, so a crash
// never leaves a half checkpoint that looks complete.
#pragma once

#include <torch/optim/optimizer.h>

#include <optional>
#include <string>
#include <vector>

#include "tzrec/embedding/embedding_storage.h"
#include "tzrec/models/model.h"

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
};

// Saves and prunes to the newest `keep_checkpoint_max` (0 keeps all). Returns the path.
std::string SaveCheckpoint(const std::string& model_dir, int64_t step, const TrainingState& state,
                           int keep_checkpoint_max);

struct RestoreOptions {
  bool restore_optimizer = true;
  bool restore_rng = true;
};
// Restores weights (missing tensors are skipped with a warning; a shape mismatch is an
// error) and, when asked and present, optimizer and RNG state.
void RestoreCheckpoint(const std::string& checkpoint_path, const TrainingState& state,
                       const RestoreOptions& options);

}  // namespace tzrec
