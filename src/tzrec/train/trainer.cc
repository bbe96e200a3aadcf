#include "tzrec/train/trainer.h"

#include <c10/core/GradMode.h>
#include <torch/optim/optimizer.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "tzrec/common/error.h"
#include <google/protobuf/text_format.h>
#include <unistd.h>

#include "tzrec/common/fs.h"
#include "tzrec/dist/data_parallel.h"
#include "tzrec/dist/process_group.h"
#include "tzrec/dist/sharding_plan.h"
#include "tzrec/embedding/fused_lookup.h"
#include "tzrec/common/logging.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/config/supported_fields.h"
#include "tzrec/data/dataset.h"
#include "tzrec/models/model.h"
#include "tzrec/optim/dense_optimizer.h"
#include "tzrec/train/batch.h"
#include "tzrec/train/checkpoint.h"
#include "tzrec/train/runtime.h"
#include "tzrec/version.h"

namespace tzrec {
namespace {

constexpr char kTrainEvalResultFile[] = "train_eval_result_v2.txt";

// Accumulates wall time per phase of the training step.
class StepTimer {
 public:
  void Start() { last_ = std::chrono::steady_clock::now(); }
  void Lap(const std::string& phase) {
    auto now = std::chrono::steady_clock::now();
    totals_[phase] += std::chrono::duration<double, std::milli>(now - last_).count();
    if (phase == "data") ++steps_;
    last_ = now;
  }
  // Mean ms per step of each phase since the last report; resets.
  std::string Report() {
    std::string text;
    for (const auto& kv : totals_) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%s%s %.2f", text.empty() ? "" : ", ", kv.first.c_str(),
                    steps_ ? kv.second / steps_ : 0.0);
      text += buf;
    }
    totals_.clear();
    steps_ = 0;
    return text;
  }

 private:
  std::chrono::steady_clock::time_point last_;
  std::map<std::string, double> totals_;
  int64_t steps_ = 0;
};

// Everything built from a config: features, model and optimizers.
struct Pipeline {
  std::vector<std::unique_ptr<Feature>> features;
  // Raw columns -> features when fg_mode is not FG_NONE.
  std::shared_ptr<const fg::FeatureGenerator> generator;
  std::shared_ptr<Model> model;
  std::unique_ptr<SparseOptimizer> sparse_optimizer;
  std::unique_ptr<torch::optim::Optimizer> dense_optimizer;

  std::vector<const Feature*> FeaturePointers() const {
    std::vector<const Feature*> out;
    for (const auto& f : features) out.push_back(f.get());
    return out;
  }
  TrainingState State() {
    return {model.get(), sparse_optimizer.get(), dense_optimizer.get()};
  }
};

// Features of the config and, for fg_mode other than FG_NONE, the generator that makes them.
void BuildFeatures(const protos::EasyRecConfig& config, Pipeline* p) {
  p->features = CreateFeatures(config.feature_configs(), config.data_config());
  const auto& data = config.data_config();
  if (data.fg_mode() != protos::FG_NONE) {
    p->generator = std::make_shared<fg::FeatureGenerator>(
        fg::DescribeFeatures(config.feature_configs(), data.fg_mode()), data.fg_mode(),
        data.fg_encoded_multival_sep(), static_cast<int>(data.fg_threads()));
  }
}

// Builds model and optimizers for already created features.
void BuildModel(const protos::EasyRecConfig& config, bool with_optimizers, Pipeline* p,
                const std::map<std::string, TableShard>& shards = {}, ShardComm* comm = nullptr) {
  const auto& data = config.data_config();
  p->model = CreateModel(config.model_config(), p->FeaturePointers(),
                         {data.label_fields().begin(), data.label_fields().end()},
                         {data.sample_weight_fields().begin(), data.sample_weight_fields().end()});
  p->sparse_optimizer = SparseOptimizer::Create(config.train_config().sparse_optimizer());
  p->model->embedding_group().Materialize(p->sparse_optimizer.get(), shards, comm);
  LOG_INFO << "embedding tables: " << (p->model->embedding_group().table_bytes() >> 20)
           << " MiB with optimizer state; process RSS " << (ResidentSetBytes() >> 20) << " MiB";
  if (with_optimizers) {
    p->dense_optimizer =
        CreateDenseOptimizer(config.train_config().dense_optimizer(), p->model->parameters());
  }
}

