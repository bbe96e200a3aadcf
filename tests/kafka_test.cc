// KafkaDataset against librdkafka's in-process mock cluster (no broker): messages written by
// an independent Arrow writer (apache-arrow JS, from Parquet read by parquet-wasm; see
// tests/interop/write_arrow.mjs) are produced to a topic, and TorchEasyRec's Criteo DeepFM
// config, switched to KafkaDataset, trains from it, resumes bit for bit and evaluates on a
// Parquet eval path. Needs `npm ci` in tests/interop; without it the tests skip visibly.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "managed_ids_test_util.h"
#include "test_util.h"
#include "train_test_util.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/strings.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/data/kafka_source.h"
#include "tzrec/data/parquet/parquet_reader.h"
#include "tzrec/tools/gen_data.h"
#include "tzrec/train/checkpoint.h"
#include "tzrec/train/event_time_saves.h"
#include "tzrec/train/trainer.h"

namespace tzrec {
namespace {

using testing::TempDir;

std::string InteropDir() { return std::string(TZREC_SOURCE_DIR) + "/tests/interop"; }

#define SKIP_WITHOUT_ARROW_WRITER()                                                                     \
  do {                                                                                                  \
    if (!PathExists(InteropDir() + "/node_modules/apache-arrow/package.json") ||                        \
        !PathExists(InteropDir() + "/node_modules/parquet-wasm/package.json") ||                        \
        std::system("node --version >/dev/null 2>&1") != 0) {                                          \
      const char* why = "skipping Kafka tests: node or tests/interop/node_modules missing (npm ci there)"; \
      std::fprintf(stderr, "[ SKIPPED  ] %s\n", why);                                                   \
      GTEST_SKIP() << why;                                                                              \
    }                                                                                                   \
  } while (0)

// A one-broker mock cluster living in this process, and a producer for it.
class MockKafka {
 public:
  MockKafka() {
    char error[512];
    rd_kafka_conf_t* owner_conf = rd_kafka_conf_new();
    rd_kafka_conf_set(owner_conf, "log_level", "3", error, sizeof(error));  // it has no brokers, on purpose
    owner_ = rd_kafka_new(RD_KAFKA_PRODUCER, owner_conf, error, sizeof(error));
    if (!owner_) throw Error(error);
    cluster_ = rd_kafka_mock_cluster_new(owner_, 1);
    if (!cluster_) throw Error("cannot start the mock cluster");
    bootstraps_ = rd_kafka_mock_cluster_bootstraps(cluster_);
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", bootstraps_.c_str(), error, sizeof(error));
    producer_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, error, sizeof(error));
    if (!producer_) throw Error(error);
  }
  ~MockKafka() {
    rd_kafka_destroy(producer_);
    rd_kafka_mock_cluster_destroy(cluster_);
    rd_kafka_destroy(owner_);
  }
  MockKafka(const MockKafka&) = delete;
  MockKafka& operator=(const MockKafka&) = delete;

