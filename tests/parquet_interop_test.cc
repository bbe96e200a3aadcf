// Interop of our Parquet reader and writer with two independent implementations run under
// node: parquet-wasm (Apache arrow-rs compiled to wasm) and hyparquet / hyparquet-writer; and
// of our Arrow IPC decoder (KafkaDataset's payloads) with apache-arrow's JS writer.
//
// Direction 1: tests/interop/write_files.mjs writes files with every codec, page version,
// dictionary on/off and the delta/byte-stream-split encodings; our reader must return exactly
// the values in its manifest. Direction 2: our writer writes the same dataset with every codec;
// both JS readers must read back exactly those values. Values are compared in the canonical
// JSON form described in tests/interop/canonical.mjs.
//
// Needs `npm ci` in tests/interop (scripts/test.sh does it); without node_modules the tests
// skip with a visible message.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "test_util.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/strings.h"
#include "tzrec/data/arrow_ipc.h"
#include "tzrec/data/parquet/parquet_reader.h"
#include "tzrec/data/parquet/parquet_writer.h"

namespace tzrec {
namespace {

using json = nlohmann::json;
using testing::TempDir;

std::string InteropDir() { return std::string(TZREC_SOURCE_DIR) + "/tests/interop"; }

// Empty when the JS packages are installed, else why not.
std::string InteropUnavailable() {
  for (const char* package :
       {"parquet-wasm", "apache-arrow", "hyparquet", "hyparquet-writer", "hyparquet-compressors"}) {
    if (!PathExists(InteropDir() + "/node_modules/" + package + "/package.json")) {
      return StrCat("skipping Parquet interop: npm unreachable (tests/interop/node_modules/",
                    package, " missing; run `npm ci` in tests/interop)");
    }
  }
  if (std::system("node --version >/dev/null 2>&1") != 0) {
    return "skipping Parquet interop: node is not on PATH";
  }
  return "";
}

#define SKIP_WITHOUT_NODE_PACKAGES()                          \
  do {                                                        \
    std::string why = InteropUnavailable();                   \
    if (!why.empty()) {                                       \
      std::fprintf(stderr, "[ SKIPPED  ] %s\n", why.c_str()); \
      GTEST_SKIP() << why;                                    \
    }                                                         \
  } while (0)

// Runs `node SCRIPT ARGS...` in tests/interop; returns stdout, fails the test on a non-zero exit.
std::string RunNode(const std::string& script_and_args) {
  std::string command = "cd '" + InteropDir() + "' && node " + script_and_args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) throw Error("cannot run " + command);
  std::string output;
  char buffer[65536];
  size_t got;
  while ((got = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, got);
  int status = pclose(pipe);
  if (status != 0) throw Error("`" + command + "` failed: " + output);
  return output;
}

// ------------------------------------------------------------------- canonical JSON (C++)

std::string Inner(const std::string& kind, size_t prefix) {
  return kind.substr(prefix, kind.size() - prefix - 1);
}

std::pair<std::string, std::string> MapKinds(const std::string& kind) {
  std::string inner = Inner(kind, 4);
  size_t comma = inner.find(',');
  return {inner.substr(0, comma), inner.substr(comma + 1)};
}

json CanonicalValue(const Column& column, size_t i, const std::string& kind) {
  if (column.IsNull(i)) return nullptr;
  if (kind == "int") return std::to_string(column.ints[i]);
  if (kind == "bool") return column.ints[i] != 0;
  if (kind == "string") return std::string(column.StringAt(i));
  double value = column.doubles[i];
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  if (value == 0 && std::signbit(value)) return "-0";
  return value;
}

json CanonicalList(const ParquetColumn& column, size_t level, size_t index,
                   const std::string& kind) {
  const ParquetListLevel& lists = column.lists[level];
  if (!lists.valid[index]) return nullptr;
  json items = json::array();
  for (uint32_t child = lists.offsets[index]; child < lists.offsets[index + 1]; ++child) {
    if (level + 1 < column.lists.size()) {
      items.push_back(CanonicalList(column, level + 1, child, Inner(kind, 5)));
    } else if (column.is_map) {
      auto [key_kind, value_kind] = MapKinds(kind);
      items.push_back(json::array({CanonicalValue(column.keys, child, key_kind),
                                   CanonicalValue(column.values, child, value_kind)}));
    } else {
      items.push_back(CanonicalValue(column.values, child, Inner(kind, 5)));
    }
  }
  return items;
}

void AppendCanonicalRows(const ParquetColumn& column, const std::string& kind, json* rows) {
  for (size_t row = 0; row < column.num_rows(); ++row) {
    rows->push_back(column.lists.empty() ? CanonicalValue(column.values, row, kind)
                                         : CanonicalList(column, 0, row, kind));
  }
}

// A canonical float: a JSON number or one of the strings for values JSON cannot hold.
double SpecialOrNumber(const json& value) {
  if (!value.is_string()) return value.get<double>();
  std::string special = value.get<std::string>();
  if (special == "NaN") return std::nan("");
  if (special == "-0") return -0.0;
  return special == "Infinity" ? INFINITY : -INFINITY;
}

// The text our reader should give a nested cell, from its canonical JSON (null = null cell).
std::optional<std::string> ExpectedText(const json& value, const std::string& kind,
                                        const ParquetReadOptions& options) {
  if (value.is_null()) return std::nullopt;
  if (kind.rfind("list<", 0) == 0 || kind.rfind("map<", 0) == 0) {
    bool is_map = kind[0] == 'm';
    bool innermost = is_map || Inner(kind, 5).rfind("list<", 0) != 0;
    std::string text;
    for (size_t i = 0; i < value.size(); ++i) {
      if (i > 0) text += innermost ? options.list_separator : options.nested_list_separator;
      if (is_map) {
        auto [key_kind, value_kind] = MapKinds(kind);
        text += ExpectedText(value[i][0], key_kind, options).value_or("") +
                options.map_kv_separator +
                ExpectedText(value[i][1], value_kind, options).value_or("");
      } else {
        text += ExpectedText(value[i], Inner(kind, 5), options).value_or("");
      }
    }
    return text;
  }
  if (kind == "int" || kind == "string") return value.get<std::string>();
  if (kind == "bool") return std::string(value.get<bool>() ? "1" : "0");
  double number = SpecialOrNumber(value);
  char buffer[40];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), number);
  return std::string(buffer, result.ptr);
}

