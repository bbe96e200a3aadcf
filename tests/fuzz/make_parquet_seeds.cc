// Writes small valid Parquet files (every type, codec, nesting; several row groups and pages)
// with our writer as the seed corpus of parquet_reader_fuzz. Usage: make_parquet_seeds DIR
#include <cstdio>
#include <string>
#include <vector>

#include "tzrec/data/parquet/parquet_writer.h"

using namespace tzrec;

namespace {

Column Ints(size_t rows, int salt) {
  Column c;
  c.type = ColumnType::kInt64;
  for (size_t i = 0; i < rows; ++i) {
    c.ints.push_back(static_cast<int64_t>(i * 37 + salt) % 1000 - 500);
    c.valid.push_back((i + salt) % 5 != 2);
  }
  return c;
}

Column Doubles(size_t rows) {
  Column c;
  c.type = ColumnType::kDouble;
  for (size_t i = 0; i < rows; ++i) {
    c.doubles.push_back(i * 0.25);
    c.valid.push_back(i % 4 != 1);
  }
  return c;
}

Column Strings(size_t rows, int salt) {
  Column c;
  c.type = ColumnType::kString;
  for (size_t i = 0; i < rows; ++i)
    c.AppendString("v" + std::to_string((i + salt) % 6), i % 3 != 0);
  return c;
}

ParquetListLevel Lists(size_t count, size_t* children) {
  ParquetListLevel level;
  *children = 0;
  for (size_t i = 0; i < count; ++i) {
    bool valid = i % 4 != 3;
    uint32_t n = valid ? static_cast<uint32_t>(i % 3) : 0;
    level.Append(valid, n);
    *children += n;
  }
  return level;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  const size_t rows = 40;
  int index = 0;
  for (ParquetCodec codec : {ParquetCodec::kUncompressed, ParquetCodec::kSnappy,
                             ParquetCodec::kGzip, ParquetCodec::kZstd, ParquetCodec::kLz4Raw}) {
    for (bool dictionary : {true, false}) {
      ParquetWriteOptions options;
      options.codec = codec;
      options.dictionary = dictionary;
      options.row_group_rows = 16;
      options.data_page_bytes = 48;
      options.page_checksums = index % 2 == 0;
      std::vector<ParquetFieldSpec> specs{
          ParquetFieldSpec::Plain("i64", ParquetType::kInt64),
          ParquetFieldSpec::Plain("i32", ParquetType::kInt32),
          ParquetFieldSpec::Plain("b", ParquetType::kBoolean),
          ParquetFieldSpec::Plain("f", ParquetType::kFloat),
          ParquetFieldSpec::Plain("d", ParquetType::kDouble),
          ParquetFieldSpec::Plain("s", ParquetType::kString),
          ParquetFieldSpec::Plain("req", ParquetType::kInt64, false),
          ParquetFieldSpec::List("l", ParquetType::kString),
          ParquetFieldSpec::List("ll", ParquetType::kInt64, 2),
          ParquetFieldSpec::Map("m", ParquetType::kString, ParquetType::kDouble)};
      std::vector<ParquetColumn> columns(specs.size());
      for (size_t c = 0; c < specs.size(); ++c) columns[c].name = specs[c].name;
      columns[0].values = Ints(rows, 1);
      columns[1].values = Ints(rows, 2);
      columns[2].values = Ints(rows, 3);
      for (auto& v : columns[2].values.ints) v = v > 0;
      columns[3].values = Doubles(rows);
      columns[4].values = Doubles(rows);
      columns[5].values = Strings(rows, 0);
      columns[6].values = Ints(rows, 4);
      columns[6].values.valid.assign(rows, 1);
      size_t children;
      columns[7].lists.push_back(Lists(rows, &children));
      columns[7].values = Strings(children, 1);
      columns[8].lists.push_back(Lists(rows, &children));
      size_t grandchildren;
      columns[8].lists.push_back(Lists(children, &grandchildren));
      columns[8].values = Ints(grandchildren, 5);
      columns[9].is_map = true;
      columns[9].lists.push_back(Lists(rows, &children));
      columns[9].keys = Strings(children, 2);
      columns[9].keys.valid.assign(children, 1);
      columns[9].values = Doubles(children);
      ParquetFileWriter writer(dir + "/seed_" + std::to_string(index++) + ".parquet", specs,
                               options);
      writer.Write(columns);
      writer.Close();
    }
  }
  return 0;
}