  void CreateTopic(const std::string& topic, int partitions) {
    ASSERT_EQ(rd_kafka_mock_topic_create(cluster_, topic.c_str(), partitions, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  }
  void Produce(const std::string& topic, int32_t partition, const std::string& payload, int64_t timestamp_ms) {
    const rd_kafka_resp_err_t err = rd_kafka_producev(
        producer_, RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(partition),
        RD_KAFKA_V_VALUE(const_cast<char*>(payload.data()), payload.size()),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_TIMESTAMP(timestamp_ms), RD_KAFKA_V_END);
    ASSERT_EQ(err, RD_KAFKA_RESP_ERR_NO_ERROR) << rd_kafka_err2str(err);
  }
  void Flush() {
    ASSERT_EQ(rd_kafka_flush(producer_, 30000), RD_KAFKA_RESP_ERR_NO_ERROR);
    ASSERT_EQ(rd_kafka_outq_len(producer_), 0);
  }
  void SetBrokerDown(bool down) {
    ASSERT_EQ(down ? rd_kafka_mock_broker_set_down(cluster_, 1) : rd_kafka_mock_broker_set_up(cluster_, 1),
              RD_KAFKA_RESP_ERR_NO_ERROR);
  }
  // The next `count` fetch requests fail with a leader change (the consumer re-fetches).
  void FailNextFetches(int count) {
    for (int i = 0; i < count; ++i) {
      rd_kafka_mock_push_request_errors(cluster_, /*ApiKey Fetch=*/1, 1, RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION);
    }
  }
  std::string Uri(const std::string& topic, const std::string& extra = "") const {
    return StrCat("kafka://", bootstraps_, "/", topic, "?group.id=tzrec_test&auto.offset.reset=earliest", extra);
  }

 private:
  rd_kafka_t* owner_ = nullptr;
  rd_kafka_mock_cluster_t* cluster_ = nullptr;
  rd_kafka_t* producer_ = nullptr;
  std::string bootstraps_;
};

// Runs `node write_arrow.mjs messages ...`: the Parquet file cut into messages of `rows` rows.
std::vector<std::string> ArrowMessages(const std::string& parquet, const std::string& out_dir, int rows,
                                       const std::string& form) {
  int exit_code = 0;
  const std::string output = testing::Shell(StrCat("cd '", InteropDir(), "' && node write_arrow.mjs messages '",
                                                   parquet, "' '", out_dir, "' ", rows, " ", form),
                                            &exit_code);
  if (exit_code != 0) throw Error("write_arrow.mjs failed: " + output);
  std::vector<std::string> messages;
  for (const std::string& file : ExpandInputPaths(out_dir + "/msg-*.bin")) messages.push_back(ReadFileToString(file));
  return messages;
}

TEST(KafkaUri, ParsesTorchEasyRecsFormAndNamesWhatIsMissing) {
  const KafkaUri uri = ParseKafkaUri("kafka://b1:9092,b2:9092/my.topic?group.id=g1&start.timestamp.ms=1711929600000"
                                     "&fetch.max.bytes=1048576&client.id=a%20b");
  EXPECT_EQ(uri.brokers, "b1:9092,b2:9092");
  EXPECT_EQ(uri.topic, "my.topic");
  EXPECT_EQ(uri.start_timestamp_ms.value_or(-1), 1711929600000);
  const std::vector<std::pair<std::string, std::string>> config = {
      {"group.id", "g1"}, {"fetch.max.bytes", "1048576"}, {"client.id", "a b"}, {"enable.auto.commit", "false"}};
  EXPECT_EQ(uri.config, config);
  EXPECT_EQ(ParseKafkaUri("kafka://b:1/t?group.id=g&enable.auto.commit=true").config.back().second, "true");
  EXPECT_TZREC_ERROR(ParseKafkaUri("kafka://b:1/t"), "group.id");
  EXPECT_TZREC_ERROR(ParseKafkaUri("kafka://b:1/?group.id=g"), "no Kafka topic");
  EXPECT_TZREC_ERROR(ParseKafkaUri("kafka:///t?group.id=g"), "no Kafka broker");
  EXPECT_TZREC_ERROR(ParseKafkaUri("kafka://b:1/t?group.id=g&start.timestamp.ms=-5"), "start.timestamp.ms=-5");
  EXPECT_TZREC_ERROR(ParseKafkaUri("odps://p/tables/t"), "not a kafka:// URI");
}

TEST(EventTimeSaves, QuorumBoundariesAndTargetsAsTorchEasyRecDefinesThem) {
  protos::TrainConfig train;
  train.set_save_checkpoints_timestamp_interval(10);
  train.add_save_checkpoints_timestamps(115);
  EventTimeSaves saves(train);
  ASSERT_TRUE(saves.enabled());
  EXPECT_EQ(saves.Reconcile({30, -1, 20, 10}), 20);  // quorum 0.5 of 4 ranks: 2 have reached 20
  train.set_save_checkpoints_timestamp_quorum(1.0);
  EXPECT_LT(EventTimeSaves(train).Reconcile({30, -1, 20, 10}), 0);  // one rank has no time yet
  train.set_save_checkpoints_timestamp_quorum(0.25);
  EXPECT_EQ(EventTimeSaves(train).Reconcile({1, 9, 2, 3}), 9);  // any one of 4 ranks
  EXPECT_FALSE(saves.ShouldSave(101));  // the first time seen is only the reference
  EXPECT_FALSE(saves.ShouldSave(109.5));
  EXPECT_TRUE(saves.ShouldSave(110));  // crossed 110
  saves.Saved(110);
  EXPECT_FALSE(saves.ShouldSave(114.9));
  EXPECT_TRUE(saves.ShouldSave(115));  // the absolute target
  saves.Saved(115);
  EXPECT_FALSE(saves.ShouldSave(119));
  EXPECT_TRUE(saves.ShouldSave(120));
  EXPECT_FALSE(saves.ShouldSave(-1));  // no event time: never a save
  saves.Restore(125);
  EXPECT_FALSE(saves.ShouldSave(129));
  EXPECT_FALSE(EventTimeSaves(protos::TrainConfig()).enabled());
  train.set_save_checkpoints_timestamp_quorum(0);
  EXPECT_TZREC_ERROR(EventTimeSaves{train}, "save_checkpoints_timestamp_quorum must be in (0, 1], got 0");
}

// Feature generation reads streamed rows as it reads files: TorchEasyRec's DIN FG_DAG config
// (sequences, lists) trained from a topic holding a Parquet file's rows ends bit for bit where
// training from the file itself ends.
TEST(KafkaFeatureGeneration, AnFgConfigTrainsFromATopicExactlyAsFromItsParquetFile) {
  SKIP_WITHOUT_ARROW_WRITER();
  TempDir dir;
  protos::EasyRecConfig config =
      LoadPipelineConfig(testing::ReferenceConfig("multi_tower_din_fg_mock_adagrad_init_acc.config"));
  // Its vocab_file lives in TorchEasyRec's test data: one of the same shape here.
  testing::WriteFile(dir.File("id_vocab_list_1"), "xyz\n<OOV>\nabc\nefg\n");
  for (auto& feature : *config.mutable_feature_configs()) {
    if (feature.has_id_feature() && feature.id_feature().has_vocab_file()) {
      feature.mutable_id_feature()->set_vocab_file(dir.File("id_vocab_list_1"));
    }
  }
  const std::string config_path = dir.File("pipeline.config");
  SavePipelineConfig(config, config_path);
  GenDataOptions gen;
  gen.output_dir = dir.File("data");
  gen.train_rows = 700;
  gen.eval_rows = 64;
  gen.num_files = 1;
  const GenDataResult data = GenerateMockData(config, gen);
  const std::string train_file = ExpandInputPaths(data.train_pattern).at(0);
  const auto messages = ArrowMessages(train_file, dir.File("messages"), 50, "stream");
  MockKafka kafka;
  kafka.CreateTopic("din", 1);
  for (size_t i = 0; i < messages.size(); ++i) kafka.Produce("din", 0, messages[i], 1700000000000 + static_cast<int64_t>(i));
  kafka.Flush();
  auto options = [&](const std::string& model_dir, const std::string& input, const std::string& type) {
    TrainEvalOptions o;
    o.pipeline_config_path = config_path;
    o.model_dir = dir.File(model_dir);
    o.train_input_path = input;
    o.eval_input_path = data.eval_pattern;
    o.edit_config_json = StrCat(R"({"data_config.dataset_type": ")", type, R"(", "data_config.batch_size": 64,
        "data_config.num_workers": 1, "data_config.shuffle": false, "train_config.num_epochs": 0,
        "train_config.num_steps": 9, "eval_config.num_steps": 1})");
    return o;
  };
  testing::DeterministicRuntime();
  TrainAndEvaluate(options("from_kafka", kafka.Uri("din"), "KafkaDataset"));
  testing::DeterministicRuntime();
  TrainAndEvaluate(options("from_parquet", train_file, "ParquetDataset"));
  const auto streamed = LoadCheckpointTensors(ListCheckpoints(dir.File("from_kafka")).back().path);
  const auto filed = LoadCheckpointTensors(ListCheckpoints(dir.File("from_parquet")).back().path);
  ASSERT_EQ(streamed.size(), filed.size());
  for (const auto& [name, tensor] : filed) {
    ASSERT_TRUE(streamed.count(name)) << name;
    EXPECT_TRUE(torch::equal(tensor, streamed.at(name))) << name;
  }
}

// TorchEasyRec's Criteo DeepFM on a 2-partition topic of 37-row messages (batches of 64 end
// inside messages), read by 2 readers.
class KafkaTraining : public ::testing::Test {
 protected:
  static constexpr const char* kTopic = "criteo";
  static constexpr int kRowsPerMessage = 37;