std::string FormatMetrics(const std::map<std::string, double>& metrics) {
  std::string text;
  for (const auto& kv : metrics) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%s%s:%0.6f", text.empty() ? "" : " ", kv.first.c_str(),
                  kv.second);
    text += buf;
  }
  return text;
}

// With `pg`, every rank evaluates its share of the eval rows and the metric states are summed
// over ranks, so the result equals one process evaluating all rows; rank 0 writes it.
std::map<std::string, double> RunEvaluation(Model& model, const Dataset& dataset,
                                            const protos::EvalConfig& eval_config,
                                            int64_t global_step, int64_t epoch,
                                            const std::string& result_file,
                                            ProcessGroup* pg = nullptr) {
  model.eval();
  model.ResetMetrics();
  c10::NoGradGuard no_grad;
  auto stream = dataset.Open(0);
  ParsedBatch parsed;
  int64_t steps = 0;
  const int64_t max_steps = eval_config.num_steps();
  const int64_t log_every = std::max<int64_t>(1, eval_config.log_step_count_steps());
  std::string suffix = (epoch >= 0 ? StrCat(" Epoch-", epoch) : std::string()) +
                       StrCat(" model-", global_step);
  // Model-parallel tables make every lookup a collective: ranks step together, and a rank
  // whose data ended joins the lookups of the others with an empty batch.
  const bool lockstep = pg && model.embedding_group().has_sharded_tables();
  while (true) {
    bool has_batch = (max_steps == 0 || steps < max_steps) && stream->Next(&parsed);
    if (lockstep) {
      std::vector<at::Tensor> active = {at::full({1}, has_batch ? 1.0f : 0.0f)};
      pg->AllReduceSum(active);
      if (active[0].item<float>() == 0) break;
      if (!has_batch) {
        model.embedding_group().ForwardEmpty();
        continue;
      }
    } else if (!has_batch) {
      break;
    }
    Batch batch = ToBatch(std::move(parsed));
    parsed = ParsedBatch();
    Predictions predictions = model.Predict(batch);
    model.ComputeLoss(predictions, batch);
    model.UpdateMetrics(predictions, batch);
    if (steps % log_every == 0) LOG_INFO << "Evaluating" << suffix << ": " << steps << "it";
    ++steps;
  }
  if (pg) {
    std::vector<double> state = model.MetricState();
    std::vector<at::Tensor> summed = {
        at::from_blob(state.data(), {static_cast<int64_t>(state.size())}, at::kDouble).clone()};
    pg->AllReduceSum(summed);
    std::copy(summed[0].data_ptr<double>(), summed[0].data_ptr<double>() + state.size(), state.begin());
    model.SetMetricState(state);
  }
  auto metrics = model.ComputeMetrics();
  LOG_INFO << "Eval Result" << suffix << ": " << FormatMetrics(metrics);
  if (!result_file.empty() && (!pg || pg->rank() == 0)) {
    // global_step first, then metrics by name, as TorchEasyRec writes them.
    std::string line = StrCat("{\"global_step\": ", global_step);
    for (const auto& kv : metrics) {
      line += ", " + nlohmann::json(kv.first).dump() + ": " + nlohmann::json(kv.second).dump();
    }
    AppendLine(result_file, line + "}");
  }
  model.train();
  return metrics;
}

void CheckTrainConfig(const protos::TrainConfig& train) {
  if ((train.num_steps() > 0) == (train.num_epochs() > 0)) {
    Fail("train_config.num_epochs or train_config.num_steps should be set, and can not be set "
         "at the same time.");
  }
  if (train.has_use_tensorboard() && train.use_tensorboard()) {
    Fail("train_config.use_tensorboard: true not supported yet (TensorBoard event files are not "
         "written yet; set it to false)");
  }
}

}  // namespace

