// Kafka topics as row sources (librdkafka; no LibTorch): KafkaDataset's reading half.
//
// Input path: TorchEasyRec's `kafka://<brokers>/<topic>?group.id=<g>&<librdkafka key>=<v>...`;
// every query key but `start.timestamp.ms` goes to librdkafka unchanged (enable.auto.commit is
// false unless given). Each message is an Arrow IPC payload (arrow_ipc.h): a stream with its
// schema, or lone record batches read with data_config.input_fields.
//
// Partitions are assigned, not subscribed: TorchEasyRec joins a consumer group and lets the
// broker spread partitions, so a rebalance can move a partition between readers mid-run and
// its rows are then read from wherever the group's committed offset (never committed here)
// says. Here partition i (in id order) belongs to global reader i % (world_size x
// num_workers), always, so a resumed run reads exactly the rows an uninterrupted one would.
//
// Positions (dataloader_state.json): "<topic>:<partition>" -> offset of the last message all
// of whose rows were consumed (TorchEasyRec's key; it resumes after that offset), and
// "<topic>:<partition>:partial" -> offset x 2^22 + row for a message consumed only up to
// `row` (a batch may end inside a message), so a resumed run skips exactly those rows
// (TorchEasyRec reads past the key and re-reads that message whole). Rows carry the message
// timestamp as their event time (RowPositions::event_time).
// A partition without a position starts at `start.timestamp.ms` when given (the earliest
// message at or after it), else where librdkafka's group offset / auto.offset.reset says.
//
// Thread safety: a source is used by one reader thread; Cancel may come from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tzrec/data/arrow_ipc.h"
#include "tzrec/data/data_position.h"
#include "tzrec/data/row_source.h"

namespace tzrec {

struct KafkaUri {
  std::string uri;      // as given (names errors)
  std::string brokers;  // bootstrap.servers
  std::string topic;
  std::vector<std::pair<std::string, std::string>> config;  // librdkafka settings, in order
  std::optional<int64_t> start_timestamp_ms;
};
// Whether `path` names a Kafka topic (kafka://...) rather than files.
bool IsKafkaUri(const std::string& path);
// Fails naming `uri` when it is not kafka://brokers/topic?group.id=...
KafkaUri ParseKafkaUri(const std::string& uri);

// Partition ids of the topic, ascending, from the brokers' metadata.
std::vector<int32_t> KafkaTopicPartitions(const KafkaUri& uri);

struct KafkaInput {
  KafkaUri uri;
  std::vector<std::string> columns;  // projection, in output order
  // input_fields as Arrow types; empty when messages carry their schema. With it, messages
  // that do carry one must have these columns with these types.
  ArrowSchema configured;
  std::string list_separator;  // joins LIST items into text (fg_encoded_multival_sep)
  std::vector<int32_t> partitions;  // this reader's
  int poll_timeout_ms = 100;        // how often a waiting Next looks at Cancel
};

// Position keys of a partition (see above).
std::string KafkaSourceId(const std::string& topic, int32_t partition);
std::string KafkaPartialSourceId(const std::string& topic, int32_t partition);
constexpr int kKafkaRowBits = 22;  // rows per message < 2^22 in partial positions

std::unique_ptr<RowSource> MakeKafkaRowSource(KafkaInput input, const DataloaderState* resume);

}  // namespace tzrec
