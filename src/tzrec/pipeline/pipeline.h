// The pipeline builder: everything a config turns into — features, the feature generator,
// datasets, the model with its embedding tables (planned and materialised), optimizers and
// learning-rate schedules — for training, evaluation, and later predict and serving, built one
// way for all of them.
//
// Order matters and is fixed here: features first (so bad data settings fail before tables are
// allocated), then the model (dense parameters initialise from the global torch generator), the
// sharding plan over the model's own tables, then the tables (initialised from the same
// generator, the same on every rank). Not thread-safe; build on the main thread.
#pragma once

#include <torch/optim/optimizer.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tzrec/dist/process_group.h"
#include "tzrec/dist/sharding_plan.h"
#include "tzrec/embedding/sparse_optimizer.h"
#include "tzrec/optim/dense_ema.h"
#include "tzrec/optim/grad_scaler.h"
#include "tzrec/features/feature.h"
#include "tzrec/fg/feature_generator.h"
#include "tzrec/input/dataset.h"
#include "tzrec/models/model.h"
#include "tzrec/optim/learning_rate.h"
#include "tzrec/protos/pipeline.pb.h"

namespace tzrec {

// The distributed job this process belongs to, and its communication (all null for one
// process). Passed explicitly to whatever communicates.
struct DistContext {
  DistEnv env;
  std::unique_ptr<ProcessGroup> pg;
  std::unique_ptr<ProcessGroupShardComm> shard_comm;
  std::unique_ptr<ProcessGroupCollectives> collectives;

  // Reads the environment and joins the process group when there is more than one rank.
  static std::unique_ptr<DistContext> FromEnvironment();
  bool distributed() const { return pg != nullptr; }
  int rank() const { return env.rank; }
  int world_size() const { return env.world_size; }
  // Null for one process (Collectives users treat null as "only me").
  Collectives* comm() const { return collectives.get(); }
};

enum class PipelineMode { kTrain, kEval, kPredict };

struct Pipeline {
  protos::EasyRecConfig config;
  PipelineMode mode = PipelineMode::kTrain;
  std::vector<std::unique_ptr<Feature>> features;
  // Raw columns -> features when fg_mode is not FG_NONE.
  std::shared_ptr<const fg::FeatureGenerator> generator;
  std::shared_ptr<Model> model;
  // Training only.
  std::unique_ptr<SparseOptimizer> sparse_optimizer;
  std::unique_ptr<torch::optim::Optimizer> dense_optimizer;
  // dense_optimizer.part_optimizers that matched a parameter (the dense optimizer has the
  // rest): `index` in part_optimizers, its optimizer, schedule and base rate.
  struct PartOptimizer {
    int index = 0;
    std::unique_ptr<torch::optim::Optimizer> optimizer;
    std::unique_ptr<LearningRateSchedule> lr;
    double base_lr = 0.0;
  };
  std::vector<PartOptimizer> part_optimizers;
  // dense_optimizer.ema, when configured.
  std::unique_ptr<DenseEma> dense_ema;
  // train_config.grad_scaler, when configured.
  std::unique_ptr<GradScaler> grad_scaler;
  std::unique_ptr<LearningRateSchedule> sparse_lr;
  std::unique_ptr<LearningRateSchedule> dense_lr;
  double sparse_base_lr = 0.0;
  double dense_base_lr = 0.0;
  // Inference: tables BuildModel stores INT8 row-wise (an export's QUANT_EMB tables).
  std::set<std::string> int8_tables;
  // Tables hash-stored whatever TZREC_EMBEDDING_STORAGE says (an export's hash-stored ones).
  std::set<std::string> hash_tables;
  // Inference: build only this tower of a retrieval model (ModelContext::tower).
  std::string tower;
  // Where each table lives (training; logged and saved with checkpoints).
  std::vector<TablePlan> plan;
  std::string plan_json;

  std::vector<const Feature*> FeaturePointers() const;
  // A dataset of this pipeline's features over `input_path` (rank split from `dist`).
  std::unique_ptr<Dataset> MakeDataset(const std::string& input_path, DatasetMode mode,
                                       uint64_t seed, const DistContext* dist,
                                       std::vector<std::string> reserved_columns = {}) const;
  // Makes `dataset` reject labels its losses are not defined for (MakeDataset does this when
  // the model exists already; datasets made before BuildModel call it after).
  void RequireLossLabelDomains(Dataset& dataset) const;
};

// Features and the generator of `config` (cheap, no LibTorch state).
std::unique_ptr<Pipeline> BuildFeatures(const protos::EasyRecConfig& config, PipelineMode mode);
// What BuildModel builds the model from: the features, labels and sample weights of the
// pipeline's config (labels only outside kPredict), and its tower.
ModelContext ModelContextOf(const Pipeline& pipeline);
// Model, plan, tables and (training) optimizers. Whole tables may use at most 80% of this
// machine's memory split over its local ranks before the planner shards them.
void BuildModel(Pipeline* pipeline, DistContext* dist);

}  // namespace tzrec