  void SetUp() override {
    SKIP_WITHOUT_ARROW_WRITER();
    protos::EasyRecConfig config = LoadPipelineConfig(testing::ReferenceConfig("deepfm_criteo.config"));
    EditConfigJson(&config, StrCat(R"({"data_config.dataset_type": "ParquetDataset", )", kSmallTables, "}"));
    GenDataOptions gen;
    gen.output_dir = dir_.File("data");
    gen.train_rows = 2000;
    gen.eval_rows = 256;
    gen.num_files = 1;
    data_ = GenerateMockData(config, gen);
    train_file_ = ExpandInputPaths(data_.train_pattern).at(0);
  }

  // The train file's rows as messages of 37 rows (the last has 2), message i to partition
  // (i + first_partition) % 2, one second apart from `first_ms`.
  void ProduceTrainRows(const std::string& topic, const std::string& form, bool create = true,
                        int first_partition = 0, int64_t first_ms = 1700000000000) {
    const std::string out = dir_.File(StrCat("messages_", topic, "_", form, "_", message_rows_[topic][0].size()));
    const auto messages = ArrowMessages(train_file_, out, kRowsPerMessage, form);
    ASSERT_EQ(messages.size(), 55u);  // 54 x 37 + 2 rows
    if (create) kafka_.CreateTopic(topic, 2);
    for (size_t i = 0; i < messages.size(); ++i) {
      const int partition = static_cast<int>((i + first_partition) % 2);
      kafka_.Produce(topic, partition, messages[i], first_ms + static_cast<int64_t>(i) * 1000);
      message_rows_[topic][partition].push_back(i + 1 < messages.size() ? kRowsPerMessage : 2);
    }
    kafka_.Flush();
  }

