#include "tzrec/pipeline/pipeline.h"

#include <unistd.h>

#include <map>

#include "tzrec/common/error.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"
#include "tzrec/dist/data_parallel.h"
#include "tzrec/fg/feature_info.h"
#include "tzrec/optim/dense_optimizer.h"

namespace tzrec {

std::unique_ptr<DistContext> DistContext::FromEnvironment() {
  auto dist = std::make_unique<DistContext>();
  dist->env = ReadDistEnv();
  if (dist->env.distributed()) {
    dist->pg = ProcessGroup::Create(dist->env);
    dist->shard_comm = std::make_unique<ProcessGroupShardComm>(dist->pg.get());
    dist->collectives = std::make_unique<ProcessGroupCollectives>(dist->pg.get());
  }
  return dist;
}

std::vector<const Feature*> Pipeline::FeaturePointers() const {
  std::vector<const Feature*> out;
  for (const auto& f : features) out.push_back(f.get());
  return out;
}

std::unique_ptr<Dataset> Pipeline::MakeDataset(const std::string& input_path, DatasetMode dataset_mode,
                                               uint64_t seed, const DistContext* dist,
                                               std::vector<std::string> reserved_columns) const {
  auto dataset = std::make_unique<Dataset>(config.data_config(), FeaturePointers(), input_path,
                                           dataset_mode, seed, generator, dist ? dist->rank() : 0,
                                           dist ? dist->world_size() : 1, std::move(reserved_columns));
  if (model) RequireLossLabelDomains(*dataset);
  return dataset;
}

void Pipeline::RequireLossLabelDomains(Dataset& dataset) const {
  TZREC_CHECK(model != nullptr, "the model is built before its label domains are known");
  for (const auto& head : model->heads()) {
    for (const auto& [loss, domain] : head->LabelDomains()) {
      dataset.RequireLabelRange(head->spec().label_name,
                                {domain.min, domain.max, domain.integral,
                                 head->spec().where + ": " + loss});
    }
  }
}

std::unique_ptr<Pipeline> BuildFeatures(const protos::EasyRecConfig& config, PipelineMode mode) {
  auto p = std::make_unique<Pipeline>();
  p->config = config;
  p->mode = mode;
  p->features = CreateFeatures(p->config.feature_configs(), p->config.data_config());
  const auto& data = p->config.data_config();
  if (data.fg_mode() != protos::FG_NONE) {
    p->generator = std::make_shared<fg::FeatureGenerator>(
        fg::DescribeFeatures(p->config.feature_configs(), data.fg_mode()), data.fg_mode(),
        data.fg_encoded_multival_sep(), static_cast<int>(data.fg_threads()));
  }
  return p;
}

ModelContext ModelContextOf(const Pipeline& p) {
  const auto& data = p.config.data_config();
  ModelContext context;
  context.config = &p.config.model_config();
  context.features = p.FeaturePointers();
  for (const Feature* f : context.features) {
    if (f->is_sparse() && !f->is_sequence()) context.heads.sparse_features.insert(f->name());
  }
  context.heads.label_fields.assign(data.label_fields().begin(), data.label_fields().end());
  context.heads.sample_weight_fields.assign(data.sample_weight_fields().begin(),
                                            data.sample_weight_fields().end());
  context.heads.needs_labels = p.mode != PipelineMode::kPredict;
  context.tower = p.tower;
  return context;
}

void BuildModel(Pipeline* p, DistContext* dist) {
  const bool training = p->mode == PipelineMode::kTrain;
  if (training && !p->tower.empty()) Fail("a model is trained whole, not as its tower '", p->tower, "'");
  p->model = CreateModel(ModelContextOf(*p));
  // Train, eval and predict from a checkpoint run as trained (TorchEasyRec: autocast around
  // predict + loss in each); an export sets its own (export_config.mixed_precision).
  p->model->set_gemm_precision(
      GemmPrecisionFor(p->config.train_config().mixed_precision(), "train_config.mixed_precision"));

  EmbeddingCollection::MaterializeOptions tables;
  const int world = dist ? dist->world_size() : 1;
  const int rank = dist ? dist->rank() : 0;
  if (training) {
    const auto& train = p->config.train_config();
    p->sparse_optimizer = SparseOptimizer::Create(train.sparse_optimizer());
    p->sparse_base_lr = p->sparse_optimizer->lr();
    p->sparse_lr = CreateLearningRateSchedule(train.sparse_optimizer(), "train_config.sparse_optimizer");
    p->dense_lr = CreateLearningRateSchedule(train.dense_optimizer(), "train_config.dense_optimizer");
    tables.optimizer = p->sparse_optimizer.get();
    // Whole tables may use at most 80% of this machine's (or container's) memory split over
    // its ranks.
    const int64_t memory = UsableMemoryBytes();
    const int local_ranks = dist ? std::max(1, dist->env.local_world_size) : 1;
    p->plan = PlanSharding(p->config, p->model->embedding_collection().table_specs(), world,
                           memory > 0 ? memory / local_ranks / 10 * 8 : 0);
    p->plan_json = PlanToJson(p->plan);
    if (rank == 0) LOG_INFO << "embedding sharding plan (" << world << " ranks): " << p->plan_json;
    tables.shards = ShardsForRank(p->plan, rank, world);
    if (dist && dist->distributed()) {
      tables.comm = dist->shard_comm.get();
      ProcessGroup* group = dist->pg.get();
      tables.exchange = [group](at::Tensor* rows, at::Tensor* grads) {
        ExchangeSparseGradients(*group, rows, grads);
      };
    }
  }
  if (!training) tables.int8_tables = p->int8_tables;
  tables.hash_tables = p->hash_tables;
  p->model->embedding_collection().Materialize(std::move(tables));
  LOG_INFO << "embedding tables: " << (p->model->embedding_collection().table_bytes() >> 20) << " MiB"
           << (training ? " with optimizer state" : "") << "; process RSS "
           << (ResidentSetBytes() >> 20) << " MiB";
  if (training) {
    const auto& dense = p->config.train_config().dense_optimizer();
    // part_optimizers take the parameters their patterns match; the dense optimizer the rest.
    std::vector<std::string> names;
    std::map<std::string, at::Tensor> by_name;
    for (const auto& item : p->model->named_parameters()) {
      names.push_back(item.key());
      by_name[item.key()] = item.value();
    }
    const auto groups = GroupParametersByPattern(names, dense);
    auto tensors = [&](const std::vector<std::string>& group) {
      std::vector<at::Tensor> out;
      for (const auto& name : group) out.push_back(by_name.at(name));
      return out;
    };
    for (int i = 0; i < dense.part_optimizers_size(); ++i) {
      const std::string where = StrCat("train_config.dense_optimizer.part_optimizers[", i, "]");
      if (groups[i].empty()) {
        LOG_WARNING << where << ": regex_pattern '" << dense.part_optimizers(i).regex_pattern()
                    << "' matches no dense parameter; this part optimizer is not used";
        continue;
      }
      LOG_INFO << where << " (" << dense.part_optimizers(i).regex_pattern() << ") optimizes "
               << groups[i].size() << " parameters: " << Join(groups[i], ", ");
      Pipeline::PartOptimizer part;
      part.index = i;
      part.optimizer = CreateDenseOptimizer(dense.part_optimizers(i), tensors(groups[i]), where);
      part.base_lr = DenseLearningRate(*part.optimizer);
      // Without its own schedule a part follows the dense optimizer's, from its own base rate.
      const bool own_schedule =
          dense.part_optimizers(i).learning_rate_case() != protos::PartOptimizer::LEARNING_RATE_NOT_SET;
      part.lr = own_schedule ? CreateLearningRateSchedule(dense.part_optimizers(i), where)
                             : CreateLearningRateSchedule(dense, "train_config.dense_optimizer");
      p->part_optimizers.push_back(std::move(part));
    }
    p->dense_optimizer = CreateDenseOptimizer(dense, tensors(groups.back()));
    p->dense_base_lr = DenseLearningRate(*p->dense_optimizer);
    if (dense.has_ema()) {
      std::vector<std::pair<std::string, at::Tensor>> params;
      for (const auto& item : p->model->named_parameters()) {
        if (item.value().requires_grad()) params.emplace_back(item.key(), item.value());
      }
      p->dense_ema = std::make_unique<DenseEma>(std::move(params), dense.ema().decay(),
                                                "train_config.dense_optimizer.ema");
    }
    if (p->config.train_config().has_grad_scaler()) {
      p->grad_scaler = std::make_unique<GradScaler>(p->config.train_config().grad_scaler());
    }
  }
}

}  // namespace tzrec