// ------------------------------------------------------------------ canonical JSON -> ours

Column ColumnFromJson(const std::vector<const json*>& values, const std::string& kind) {
  Column column;
  column.type = kind == "string"  ? ColumnType::kString
                : kind == "float" ? ColumnType::kDouble
                                  : ColumnType::kInt64;
  for (const json* value : values) {
    bool valid = !value->is_null();
    column.valid.push_back(valid);
    if (column.type == ColumnType::kString) {
      column.chars += valid ? value->get<std::string>() : "";
      column.offsets.push_back(static_cast<uint32_t>(column.chars.size()));
    } else if (kind == "bool") {
      column.ints.push_back(valid && value->get<bool>());
    } else if (kind == "int") {
      column.ints.push_back(valid ? std::stoll(value->get<std::string>()) : 0);
    } else if (!valid) {
      column.doubles.push_back(0);
    } else {
      column.doubles.push_back(SpecialOrNumber(*value));
    }
  }
  return column;
}

ParquetColumn ParquetColumnFromJson(const std::string& name, const json& rows,
                                    const std::string& kind) {
  ParquetColumn column;
  column.name = name;
  std::vector<const json*> level_items;
  for (const json& row : rows) level_items.push_back(&row);
  std::string item_kind = kind;
  while (item_kind.rfind("list<", 0) == 0 || item_kind.rfind("map<", 0) == 0) {
    column.is_map = item_kind[0] == 'm';
    ParquetListLevel level;
    std::vector<const json*> children;
    for (const json* list : level_items) {
      level.Append(!list->is_null(), list->is_null() ? 0 : static_cast<uint32_t>(list->size()));
      if (!list->is_null()) {
        for (const json& child : *list) children.push_back(&child);
      }
    }
    column.lists.push_back(level);
    level_items = children;
    if (column.is_map) break;
    item_kind = Inner(item_kind, 5);
  }
  if (column.is_map) {
    auto [key_kind, value_kind] = MapKinds(item_kind);
    std::vector<const json*> keys, values;
    for (const json* entry : level_items) {
      keys.push_back(&(*entry)[0]);
      values.push_back(&(*entry)[1]);
    }
    column.keys = ColumnFromJson(keys, key_kind);
    column.values = ColumnFromJson(values, value_kind);
  } else {
    column.values = ColumnFromJson(level_items, item_kind);
  }
  return column;
}