  TrainEvalOptions Options(int64_t steps, bool continue_train, const std::string& model_dir,
                           const std::string& topic = kTopic, const std::string& edits = "") {
    TrainEvalOptions options;
    options.pipeline_config_path = config_path_;
    options.model_dir = dir_.File(model_dir);
    options.continue_train = continue_train;
    options.train_input_path = kafka_.Uri(topic);
    options.eval_input_path = data_.eval_pattern;
    options.edit_config_json = StrCat(R"({"data_config.dataset_type": "KafkaDataset", )", kSmallTables,
                                      R"(, "data_config.batch_size": 64, "data_config.num_workers": 2,
        "data_config.shuffle": false, "train_config.num_epochs": 0, "train_config.num_steps": )",
                                      steps, R"(, "train_config.save_checkpoints_steps": 4,
        "eval_config.num_steps": 2)", edits, "}");
    return options;
  }

  // Rows of the topic a dataloader state says were consumed: whole messages up to each
  // partition's offset, plus the rows of a partly consumed next message.
  int64_t ConsumedRows(const std::string& checkpoint, const std::string& topic) {
    const auto state = nlohmann::json::parse(ReadFileToString(checkpoint + "/dataloader_state.json"));
    int64_t rows = 0;
    for (int partition = 0; partition < 2; ++partition) {
      const std::string full = KafkaSourceId(topic, partition);
      const int64_t last = state.contains(full) ? state[full].get<int64_t>() : -1;
      for (int64_t offset = 0; offset <= last; ++offset) rows += message_rows_[topic][partition].at(offset);
      const std::string partial = KafkaPartialSourceId(topic, partition);
      if (state.contains(partial) && (state[partial].get<int64_t>() >> kKafkaRowBits) == last + 1) {
        rows += (state[partial].get<int64_t>() & ((int64_t{1} << kKafkaRowBits) - 1)) + 1;
      }
    }
    return rows;
  }

