// Micro-benchmarks of the two hot paths of a training step (not tests; run by
// bench/micro_bench.sh): the fused embedding lookup + backward + Adagrad in lookups/s per
// thread for 1M- and 10M-row tables (uniform ids, the cache-hostile case), and the MLP
// layers with oneDNN FastLinear against ATen's Linear in the same process; and the data paths
// (files, Kafka, the negative sampler) into training Batches.
#include <ATen/Parallel.h>
#include <oneapi/dnnl/dnnl.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>

#include "tzrec/config/pipeline_config.h"
#include "tzrec/data/arrow_ipc.h"
#include "tzrec/input/dataset.h"
#include "tzrec/pipeline/pipeline.h"
#include "tzrec/input/sampler.h"
#include "tzrec/common/fs.h"
#include "tzrec/protos/sampler.pb.h"
#include "tzrec/kernels/blas_core.h"
#include "tzrec/embedding/embedding_storage.h"
#include "tzrec/features/feature.h"
#include "tzrec/embedding/fused_lookup.h"
#include "tzrec/batch/batch.h"
#include "tzrec/modules/fast_linear.h"
#include "tzrec/train/runtime.h"

namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

void EmbeddingBench(int64_t rows, int threads, tzrec::RowFormat format = tzrec::RowFormat::kFloat32) {
  at::set_num_threads(threads);
  tzrec::SparseOptimizerSpec spec;
  spec.kind = tzrec::SparseOptimizerSpec::Kind::kAdagrad;
  spec.lr = 0.01f;
  tzrec::SparseOptimizer optimizer(spec);
  tzrec::EmbeddingStorage storage(16, &optimizer, format);
  tzrec::EmbeddingTable* table = storage.AddTable("t", rows, true);
  storage.Allocate();
  const int64_t bags = 4096, lookups = 26;
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<int64_t> id(0, rows - 1);
  std::vector<tzrec::LookupTensors> inputs;
  for (int k = 0; k < lookups; ++k) {
    at::Tensor values = torch::empty({bags}, torch::kLong);
    for (int64_t i = 0; i < bags; ++i) values.data_ptr<int64_t>()[i] = id(rng);
    inputs.push_back({values, torch::arange(bags + 1, torch::kLong), table, false});
  }
  at::Tensor upstream = torch::randn({bags, lookups * 16});
  auto step = [&]() {
    at::Tensor out = tzrec::StoragePooledLookup(&storage, inputs, bags, true);
    (out * upstream).sum().backward();
    optimizer.FinishStep();
  };
  for (int i = 0; i < 3; ++i) step();
  const int steps = 60;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  double seconds = Seconds(start);
  double per_second = steps * bags * lookups / seconds;
  // The two kernels alone, without autograd around them.
  std::vector<tzrec::LookupArgs> args;
  for (const auto& in : inputs) {
    args.push_back({in.values.data_ptr<int64_t>(), in.offsets.data_ptr<int64_t>(), 0, rows, false, true});
  }
  at::Tensor out = torch::empty({bags, lookups * 16});
  start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    tzrec::StorageForward(&storage, args, bags, out.data_ptr<float>());
  }
  double forward_ms = Seconds(start) / steps * 1e3;
  // The same ids as one lookup of single-id bags (a sharded table's received segments).
  at::Tensor all_values = at::cat([&] {
    std::vector<at::Tensor> v;
    for (const auto& in : inputs) v.push_back(in.values);
    return v;
  }());
  at::Tensor all_offsets = torch::arange(bags * lookups + 1, torch::kLong);
  const std::vector<tzrec::LookupArgs> one = {
      {all_values.data_ptr<int64_t>(), all_offsets.data_ptr<int64_t>(), 0, rows, false, true}};
  start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) tzrec::StorageForward(&storage, one, bags * lookups, out.data_ptr<float>());
  double one_lookup_ms = Seconds(start) / steps * 1e3;
  start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    tzrec::FusedKernels().backward_update(&storage, args, bags, upstream.data_ptr<float>(), i + 10);
  }
  double backward_ms = Seconds(start) / steps * 1e3;
  std::printf("  kernels alone: forward %.2f ms (as one lookup: %.2f ms), backward+adagrad %.2f ms\n", forward_ms,
              one_lookup_ms, backward_ms);
  std::printf("embedding %s rows=%lld threads=%d: %.2f M lookups/s (fwd+bwd+adagrad), %.2f M/s per thread, %.2f ms/step\n",
              format == tzrec::RowFormat::kFloat16 ? "fp16" : "fp32", static_cast<long long>(rows), threads,
              per_second / 1e6, per_second / 1e6 / threads, seconds / steps * 1e3);
}