ParquetFieldSpec SpecFor(const std::string& name, const std::string& kind) {
  auto type_of = [&](const std::string& k) {
    if (k == "int") return name == "i32" ? ParquetType::kInt32 : ParquetType::kInt64;
    if (k == "float") return name == "f32" ? ParquetType::kFloat : ParquetType::kDouble;
    if (k == "bool") return ParquetType::kBoolean;
    return ParquetType::kString;
  };
  if (kind.rfind("map<", 0) == 0) {
    auto [key_kind, value_kind] = MapKinds(kind);
    return ParquetFieldSpec::Map(name, type_of(key_kind), type_of(value_kind));
  }
  int depth = 0;
  std::string item = kind;
  while (item.rfind("list<", 0) == 0) {
    item = Inner(item, 5);
    ++depth;
  }
  if (depth > 0) return ParquetFieldSpec::List(name, type_of(item), depth);
  return ParquetFieldSpec::Plain(name, type_of(item), name != "i64req");
}

struct Manifest {
  json kinds;
  json expected;
  json files;
  json unsupported;
  int64_t rows;
};

Manifest WriteJsFiles(const std::string& dir) {
  RunNode("write_files.mjs '" + dir + "'");
  json manifest = json::parse(ReadFileToString(dir + "/manifest.json"));
  return {manifest["kinds"], manifest["expected"], manifest["files"], manifest["unsupported"],
          manifest["rows"].get<int64_t>()};
}

TEST(ParquetInteropTest, ReadsFilesOfParquetWasmAndHyparquetWriter) {
  SKIP_WITHOUT_NODE_PACKAGES();
  TempDir dir;
  Manifest manifest = WriteJsFiles(dir.path());
  ASSERT_GE(manifest.files.size(), 30u);
  ParquetReadOptions text_options;
  text_options.list_separator = ",";
  text_options.nested_list_separator = "|";
  text_options.map_kv_separator = "=";
  for (const json& entry : manifest.files) {
    std::string path = dir.File(entry["file"].get<std::string>());
    SCOPED_TRACE(entry.dump());
    ParquetFileReader reader(path, text_options);
    ASSERT_EQ(reader.num_rows(), manifest.rows);
    EXPECT_GT(reader.num_row_groups(), 1);
    std::vector<json> actual(reader.column_names().size(), json::array());
    for (int g = 0; g < reader.num_row_groups(); ++g) {
      std::vector<ParquetColumn> columns = reader.ReadRowGroupColumns(g);
      for (size_t c = 0; c < columns.size(); ++c) {
        AppendCanonicalRows(columns[c], manifest.kinds[columns[c].name].get<std::string>(),
                            &actual[c]);
      }
    }
    RecordBatch batch;
    reader.ReadRows(0, reader.num_rows(), &batch);
    for (size_t c = 0; c < actual.size(); ++c) {
      const std::string& name = reader.column_names()[c];
      const std::string kind = manifest.kinds[name].get<std::string>();
      EXPECT_EQ(actual[c], manifest.expected[name])
          << name << "\n  ours:     " << actual[c].dump()
          << "\n  expected: " << manifest.expected[name].dump();
      if (kind.find('<') == std::string::npos) continue;
      const Column* text = batch.Find(name);
      for (int64_t row = 0; row < manifest.rows; ++row) {
        std::optional<std::string> want =
            ExpectedText(manifest.expected[name][row], kind, text_options);
        ASSERT_EQ(!text->IsNull(row), want.has_value()) << name << " row " << row;
        if (want) EXPECT_EQ(text->StringAt(row), *want) << name << " row " << row;
      }
    }
    // Projection and a row range that starts and ends inside row groups.
    ParquetReadOptions projection;
    projection.columns = {"mi64str", "i32"};
    ParquetFileReader ranged(path, projection);
    ranged.SetRowRange(5, 19);
    int64_t next_row = 5;
    while (ranged.Next(4, &batch)) {
      for (size_t i = 0; i < batch.num_rows(); ++i, ++next_row) {
        EXPECT_EQ(batch.line_numbers[i], next_row + 1);
        json i32 = CanonicalValue(batch.columns[1], i, "int");
        EXPECT_EQ(i32, manifest.expected["i32"][next_row]) << "row " << next_row;
        std::optional<std::string> map_text = ExpectedText(manifest.expected["mi64str"][next_row],
                                                           "map<int,string>", ParquetReadOptions());
        EXPECT_EQ(batch.columns[0].IsNull(i)
                      ? std::nullopt
                      : std::optional<std::string>(batch.columns[0].TextAt(i)),
                  map_text);
      }
    }
    EXPECT_EQ(next_row, 19);
  }
  for (const json& entry : manifest.unsupported) {
    std::string path = dir.File(entry["file"].get<std::string>());
    std::string codec = entry["codec"].get<std::string>();
    try {
      ParquetFileReader reader(path);
      RecordBatch batch;
      reader.ReadRows(0, reader.num_rows(), &batch);
      ADD_FAILURE() << path << " should fail";
    } catch (const Error& e) {
      std::string what = e.what();
      EXPECT_NE(what.find(codec), std::string::npos) << what;
      EXPECT_NE(what.find("not supported yet"), std::string::npos) << what;
      EXPECT_NE(what.find(path), std::string::npos) << what;
    }
  }
}