  // Event time of row `row` of `partition` of kTopic as ProduceTrainRows(kTopic, ...) filled it
  // once: the timestamp of the message holding it, message i = 2 x offset + partition.
  double RowEventTime(int partition, int64_t row) {
    int64_t offset = 0;
    while (row >= message_rows_[kTopic][partition].at(offset)) row -= message_rows_[kTopic][partition][offset++];
    return 1700000000.0 + static_cast<double>(2 * offset + partition);
  }
  // The steps save_checkpoints_timestamp_interval 10 saves at, the rule applied literally to
  // each step's event time (the first only sets the reference), and the last step.
  static std::vector<int64_t> SimulatedSaves(int64_t steps, const std::function<double(int64_t)>& step_time) {
    std::vector<int64_t> saves;
    double reference = -1;
    for (int64_t k = 0; k < steps; ++k) {
      const double seconds = step_time(k);
      if (reference < 0) {
        reference = seconds;
      } else if (std::floor(seconds / 10) > std::floor(reference / 10)) {
        saves.push_back(k);
        reference = seconds;
      }
    }
    saves.push_back(steps - 1);
    return saves;
  }

  static constexpr const char* kSmallTables =
      R"("feature_configs[id_feature.num_buckets>2000].id_feature.num_buckets": 2000)";
  TempDir dir_;
  MockKafka kafka_;
  std::map<std::string, std::map<int, std::vector<int64_t>>> message_rows_;  // topic, partition -> rows by offset
  GenDataResult data_;
  std::string train_file_;
  std::string config_path_ = testing::ReferenceConfig("deepfm_criteo.config");
};

TEST_F(KafkaTraining, TrainsFromATopicResumesBitForBitAndEvaluatesOnParquet) {
  ProduceTrainRows(kTopic, "stream");
  testing::ExpectResumeIsBitForBit(
      [&](int64_t steps, bool continue_train, const std::string& name) {
        return Options(steps, continue_train, name);
      },
      dir_, 5, 12, "embedding_group", 1);
  // Every consumed row counted once: the positions add up to the batches trained (steps 0..S).
  for (const auto& checkpoint : ListCheckpoints(dir_.File("resumed"))) {
    EXPECT_EQ(ConsumedRows(checkpoint.path, kTopic), (checkpoint.step + 1) * 64) << checkpoint.path;
  }
  const auto state = nlohmann::json::parse(
      ReadFileToString(ListCheckpoints(dir_.File("resumed")).back().path + "/dataloader_state.json"));
  EXPECT_TRUE(state.contains(KafkaSourceId(kTopic, 0)) && state.contains(KafkaSourceId(kTopic, 1))) << state.dump();
  // An evaluation on a stream needs a step count (it would wait for data forever).
  TrainEvalOptions stream_eval = Options(2, false, "stream_eval");
  stream_eval.eval_input_path = kafka_.Uri(kTopic);
  stream_eval.edit_config_json.insert(stream_eval.edit_config_json.size() - 1, R"(, "eval_config.num_steps": 0)");
  EXPECT_TZREC_ERROR(TrainAndEvaluate(stream_eval), "is a Kafka stream, which has no end: set eval_config.num_steps");
  // The evaluation ran on the Parquet eval path.
  const auto results = testing::ReadJsonLines(dir_.File("resumed/train_eval_result_v2.txt"));
  ASSERT_FALSE(results.empty());
  EXPECT_EQ(results.back()["global_step"], 11);
  EXPECT_GT(results.back()["auc"].get<double>(), 0.0);
}