protos::EasyRecConfig LoadTrainConfig(const TrainEvalOptions& options) {
  if (options.pipeline_config_path.empty()) Fail("--pipeline_config_path is required");
  auto config = LoadPipelineConfig(options.pipeline_config_path);
  if (!options.fine_tune_checkpoint.empty()) {
    config.mutable_train_config()->set_fine_tune_checkpoint(options.fine_tune_checkpoint);
  }
  if (!options.train_input_path.empty()) config.set_train_input_path(options.train_input_path);
  if (!options.eval_input_path.empty()) config.set_eval_input_path(options.eval_input_path);
  if (!options.model_dir.empty()) config.set_model_dir(options.model_dir);
  if (!options.edit_config_json.empty()) EditConfigJson(&config, options.edit_config_json);
  ApplyFgModeCompat(&config);
  CheckConfigSupported(config);
  CheckTrainConfig(config.train_config());
  if (config.model_dir().empty()) Fail("model_dir is empty: set it in the config or --model_dir");
  if (config.train_input_path().empty()) Fail("train_input_path is empty");
  return config;
}

void TrainAndEvaluate(const TrainEvalOptions& options) {
  protos::EasyRecConfig config = LoadTrainConfig(options);
  const auto& train = config.train_config();
  const std::string model_dir = config.model_dir();
  uint64_t data_seed = DataSeed();

  // Distributed (torchrun / tzrec launch environment): data-parallel over a process group.
  const DistEnv dist = ReadDistEnv();
  std::unique_ptr<ProcessGroup> pg;
  if (dist.distributed()) {
    pg = ProcessGroup::Create(dist);
    std::string text;
    google::protobuf::TextFormat::PrintToString(config, &text);
    pg->CheckSameOnAllRanks("pipeline config", text);
    // One data seed for all ranks: CSV file order must be shuffled identically everywhere.
    std::vector<at::Tensor> seed = {at::full({1}, static_cast<int64_t>(data_seed), at::kLong)};
    pg->Broadcast(seed, 0);
    data_seed = static_cast<uint64_t>(seed[0].item<int64_t>());
  }
  const bool chief = dist.rank == 0;

  // Data before model: bad data settings fail before any table is allocated.
  Pipeline pipeline;
  BuildFeatures(config, &pipeline);
  Dataset train_data(config.data_config(), pipeline.FeaturePointers(), config.train_input_path(),
                     DatasetMode::kTrain, data_seed, pipeline.generator, dist.rank,
                     dist.world_size);
  std::unique_ptr<Dataset> eval_data;
  if (!config.eval_input_path().empty()) {
    eval_data = std::make_unique<Dataset>(config.data_config(), pipeline.FeaturePointers(),
                                          config.eval_input_path(), DatasetMode::kEval, data_seed,
                                          pipeline.generator, dist.rank, dist.world_size);
  }
  // Whole tables may use at most 80% of this machine's memory split over its ranks.
  const int64_t memory = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  const std::vector<TablePlan> plan = PlanSharding(
      config, pipeline.FeaturePointers(), dist.world_size,
      memory > 0 ? memory / std::max(1, dist.local_world_size) / 10 * 8 : 0);
  const std::string plan_json = PlanToJson(plan);
  if (dist.rank == 0) LOG_INFO << "embedding sharding plan (" << dist.world_size << " ranks): " << plan_json;
  std::unique_ptr<ProcessGroupShardComm> shard_comm;
  if (pg) shard_comm = std::make_unique<ProcessGroupShardComm>(pg.get());
  BuildModel(config, /*with_optimizers=*/true, &pipeline,
             ShardsForRank(plan, dist.rank, dist.world_size), shard_comm.get());
  // Tables are initialised from the same default seed on every rank; dense parameters are
  // copied from rank 0 as well, so all ranks start identical.
  if (pg) BroadcastParameters(*pg, pipeline.model->parameters());
  struct ExchangeGuard {
    ~ExchangeGuard() { SetSparseGradientExchange(nullptr); }
  } exchange_guard;
  if (pg) {
    ProcessGroup* group = pg.get();
    SetSparseGradientExchange([group](at::Tensor* rows, at::Tensor* grads) {
      ExchangeSparseGradients(*group, rows, grads);
    });
  }

  // Restore point: fine-tune checkpoint (weights only), overridden by the latest checkpoint of
  // model_dir with --continue_train.
  std::optional<CheckpointRef> restore_from;
  bool fine_tune = false;
  if (!train.fine_tune_checkpoint().empty()) {
    restore_from = LatestCheckpoint(train.fine_tune_checkpoint());
    if (!restore_from) {
      Fail("fine_tune_checkpoint[", train.fine_tune_checkpoint(), "] not exists.");
    }
    fine_tune = true;
  }
  int64_t skip_steps = -1;
  if (auto latest = LatestCheckpoint(model_dir); latest && IsDirectory(model_dir) &&
                                                 !ListCheckpoints(model_dir).empty()) {
    if (!options.continue_train) {
      Fail("model_dir[", model_dir, "] already exists and not empty(if you want to continue ",
           "train on current model_dir please delete dir model_dir or specify --continue_train)");
    }
    restore_from = latest;
    fine_tune = false;
    skip_steps = latest->step;
  }
  // Exact data position of the checkpoint we continue from; without one (older checkpoints)
  // the seeded data order is replayed and the consumed batches skipped.
  DataloaderState data_state;
  bool resume_data_position = false;
  if (skip_steps >= 0) {
    const std::string state_file = JoinPath(restore_from->path, DataloaderState::kFileName);
    if (PathExists(state_file)) {
      data_state = DataloaderState::FromJson(ReadFileToString(state_file), state_file);
      resume_data_position = true;
      LOG_INFO << "Resuming data after the rows recorded in " << state_file << " (epoch "
               << data_state.epochs_completed() << ")";
    }
  }
  if (restore_from) {
    RestoreOptions restore;
    restore.restore_optimizer = !fine_tune && !options.ignore_restore_optimizer;
    restore.restore_rng = !fine_tune;
    LOG_INFO << (fine_tune ? "Fine-tuning from " : "Continuing from ") << restore_from->path;
    RestoreCheckpoint(restore_from->path, pipeline.State(), restore);
  }

  if (chief) {
    MakeDirs(model_dir);
    SavePipelineConfig(config, JoinPath(model_dir, "pipeline.config"));
    WriteFileAtomic(JoinPath(model_dir, "version"), std::string(kTzrecVersion) + "\n");
  }

  Model& model = *pipeline.model;
  model.train();
  const bool use_epochs = train.num_epochs() > 0;
  const int64_t num_steps = train.num_steps();
  const int64_t save_epochs = train.save_checkpoints_epochs();
  const int64_t save_steps = save_epochs > 0 ? 0 : train.save_checkpoints_steps();
  const int64_t log_every = std::max<int64_t>(1, train.log_step_count_steps());
  const std::string result_file = JoinPath(model_dir, kTrainEvalResultFile);
  std::vector<at::Tensor> dense_params = model.parameters();

  int64_t last_saved = -1;
  auto save_and_eval = [&](int64_t step, int64_t epoch) {
    if (step < 0 || step == last_saved) return;
    TrainingState state = pipeline.State();
    DataloaderState merged = data_state;
    if (pg) {
      // Every rank's data position goes into the checkpoint (ranks read disjoint rows);
      // parameters are identical on all ranks, so rank 0 writes the checkpoint alone.
      for (const std::string& json : pg->AllGatherStrings(data_state.ToJson())) {
        merged.Merge(DataloaderState::FromJson(json, "a rank's data position"));
      }
    }
    state.dataloader_state = &merged;
    state.sharding_plan_json = &plan_json;
    // Model-parallel tables are gathered to logical ones (a collective, on every rank).
    std::map<std::string, std::map<std::string, at::Tensor>> gathered;
    if (model.embedding_group().has_sharded_tables()) {
      gathered = model.embedding_group().GatherShardedTables();
    }
    state.sharded_tables = &gathered;
    if (chief) SaveCheckpoint(model_dir, step, state, static_cast<int>(train.keep_checkpoint_max()));
    if (pg) pg->Barrier();  // the checkpoint is complete before any rank goes on
    last_saved = step;
    if (eval_data) {
      RunEvaluation(model, *eval_data, config.eval_config(), step, epoch, result_file, pg.get());
    }
  };

  int64_t i_step = -1;  // index of the last trained step
  int64_t skipped = 0;
  auto last_log_time = std::chrono::steady_clock::now();
  int64_t last_log_step = skip_steps;
  // A finished run continued again has nothing left to train.
  bool done = !use_epochs && skip_steps >= num_steps - 1;
  // Where step time goes (ms since the last log line), reported at LOG_LEVEL=DEBUG.
  StepTimer timer;
  if (done || resume_data_position) i_step = skip_steps;
  const int64_t first_epoch = resume_data_position ? data_state.epochs_completed() : 0;
  for (int64_t epoch = first_epoch; !done && (!use_epochs || epoch < train.num_epochs()); ++epoch) {
    const bool resumed_epoch = resume_data_position && epoch == first_epoch;
    auto stream = train_data.Open(epoch, resumed_epoch ? &data_state : nullptr);
    ParsedBatch parsed;
    int64_t batches_this_epoch = 0;
    while (true) {
      timer.Start();
      bool has_batch = stream->Next(&parsed);
      if (pg) {
        // Ranks step together: when any rank's data ends, the epoch ends for all.
        std::vector<at::Tensor> out_of_data = {at::full({1}, has_batch ? 0.0f : 1.0f)};
        pg->AllReduceSum(out_of_data);
        if (out_of_data[0].item<float>() > 0) has_batch = false;
      }
      if (!has_batch) break;
      timer.Lap("data");
      ++batches_this_epoch;
      // Resume without a data-position file: replay the order and skip consumed batches.
      if (!resume_data_position && skipped <= skip_steps) {
        data_state.Consume(parsed.positions);
        ++skipped;
        i_step = skipped - 1;
        parsed = ParsedBatch();
        continue;
      }
      ++i_step;
      RowPositions positions = std::move(parsed.positions);
      Batch batch = ToBatch(std::move(parsed));
      parsed = ParsedBatch();
      Predictions predictions = model.Predict(batch);
      auto losses = model.ComputeLoss(predictions, batch);
      at::Tensor total;
      for (auto& kv : losses) total = total.defined() ? total + kv.second : kv.second;
      timer.Lap("forward");
      for (auto& p : dense_params) p.mutable_grad().reset();
      total.backward();
      if (pg) AllReduceDenseGradients(*pg, dense_params);
      timer.Lap("backward+sparse_update");
      pipeline.dense_optimizer->step();
      timer.Lap("dense_opt");
      // Table rows were already updated inside backward; this advances Adam's step count.
      pipeline.sparse_optimizer->FinishStep();
      data_state.Consume(positions);

      if (i_step % log_every == 0) {
        auto now = std::chrono::steady_clock::now();
        double seconds = std::chrono::duration<double>(now - last_log_time).count();
        double rate = seconds > 0 ? static_cast<double>(i_step - last_log_step) / seconds : 0.0;
        last_log_time = now;
        last_log_step = i_step;
        char head[160];
        std::snprintf(head, sizeof(head), "Training Epoch %lld: %lldit [%.2fit/s] lr_g0:%.5f lr_g1:%.5f",
                      static_cast<long long>(epoch), static_cast<long long>(i_step), rate,
                      pipeline.sparse_optimizer->lr(), DenseLearningRate(*pipeline.dense_optimizer));
        std::string line = head;
        // Distributed: the losses of the global batch (mean of the ranks' local means), so the
        // curve reads the same whatever the number of ranks.
        std::vector<double> values;
        for (auto& kv : losses) values.push_back(kv.second.item<double>());
        values.push_back(total.item<double>());
        if (pg) {
          std::vector<at::Tensor> sums = {
              at::from_blob(values.data(), {static_cast<int64_t>(values.size())}, at::kDouble).clone()};
          pg->AllReduceSum(sums);
          for (size_t v = 0; v < values.size(); ++v) {
            values[v] = sums[0].data_ptr<double>()[v] / pg->world_size();
          }
        }
        size_t v = 0;
        for (auto& kv : losses) {
          char buf[96];
          std::snprintf(buf, sizeof(buf), " %s:%.5f", kv.first.c_str(), values[v++]);
          line += buf;
        }
        char tail[64];
        std::snprintf(tail, sizeof(tail), " total_loss: %.5f", values.back());
        LOG_INFO << line << tail;
        LOG_DEBUG << "step time breakdown (ms per step): " << timer.Report();
      }
      if (save_steps > 0 && i_step > 0 && i_step % save_steps == 0) save_and_eval(i_step, epoch);
      if (!use_epochs && i_step >= num_steps - 1) {
        done = true;
        break;
      }
    }
    if (batches_this_epoch == 0 && !resumed_epoch) {
      Fail("train input '", config.train_input_path(), "' yields no batch");
    }
    if (!done) data_state.FinishEpoch();
    if (save_epochs > 0 && (epoch + 1) % save_epochs == 0) save_and_eval(i_step, epoch);
    if (done) {
      save_and_eval(i_step, epoch);
    } else if (use_epochs && epoch + 1 == train.num_epochs()) {
      save_and_eval(i_step, epoch);
    }
  }
  LOG_INFO << "Train and Evaluate Finished.";
}