TEST(ParquetInteropTest, ParquetWasmAndHyparquetReadOurFiles) {
  SKIP_WITHOUT_NODE_PACKAGES();
  TempDir dir;
  Manifest manifest = WriteJsFiles(dir.path());
  std::string kinds_path = dir.File("kinds.json");
  testing::WriteFile(kinds_path, manifest.kinds.dump());
  std::vector<ParquetFieldSpec> specs;
  std::vector<ParquetColumn> columns;
  for (const auto& [name, kind] : manifest.kinds.items()) {
    specs.push_back(SpecFor(name, kind.get<std::string>()));
    columns.push_back(
        ParquetColumnFromJson(name, manifest.expected[name], kind.get<std::string>()));
  }
  struct Case {
    ParquetCodec codec;
    const char* name;
  };
  for (Case codec : {Case{ParquetCodec::kUncompressed, "UNCOMPRESSED"},
                     Case{ParquetCodec::kSnappy, "SNAPPY"}, Case{ParquetCodec::kGzip, "GZIP"},
                     Case{ParquetCodec::kZstd, "ZSTD"}, Case{ParquetCodec::kLz4Raw, "LZ4_RAW"}}) {
    for (bool dictionary : {true, false}) {
      std::string path =
          dir.File(StrCat("ours_", codec.name, dictionary ? "_dict" : "_plain", ".parquet"));
      SCOPED_TRACE(path);
      ParquetWriteOptions options;
      options.codec = codec.codec;
      options.dictionary = dictionary;
      options.row_group_rows = 8;
      options.data_page_bytes = 64;
      ParquetFileWriter writer(path, specs, options);
      writer.Write(columns);
      writer.Close();
      json results = json::parse(RunNode("read_file.mjs '" + path + "' '" + kinds_path + "'"));
      for (const char* reader : {"parquet-wasm", "hyparquet"}) {
        const json& got = results[reader];
        ASSERT_FALSE(got.contains("error")) << reader << ": " << got["error"];
        for (const auto& [name, kind] : manifest.kinds.items()) {
          EXPECT_EQ(got[name], manifest.expected[name])
              << reader << " column " << name << "\n  read:    " << got[name].dump()
              << "\n  written: " << manifest.expected[name].dump();
        }
      }
      // And our own reader agrees.
      ParquetFileReader ours(path);
      for (size_t c = 0; c < columns.size(); ++c) {
        json rows = json::array();
        for (int g = 0; g < ours.num_row_groups(); ++g) {
          AppendCanonicalRows(ours.ReadRowGroupColumns(g)[c],
                              manifest.kinds[columns[c].name].get<std::string>(), &rows);
        }
        EXPECT_EQ(rows, manifest.expected[columns[c].name]) << columns[c].name;
      }
    }
  }
}


// ------------------------------------------------------------------------- Arrow IPC

ArrowSchema InteropArrowSchema() {
  ArrowSchema schema;
  for (auto [name, type] : std::vector<std::pair<std::string, std::string>>{
           {"i32", "INT32"}, {"i64", "INT64"}, {"i64req", "INT64"}, {"f32", "FLOAT"}, {"f64", "DOUBLE"},
           {"str", "STRING"}, {"b", ""}, {"li64", "ARRAY_INT64"}, {"lstr", "ARRAY_STRING"},
           {"llist", "ARRAY_ARRAY_INT64"}, {"mstrf64", "MAP_STRING_DOUBLE"}, {"mi64str", "MAP_INT64_STRING"}}) {
    if (type.empty()) {  // bool has no TorchEasyRec FieldType
      ArrowField field;
      field.name = name;
      field.kind = ArrowField::Kind::kBool;
      field.buffers = 2;
      schema.push_back(field);
    } else {
      schema.push_back(ArrowFieldOfType(name, type, "test"));
    }
  }
  return schema;
}

