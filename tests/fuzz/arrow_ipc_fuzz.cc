// libFuzzer target for the Arrow IPC decoder (data/arrow_ipc.h), KafkaDataset's message
// format: any bytes must decode or fail with tzrec::Error; crashes, sanitizer reports and
// other exceptions are bugs. Each input is decoded as a stream and as lone record batches
// of a fixed schema covering every supported column kind, and every decoded value is read.
//
// Built and run by tests/fuzz/run_arrow_ipc_fuzz.sh; not part of the CMake build.
#include <cstdint>
#include <string>
#include <vector>

#include "tzrec/common/error.h"
#include "tzrec/data/arrow_ipc.h"

namespace {

uint64_t TouchColumn(const tzrec::Column& column) {
  uint64_t sum = 0;
  for (size_t i = 0; i < column.size(); ++i) {
    sum += column.valid[i];
    if (column.type == tzrec::ColumnType::kString) sum += column.StringAt(i).size();
    if (column.type == tzrec::ColumnType::kInt64) sum += static_cast<uint64_t>(column.ints[i]);
    if (column.type == tzrec::ColumnType::kDouble) sum += column.doubles[i] > 0;
  }
  return sum;
}

uint64_t TouchPayload(const tzrec::ArrowPayload& payload) {
  uint64_t sum = 0;
  for (const auto& batch : payload.batches) {
    for (const auto& column : batch.columns) {
      for (const auto& level : column.lists) {
        for (size_t i = 0; i < level.size(); ++i) sum += level.valid[i] + level.offsets[i + 1] - level.offsets[i];
      }
      sum += TouchColumn(column.keys) + TouchColumn(column.values);
    }
  }
  return sum;
}

const tzrec::ArrowSchema& Schema() {
  static const tzrec::ArrowSchema schema = [] {
    tzrec::ArrowSchema s;
    for (auto [name, type] : std::vector<std::pair<std::string, std::string>>{
             {"i32", "INT32"}, {"i64", "INT64"}, {"f32", "FLOAT"}, {"f64", "DOUBLE"}, {"str", "STRING"},
             {"li64", "ARRAY_INT64"}, {"llist", "ARRAY_ARRAY_INT64"}, {"mstrf64", "MAP_STRING_DOUBLE"}}) {
      s.push_back(tzrec::ArrowFieldOfType(name, type, "fuzz"));
    }
    return s;
  }();
  return schema;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::string> wanted = {"i32", "i64", "f32", "f64", "str", "li64", "llist", "mstrf64"};
  static const std::vector<std::string> stream_wanted = {"i32", "i64", "str", "li64", "llist", "mstrf64", "b"};
  volatile uint64_t sink = 0;
  try {
    sink = sink + TouchPayload(tzrec::DecodeArrowIpc(data, size, nullptr, stream_wanted));
  } catch (const tzrec::Error&) {
  }
  try {
    sink = sink + TouchPayload(tzrec::DecodeArrowIpc(data, size, &Schema(), wanted));
  } catch (const tzrec::Error&) {
  }
  return 0;
}
