// Arrow IPC payloads decoded into columns (no LibTorch): what a KafkaDataset message holds.
//
// A payload is either an IPC stream (a Schema message, record-batch messages, optionally the
// end-of-stream marker) or lone encapsulated record-batch messages, which need the schema from
// elsewhere (data_config.input_fields). Message metadata is FlatBuffers, read through
// libflatbuffers' table accessors and bounds-checked with its Verifier, so a malformed payload
// is an error, never an out-of-bounds read. Compressed bodies and dictionary batches are
// refused; union, view and run-end-encoded columns can be neither decoded nor skipped.
//
// Columns come out in ParquetColumn form (the same Arrow-like structure the Parquet reader
// produces), so the two readers share the text form of lists and maps.
//
// Thread safety: free functions over caller-owned data; safe to call concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tzrec/data/parquet/parquet_column.h"

namespace tzrec {

struct ArrowField {
  enum class Kind { kNull, kInt, kFloat, kBool, kUtf8, kBinary, kList, kMap, kStruct, kOther };
  std::string name;
  Kind kind = Kind::kNull;
  int bit_width = 0;       // kInt: 8/16/32/64; kFloat: 16/32/64
  bool is_signed = true;   // kInt
  bool large = false;      // 64-bit offsets (large_utf8, large_binary, large_list)
  int type_id = 0;         // the Arrow Type union id (names kOther in errors)
  int buffers = 0;         // body buffers of this field itself (not of its children)
  std::vector<ArrowField> children;  // kList: item; kMap: entries struct {key, value}; kStruct

  // Arrow's spelling, ignoring nullability and item names: "int64", "list<utf8>",
  // "map<utf8, float>". Two columns are compatible iff their type names are equal.
  std::string TypeName() const;
};
using ArrowSchema = std::vector<ArrowField>;

// The Arrow type of a TorchEasyRec FieldType name ("INT64", "ARRAY_FLOAT", "MAP_STRING_INT32";
// INT and BIGINT are INT32 and INT64). Fails naming `where` for other names.
ArrowField ArrowFieldOfType(const std::string& name, const std::string& type_name,
                            const std::string& where);

struct ArrowRecordBatch {
  int64_t num_rows = 0;
  std::vector<ParquetColumn> columns;  // the wanted columns, in the order asked for
};

struct ArrowPayload {
  bool has_schema = false;  // the payload began with a Schema message
  ArrowSchema schema;       // the payload's schema, or the fallback one
  std::vector<ArrowRecordBatch> batches;
};

// Decodes every record batch of `data`. `fallback` is the schema of lone record-batch messages
// (null: such a payload is an error). `wanted`: column names to decode, in output order (each
// must exist in the schema); others are skipped. Errors say what is wrong, not where: callers
// prefix the message's location.
ArrowPayload DecodeArrowIpc(const uint8_t* data, size_t size, const ArrowSchema* fallback,
                            const std::vector<std::string>& wanted);

}  // namespace tzrec