TEST_F(KafkaTraining, LoneRecordBatchesAreReadWithInputFieldsAndSchemasAreChecked) {
  ProduceTrainRows("lone", "lone");
  ProduceTrainRows(kTopic, "stream");
  // The columns' types, as input_fields_str (the Parquet file's types).
  ParquetFileReader parquet(train_file_);
  std::string fields;
  for (const auto& field : parquet.fields()) {
    std::string type = field.parquet_type;  // e.g. LIST<BYTE_ARRAY> -> ARRAY_STRING
    for (size_t at; (at = type.find("LIST<")) != std::string::npos;) type.replace(at, 5, "ARRAY_");
    type.erase(std::remove(type.begin(), type.end(), '>'), type.end());
    if (type.find("BYTE_ARRAY") != std::string::npos) type.replace(type.find("BYTE_ARRAY"), 10, "STRING");
    fields += StrCat(field.name, ":", type, ";");
  }
  // (--edit_config_json splits values at ';': the field goes into a config file instead.)
  auto with_fields = [&](const std::string& input_fields, const std::string& name) {
    protos::EasyRecConfig config = LoadPipelineConfig(testing::ReferenceConfig("deepfm_criteo.config"));
    config.mutable_data_config()->set_input_fields_str(input_fields);
    config_path_ = dir_.File(name + ".config");
    SavePipelineConfig(config, config_path_);
  };
  with_fields(fields, "lone");
  testing::DeterministicRuntime();
  TrainAndEvaluate(Options(3, false, "lone_model", "lone"));
  EXPECT_EQ(ListCheckpoints(dir_.File("lone_model")).back().step, 2);
  // Without input_fields a lone record batch cannot be read; the error names where it is.
  config_path_ = testing::ReferenceConfig("deepfm_criteo.config");
  // (Either reader may meet its first message first.)
  EXPECT_TZREC_ERROR(TrainAndEvaluate(Options(3, false, "no_fields", "lone")),
                     " offset 0: the message is a record batch without a schema");
  // A declared type the messages do not have: named with column, partition and offset.
  ASSERT_NE(fields.find("int_0:DOUBLE;"), std::string::npos) << fields;
  with_fields(std::string(fields).replace(fields.find("int_0:DOUBLE;"), 13, "int_0:STRING;"), "wrong");
  EXPECT_TZREC_ERROR(TrainAndEvaluate(Options(3, false, "wrong_type", kTopic)),
                     "column 'int_0' is double but data_config.input_fields says string");
}

// save_checkpoints_timestamp_interval: checkpoints where the batches' event time (their
// messages' timestamps, one second apart) crosses a multiple of 10 s, at the steps a literal
// simulation of the rule over the known message layout predicts, before and after a resume.
TEST_F(KafkaTraining, CheckpointsFollowTheEventTimeAcrossAResume) {
  ProduceTrainRows(kTopic, "stream");
  constexpr int64_t kSteps = 24;
  // Step k trains rows [64 * (k / 2), +64) of partition k % 2 (two readers in turn).
  const std::vector<int64_t> expected = SimulatedSaves(kSteps, [&](int64_t k) {
    return RowEventTime(static_cast<int>(k % 2), 64 * (k / 2) + 63);
  });
  ASSERT_GE(expected.size(), 4u);
  const std::string edits = R"(, "train_config.save_checkpoints_steps": 0, "train_config.save_checkpoints_timestamp_interval": 10)";
  auto steps_of = [&](const std::string& model_dir) {
    std::vector<int64_t> steps;
    for (const auto& checkpoint : ListCheckpoints(dir_.File(model_dir))) steps.push_back(checkpoint.step);
    return steps;
  };
  testing::DeterministicRuntime();
  TrainAndEvaluate(Options(kSteps, false, "by_time", kTopic, edits));
  EXPECT_EQ(steps_of("by_time"), expected);
  for (const auto& checkpoint : ListCheckpoints(dir_.File("by_time"))) {
    const auto state = nlohmann::json::parse(ReadFileToString(checkpoint.path + "/dataloader_state.json"));
    EXPECT_TRUE(state.contains("__data_ts_watermark__")) << checkpoint.path;
  }
  // Stopped after step 8 and continued: the same saves follow (the watermark carries over).
  testing::DeterministicRuntime();
  TrainAndEvaluate(Options(9, false, "by_time_resumed", kTopic, edits));
  TrainAndEvaluate(Options(kSteps, true, "by_time_resumed", kTopic, edits));
  std::vector<int64_t> resumed_expected;
  for (int64_t step : expected) {
    if (step > 8) resumed_expected.push_back(step);
  }
  std::vector<int64_t> resumed;
  for (int64_t step : steps_of("by_time_resumed")) {
    if (step > 8) resumed.push_back(step);
  }
  EXPECT_EQ(resumed, resumed_expected);
  EXPECT_TZREC_ERROR(TrainAndEvaluate(Options(2, false, "bad_quorum", kTopic,
                                              edits + R"(, "train_config.save_checkpoints_timestamp_quorum": 1.5)")),
                     "save_checkpoints_timestamp_quorum must be in (0, 1], got 1.5");
}

