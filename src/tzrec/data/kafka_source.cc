#include "tzrec/data/kafka_source.h"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <cctype>
#include <map>
#include <set>
#include <thread>

#include "tzrec/common/error.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"
#include "tzrec/data/parquet/parquet_reader.h"

namespace tzrec {
namespace {

constexpr int kMetadataTimeoutMs = 30000;

std::string PercentDecode(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '+') {
      out += ' ';
    } else if (text[i] == '%' && i + 2 < text.size() && std::isxdigit(static_cast<unsigned char>(text[i + 1])) &&
               std::isxdigit(static_cast<unsigned char>(text[i + 2]))) {
      out += static_cast<char>(std::stoi(std::string(text.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

// Client-level errors (a broker down, all brokers down: librdkafka reconnects by itself),
// served while the consumer is polled; `opaque` is the consumer's KafkaUri.
void LogClientError(rd_kafka_t*, int err, const char* reason, void* opaque) {
  LOG_WARNING << static_cast<const KafkaUri*>(opaque)->uri << ": " << reason << " ("
              << rd_kafka_err2name(static_cast<rd_kafka_resp_err_t>(err)) << "; librdkafka retries)";
}

// An rd_kafka_t with the URI's settings (a consumer), or a failure naming the setting. `uri`
// must outlive it.
rd_kafka_t* NewConsumer(const KafkaUri& uri) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set_error_cb(conf, LogClientError);
  rd_kafka_conf_set_opaque(conf, const_cast<KafkaUri*>(&uri));
  char error[512];
  auto set = [&](const std::string& key, const std::string& value) {
    if (rd_kafka_conf_set(conf, key.c_str(), value.c_str(), error, sizeof(error)) != RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      Fail(uri.uri, ": ", key, "=", value, ": ", error);
    }
  };
  set("bootstrap.servers", uri.brokers);
  for (const auto& [key, value] : uri.config) set(key, value);
  rd_kafka_t* consumer = rd_kafka_new(RD_KAFKA_CONSUMER, conf, error, sizeof(error));
  if (!consumer) {
    rd_kafka_conf_destroy(conf);
    Fail(uri.uri, ": cannot create a Kafka consumer: ", error);
  }
  return consumer;
}

struct ConsumerDeleter {
  void operator()(rd_kafka_t* consumer) const {
    rd_kafka_consumer_close(consumer);
    rd_kafka_destroy(consumer);
  }
};
using ConsumerPtr = std::unique_ptr<rd_kafka_t, ConsumerDeleter>;

struct ListDeleter {
  void operator()(rd_kafka_topic_partition_list_t* list) const { rd_kafka_topic_partition_list_destroy(list); }
};
using PartitionListPtr = std::unique_ptr<rd_kafka_topic_partition_list_t, ListDeleter>;

// One decoded record batch of a message, its rows handed out from `next_row`.
struct PendingRows {
  int32_t partition;
  int64_t offset;
  int64_t first_row;     // of this batch within its message
  int64_t message_rows;  // all batches of the message
  double event_time;     // the message's timestamp in seconds, -1 when it has none
  ArrowRecordBatch batch;
  int64_t next_row = 0;  // within `batch`
};

class KafkaRowSource : public RowSource {
 public:
  KafkaRowSource(KafkaInput input, const DataloaderState* resume) : input_(std::move(input)) {
    if (input_.partitions.empty()) return;
    consumer_.reset(NewConsumer(input_.uri));
    // Client-level errors (a broker down, all brokers down) then arrive through
    // rd_kafka_consumer_poll too, where Poll logs them.
    rd_kafka_poll_set_consumer(consumer_.get());
    PartitionListPtr list(rd_kafka_topic_partition_list_new(static_cast<int>(input_.partitions.size())));
    std::vector<int32_t> by_time;
    for (int32_t partition : input_.partitions) {
      rd_kafka_topic_partition_t* entry =
          rd_kafka_topic_partition_list_add(list.get(), input_.uri.topic.c_str(), partition);
      entry->offset = RD_KAFKA_OFFSET_INVALID;  // the group's committed offset, else auto.offset.reset
      if (resume) {
        auto full = resume->consumed().find(KafkaSourceId(input_.uri.topic, partition));
        if (full != resume->consumed().end()) {
          entry->offset = full->second + 1;
          resumed_.insert(partition);
          auto partial = resume->consumed().find(KafkaPartialSourceId(input_.uri.topic, partition));
          if (partial != resume->consumed().end() && (partial->second >> kKafkaRowBits) == entry->offset) {
            skip_rows_[partition] = {entry->offset, (partial->second & ((int64_t{1} << kKafkaRowBits) - 1)) + 1};
          }
          continue;
        }
      }
      if (input_.uri.start_timestamp_ms) {
        entry->offset = *input_.uri.start_timestamp_ms;  // offsets_for_times reads the time here
        by_time.push_back(partition);
      }
    }
    if (!by_time.empty()) ResolveStartTimes(list.get());
    const rd_kafka_resp_err_t err = rd_kafka_assign(consumer_.get(), list.get());
    if (err) Fail(input_.uri.uri, ": cannot assign partitions: ", rd_kafka_err2str(err));
    std::vector<std::string> shown;
    for (int i = 0; i < list->cnt; ++i) {
      shown.push_back(StrCat(list->elems[i].partition, "@",
                             list->elems[i].offset < 0 ? std::string("group/auto.offset.reset")
                                                       : std::to_string(list->elems[i].offset)));
    }
    LOG_INFO << "KafkaDataset: topic " << input_.uri.topic << " partitions " << Join(shown, ", ");
  }

  void Cancel() override { cancelled_.store(true); }

  bool Next(size_t max_rows, RecordBatch* records, RowPositions* positions) override {
    if (!consumer_) {
      // A reader without partitions still has to wait for the end of the run (streams do not end).
      while (!cancelled_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(input_.poll_timeout_ms));
      return false;
    }
    while (pending_.empty() || pending_.front().next_row >= pending_.front().batch.num_rows) {
      if (!pending_.empty()) {
        pending_.pop_front();
        continue;
      }
      if (cancelled_.load()) return false;
      Poll();
    }
    if (cancelled_.load()) return false;
    PendingRows& rows = pending_.front();
    const int64_t begin = rows.next_row;
    const int64_t end = std::min<int64_t>(rows.batch.num_rows, begin + static_cast<int64_t>(max_rows));
    rows.next_row = end;
    records->source = StrCat("kafka topic ", input_.uri.topic, " partition ", rows.partition, " offset ", rows.offset, " row");
    records->line_numbers.resize(static_cast<size_t>(end - begin));
    records->columns.clear();
    ParquetReadOptions text;
    text.list_separator = input_.list_separator;
    for (size_t c = 0; c < rows.batch.columns.size(); ++c) {
      records->columns.push_back(ParquetColumnRows(rows.batch.columns[c], static_cast<size_t>(begin),
                                                   static_cast<size_t>(end), text, float_items_[c],
                                                   float_keys_[c]));
    }
    *positions = RowPositions();
    const std::string full = KafkaSourceId(input_.uri.topic, rows.partition);
    const std::string partial = KafkaPartialSourceId(input_.uri.topic, rows.partition);
    for (int64_t r = begin; r < end; ++r) {
      const int64_t row_in_message = rows.first_row + r;
      records->line_numbers[static_cast<size_t>(r - begin)] = row_in_message + 1;
      if (row_in_message + 1 == rows.message_rows) {
        positions->AddRange(full, rows.offset, 1);
      } else {
        positions->AddRange(partial, (rows.offset << kKafkaRowBits) + row_in_message, 1);
      }
    }
    positions->event_time.assign(static_cast<size_t>(end - begin), rows.event_time);
    return true;
  }

 private:
  void ResolveStartTimes(rd_kafka_topic_partition_list_t* list) {
    // Only the partitions without a resume position carry a time; resolve a copy of them.
    PartitionListPtr timed(rd_kafka_topic_partition_list_new(list->cnt));
    for (int i = 0; i < list->cnt; ++i) {
      if (list->elems[i].offset >= 0 && !HasResumePosition(list->elems[i].partition)) {
        rd_kafka_topic_partition_list_add(timed.get(), list->elems[i].topic, list->elems[i].partition)->offset =
            list->elems[i].offset;
      }
    }
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
    for (int attempt = 0; attempt < 3; ++attempt) {
      err = rd_kafka_offsets_for_times(consumer_.get(), timed.get(), kMetadataTimeoutMs);
      if (!err) break;
      LOG_WARNING << input_.uri.uri << ": offsets_for_times attempt " << attempt + 1 << " failed: " << rd_kafka_err2str(err);
    }
    // A failure is fatal: falling back to auto.offset.reset could replay the whole topic.
    if (err) Fail(input_.uri.uri, ": cannot resolve start.timestamp.ms to offsets: ", rd_kafka_err2str(err));
    for (int i = 0; i < timed->cnt; ++i) {
      rd_kafka_topic_partition_t* entry =
          rd_kafka_topic_partition_list_find(list, timed->elems[i].topic, timed->elems[i].partition);
      if (timed->elems[i].offset >= 0) {
        entry->offset = timed->elems[i].offset;
      } else {
        // No message at or after the time yet: read from the end, i.e. what arrives next.
        LOG_WARNING << input_.uri.uri << ": partition " << entry->partition << " has no message at or after "
                    << *input_.uri.start_timestamp_ms << " ms; reading new messages only";
        entry->offset = RD_KAFKA_OFFSET_END;
      }
    }
  }

  bool HasResumePosition(int32_t partition) const { return resumed_.count(partition) > 0; }
  const ArrowSchema& configured() const { return input_.configured; }

  // Waits up to poll_timeout_ms for one message; decodes it into pending_.
  void Poll() {
    rd_kafka_message_t* message = rd_kafka_consumer_poll(consumer_.get(), input_.poll_timeout_ms);
    if (!message) return;
    std::unique_ptr<rd_kafka_message_t, void (*)(rd_kafka_message_t*)> owned(message, rd_kafka_message_destroy);
    if (message->err) {
      if (message->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) return;
      const std::string what = rd_kafka_message_errstr(message);
      if (message->err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC || message->err == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED ||
          message->err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION || message->err == RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE ||
          message->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET) {
        Fail(input_.uri.uri, ": ", what);
      }
      // Broker and transport errors are retried by librdkafka; say so once a second at most.
      const auto now = std::chrono::steady_clock::now();
      if (now - last_error_log_ > std::chrono::seconds(1)) {
        LOG_WARNING << input_.uri.uri << ": " << what << " (" << rd_kafka_err2name(message->err) << "; librdkafka retries)";
        last_error_log_ = now;
      }
      return;
    }
    const int32_t partition = message->partition;
    const int64_t offset = message->offset;
    const std::string where = StrCat(input_.uri.uri, ": partition ", partition, " offset ", offset);
    if (offset >= (int64_t{1} << (63 - kKafkaRowBits))) Fail(where, ": offset too large for positions");
    ArrowPayload payload;
    try {
      payload = DecodeArrowIpc(static_cast<const uint8_t*>(message->payload), message->len,
                               configured().empty() ? nullptr : &configured(), input_.columns);
    } catch (const Error& e) {
      Fail(where, ": ", e.what());
    }
    CheckSchema(payload, where);
    int64_t rows = 0;
    for (const ArrowRecordBatch& batch : payload.batches) rows += batch.num_rows;
    if (rows >= (int64_t{1} << kKafkaRowBits)) Fail(where, ": ", rows, " rows in one message (at most 2^22)");
    rd_kafka_timestamp_type_t timestamp_type;
    const int64_t timestamp_ms = rd_kafka_message_timestamp(message, &timestamp_type);
    const double event_time = timestamp_ms >= 0 ? static_cast<double>(timestamp_ms) / 1000.0 : -1.0;
    int64_t skip = 0;
    auto resumed = skip_rows_.find(partition);
    if (resumed != skip_rows_.end() && resumed->second.first == offset) {
      skip = resumed->second.second;
      skip_rows_.erase(resumed);
    }
    int64_t first = 0;
    for (ArrowRecordBatch& batch : payload.batches) {
      PendingRows pending{partition, offset, first, rows, event_time, std::move(batch)};
      pending.next_row = std::clamp<int64_t>(skip - first, 0, pending.batch.num_rows);
      first += pending.batch.num_rows;
      pending_.push_back(std::move(pending));
    }
  }

  // Columns must keep their type across messages: the types come from input_fields, else from
  // the first message read.
  void CheckSchema(const ArrowPayload& payload, const std::string& where) {
    if (expected_.empty()) {
      expected_ = payload.schema;
      for (const std::string& column : input_.columns) {
        for (const ArrowField& field : payload.schema) {
          if (field.name != column) continue;
          const ArrowField* leaf = &field;
          while (leaf->kind == ArrowField::Kind::kList) leaf = &leaf->children[0];
          const bool is_map = leaf->kind == ArrowField::Kind::kMap;
          const ArrowField& items = is_map ? leaf->children[0].children[1] : *leaf;
          float_items_.push_back(items.kind == ArrowField::Kind::kFloat && items.bit_width == 32);
          float_keys_.push_back(is_map && leaf->children[0].children[0].kind == ArrowField::Kind::kFloat &&
                                leaf->children[0].children[0].bit_width == 32);
          break;
        }
      }
      if (!configured().empty()) expected_ = configured();
    }
    for (const std::string& column : input_.columns) {
      auto find = [&](const ArrowSchema& schema) -> const ArrowField* {
        for (const ArrowField& field : schema) {
          if (field.name == column) return &field;
        }
        return nullptr;
      };
      const ArrowField* want = find(expected_);
      const ArrowField* got = find(payload.schema);
      if (want && got && want->TypeName() != got->TypeName()) {
        Fail(where, ": column '", column, "' is ", got->TypeName(), " but ",
             configured().empty() ? "earlier messages had " : "data_config.input_fields says ", want->TypeName());
      }
    }
  }

  KafkaInput input_;
  ArrowSchema expected_;
  std::vector<bool> float_items_;
  std::vector<bool> float_keys_;
  ConsumerPtr consumer_;
  std::map<int32_t, std::pair<int64_t, int64_t>> skip_rows_;  // partition -> (offset, rows done)
  std::set<int32_t> resumed_;  // partitions with a resume position
  std::deque<PendingRows> pending_;
  std::atomic<bool> cancelled_{false};
  std::chrono::steady_clock::time_point last_error_log_{};
};

}  // namespace

constexpr std::string_view kKafkaScheme = "kafka://";

bool IsKafkaUri(const std::string& path) { return StartsWith(path, kKafkaScheme); }

KafkaUri ParseKafkaUri(const std::string& uri) {
  KafkaUri out;
  out.uri = uri;
  if (!IsKafkaUri(uri)) Fail("input path '", uri, "' is not a kafka:// URI");
  std::string_view rest = std::string_view(uri).substr(kKafkaScheme.size());
  const size_t query = rest.find('?');
  std::string_view path = rest.substr(0, query);
  const size_t slash = path.find('/');
  out.brokers = std::string(path.substr(0, slash));
  if (out.brokers.empty()) Fail("input path '", uri, "': no Kafka broker (kafka://host:port/topic?group.id=...)");
  out.topic = slash == std::string_view::npos ? "" : PercentDecode(path.substr(slash + 1));
  if (out.topic.empty() || out.topic.find('/') != std::string::npos) {
    Fail("input path '", uri, "': no Kafka topic (kafka://host:port/topic?group.id=...)");
  }
  bool has_group = false;
  bool has_commit = false;
  if (query != std::string_view::npos) {
    for (std::string_view item : SplitView(rest.substr(query + 1), "&")) {
      if (item.empty()) continue;
      const size_t eq = item.find('=');
      const std::string key = PercentDecode(item.substr(0, eq));
      const std::string value = eq == std::string_view::npos ? "" : PercentDecode(item.substr(eq + 1));
      if (key == "start.timestamp.ms") {
        int64_t ms;
        if (!ParseInt64(value, &ms) || ms < 0) {
          Fail("input path '", uri, "': start.timestamp.ms=", value, " is not a non-negative integer");
        }
        out.start_timestamp_ms = ms;
        continue;
      }
      if (key == "bootstrap.servers") Fail("input path '", uri, "': give the brokers before the topic, not as bootstrap.servers");
      has_group = has_group || key == "group.id";
      has_commit = has_commit || key == "enable.auto.commit";
      out.config.emplace_back(key, value);
    }
  }
  if (!has_group) Fail("input path '", uri, "': no consumer group (add ?group.id=<name>)");
  if (!has_commit) out.config.emplace_back("enable.auto.commit", "false");
  return out;
}

std::vector<int32_t> KafkaTopicPartitions(const KafkaUri& uri) {
  ConsumerPtr consumer(NewConsumer(uri));
  rd_kafka_topic_t* topic = rd_kafka_topic_new(consumer.get(), uri.topic.c_str(), nullptr);
  const rd_kafka_metadata_t* metadata = nullptr;
  rd_kafka_resp_err_t err = rd_kafka_metadata(consumer.get(), 0, topic, &metadata, kMetadataTimeoutMs);
  rd_kafka_topic_destroy(topic);
  if (err) Fail(uri.uri, ": cannot read the topic's metadata: ", rd_kafka_err2str(err));
  std::vector<int32_t> partitions;
  err = metadata->topic_cnt == 1 ? metadata->topics[0].err : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
  if (!err) {
    for (int i = 0; i < metadata->topics[0].partition_cnt; ++i) partitions.push_back(metadata->topics[0].partitions[i].id);
  }
  rd_kafka_metadata_destroy(metadata);
  if (err) Fail(uri.uri, ": topic '", uri.topic, "': ", rd_kafka_err2str(err));
  if (partitions.empty()) Fail(uri.uri, ": topic '", uri.topic, "' has no partitions");
  std::sort(partitions.begin(), partitions.end());
  return partitions;
}

std::string KafkaSourceId(const std::string& topic, int32_t partition) {
  return StrCat(topic, ":", partition);
}

std::string KafkaPartialSourceId(const std::string& topic, int32_t partition) {
  return StrCat(topic, ":", partition, ":partial");
}

std::unique_ptr<RowSource> MakeKafkaRowSource(KafkaInput input, const DataloaderState* resume) {
  return std::make_unique<KafkaRowSource>(std::move(input), resume);
}

}  // namespace tzrec
