// KafkaDataset: a topic's partitions spread over world_size x num_workers readers (partition i
// in id order to global reader i % readers, see data/kafka_source.h), each message an Arrow
// IPC payload. Reads input_fields / input_fields_str (the schema of lone record-batch
// messages, and the types messages with a schema must have). The stream does not end: a
// training run stops at num_steps or when stopped.
#include <algorithm>

#include "tzrec/common/error.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"
#include "tzrec/data/kafka_source.h"
#include "tzrec/input/dataset_reader.h"

namespace tzrec {
namespace {

ArrowSchema InputFieldsAsArrow(const protos::DataConfig& data_config) {
  ArrowSchema schema;
  for (const InputFieldSpec& field : DeclaredInputFields(data_config)) {
    if (field.type.empty()) {
      Fail(field.where, ": '", field.name, "' needs input_type (KafkaDataset reads record batches by it)");
    }
    schema.push_back(ArrowFieldOfType(field.name, field.type, field.where));
  }
  return schema;
}

class KafkaDatasetReader : public DatasetReader {
 public:
  KafkaDatasetReader(const protos::DataConfig& data_config, DatasetOptions* options)
      : uri_(ParseKafkaUri(options->input_path)), configured_(InputFieldsAsArrow(data_config)) {
    for (const std::string& column : options->columns) {
      if (configured_.empty()) break;
      const bool found = std::any_of(configured_.begin(), configured_.end(),
                                     [&](const ArrowField& f) { return f.name == column; });
      if (!found) Fail("data_config.input_fields: no field '", column, "', which the features, labels or weights read");
    }
    partitions_ = KafkaTopicPartitions(uri_);
    const size_t count = partitions_.size();
    if (count < static_cast<size_t>(options->world_size)) {
      Fail(options->input_path, ": topic '", uri_.topic, "' has ", count, " partitions but the job has ",
           options->world_size, " ranks; each rank reads whole partitions, so it needs at least one per rank");
    }
    const size_t per_rank = count / static_cast<size_t>(options->world_size);
    if (static_cast<size_t>(options->num_workers) > per_rank) {
      LOG_INFO << "num_workers reduced from " << options->num_workers << " to " << per_rank
               << " (one reader per Kafka partition)";
      options->num_workers = static_cast<int>(per_rank);
    }
    if (count % (static_cast<size_t>(options->world_size) * options->num_workers) != 0) {
      LOG_WARNING << "topic '" << uri_.topic << "' has " << count << " partitions for "
                  << options->world_size * options->num_workers
                  << " readers: some readers get more partitions than others";
    }
    options_ = *options;
  }

  std::vector<std::unique_ptr<RowSource>> Open(int64_t epoch, const DataloaderState* resume) const override {
    const int workers = options_.num_workers;
    const size_t readers = static_cast<size_t>(options_.world_size) * workers;
    std::vector<std::unique_ptr<RowSource>> sources;
    for (int w = 0; w < workers; ++w) {
      KafkaInput input;
      input.uri = uri_;
      input.columns = options_.columns;
      input.configured = configured_;
      input.list_separator = options_.list_separator;
      for (size_t i = static_cast<size_t>(options_.rank) * workers + w; i < partitions_.size(); i += readers) {
        input.partitions.push_back(partitions_[i]);
      }
      sources.push_back(MakeKafkaRowSource(std::move(input), resume));
    }
    return sources;
  }

 private:
  KafkaUri uri_;
  ArrowSchema configured_;
  std::vector<int32_t> partitions_;
  DatasetOptions options_;
};

std::unique_ptr<DatasetReader> MakeKafkaReader(const protos::DataConfig& data_config, DatasetOptions* options) {
  return std::make_unique<KafkaDatasetReader>(data_config, options);
}

}  // namespace

TZREC_REGISTER(DatasetReaderRegistry(), "KafkaDataset", MakeKafkaReader, "input_fields.*", "input_fields_str");

}  // namespace tzrec