TEST(ArrowIpcInteropTest, DecodesStreamsAndLoneBatchesOfApacheArrowJs) {
  SKIP_WITHOUT_NODE_PACKAGES();
  TempDir dir;
  RunNode("write_arrow.mjs dataset '" + dir.path() + "'");
  const json manifest = json::parse(ReadFileToString(dir.File("manifest.json")));
  std::vector<std::string> names;
  for (const auto& [name, kind] : manifest["kinds"].items()) names.push_back(name);
  std::reverse(names.begin(), names.end());  // output follows the order asked for
  ParquetReadOptions text_options;
  text_options.list_separator = ",";
  text_options.nested_list_separator = "|";
  text_options.map_kv_separator = "=";
  auto expect_dataset = [&](const ArrowPayload& payload, size_t batches) {
    ASSERT_EQ(payload.batches.size(), batches);
    std::vector<json> actual(names.size(), json::array());
    std::vector<std::vector<std::optional<std::string>>> texts(names.size());
    int64_t rows = 0;
    for (const ArrowRecordBatch& batch : payload.batches) {
      rows += batch.num_rows;
      ASSERT_EQ(batch.columns.size(), names.size());
      for (size_t c = 0; c < names.size(); ++c) {
        ASSERT_EQ(batch.columns[c].name, names[c]);
        AppendCanonicalRows(batch.columns[c], manifest["kinds"][names[c]].get<std::string>(), &actual[c]);
        const Column text = ParquetColumnRows(batch.columns[c], 0, static_cast<size_t>(batch.num_rows), text_options);
        for (size_t r = 0; r < text.size(); ++r) {
          texts[c].push_back(text.IsNull(r) ? std::nullopt : std::optional<std::string>(text.TextAt(r)));
        }
      }
    }
    EXPECT_EQ(rows, manifest["rows"].get<int64_t>());
    for (size_t c = 0; c < names.size(); ++c) {
      const std::string kind = manifest["kinds"][names[c]].get<std::string>();
      EXPECT_EQ(actual[c], manifest["expected"][names[c]]) << names[c] << "\n  ours:     " << actual[c].dump();
      if (kind.find('<') == std::string::npos) continue;
      for (size_t r = 0; r < texts[c].size(); ++r) {
        EXPECT_EQ(texts[c][r], ExpectedText(manifest["expected"][names[c]][r], kind, text_options)) << names[c] << " row " << r;
      }
    }
  };
  auto decode = [&](const std::string& file, const ArrowSchema* fallback, const std::vector<std::string>& wanted) {
    const std::string bytes = ReadFileToString(dir.File(file));
    return DecodeArrowIpc(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), fallback, wanted);
  };
  const ArrowSchema schema = InteropArrowSchema();
  {
    SCOPED_TRACE("stream");
    const ArrowPayload payload = decode("stream.arrows", nullptr, names);
    EXPECT_TRUE(payload.has_schema);
    ASSERT_EQ(payload.schema.size(), schema.size());
    for (size_t i = 0; i < schema.size(); ++i) {
      EXPECT_EQ(payload.schema[i].name, schema[i].name);
      EXPECT_EQ(payload.schema[i].TypeName(), schema[i].TypeName()) << schema[i].name;
    }
    expect_dataset(payload, 1);
  }
  {
    SCOPED_TRACE("two batches written from slices");
    expect_dataset(decode("two_batches.arrows", nullptr, names), 2);
  }
  {
    SCOPED_TRACE("lone record batch with input_fields' schema");
    EXPECT_TZREC_ERROR(decode("lone_batch.bin", nullptr, names), "without a schema");
    const ArrowPayload payload = decode("lone_batch.bin", &schema, names);
    EXPECT_FALSE(payload.has_schema);
    expect_dataset(payload, 1);
  }
  // Projection: only the wanted columns, in the wanted order; a missing one is named.
  const ArrowPayload projected = decode("stream.arrows", nullptr, {"mi64str", "i32"});
  ASSERT_EQ(projected.batches[0].columns.size(), 2u);
  EXPECT_EQ(projected.batches[0].columns[1].name, "i32");
  EXPECT_TZREC_ERROR(decode("stream.arrows", nullptr, {"i32", "nope"}), "column 'nope' is missing");

  // Damaged payloads: every truncation and single-byte change either decodes or fails with an
  // error (tests/fuzz/run_arrow_ipc_fuzz.sh runs the decoder under ASan on such inputs).
  const std::string stream = ReadFileToString(dir.File("two_batches.arrows"));
  int errors = 0;
  for (size_t cut = 0; cut < stream.size(); cut += 3) {
    try {
      DecodeArrowIpc(reinterpret_cast<const uint8_t*>(stream.data()), cut, nullptr, names);
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 0);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string damaged = stream;
    const size_t at = std::uniform_int_distribution<size_t>(0, 1200)(rng) % damaged.size();
    damaged[at] = static_cast<char>(rng());
    try {
      DecodeArrowIpc(reinterpret_cast<const uint8_t*>(damaged.data()), damaged.size(), nullptr, names);
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace tzrec