// A feature in a WIDE and a DEEP group (DeepFM, Wide&Deep) is looked up in two tables with the
// same ids: 26 Criteo-sized tables of dim 16 (Adagrad) and their dim-4 WIDE twins, new skewed
// ids every step (most in few hot rows, as in Criteo), forward + backward + update. Rounds
// alternate the two storages looked up one after the other and the WIDE one riding with the
// DEEP one (one pass over the ids, fused_lookup.h's CompanionLookups).
void WideDeepBench(int threads) {
  at::set_num_threads(threads);
  const std::vector<int64_t> rows = {1000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 1000000, 1000000,
                                     405282, 10, 2209, 11938, 155, 4, 976, 14, 1000000, 1000000, 1000000,
                                     590152, 12973, 108, 36};
  tzrec::SparseOptimizerSpec spec;
  spec.kind = tzrec::SparseOptimizerSpec::Kind::kAdagrad;
  spec.lr = 0.01f;
  tzrec::SparseOptimizer optimizer(spec);
  tzrec::EmbeddingStorage deep(16, &optimizer), wide(4, &optimizer);
  std::vector<tzrec::EmbeddingTable*> deep_tables, wide_tables;
  for (size_t t = 0; t < rows.size(); ++t) {
    deep_tables.push_back(deep.AddTable("t" + std::to_string(t), rows[t], true));
    wide_tables.push_back(wide.AddTable("t" + std::to_string(t) + "_wide", rows[t], true));
  }
  deep.Allocate();
  wide.Allocate();
  const int64_t bags = 4096, batches = 40, lookups = static_cast<int64_t>(rows.size());
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  at::Tensor offsets = torch::arange(bags + 1, torch::kLong);
  std::vector<std::vector<at::Tensor>> ids(batches);
  for (auto& batch : ids) {
    for (int64_t t = 0; t < lookups; ++t) {
      at::Tensor v = torch::empty({bags}, torch::kLong);
      // u^4 puts most ids on the first rows of each table and a long tail over the rest.
      for (int64_t i = 0; i < bags; ++i) {
        v.data_ptr<int64_t>()[i] = std::min<int64_t>(rows[t] - 1, static_cast<int64_t>(rows[t] * std::pow(u(rng), 4.0)));
      }
      batch.push_back(v);
    }
  }
  at::Tensor deep_grad = torch::randn({bags, lookups * 16}) * 1e-3, wide_grad = torch::randn({bags, lookups * 4}) * 1e-3;
  auto run = [&](bool paired) {
    const auto start = std::chrono::steady_clock::now();
    for (const auto& batch : ids) {
      std::vector<tzrec::LookupTensors> deep_lookups, wide_lookups;
      tzrec::CompanionLookups companion;
      companion.storage = &wide;
      companion.count = lookups;
      for (int64_t t = 0; t < lookups; ++t) {
        deep_lookups.push_back({batch[t], offsets, deep_tables[t], false});
        wide_lookups.push_back({batch[t], offsets, wide_tables[t], false});
        companion.tables.push_back(wide_tables[t]);
        companion.positions.push_back(static_cast<int32_t>(t));
      }
      std::vector<at::Tensor> outputs;
      if (paired) {
        outputs = tzrec::StorageLookup(&deep, deep_lookups, {}, bags, true, nullptr, &companion);
      } else {
        outputs = {tzrec::StoragePooledLookup(&deep, deep_lookups, bags, true),
                   tzrec::StoragePooledLookup(&wide, wide_lookups, bags, true)};
      }
      torch::autograd::backward({outputs[0], outputs[1]}, {deep_grad, wide_grad});
      optimizer.FinishStep();
    }
    return Seconds(start) / batches * 1e3;
  };
  run(false);
  run(true);
  std::vector<double> ratios;
  for (int round = 1; round <= 3; ++round) {
    const double separate = run(false), paired = run(true);
    ratios.push_back(separate / paired);
    std::printf("  wide+deep lookups threads=%d round %d: separate %.2f ms/step, wide riding with deep %.2f ms/step (%.2fx)\n",
                threads, round, separate, paired, separate / paired);
  }
  std::sort(ratios.begin(), ratios.end());
  std::printf("wide+deep lookups threads=%d: riding %.2fx faster than separate (median of 3 rounds)\n", threads, ratios[1]);
}