// Two ranks under `tzrec launch`, a partition each: the checkpoint's positions hold both
// partitions' rows, and event-time saves follow the quorum (0.5 of 2 ranks: the later rank's
// time) of the ranks' batch times, as a simulation over the message layout predicts.
TEST_F(KafkaTraining, TwoRanksSplitThePartitionsAndSaveOnTheQuorumEventTime) {
  ProduceTrainRows(kTopic, "stream");
  constexpr int64_t kSteps = 14;
  // Rank r's step k trains rows [64 k, +64) of partition r.
  const std::vector<int64_t> expected = SimulatedSaves(kSteps, [&](int64_t k) {
    return std::max(RowEventTime(0, 64 * k + 63), RowEventTime(1, 64 * k + 63));
  });
  ASSERT_GE(expected.size(), 3u);
  TrainEvalOptions options = Options(kSteps, false, "two_ranks", kTopic,
                                     R"(, "data_config.num_workers": 1, "train_config.save_checkpoints_steps": 0,
                                        "train_config.save_checkpoints_timestamp_interval": 10)");
  int port = 0;
  {  // a free port for the rendezvous
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    close(fd);
    port = ntohs(addr.sin_port);
  }
  int exit_code = 0;
  const std::string output = testing::Shell(
      StrCat(TZREC_BINARY, " launch --nproc_per_node 2 --master_port ", port, " -- train_eval",
             " --pipeline_config_path='", options.pipeline_config_path, "' --model_dir='", options.model_dir,
             "' --train_input_path='", options.train_input_path, "' --eval_input_path='", options.eval_input_path,
             "' --edit_config_json='", options.edit_config_json, "'"),
      &exit_code);
  ASSERT_EQ(exit_code, 0) << output;
  std::vector<int64_t> steps;
  for (const auto& checkpoint : ListCheckpoints(options.model_dir)) steps.push_back(checkpoint.step);
  EXPECT_EQ(steps, expected) << output;
  const std::string last = ListCheckpoints(options.model_dir).back().path;
  EXPECT_EQ(ConsumedRows(last, kTopic), 2 * kSteps * 64);
  const auto state = nlohmann::json::parse(ReadFileToString(last + "/dataloader_state.json"));
  EXPECT_TRUE(state.contains(KafkaSourceId(kTopic, 0)) && state.contains(KafkaSourceId(kTopic, 1))) << state.dump();
}

