#include "tzrec/train/trainer.h"

#include <c10/core/GradMode.h>
#include <torch/optim/optimizer.h>

#include <chrono>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <nlohmann/json.hpp>

#include "tzrec/common/error.h"
#include <google/protobuf/text_format.h>
#include <unistd.h>

#include "tzrec/batch/batch_stream.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/config/supported_fields.h"
#include "tzrec/data/kafka_source.h"
#include "tzrec/dist/data_parallel.h"
#include "tzrec/optim/dense_optimizer.h"
#include "tzrec/train/checkpoint.h"
#include "tzrec/train/event_time_saves.h"
#include "tzrec/train/model_dir.h"
#include "tzrec/train/non_finite.h"
#include "tzrec/train/runtime.h"
#include "tzrec/train/stop_signal.h"
#include "tzrec/train/tensorboard.h"
#include "tzrec/train/train_summaries.h"
#include "tzrec/version.h"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_legacy.h>

namespace tzrec {
namespace {

// An evaluation over a stream would wait for data forever once the topic is read: it needs a
// step count (TorchEasyRec's would hang the same way).
void CheckEvaluationEnds(const protos::EasyRecConfig& config) {
  if (config.data_config().dataset_type() == protos::KafkaDataset &&
      IsKafkaUri(config.eval_input_path()) && config.eval_config().num_steps() == 0) {
    Fail("eval_input_path '", config.eval_input_path(),
         "' is a Kafka stream, which has no end: set eval_config.num_steps, or evaluate on files");
  }
}

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

// global_step of every line of a train_eval result file (missing file: none).
std::set<int64_t> EvaluatedSteps(const std::string& result_file) {
  std::set<int64_t> steps;
  if (!PathExists(result_file)) return steps;
  std::istringstream lines(ReadFileToString(result_file));
  std::string line;
  while (std::getline(lines, line)) {
    auto json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (json.is_object() && json.contains("global_step") && json["global_step"].is_number_integer()) {
      steps.insert(json["global_step"].get<int64_t>());
    }
  }
  return steps;
}

// --eval_result_filename is a name inside model_dir: nothing is written elsewhere.
void CheckResultFileName(const std::string& name) {
  if (name.empty()) return;
  if (name[0] == '/') Fail("--eval_result_filename: '", name, "' must be relative to model_dir");
  for (const auto& part : Split(name, "/")) {
    if (part == "..") Fail("--eval_result_filename: '", name, "' must not contain '..'");
  }
}

void CheckTrainConfig(const protos::TrainConfig& train) {
  if ((train.num_steps() > 0) == (train.num_epochs() > 0)) {
    Fail("train_config.num_epochs or train_config.num_steps should be set, and can not be set "
         "at the same time.");
  }
  // TorchEasyRec always writes losses and learning rates.
  for (const std::string& summary : train.tensorboard_summaries()) {
    if (summary == "loss" || summary == "learning_rate" || summary == "global_gradient_norm" ||
        summary == "gradient_norm" || summary == "parameter" || summary == "gradient") {
      continue;
    }
    Fail("train_config.tensorboard_summaries: '", summary, "' is none of loss, learning_rate, parameter, ",
         "global_gradient_norm, gradient_norm, gradient");
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

Trainer::Trainer(Pipeline* pipeline, DistContext* dist)
    : pipeline_(pipeline), dist_(dist), dense_params_(pipeline->model->parameters()) {
  const auto& train = pipeline->config.train_config();
  accumulation_steps_ = std::max<int64_t>(1, train.gradient_accumulation_steps());
  // Table rows wait for the step's end while gradients accumulate, and with a grad scaler
  // (a step with an overflow must leave every row untouched).
  if (pipeline->sparse_optimizer) {
    pipeline->sparse_optimizer->set_defer_updates(accumulation_steps_ > 1 || pipeline->grad_scaler);
  }
  if (train.has_grad_clipping()) {
    const auto& clip = train.grad_clipping();
    std::string type = clip.clipping_type();
    std::transform(type.begin(), type.end(), type.begin(), [](unsigned char c) { return std::tolower(c); });
    if (type == "norm") {
      clipping_ = Clipping::kNorm;
    } else if (type == "value") {
      clipping_ = Clipping::kValue;
    } else if (type != "none") {
      Fail("train_config.grad_clipping.clipping_type: '", clip.clipping_type(),
           "' (valid: none, norm, value)");
    }
    max_gradient_ = clip.max_gradient();
    norm_type_ = clip.norm_type();
    if (clipping_ != Clipping::kNone && !(max_gradient_ > 0)) {
      Fail("train_config.grad_clipping.max_gradient: ", clip.max_gradient(), " must be > 0");
    }
    if (clipping_ == Clipping::kNorm && !(norm_type_ > 0)) {
      Fail("train_config.grad_clipping.norm_type: ", clip.norm_type(), " must be > 0 (or inf)");
    }
    // enable_global_grad_clip makes TorchRec norm sharded dense parameters over all ranks;
    // ours are replicated and their gradients merged before clipping, so every rank's norm is
    // already the global one.
  }
  eval_uses_ema_ = pipeline->dense_ema && UseDenseEma(pipeline->config.eval_config(), train);
}

int Trainer::RanksWithBatch(bool has_batch) const {
  if (!dist_ || !dist_->distributed()) return has_batch ? 1 : 0;
  std::vector<at::Tensor> count = {at::full({1}, has_batch ? 1.0f : 0.0f)};
  dist_->pg->AllReduceSum(count);
  return static_cast<int>(count[0].item<float>() + 0.5f);
}

Trainer::StepVote Trainer::Vote(bool has_batch, bool stop) const {
  if (!dist_ || !dist_->distributed()) return {has_batch ? 1 : 0, stop ? 1 : 0};
  std::vector<at::Tensor> votes = {at::tensor({has_batch ? 1.0f : 0.0f, stop ? 1.0f : 0.0f})};
  dist_->pg->AllReduceSum(votes);
  return {static_cast<int>(votes[0][0].item<float>() + 0.5f), static_cast<int>(votes[0][1].item<float>() + 0.5f)};
}

std::vector<double> Trainer::GatherFromRanks(double value) const {
  if (!dist_ || !dist_->distributed()) return {value};
  at::Tensor all = dist_->pg->AllGather(at::full({1}, value, at::kDouble));
  std::vector<double> out(static_cast<size_t>(all.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = all[static_cast<int64_t>(i)].item<double>();
  return out;
}

Trainer::StepResult Trainer::TrainStep(const Batch& batch, int64_t step, int64_t epoch) {
  Model& model = *pipeline_->model;
  if (pipeline_->sparse_lr) {
    pipeline_->sparse_optimizer->set_lr(pipeline_->sparse_lr->Rate(pipeline_->sparse_base_lr, step, epoch));
  }
  if (pipeline_->dense_lr) {
    const double lr = pipeline_->dense_lr->Rate(pipeline_->dense_base_lr, step, epoch);
    if (lr != DenseLearningRate(*pipeline_->dense_optimizer)) SetDenseLearningRate(*pipeline_->dense_optimizer, lr);
  }
  for (auto& part : pipeline_->part_optimizers) {
    const double lr = part.lr->Rate(part.base_lr, step, epoch);
    if (lr != DenseLearningRate(*part.optimizer)) SetDenseLearningRate(*part.optimizer, lr);
  }
  auto last = std::chrono::steady_clock::now();
  const double gemm_ms_before = FastLinearGemmMilliseconds();
  const double collective_ms_before = CollectiveMilliseconds();
  size_t phase = 0;
  auto lap = [&](const char* name) {
    const auto now = std::chrono::steady_clock::now();
    if (phase == phase_ms_.size()) phase_ms_.emplace_back(name, 0.0);
    phase_ms_[phase++].second += std::chrono::duration<double, std::milli>(now - last).count();
    last = now;
  };
  // mixed_precision: the model's GEMMs (forward here, backward below) in its precision.
  ScopedGemmPrecision precision(model.gemm_precision());
  // Scopes named for profiles (is_profiling): the custom autograd functions inside are
  // otherwise invisible in the forward.
  Predictions predictions;
  {
    RECORD_USER_SCOPE("tzrec::forward");
    predictions = model.Predict(batch);
  }
  lap("forward");
  NamedLosses losses = model.ComputeLosses(predictions, batch);
  at::Tensor total = model.TotalLoss(losses);
  // Before backward: the sparse optimizer updates table rows inside it, so this is the last
  // moment a poisoned step can be stopped with nothing touched.
  CheckFiniteLoss(total, losses, step);
  lap("loss");
  if (accumulated_ == 0) {
    for (auto& p : dense_params_) p.mutable_grad().reset();
  }
  {
    RECORD_USER_SCOPE("tzrec::backward");
    const double factor = (pipeline_->grad_scaler ? pipeline_->grad_scaler->scale() : 1.0) /
                          static_cast<double>(accumulation_steps_);
    if (factor != 1.0) {
      (total * factor).backward();
    } else {
      total.backward();
    }
  }
  lap("backward");
  if (++accumulated_ >= accumulation_steps_) ApplyAccumulatedGradients(step);
  lap("dense_update");
  if (model.has_train_metrics()) {
    c10::NoGradGuard no_grad;
    model.UpdateTrainMetrics(predictions, batch, dist_ ? dist_->comm() : nullptr);
  }
  lap("train_metrics");
  phase_gemm_ms_ += FastLinearGemmMilliseconds() - gemm_ms_before;
  phase_collective_ms_ += CollectiveMilliseconds() - collective_ms_before;
  ++phase_steps_;
  StepResult result;
  for (auto& [name, loss] : losses) result.losses.emplace_back(name, loss.detach());
  result.total = total.detach();
  return result;
}

void Trainer::ApplyAccumulatedGradients(int64_t step) {
  if (accumulated_ == 0) return;
  accumulated_ = 0;
  if (dist_ && dist_->distributed()) AllReduceDenseGradients(*dist_->pg, dense_params_);
  EmbeddingCollection& tables = pipeline_->model->embedding_collection();
  float unscale = 1.0f;
  if (GradScaler* scaler = pipeline_->grad_scaler.get()) {
    // torch's GradScaler.step: unscale, and skip the whole step (here the table rows too) when
    // anything overflowed; every rank decides alike.
    unscale = 1.0f / scaler->scale();
    bool finite = tables.DeferredGradientsFinite();
    {
      c10::NoGradGuard no_grad;
      for (auto& p : dense_params_) {
        if (!p.grad().defined()) continue;
        p.mutable_grad().mul_(unscale);
        finite = finite && AllFinite(p.grad());
      }
    }
    if (dist_ && dist_->distributed()) {
      std::vector<at::Tensor> overflowed = {at::full({1}, finite ? 0.0f : 1.0f)};
      dist_->pg->AllReduceSum(overflowed);
      finite = overflowed[0].item<float>() == 0.0f;
    }
    scaler->Update(finite);
    if (!finite) {
      tables.DiscardDeferredGradients();
      for (auto& p : dense_params_) p.mutable_grad().reset();
      LOG_WARNING << "step " << step << ": non-finite gradients at loss scale " << 1.0f / unscale
                  << "; step skipped, grad scaler scale now " << scaler->scale();
      return;
    }
  }
  CheckFiniteGradients(step);
  ClipGradients();
  {
    RECORD_USER_SCOPE("tzrec::dense_optimizer");
    pipeline_->dense_optimizer->step();
    for (auto& part : pipeline_->part_optimizers) part.optimizer->step();
  }
  // Table rows were updated inside the backwards (or wait in their storages while
  // accumulating); this advances Adam's step count after them.
  if (pipeline_->sparse_optimizer->defers_updates()) tables.ApplyDeferredGradients(unscale);
  pipeline_->sparse_optimizer->FinishStep();
  if (pipeline_->dense_ema) pipeline_->dense_ema->Update();
}

void Trainer::ClipGradients() {
  if (clipping_ == Clipping::kNone) return;
  std::vector<at::Tensor> grads;
  for (const auto& p : dense_params_) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return;
  c10::NoGradGuard no_grad;
  if (clipping_ == Clipping::kValue) {
    for (auto& g : grads) g.clamp_(-max_gradient_, max_gradient_);
    return;
  }
  // torch.nn.utils.clip_grad_norm_: the norm of all gradients together; scaled down by
  // max / (norm + 1e-6) when that is below 1.
  double norm = 0.0;
  if (std::isinf(norm_type_)) {
    for (const auto& g : grads) norm = std::max(norm, g.abs().max().item<double>());
  } else {
    for (const auto& g : grads) norm += std::pow(g.norm(norm_type_).item<double>(), norm_type_);
    norm = std::pow(norm, 1.0 / norm_type_);
  }
  const double coefficient = max_gradient_ / (norm + 1e-6);
  if (coefficient < 1.0) {
    for (auto& g : grads) g.mul_(coefficient);
  }
}

std::vector<std::pair<std::string, double>> Trainer::GradientNorms() const {
  std::vector<std::pair<std::string, double>> norms;
  for (const auto& item : pipeline_->model->named_parameters()) {
    const at::Tensor& grad = item.value().grad();
    if (grad.defined()) norms.emplace_back(item.key(), grad.norm().item<double>());
  }
  return norms;
}

double Trainer::CollectiveMilliseconds() const {
  return dist_ && dist_->distributed() ? dist_->pg->collective_milliseconds() : 0.0;
}

std::string Trainer::TakePhaseReport() {
  std::string text;
  for (auto& [name, ms] : phase_ms_) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%s%s %.2f", text.empty() ? "" : ", ", name.c_str(),
                  phase_steps_ ? ms / static_cast<double>(phase_steps_) : 0.0);
    text += buf;
    ms = 0.0;
  }
  // The dense layers' GEMMs run inside forward and backward: their share says how far the
  // step is from its dense-compute limit.
  char buf[96];
  std::snprintf(buf, sizeof(buf), "; of these, FastLinear GEMMs %.2f",
                phase_steps_ ? phase_gemm_ms_ / static_cast<double>(phase_steps_) : 0.0);
  text += buf;
  if (dist_ && dist_->distributed()) {
    // Sharded lookups' exchanges and gradient reductions, waiting for slower ranks included.
    std::snprintf(buf, sizeof(buf), ", collectives %.2f",
                  phase_steps_ ? phase_collective_ms_ / static_cast<double>(phase_steps_) : 0.0);
    text += buf;
  }
  phase_gemm_ms_ = 0.0;
  phase_collective_ms_ = 0.0;
  phase_steps_ = 0;
  return text;
}

void Trainer::CheckFiniteLoss(const at::Tensor& total, const NamedLosses& losses, int64_t step) const {
  const double value = total.item<double>();
  if (std::isfinite(value)) return;
  std::string parts;
  for (const auto& [name, loss] : losses) parts += StrCat(parts.empty() ? "" : ", ", name, " ", loss.item<double>());
  Fail("step ", step, ": the loss is ", value, " (", parts, "); training stopped before this step ",
       "changed any weight, and no checkpoint was written for it. Usual causes: a learning rate ",
       "too large for the model (dense lr ", DenseLearningRate(*pipeline_->dense_optimizer),
       ", sparse lr ", pipeline_->sparse_optimizer->lr(), ") or extreme input values.");
}

void Trainer::CheckFiniteGradients(int64_t step) const {
  RequireFiniteGradients(dense_params_, [&](const at::Tensor& param) {
    // Names only on the failure path: named_parameters() builds a dict of strings.
    for (const auto& item : pipeline_->model->named_parameters()) {
      if (item.value().is_same(param)) return item.key();
    }
    return std::string("a dense parameter");
  }, step);
}

Trainer::LossValues Trainer::GlobalLosses(const StepResult& local) const {
  std::vector<double> values;
  for (const auto& kv : local.losses) values.push_back(kv.second.item<double>());
  values.push_back(local.total.item<double>());
  if (dist_ && dist_->distributed()) {
    dist_->comm()->AllReduceSum(&values);
    for (double& v : values) v /= dist_->world_size();
  }
  LossValues out;
  for (size_t v = 0; v < local.losses.size(); ++v) out.losses.emplace_back(local.losses[v].first, values[v]);
  out.total = values.back();
  return out;
}

std::map<std::string, double> Trainer::Evaluate(const Dataset& dataset, int64_t global_step,
                                                int64_t epoch, const std::string& result_file) {
  Model& model = *pipeline_->model;
  const protos::EvalConfig& eval_config = pipeline_->config.eval_config();
  // use_dense_ema: evaluate the averaged weights, the live ones back afterwards (even when the
  // evaluation fails, so a caller that goes on trains the right weights).
  struct EmaSwap {
    DenseEma* ema;
    explicit EmaSwap(DenseEma* e) : ema(e) {
      if (ema) ema->Swap();
    }
    ~EmaSwap() {
      if (ema) ema->Swap();
    }
  } ema_swap(eval_uses_ema_ ? pipeline_->dense_ema.get() : nullptr);
  model.eval();
  model.ResetMetrics();
  c10::NoGradGuard no_grad;
  BatchStream stream(dataset, 0);
  Batch batch;
  int64_t steps = 0;
  const int64_t max_steps = eval_config.num_steps();
  const int64_t log_every = std::max<int64_t>(1, eval_config.log_step_count_steps());
  std::string suffix = (epoch >= 0 ? StrCat(" Epoch-", epoch) : std::string()) +
                       StrCat(" model-", global_step);
  // Model-parallel tables make every lookup a collective: ranks step together.
  const bool lockstep = dist_ && dist_->distributed() && model.embedding_collection().has_sharded_tables();
  ScopedGemmPrecision precision(model.gemm_precision());
  while (true) {
    bool has_batch = (max_steps == 0 || steps < max_steps) && stream.Next(&batch);
    if (lockstep) {
      if (RanksWithBatch(has_batch) == 0) break;
      if (!has_batch) {
        model.embedding_collection().LookupEmpty();
        continue;
      }
    } else if (!has_batch) {
      break;
    }
    Predictions predictions = model.Predict(batch);
    NamedLosses losses = model.ComputeLosses(predictions, batch);
    model.UpdateMetrics(predictions, batch, losses);
    if (steps % log_every == 0) LOG_INFO << "Evaluating" << suffix << ": " << steps << "it";
    ++steps;
  }
  auto metrics = model.ComputeMetrics(dist_ ? dist_->comm() : nullptr);
  LOG_INFO << "Eval Result" << suffix << ": " << FormatMetrics(metrics);
  if (!result_file.empty() && (!dist_ || dist_->rank() == 0)) {
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

void TrainAndEvaluate(const TrainEvalOptions& options) {
  protos::EasyRecConfig config = LoadTrainConfig(options);
  const auto& train = config.train_config();
  const std::string model_dir = config.model_dir();
  uint64_t data_seed = DataSeed();

  // Distributed (torchrun / tzrec launch environment): data-parallel over a process group.
  std::unique_ptr<DistContext> dist = DistContext::FromEnvironment();
  if (dist->distributed()) {
    std::string text;
    google::protobuf::TextFormat::PrintToString(config, &text);
    dist->pg->CheckSameOnAllRanks("pipeline config", text);
    // One data seed for all ranks: CSV file order must be shuffled identically everywhere.
    std::vector<at::Tensor> seed = {at::full({1}, static_cast<int64_t>(data_seed), at::kLong)};
    dist->pg->Broadcast(seed, 0);
    data_seed = static_cast<uint64_t>(seed[0].item<int64_t>());
  }
  const bool chief = dist->rank() == 0;

  // Data before model: bad data settings fail before any table is allocated.
  std::unique_ptr<Pipeline> pipeline = BuildFeatures(config, PipelineMode::kTrain);
  std::unique_ptr<Dataset> train_data =
      pipeline->MakeDataset(config.train_input_path(), DatasetMode::kTrain, data_seed, dist.get());
  std::unique_ptr<Dataset> eval_data;
  if (!config.eval_input_path().empty()) {
    CheckEvaluationEnds(config);
    eval_data = pipeline->MakeDataset(config.eval_input_path(), DatasetMode::kEval, data_seed, dist.get());
  }
  BuildModel(pipeline.get(), dist.get());
  pipeline->RequireLossLabelDomains(*train_data);
  if (eval_data) pipeline->RequireLossLabelDomains(*eval_data);
  // Tables are initialised from the same default seed on every rank; dense parameters are
  // copied from rank 0 as well, so all ranks start identical.
  if (dist->distributed()) BroadcastParameters(*dist->pg, pipeline->model->parameters());
  Trainer trainer(pipeline.get(), dist.get());
  auto training_state = [&]() {
    TrainingState state{pipeline->model.get(), pipeline->sparse_optimizer.get(),
                        pipeline->dense_optimizer.get(), pipeline->dense_ema.get()};
    state.grad_scaler = pipeline->grad_scaler.get();
    for (auto& part : pipeline->part_optimizers) state.part_optimizers.emplace_back(part.index, part.optimizer.get());
    return state;
  };

  // After every check that needs no files, so a bad config creates nothing. Rank 0 writes
  // everything in model_dir; it holds the lock for the whole run, and what interrupted saves
  // of earlier runs left there goes.
  std::unique_ptr<ModelDirLock> model_dir_lock;
  if (chief) {
    model_dir_lock = std::make_unique<ModelDirLock>(model_dir);
    RemoveInterruptedSaves(model_dir);
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
    restore.require_all = !fine_tune;
    if (fine_tune && !train.fine_tune_ckpt_param_map().empty()) {
      restore.param_map = ReadCheckpointParamMap(train.fine_tune_ckpt_param_map());
    }
    LOG_INFO << (fine_tune ? "Fine-tuning from " : "Continuing from ") << restore_from->path;
    RestoreCheckpoint(restore_from->path, training_state(), restore);
  }

  if (chief) {
    MakeDirs(model_dir);
    SavePipelineConfig(config, JoinPath(model_dir, "pipeline.config"));
    WriteFileAtomic(JoinPath(model_dir, "version"), std::string(kTzrecVersion) + "\n");
  }

  Model& model = *pipeline->model;
  model.train();
  const bool use_epochs = train.num_epochs() > 0;
  const int64_t num_steps = train.num_steps();
  const int64_t save_epochs = train.save_checkpoints_epochs();
  const int64_t save_steps = save_epochs > 0 ? 0 : train.save_checkpoints_steps();
  const int64_t log_every = std::max<int64_t>(1, train.log_step_count_steps());
  const std::string result_file = JoinPath(model_dir, kTrainEvalResultFile);
  // TensorBoard (train_config.use_tensorboard, true by default as in TorchEasyRec): the chief
  // writes the training scalars in model_dir and the evaluations' in model_dir/eval_val, from
  // here on (a run that fails its checks before leaves no event files).
  std::unique_ptr<EventWriter> train_events, eval_events;
  if (chief && train.use_tensorboard()) {
    train_events = std::make_unique<EventWriter>(model_dir);
    eval_events = std::make_unique<EventWriter>(JoinPath(model_dir, "eval_val"));
  }

  int64_t last_saved = -1;
  if (skip_steps >= 0) {
    last_saved = skip_steps;
    // Killed between the save and its evaluation: evaluate the checkpoint we continue from.
    if (eval_data && !EvaluatedSteps(result_file).count(skip_steps)) {
      LOG_INFO << "Checkpoint " << restore_from->path << " was never evaluated; evaluating it first";
      WriteMetricScalars(eval_events.get(),
                         trainer.Evaluate(*eval_data, skip_steps,
                                          resume_data_position ? data_state.epochs_completed() : -1, result_file),
                         skip_steps);
    }
  }
  EventTimeSaves event_saves(train);
  if (resume_data_position) event_saves.Restore(data_state.data_ts_watermark());
  double step_event_time = -1.0;  // the last step's event time, reconciled over ranks
  auto save_and_eval = [&](int64_t step, int64_t epoch, bool evaluate = true) {
    if (step < 0 || step == last_saved) return;
    trainer.ApplyAccumulatedGradients(step);
    TrainingState state = training_state();
    DataloaderState merged = data_state;
    if (dist->distributed()) {
      // Every rank's data position goes into the checkpoint (ranks read disjoint rows);
      // parameters are identical on all ranks, so rank 0 writes the checkpoint alone.
      for (const std::string& json : dist->pg->AllGatherStrings(data_state.ToJson())) {
        merged.Merge(DataloaderState::FromJson(json, "a rank's data position"));
      }
    }
    if (event_saves.enabled() && step_event_time >= 0) {
      merged.set_data_ts_watermark(step_event_time);
      event_saves.Saved(step_event_time);
    }
    state.dataloader_state = &merged;
    state.sharding_plan_json = &pipeline->plan_json;
    // export_config.exporter_type "best": pruning keeps the best evaluated checkpoint too.
    int64_t keep_step = -1;
    const auto& export_config = config.export_config();
    if (chief && export_config.exporter_type() == "best" && train.keep_checkpoint_max() > 0) {
      std::vector<int64_t> steps;
      for (const auto& ckpt : ListCheckpoints(model_dir)) steps.push_back(ckpt.step);
      keep_step = BestEvaluatedStep(result_file, export_config.best_exporter_metric(),
                                    export_config.metric_larger_is_better(), steps)
                      .value_or(-1);
    }
    SaveCheckpoint(model_dir, step, state, static_cast<int>(train.keep_checkpoint_max()), chief,
                   keep_step);
    if (dist->distributed()) dist->pg->Barrier();  // the checkpoint is complete before any rank goes on
    last_saved = step;
    if (eval_data && evaluate) WriteMetricScalars(eval_events.get(), trainer.Evaluate(*eval_data, step, epoch, result_file), step);
  };

  int64_t i_step = -1;  // index of the last trained step
  int64_t profiled_steps = 0;  // steps trained by this run, while is_profiling counts them
  std::unique_ptr<torch::autograd::profiler::RecordProfile> profiler;
  std::string trace_path;
  int64_t skipped = 0;
  auto last_log_time = std::chrono::steady_clock::now();
  int64_t last_log_step = skip_steps;
  // A finished run continued again has nothing left to train.
  bool done = !use_epochs && skip_steps >= num_steps - 1;
  // Where step time goes (ms since the last log line), reported at LOG_LEVEL=DEBUG.
  StepTimer timer;
  if (done || resume_data_position) i_step = skip_steps;
  StopSignal stop_signal;
  bool stopped = false;
  const int64_t first_epoch = resume_data_position ? data_state.epochs_completed() : 0;
  for (int64_t epoch = first_epoch; !done && (!use_epochs || epoch < train.num_epochs()); ++epoch) {
    const bool resumed_epoch = resume_data_position && epoch == first_epoch;
    BatchStream stream(*train_data, epoch, resumed_epoch ? &data_state : nullptr);
    stream.set_interrupt(&StopSignal::flag());
    Batch batch;
    int64_t batches_this_epoch = 0;
    while (true) {
      timer.Start();
      bool has_batch = stream.Next(&batch);
      // Ranks step together: when any rank's data ends, the epoch ends for all; when any
      // rank is stopped, the run ends for all.
      const Trainer::StepVote vote = trainer.Vote(has_batch, stop_signal.requested());
      if (vote.stopping > 0) {
        stopped = done = true;
        break;
      }
      if (vote.with_batch < dist->world_size()) has_batch = false;
      if (!has_batch) break;
      timer.Lap("data");
      ++batches_this_epoch;
      // Resume without a data-position file: replay the order and skip consumed batches.
      if (!resume_data_position && skipped <= skip_steps) {
        data_state.Consume(batch.positions);
        ++skipped;
        i_step = skipped - 1;
        continue;
      }
      ++i_step;
      // is_profiling: as TorchEasyRec's schedule (wait 1, warmup 1, active 10), the 3rd to 12th
      // steps of this run go into a Chrome trace in model_dir/train_eval_trace, one per rank.
      if (train.is_profiling() && profiled_steps == 2) {
        const std::string trace_dir = JoinPath(model_dir, "train_eval_trace");
        MakeDirs(trace_dir);
        const int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch()).count();
        trace_path = JoinPath(trace_dir, StrCat(HostName(), "_", static_cast<int64_t>(getpid()), ".", ms, ".pt.trace.json"));
        profiler = std::make_unique<torch::autograd::profiler::RecordProfile>(trace_path);
      }
      Trainer::StepResult step = trainer.TrainStep(batch, i_step, epoch);
      if (train.is_profiling() && ++profiled_steps == 12 && profiler) {
        profiler.reset();  // writes the trace
        LOG_INFO << "profile of 10 training steps written to " << trace_path;
      }
      timer.Lap("step");
      data_state.Consume(batch.positions);
      bool event_time_save = false;
      if (event_saves.enabled()) {
        step_event_time = event_saves.Reconcile(trainer.GatherFromRanks(batch.positions.MaxEventTime()));
        event_time_save = event_saves.ShouldSave(step_event_time);
      }

      if (i_step % log_every == 0) {
        auto now = std::chrono::steady_clock::now();
        double seconds = std::chrono::duration<double>(now - last_log_time).count();
        double rate = seconds > 0 ? static_cast<double>(i_step - last_log_step) / seconds : 0.0;
        last_log_time = now;
        last_log_step = i_step;
        char head[160];
        std::snprintf(head, sizeof(head), "Training Epoch %lld: %lldit [%.2fit/s] lr_g0:%.5f lr_g1:%.5f",
                      static_cast<long long>(epoch), static_cast<long long>(i_step), rate,
                      pipeline->sparse_optimizer->lr(), DenseLearningRate(*pipeline->dense_optimizer));
        std::string line = head;
        // part_optimizers follow as lr_g2, lr_g3, ... (TorchEasyRec's optimizer groups).
        for (size_t k = 0; k < pipeline->part_optimizers.size(); ++k) {
          char buf[64];
          std::snprintf(buf, sizeof(buf), " lr_g%zu:%.5f", k + 2,
                        DenseLearningRate(*pipeline->part_optimizers[k].optimizer));
          line += buf;
        }
        Trainer::LossValues global = trainer.GlobalLosses(step);
        for (const auto& [name, value] : global.losses) {
          char buf[96];
          std::snprintf(buf, sizeof(buf), " %s:%.5f", name.c_str(), value);
          line += buf;
        }
        char tail[64];
        std::snprintf(tail, sizeof(tail), " total_loss: %.5f", global.total);
        line += tail;
        for (const auto& [name, value] : model.TrainMetricValues()) {
          char buf[96];
          std::snprintf(buf, sizeof(buf), " %s:%.5f", name.c_str(), value);
          line += buf;
        }
        LOG_INFO << line;
        if (train_events) WriteTrainSummaries(train_events.get(), train, trainer, *pipeline, model, global, i_step);
        LOG_DEBUG << "step time breakdown (ms per step): " << timer.Report() << "; within the step: "
                  << trainer.TakePhaseReport();
      }
      if ((save_steps > 0 && i_step > 0 && i_step % save_steps == 0) || event_time_save) save_and_eval(i_step, epoch);
      if (!use_epochs && i_step >= num_steps - 1) {
        done = true;
        break;
      }
    }
    if (stopped) {
      // The checkpoint first: a supervisor's SIGKILL may follow; its evaluation waits for the
      // resumed run (which evaluates an unevaluated checkpoint first).
      LOG_INFO << "SIGTERM: saving the last checkpoint (step " << i_step << ") and stopping";
      save_and_eval(i_step, epoch, /*evaluate=*/false);
      break;
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
  CheckEvaluationEnds(config);
  std::string ckpt_source = options.checkpoint_path.empty() ? config.model_dir() : options.checkpoint_path;
  auto ckpt = LatestCheckpoint(ckpt_source);
  if (!ckpt) Fail("no checkpoint found at '", ckpt_source, "'");
  // Under tzrec launch / torchrun every rank evaluates its share; metrics are combined.
  std::unique_ptr<DistContext> dist = DistContext::FromEnvironment();
  std::unique_ptr<Pipeline> pipeline = BuildFeatures(config, PipelineMode::kEval);
  std::unique_ptr<Dataset> eval_data =
      pipeline->MakeDataset(config.eval_input_path(), DatasetMode::kEval, DataSeed(), dist.get());
  BuildModel(pipeline.get(), dist.get());
  pipeline->RequireLossLabelDomains(*eval_data);
  RestoreOptions restore;
  restore.restore_optimizer = false;
  restore.restore_rng = false;
  restore.use_dense_ema = UseDenseEma(config.eval_config(), config.train_config());
  RestoreCheckpoint(ckpt->path, TrainingState{pipeline->model.get(), nullptr, nullptr}, restore);
  CheckResultFileName(options.eval_result_filename);
  std::string result_file;
  if (!options.eval_result_filename.empty()) {
    result_file = JoinPath(config.model_dir(), options.eval_result_filename);
    if (dist->rank() == 0) MakeDirs(config.model_dir());
  }
  Trainer trainer(pipeline.get(), dist.get());
  std::map<std::string, double> metrics = trainer.Evaluate(*eval_data, ckpt->step, -1, result_file);
  // As TorchEasyRec: the chief writes the metrics for TensorBoard in model_dir/eval.
  if (dist->rank() == 0) {
    EventWriter events(JoinPath(config.model_dir(), "eval"));
    WriteMetricScalars(&events, metrics, ckpt->step);
  }
  return metrics;
}

}  // namespace tzrec