void MlpBench(bool fast, int threads, bool bf16 = false, bool chain = false) {
  at::set_num_threads(threads);
  tzrec::ScopedGemmPrecision precision(bf16 ? tzrec::GemmPrecision::kBFloat16 : tzrec::GemmPrecision::kFloat32);
  torch::manual_seed(0);
  const int64_t batch = 4096;
  std::vector<int64_t> dims = {429, 512, 256, 128};
  std::vector<at::Tensor> weights, biases;
  for (size_t i = 0; i + 1 < dims.size(); ++i) {
    weights.push_back(torch::randn({dims[i + 1], dims[i]}).mul_(0.05).requires_grad_(true));
    biases.push_back(torch::zeros({dims[i + 1]}).requires_grad_(true));
  }
  // The input needs its gradient, as a DeepFM deep input does (the embeddings learn from it):
  // the FLOP count below includes the first layer's dX.
  at::Tensor x = torch::randn({batch, dims[0]}).requires_grad_(true);
  auto step = [&]() {
    at::Tensor h = x;
    if (chain) {
      h = tzrec::FastLinearChain(x, weights, biases, std::vector<bool>(weights.size(), true));
    } else {
      for (size_t i = 0; i < weights.size(); ++i) {
        h = fast ? tzrec::FastLinear(h, weights[i], biases[i], true)
                 : torch::relu(torch::linear(h, weights[i], biases[i]));
      }
    }
    h.sum().backward();
    for (auto& w : weights) w.mutable_grad().reset();
    for (auto& b : biases) b.mutable_grad().reset();
    x.mutable_grad().reset();
  };
  for (int i = 0; i < 3; ++i) step();
  const int steps = 60;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  double ms = Seconds(start) / steps * 1e3;
  double gflop = 3.0 * 2.0 * batch * (429 * 512 + 512 * 256 + 256 * 128) / 1e9;
  std::printf("mlp 429-512-256-128 batch 4096 %s threads=%d: %.2f ms fwd+bwd, %.0f GFLOP/s\n",
              chain ? "FastLinearChain(oneDNN BF16)" : bf16 ? "FastLinear(oneDNN BF16)" : fast ? "FastLinear(oneDNN)" : "aten linear+relu ", threads,
              ms, gflop / ms * 1e3);
}

void RawGemmBench() {
  const int64_t m = 4096, n = 256, k = 512;
  std::vector<float> a(m * k, 0.01f), b(k * n, 0.02f), c(m * n);
  for (int i = 0; i < 3; ++i) dnnl_sgemm('N', 'T', m, n, k, 1.f, a.data(), k, b.data(), k, 0.f, c.data(), n);
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) dnnl_sgemm('N', 'T', m, n, k, 1.f, a.data(), k, b.data(), k, 0.f, c.data(), n);
  std::printf("raw dnnl_sgemm NT 4096x256x512: %.0f GFLOP/s\n", 20 * 2.0 * m * n * k / Seconds(start) / 1e9);
}

// The GEMM every ATen matmul outside the MLP runs on (Debian's LibTorch calls the system
// BLAS): what `gemm` prints for our side, the reference prints the same probe (train_reference.py).
void AtenGemmBench() {
  const int64_t m = 4096, n = 256, k = 512;
  at::Tensor a = torch::full({m, k}, 0.01f), b = torch::full({k, n}, 0.02f);
  for (int i = 0; i < 3; ++i) at::mm(a, b);
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) at::mm(a, b);
  std::printf("gemm aten::mm 4096x512x256 (OpenBLAS core %s, %d threads): %.0f GFLOP/s\n",
              tzrec::RunningOpenBlasCore().c_str(), at::get_num_threads(),
              20 * 2.0 * m * n * k / Seconds(start) / 1e9);
}

// Reads a whole dataset (CSV -> parsed batches) as the trainer would, reporting rows/s.
void DataBench(const std::string& config_path, const std::string& input, int workers) {
  auto config = tzrec::LoadPipelineConfig(config_path);
  config.mutable_data_config()->set_num_workers(workers);
  // The features and feature generator (FG configs) as training builds them.
  auto pipeline = tzrec::BuildFeatures(config, tzrec::PipelineMode::kTrain);
  auto dataset = pipeline->MakeDataset(input, tzrec::DatasetMode::kTrain, 1, nullptr);
  auto start = std::chrono::steady_clock::now();
  auto stream = dataset->Open(0);
  tzrec::ParsedBatch batch;
  int64_t rows = 0;
  while (stream->Next(&batch)) {
    rows += batch.size;
    tzrec::Batch tensors = tzrec::ToBatch(std::move(batch));  // what the trainer consumes
    batch = tzrec::ParsedBatch();
  }
  double seconds = Seconds(start);
  std::printf("data %s workers=%d: %.0f rows/s (%.0f rows/s per worker thread), %.2f ms per 4096-row batch\n",
              input.c_str(), workers, rows / seconds, rows / seconds / workers,
              seconds / rows * 4096 * 1e3);
}