// Starts `tzrec train_eval` with `options` as a separate process, its output in `log`.
pid_t SpawnTrainEval(const TrainEvalOptions& options, const std::string& log) {
  std::vector<std::string> args = {TZREC_BINARY, "train_eval",
                                   "--pipeline_config_path=" + options.pipeline_config_path,
                                   "--model_dir=" + options.model_dir,
                                   "--train_input_path=" + options.train_input_path,
                                   "--eval_input_path=" + options.eval_input_path,
                                   "--edit_config_json=" + options.edit_config_json};
  if (options.continue_train) args.push_back("--continue_train");
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {  // only async-signal-safe calls until exec
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// Waits up to `seconds` for `done()`.
bool WaitFor(const std::function<bool()>& done, int seconds) {
  for (int i = 0; i < seconds * 10; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return done();
}

// Online training as a job runs it: the run catches up with the topic and waits for more;
// SIGTERM then saves the last step and exits 0; more messages arrive; a continued run is
// killed -9 after a checkpoint and continued again. The chain ends bit for bit where one
// uninterrupted run over the same messages ends.
TEST_F(KafkaTraining, SigtermSavesTheLastStepAndRunsKilledResumeExactly) {
  ProduceTrainRows(kTopic, "stream");
  const std::string log_edits = R"(, "train_config.log_step_count_steps": 1)";
  testing::DeterministicRuntime();
  // Each partition holds ~1000 rows: 15 batches of 64 each, then the readers wait.
  const pid_t first = SpawnTrainEval(Options(1000, false, "online", kTopic, log_edits), dir_.File("first.log"));
  ASSERT_GT(first, 0);
  const bool caught_up = WaitFor([&] {
    return PathExists(dir_.File("first.log")) &&
           ReadFileToString(dir_.File("first.log")).find("Training Epoch 0: 29it") != std::string::npos;
  }, 300);
  // The broker goes away for a while: a clear log line, the run waits and goes on.
  kafka_.SetBrokerDown(true);
  std::this_thread::sleep_for(std::chrono::seconds(3));
  kafka_.SetBrokerDown(false);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  kill(first, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(first, &status, 0), first);
  const std::string first_log = ReadFileToString(dir_.File("first.log"));
  ASSERT_TRUE(caught_up) << first_log;
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << first_log;
  EXPECT_EQ(first_log.find("Training Epoch 0: 30it"), std::string::npos) << "trained past the topic's rows";
  EXPECT_NE(first_log.find("SIGTERM: saving the last checkpoint (step 29)"), std::string::npos) << first_log;
  EXPECT_NE(first_log.find("brokers are down (_ALL_BROKERS_DOWN; librdkafka retries)"), std::string::npos) << first_log;
  ASSERT_EQ(ListCheckpoints(dir_.File("online")).back().step, 29);
  EXPECT_EQ(ConsumedRows(ListCheckpoints(dir_.File("online")).back().path, kTopic), 30 * 64);

  // More messages (the same rows again), then a continued run killed -9 after a checkpoint.
  ProduceTrainRows(kTopic, "stream", /*create=*/false, /*first_partition=*/1, 1700000100000);
  kafka_.FailNextFetches(3);  // broker errors on the way lose no row (checked at the end)
  const pid_t second = SpawnTrainEval(Options(56, true, "online", kTopic, log_edits), dir_.File("second.log"));
  ASSERT_GT(second, 0);
  const bool saved = WaitFor([&] { return ListCheckpoints(dir_.File("online")).back().step >= 40; }, 300);
  kill(second, SIGKILL);
  ASSERT_EQ(waitpid(second, &status, 0), second);
  ASSERT_TRUE(saved) << ReadFileToString(dir_.File("second.log"));
  TrainAndEvaluate(Options(56, true, "online"));

  testing::DeterministicRuntime();
  TrainAndEvaluate(Options(56, false, "straight_online"));
  const auto chained = LoadCheckpointTensors(ListCheckpoints(dir_.File("online")).back().path);
  const auto straight = LoadCheckpointTensors(ListCheckpoints(dir_.File("straight_online")).back().path);
  EXPECT_EQ(ListCheckpoints(dir_.File("online")).back().step, 55);
  ASSERT_EQ(chained.size(), straight.size());
  for (const auto& [name, tensor] : straight) {
    ASSERT_TRUE(chained.count(name)) << name;
    EXPECT_TRUE(torch::equal(tensor, chained.at(name))) << name;
  }
  EXPECT_EQ(ConsumedRows(ListCheckpoints(dir_.File("online")).back().path, kTopic), 56 * 64);
}

}  // namespace
}  // namespace tzrec