std::map<std::string, double> Evaluate(const EvalOptions& options) {
  if (options.pipeline_config_path.empty()) Fail("--pipeline_config_path is required");
  auto config = LoadPipelineConfig(options.pipeline_config_path);
  if (!options.eval_input_path.empty()) config.set_eval_input_path(options.eval_input_path);
  CheckConfigSupported(config);
  if (config.eval_input_path().empty()) Fail("eval_input_path is empty: set it or --eval_input_path");
  std::string ckpt_source = options.checkpoint_path.empty() ? config.model_dir() : options.checkpoint_path;
  auto ckpt = LatestCheckpoint(ckpt_source);
  if (!ckpt) Fail("no checkpoint found at '", ckpt_source, "'");
  // Under tzrec launch / torchrun every rank evaluates its share; metrics are summed.
  const DistEnv dist = ReadDistEnv();
  std::unique_ptr<ProcessGroup> pg;
  if (dist.distributed()) pg = ProcessGroup::Create(dist);
  Pipeline pipeline;
  BuildFeatures(config, &pipeline);
  Dataset eval_data(config.data_config(), pipeline.FeaturePointers(), config.eval_input_path(),
                    DatasetMode::kEval, DataSeed(), pipeline.generator, dist.rank, dist.world_size);
  BuildModel(config, /*with_optimizers=*/false, &pipeline);
  RestoreOptions restore;
  restore.restore_optimizer = false;
  restore.restore_rng = false;
  RestoreCheckpoint(ckpt->path, pipeline.State(), restore);
  std::string result_file;
  if (!options.eval_result_filename.empty()) {
    result_file = JoinPath(config.model_dir(), options.eval_result_filename);
    if (dist.rank == 0) MakeDirs(config.model_dir());
  }
  return RunEvaluation(*pipeline.model, eval_data, config.eval_config(), ckpt->step, -1, result_file,
                       pg.get());
}

}  // namespace tzrec