// KafkaDataset: the Arrow IPC message files in `messages_dir` (bench/kafka_throughput.sh writes
// them) produced to a topic of an in-process librdkafka mock cluster (not timed), then read
// into training Batches by `workers` readers, as DataBench reads files (timed: consuming,
// decoding, FG, tensors). The mock broker keeps only ~5 MB per partition (older messages are
// dropped), so the topic gets a partition per 8 messages, an even number of them.
void KafkaBench(const std::string& config_path, const std::string& messages_dir, int workers) {
  std::vector<std::string> messages;
  int64_t total_rows = 0;
  for (const auto& file : tzrec::ExpandInputPaths(messages_dir + "/msg-*.bin")) {
    messages.push_back(tzrec::ReadFileToString(file));
    total_rows += tzrec::DecodeArrowIpc(reinterpret_cast<const uint8_t*>(messages.back().data()),
                                        messages.back().size(), nullptr, {})
                      .batches.at(0).num_rows;
  }
  const int partitions = static_cast<int>((messages.size() + 15) / 16 * 2);
  char error[512];
  rd_kafka_conf_t* owner_conf = rd_kafka_conf_new();
  rd_kafka_conf_set(owner_conf, "log_level", "3", error, sizeof(error));
  rd_kafka_t* owner = rd_kafka_new(RD_KAFKA_PRODUCER, owner_conf, error, sizeof(error));
  rd_kafka_mock_cluster_t* cluster = rd_kafka_mock_cluster_new(owner, 1);
  const std::string bootstraps = rd_kafka_mock_cluster_bootstraps(cluster);
  rd_kafka_mock_topic_create(cluster, "bench", partitions, 1);
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", bootstraps.c_str(), error, sizeof(error));
  rd_kafka_t* producer = rd_kafka_new(RD_KAFKA_PRODUCER, conf, error, sizeof(error));
  for (size_t m = 0; m < messages.size(); ++m) {
    while (rd_kafka_producev(producer, RD_KAFKA_V_TOPIC("bench"), RD_KAFKA_V_PARTITION(static_cast<int32_t>(m % partitions)),
                             RD_KAFKA_V_VALUE(const_cast<char*>(messages[m].data()), messages[m].size()),
                             RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
      rd_kafka_poll(producer, 10);
    }
  }
  rd_kafka_flush(producer, 600000);
  auto config = tzrec::LoadPipelineConfig(config_path);
  config.mutable_data_config()->set_num_workers(workers);
  config.mutable_data_config()->set_dataset_type(tzrec::protos::KafkaDataset);
  auto pipeline = tzrec::BuildFeatures(config, tzrec::PipelineMode::kTrain);
  auto dataset = pipeline->MakeDataset("kafka://" + bootstraps + "/bench?group.id=bench&auto.offset.reset=earliest",
                                       tzrec::DatasetMode::kTrain, 1, nullptr);
  const int64_t batch_size = dataset->options().batch_size;
  // Every reader keeps a last partial batch the stream never completes: stop a batch short.
  const int64_t target = (total_rows / workers / batch_size - 1) * batch_size * workers;
  const auto start = std::chrono::steady_clock::now();
  auto stream = dataset->Open(0);
  tzrec::ParsedBatch batch;
  int64_t rows = 0;
  while (rows < target && stream->Next(&batch)) {
    rows += batch.size;
    tzrec::Batch tensors = tzrec::ToBatch(std::move(batch));
    batch = tzrec::ParsedBatch();
  }
  const double seconds = Seconds(start);
  stream.reset();
  const double rows_per_message = static_cast<double>(total_rows) / static_cast<double>(messages.size());
  std::printf("kafka workers=%d: %.0f rows/s (%.0f rows/s per worker thread), %.0f messages/s of %.0f rows, %.2f ms "
              "per 4096-row batch (%d partitions)\n",
              workers, rows / seconds, rows / seconds / workers, rows / rows_per_message / seconds, rows_per_message,
              seconds / rows * 4096 * 1e3, partitions);
  dataset.reset();
  rd_kafka_destroy(producer);
  rd_kafka_mock_cluster_destroy(cluster);
  rd_kafka_destroy(owner);
}

// Negative sampler alone: a `items`-item table (6 attributes) written to `dir`, loaded, then
// batches of 1024 item ids drawing 1024 weighted negatives each, with their attribute rows.
void SamplerBench(const std::string& dir, int64_t items) {
  const std::string path = dir + "/sampler_bench_items.txt";
  {
    std::string text = "id:int64\tweight:float\tattrs:string\n";
    std::mt19937_64 rng(1);
    for (int64_t i = 0; i < items; ++i) {
      text += std::to_string(i) + "\t" + std::to_string(1 + rng() % 10) + "\t" + std::to_string(i);
      for (int a = 0; a < 5; ++a) text += "\x02" + std::to_string(rng() % 100000);
      text += "\n";
    }
    tzrec::WriteFileAtomic(path, text);
  }
  tzrec::protos::NegativeSampler config;
  config.set_input_path(path);
  config.set_num_sample(1024);
  for (const char* attr : {"item_id", "a1", "a2", "a3", "a4", "a5"}) config.add_attr_fields(attr);
  config.set_item_id_field("item_id");
  config.set_attr_delimiter("\x02");
  tzrec::SamplerContext context;
  context.config = &config;
  context.where = "data_config.negative_sampler";
  auto start = std::chrono::steady_clock::now();
  auto sampler = tzrec::SamplerRegistry().Get("negative_sampler")(context);
  const double load = Seconds(start);
  tzrec::SamplerInput input;
  std::mt19937_64 rng(2);
  for (int i = 0; i < 1024; ++i) input.item_ids.push_back(static_cast<int64_t>(rng() % items));
  const std::vector<std::string> columns = {"item_id", "a1", "a2", "a3", "a4", "a5"};
  const int batches = 300;
  start = std::chrono::steady_clock::now();
  int64_t rows = 0;
  for (int b = 0; b < batches; ++b) {
    tzrec::SampledItems sampled = sampler->Sample(input, rng);
    tzrec::RecordBatch records = sampler->AttrRows(sampled, columns);
    rows += static_cast<int64_t>(records.num_rows());
  }
  const double seconds = Seconds(start);
  std::printf("sampler items=%lld: load %.2f s (%.0f items/s); 1024 negatives per 1024-row batch: "
              "%.0f batches/s, %.0f sampled rows/s per thread\n",
              static_cast<long long>(items), load, items / load, batches / seconds, rows / seconds);
  std::remove(path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  tzrec::InitRuntime();
  const int threads = at::get_num_threads();
  const std::string only = argc > 1 ? argv[1] : "";
  if (only == "data") {
    for (int workers : {1, 2}) DataBench(argv[2], argv[3], workers);
    return 0;
  }
  if (only == "kafka") {  // kafka CONFIG MESSAGES_DIR
    for (int workers : {1, 2}) KafkaBench(argv[2], argv[3], workers);
    return 0;
  }
  if (only == "sampler") {  // sampler DIR [items]
    SamplerBench(argv[2], argc > 3 ? std::atoll(argv[3]) : 1000000);
    return 0;
  }
  if (only == "gemm") {
    AtenGemmBench();
    return 0;
  }
  if (only == "emb" || only == "emb_fp16") {  // emb[_fp16] [threads] [rows]: fp32 or FP16 rows
    EmbeddingBench(argc > 3 ? std::atoll(argv[3]) : 1000000, argc > 2 ? std::atoi(argv[2]) : 1,
                   only == "emb" ? tzrec::RowFormat::kFloat32 : tzrec::RowFormat::kFloat16);
    return 0;
  }
  if (only == "wide_deep") {
    WideDeepBench(threads);
    return 0;
  }
  if (only == "mlp") {
    MlpBench(true, threads);
    return 0;
  }
  if (only == "mlp_bf16") {  // mixed_precision BF16 (needs AVX512-BF16 to differ from fp32)
    // As the MLP module runs in BF16: one chain, hidden activations in bfloat16.
    const bool native = tzrec::NativeBf16GemmAvailable();
    MlpBench(true, threads, native, /*chain=*/native);
    return 0;
  }
  for (int64_t rows : {1000000LL, 10000000LL}) {
    for (auto format : {tzrec::RowFormat::kFloat32, tzrec::RowFormat::kFloat16}) {
      EmbeddingBench(rows, 1, format);
      if (threads > 1) EmbeddingBench(rows, threads, format);
    }
  }
  AtenGemmBench();
  RawGemmBench();
  MlpBench(false, threads);
  MlpBench(true, threads);
  if (tzrec::NativeBf16GemmAvailable()) {
    MlpBench(true, threads, true);
    MlpBench(true, threads, true, /*chain=*/true);
  }
  return 0;
}
