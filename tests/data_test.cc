// CSV reading, FG_NONE feature parsing and the batching dataset, including bad input.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "test_util.h"
#include "tzrec/common/flags.h"
#include "tzrec/common/strings.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/data/csv_reader.h"
#include "tzrec/batch/batch.h"
#include "tzrec/input/dataset.h"
#include "tzrec/features/feature.h"

namespace tzrec {
namespace {

using testing::TempDir;
using testing::WriteFile;

// The first (up to max_rows) records of a CSV file with a header line.
RecordBatch ReadCsvWithHeader(const std::string& path, size_t max_rows) {
  CsvOptions options;
  options.with_header = true;
  CsvFileReader reader(path, options);
  RecordBatch records;
  EXPECT_TRUE(reader.Next(max_rows, &records)) << path << " has no record";
  return records;
}

TEST(CsvReader, HeaderQuotesNullsAndProjection) {
  TempDir dir;
  WriteFile(dir.File("a.csv"),
            "id,name,score\r\n1,\"x,\"\"y\"\"\",0.5\n\n2,,\n3,\"multi\nline\",7\n");
  CsvOptions options;
  options.with_header = true;
  options.column_types["score"] = ColumnType::kDouble;
  options.wanted_columns = {"score", "name"};
  CsvFileReader reader(dir.File("a.csv"), options);
  RecordBatch batch;
  ASSERT_TRUE(reader.Next(10, &batch));
  ASSERT_EQ(batch.num_rows(), 3u);
  const Column* name = batch.Find("name");
  const Column* score = batch.Find("score");
  ASSERT_NE(name, nullptr);
  ASSERT_NE(score, nullptr);
  EXPECT_EQ(name->StringAt(0), "x,\"y\"");
  EXPECT_TRUE(name->IsNull(1));
  EXPECT_EQ(name->StringAt(2), "multi\nline");
  EXPECT_DOUBLE_EQ(score->doubles[0], 0.5);
  EXPECT_TRUE(score->IsNull(1));
  EXPECT_DOUBLE_EQ(score->doubles[2], 7.0);
  EXPECT_EQ(batch.line_numbers[0], 2);
  EXPECT_EQ(batch.line_numbers[1], 4);
  EXPECT_EQ(batch.line_numbers[2], 5);
  EXPECT_EQ(batch.Find("id"), nullptr);
  EXPECT_FALSE(reader.Next(10, &batch));
}

TEST(CsvReader, ChunksRespectMaxRows) {
  TempDir dir;
  std::string content;
  for (int i = 0; i < 10; ++i) content += std::to_string(i) + "\n";
  WriteFile(dir.File("a.csv"), content);
  CsvOptions options;
  options.column_names = {"v"};
  options.column_types["v"] = ColumnType::kInt64;
  CsvFileReader reader(dir.File("a.csv"), options);
  RecordBatch batch;
  int64_t total = 0;
  int chunks = 0;
  while (reader.Next(4, &batch)) {
    EXPECT_LE(batch.num_rows(), 4u);
    for (size_t i = 0; i < batch.num_rows(); ++i) EXPECT_EQ(batch.columns[0].ints[i], total + static_cast<int64_t>(i));
    total += batch.num_rows();
    ++chunks;
  }
  EXPECT_EQ(total, 10);
  EXPECT_EQ(chunks, 3);
}

TEST(CsvReader, MalformedInputNamesFileAndLine) {
  TempDir dir;
  CsvOptions options;
  options.column_names = {"a", "b"};
  options.column_types["b"] = ColumnType::kInt64;
  RecordBatch batch;
  WriteFile(dir.File("count.csv"), "1,2\n3\n");
  EXPECT_TZREC_ERROR(CsvFileReader(dir.File("count.csv"), options).Next(10, &batch),
                     "count.csv:2: expected 2 columns, got 1");
  WriteFile(dir.File("num.csv"), "1,2\n3,x4\n");
  EXPECT_TZREC_ERROR(CsvFileReader(dir.File("num.csv"), options).Next(10, &batch),
                     "num.csv:2: column 'b': 'x4' is not an integer");
  WriteFile(dir.File("quote.csv"), "1,\"2\n");
  EXPECT_TZREC_ERROR(CsvFileReader(dir.File("quote.csv"), options).Next(10, &batch),
                     "unterminated quoted field");
  options.with_header = true;
  options.wanted_columns = {"c"};
  WriteFile(dir.File("head.csv"), "a,b\n1,2\n");
  EXPECT_TZREC_ERROR(CsvFileReader(dir.File("head.csv"), options), "column 'c' is missing");
  EXPECT_TZREC_ERROR(CsvFileReader(dir.File("none.csv"), options), "cannot open CSV file");
}

protos::EasyRecConfig FeatureConfig() {
  return ParsePipelineConfigText(R"(
    data_config { dataset_type: CsvDataset with_header: true label_fields: "clk" }
    feature_configs { id_feature { feature_name: "user" num_buckets: 100 embedding_dim: 4 } }
    feature_configs { id_feature { feature_name: "tags" hash_bucket_size: 50 embedding_dim: 4
                                   fg_encoded_default_value: "7" } }
    feature_configs { raw_feature { feature_name: "price" } }
    feature_configs { raw_feature { feature_name: "vec" value_dim: 2
                                    fg_encoded_default_value: "0.5\x031.5" } }
    feature_configs { raw_feature { feature_name: "bucket" boundaries: [1, 2, 3]
                                    embedding_dim: 4 } }
  )", "features");
}

TEST(Features, ShapesFromConfig) {
  auto config = FeatureConfig();
  auto features = CreateFeatures(config.feature_configs(), config.data_config());
  ASSERT_EQ(features.size(), 5u);
  EXPECT_TRUE(features[0]->is_sparse());
  EXPECT_EQ(features[0]->num_embeddings(), 100);
  EXPECT_EQ(features[0]->embedding_name(), "user_emb");
  EXPECT_EQ(features[1]->num_embeddings(), 50);
  EXPECT_FALSE(features[2]->is_sparse());
  EXPECT_EQ(features[3]->value_dim(), 2);
  EXPECT_TRUE(features[4]->is_sparse());
  EXPECT_EQ(features[4]->num_embeddings(), 4);
}

TEST(Features, ParseEncodedValuesDefaultsAndNulls) {
  auto config = FeatureConfig();
  auto features = CreateFeatures(config.feature_configs(), config.data_config());
  TempDir dir;
  WriteFile(dir.File("d.csv"),
            "user,tags,price,vec,bucket,clk\n"
            "5,1\x03" "2\x03" "3,1.5,0.1\x03" "0.2,0,1\n"
            ",,2,,3,0\n");
  const RecordBatch records = ReadCsvWithHeader(dir.File("d.csv"), 10);
  ParsedBatch parsed;
  for (const auto& f : features) f->ParseEncoded(records, &parsed);
  EXPECT_EQ(parsed.sparse["user"].values, (std::vector<int64_t>{5}));
  EXPECT_EQ(parsed.sparse["user"].lengths, (std::vector<int32_t>{1, 0}));  // null -> empty bag
  EXPECT_EQ(parsed.sparse["tags"].values, (std::vector<int64_t>{1, 2, 3, 7}));  // null -> default
  EXPECT_EQ(parsed.sparse["tags"].lengths, (std::vector<int32_t>{3, 1}));
  EXPECT_EQ(parsed.dense["price"].values, (std::vector<float>{1.5f, 2.0f}));
  EXPECT_EQ(parsed.dense["vec"].values, (std::vector<float>{0.1f, 0.2f, 0.5f, 1.5f}));
  EXPECT_EQ(parsed.sparse["bucket"].values, (std::vector<int64_t>{0, 3}));
}

// Cells of one plain decimal id are read by a digit loop; every other cell by splitting on the
// separator and parsing each piece. Both must give what that split-and-parse gives, also when
// the separator is itself a digit (then no cell may be taken for one id).
TEST(Features, IdCellsReadAsSplittingAndParsingEachPieceReadsThem) {
  for (const std::string separator : {std::string("\x03"), std::string("1"), std::string("|")}) {
    auto config = ParsePipelineConfigText(
        "data_config { fg_encoded_multival_sep: \"" + std::string(separator == "\x03" ? "\\003" : separator) +
            "\" }\n feature_configs { id_feature { feature_name: \"ids\" num_buckets: 1000000000 "
            "embedding_dim: 4 } }",
        "ids");
    auto features = CreateFeatures(config.feature_configs(), config.data_config());
    std::mt19937 rng(static_cast<unsigned>(separator[0]));
    auto below = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
    std::string csv = "ids\n";
    std::vector<int64_t> expected_ids;
    std::vector<int32_t> expected_lengths;
    for (int row = 0; row < 3000; ++row) {
      const int pieces = below(4) == 0 ? 1 + below(3) : 1;
      std::string cell;
      int32_t length = 0;
      for (int p = 0; p < pieces; ++p) {
        if (p > 0) cell += separator;
        std::string digits = std::string(static_cast<size_t>(below(3) == 0 ? below(12) : 0), '0');
        const int value_digits = 1 + below(9);
        for (int d = 0; d < value_digits; ++d) {
          char c = static_cast<char>('0' + below(10));
          if (separator == "1" && c == '1') c = '2';
          digits += c;
        }
        const int dress = below(10);
        if (dress == 0) digits = "+" + digits;
        if (dress == 1) digits = " " + digits + " ";
        cell += digits;
      }
      for (std::string_view piece : SplitView(cell, separator)) {
        if (piece.empty()) continue;
        int64_t id;
        ASSERT_TRUE(ParseInt64(piece, &id)) << "cell '" << cell << "' piece '" << piece << "'";
        expected_ids.push_back(id);
        ++length;
      }
      expected_lengths.push_back(length);
      csv += cell + "\n";
    }
    TempDir dir;
    WriteFile(dir.File("ids.csv"), csv);
    const RecordBatch records = ReadCsvWithHeader(dir.File("ids.csv"), 100000);
    ParsedBatch parsed;
    features[0]->ParseEncoded(records, &parsed);
    EXPECT_EQ(parsed.sparse["ids"].values, expected_ids) << "separator '" << separator << "'";
    EXPECT_EQ(parsed.sparse["ids"].lengths, expected_lengths) << "separator '" << separator << "'";
  }
  // Out of range and too many digits fail as before, naming the row.
  auto config = ParsePipelineConfigText(
      "feature_configs { id_feature { feature_name: \"ids\" num_buckets: 100 embedding_dim: 4 } }", "ids");
  auto features = CreateFeatures(config.feature_configs(), config.data_config());
  TempDir dir;
  for (const auto& [cell, message] : std::vector<std::pair<std::string, std::string>>{
           {"100", "t.csv:3: column 'ids' (feature_configs[0].id_feature): id 100 out of range [0, 100)"},
           {"000000000000000100", "id 100 out of range [0, 100)"},
           {"99999999999999999999", "'99999999999999999999' is not an integer id"}}) {
    WriteFile(dir.File("t.csv"), "ids\n7\n" + cell + "\n");
    const RecordBatch records = ReadCsvWithHeader(dir.File("t.csv"), 10);
    ParsedBatch parsed;
    EXPECT_TZREC_ERROR(features[0]->ParseEncoded(records, &parsed), message);
  }
}

TEST(Features, BadValuesNameFileRowAndColumn) {
  auto config = FeatureConfig();
  auto features = CreateFeatures(config.feature_configs(), config.data_config());
  TempDir dir;
  CsvOptions options;
  options.with_header = true;
  RecordBatch records;
  ParsedBatch parsed;
  auto parse_file = [&](const std::string& name, const std::string& content, int feature) {
    WriteFile(dir.File(name), content);
    CsvFileReader reader(dir.File(name), options);
    ASSERT_TRUE(reader.Next(10, &records));
    features[feature]->ParseEncoded(records, &parsed);
  };
  std::string header = "user,tags,price,vec,bucket,clk\n";
  EXPECT_TZREC_ERROR(parse_file("range.csv", header + "1,1,1,1\x03" "1,0,1\n100,1,1,1\x03" "1,0,1\n", 0),
                     "range.csv:3: column 'user' (feature_configs[0].id_feature): id 100 out of range [0, 100)");
  EXPECT_TZREC_ERROR(parse_file("neg.csv", header + "-1,1,1,1\x03" "1,0,1\n", 0), "id -1 out of range");
  EXPECT_TZREC_ERROR(parse_file("word.csv", header + "1,1\x03z,1,1\x03" "1,0,1\n", 1),
                     "word.csv:2: column 'tags' (feature_configs[1].id_feature): 'z' is not an integer id");
  EXPECT_TZREC_ERROR(parse_file("dim.csv", header + "1,1,1,1,0,1\n", 3), "1 values but value_dim is 2");
  EXPECT_TZREC_ERROR(parse_file("null.csv", header + "1,1,,1\x03" "1,0,1\n", 2),
                     "null value; set fg_encoded_default_value");
  EXPECT_TZREC_ERROR(parse_file("bucket.csv", header + "1,1,1,1\x03" "1,4,1\n", 4), "id 4 out of range [0, 4)");
}

TEST(Features, ConfigErrors) {
  auto config = ParsePipelineConfigText(R"(
    feature_configs { id_feature { feature_name: "a" embedding_dim: 4 } })", "t");
  EXPECT_TZREC_ERROR(CreateFeatures(config.feature_configs(), config.data_config()),
                     "feature_configs[0].id_feature: needs hash_bucket_size or num_buckets");
  config = ParsePipelineConfigText(R"(
    feature_configs { id_feature { feature_name: "a" num_buckets: 3 embedding_dim: 4 } }
    feature_configs { id_feature { feature_name: "a" num_buckets: 3 embedding_dim: 4 } })", "t");
  EXPECT_TZREC_ERROR(CreateFeatures(config.feature_configs(), config.data_config()),
                     "duplicate feature name 'a'");
  config = ParsePipelineConfigText(R"(
    feature_configs { regex_replace_feature { feature_name: "a" expression: "user:q" } })", "t");
  EXPECT_TZREC_ERROR(CreateFeatures(config.feature_configs(), config.data_config()),
                     "feature_configs[0].regex_replace_feature: not supported yet");
}

// Writes `files` CSV files of `rows_per_file` rows: user = global row index % 100, clk = row.
std::string WriteRows(const TempDir& dir, int files, int rows_per_file) {
  int row = 0;
  for (int f = 0; f < files; ++f) {
    std::string content = "user,clk\n";
    for (int r = 0; r < rows_per_file; ++r, ++row) {
      content += std::to_string(row % 100) + "," + std::to_string(row) + "\n";
    }
    WriteFile(dir.File("part-" + std::to_string(f) + ".csv"), content);
  }
  return dir.path() + "/part-*.csv";
}

protos::DataConfig DataConfigFor(int batch_size, int workers, bool drop_remainder, bool shuffle) {
  auto config = ParsePipelineConfigText(R"(
    data_config { dataset_type: CsvDataset with_header: true label_fields: "clk" })", "t");
  auto data = config.data_config();
  data.set_batch_size(batch_size);
  data.set_num_workers(workers);
  data.set_drop_remainder(drop_remainder);
  data.set_shuffle(shuffle);
  data.set_shuffle_buffer_size(3);
  return data;
}

std::vector<std::vector<float>> ReadAll(const Dataset& dataset, int64_t epoch) {
  std::vector<std::vector<float>> batches;
  auto stream = dataset.Open(epoch);
  ParsedBatch batch;
  while (stream->Next(&batch)) batches.push_back(batch.labels.at("clk"));
  return batches;
}

// The single-feature setup the dataset tests share: an id feature "user" of 100 buckets.
std::vector<std::unique_ptr<Feature>> UserFeature() {
  auto config = ParsePipelineConfigText(
      R"(feature_configs { id_feature { feature_name: "user" num_buckets: 100 embedding_dim: 2 } })", "t");
  return CreateFeatures(config.feature_configs(), config.data_config());
}

TEST(Dataset, BatchesWorkersAndRemainders) {
  TempDir dir;
  std::string pattern = WriteRows(dir, 3, 25);  // 75 rows in 3 files
  auto features = UserFeature();
  std::vector<const Feature*> feature_ptrs{features[0].get()};

  // One worker: batches of 10 across file boundaries, remainder 5 kept.
  Dataset one(DataConfigFor(10, 1, false, false), feature_ptrs, pattern, DatasetMode::kTrain, 1);
  auto batches = ReadAll(one, 0);
  ASSERT_EQ(batches.size(), 8u);
  EXPECT_EQ(batches.back().size(), 5u);
  for (size_t b = 0; b < batches.size(); ++b) {
    for (size_t i = 0; i < batches[b].size(); ++i) EXPECT_EQ(batches[b][i], b * 10 + i);
  }
  // Three workers, in order: worker w reads file w; each keeps its own remainder of 5.
  Dataset three(DataConfigFor(10, 3, false, false), feature_ptrs, pattern, DatasetMode::kTrain, 1);
  batches = ReadAll(three, 0);
  ASSERT_EQ(batches.size(), 9u);
  EXPECT_EQ(batches[0][0], 0);   // worker 0
  EXPECT_EQ(batches[1][0], 25);  // worker 1
  EXPECT_EQ(batches[2][0], 50);  // worker 2
  EXPECT_EQ(batches[3][0], 10);
  std::multiset<float> seen;
  for (auto& b : batches) seen.insert(b.begin(), b.end());
  EXPECT_EQ(seen.size(), 75u);
  EXPECT_EQ(std::set<float>(seen.begin(), seen.end()).size(), 75u);
  // drop_remainder drops each worker's partial batch.
  Dataset dropped(DataConfigFor(10, 3, true, false), feature_ptrs, pattern, DatasetMode::kTrain, 1);
  batches = ReadAll(dropped, 0);
  EXPECT_EQ(batches.size(), 6u);
  for (auto& b : batches) EXPECT_EQ(b.size(), 10u);
  // The same run twice gives the same order (in_order default).
  EXPECT_EQ(ReadAll(three, 0), ReadAll(three, 0));
}

TEST(Dataset, ShuffleIsSeededAndKeepsEveryRow) {
  TempDir dir;
  std::string pattern = WriteRows(dir, 2, 40);
  auto features = UserFeature();
  std::vector<const Feature*> ptrs{features[0].get()};
  Dataset shuffled(DataConfigFor(5, 2, false, true), ptrs, pattern, DatasetMode::kTrain, 42);
  auto a = ReadAll(shuffled, 0);
  auto b = ReadAll(shuffled, 0);
  auto c = ReadAll(shuffled, 1);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::set<float> rows;
  for (auto& batch : a) rows.insert(batch.begin(), batch.end());
  EXPECT_EQ(rows.size(), 80u);
  // Eval never shuffles.
  Dataset eval(DataConfigFor(5, 1, false, true), ptrs, pattern, DatasetMode::kEval, 42);
  EXPECT_EQ(ReadAll(eval, 0)[0][0], 0);
}

TEST(Dataset, ErrorsFromWorkersReachTheConsumer) {
  TempDir dir;
  WriteFile(dir.File("bad.csv"), "user,clk\n1,0\n200,1\n");
  auto features = UserFeature();
  Dataset dataset(DataConfigFor(10, 1, false, false), {features[0].get()}, dir.File("bad.csv"),
                  DatasetMode::kTrain, 1);
  EXPECT_TZREC_ERROR(ReadAll(dataset, 0), "bad.csv:3: column 'user'");
  EXPECT_TZREC_ERROR(Dataset(DataConfigFor(10, 1, false, false), {features[0].get()},
                             dir.File("nothing*.csv"), DatasetMode::kTrain, 1),
                     "matches no file");
  WriteFile(dir.File("nolabel.csv"), "user,other\n1,0\n");
  Dataset nolabel(DataConfigFor(10, 1, false, false), {features[0].get()}, dir.File("nolabel.csv"),
                  DatasetMode::kTrain, 1);
  EXPECT_TZREC_ERROR(ReadAll(nolabel, 0), "column 'clk' is missing");
  WriteFile(dir.File("nulllabel.csv"), "user,clk\n1,\n");
  Dataset nulllabel(DataConfigFor(10, 1, false, false), {features[0].get()},
                    dir.File("nulllabel.csv"), DatasetMode::kTrain, 1);
  EXPECT_TZREC_ERROR(ReadAll(nulllabel, 0), "nulllabel.csv:2: label 'clk' is null");
}

// Reserved columns (predict's pass-through) travel with their rows through batching, and into
// the Batch; prediction mode reads no labels.
TEST(Dataset, ReservedColumnsTravelWithTheirRowsIntoTheBatch) {
  TempDir dir;
  WriteFile(dir.File("r.csv"), "user,clk,request_id\n1,0,a\n2,1,\n3,0,c\n");
  auto features = UserFeature();
  Dataset dataset(DataConfigFor(2, 1, false, false), {features[0].get()}, dir.File("r.csv"),
                  DatasetMode::kPredict, 1, nullptr, 0, 1, {"request_id"});
  auto stream = dataset.Open(0);
  ParsedBatch first, second, none;
  ASSERT_TRUE(stream->Next(&first));
  ASSERT_TRUE(stream->Next(&second));
  EXPECT_FALSE(stream->Next(&none));
  EXPECT_EQ(first.reserved.at("request_id"), (std::vector<std::string>{"a", ""}));
  EXPECT_EQ(second.reserved.at("request_id"), (std::vector<std::string>{"c"}));
  EXPECT_TRUE(first.labels.empty());
  Batch batch = ToBatch(std::move(first));
  EXPECT_EQ(batch.size, 2);
  EXPECT_EQ(batch.reserved.at("request_id")[0], "a");
  EXPECT_EQ(batch.base().size, 2);
  EXPECT_EQ(batch.Sparse("user").values[1].item<int64_t>(), 2);
  EXPECT_EQ(batch.positions.size(), 2u);
  EXPECT_TZREC_ERROR(batch.Label("clk"), "batch has no label 'clk'");
  EXPECT_TZREC_ERROR(batch.group("__NEG__"), "no data group '__NEG__'");
}

// Sequence features become SequenceIds (steps per row, ids per step), not jagged ids.
TEST(Batch, SequencesKeepStepAndKeyLengths) {
  ParsedBatch parsed;
  parsed.size = 2;
  SparseValues& seq = parsed.sparse["clicks"];
  seq.sequence = true;
  seq.values = {5, 6, 7, 8};
  seq.lengths = {2, 1};          // row 0: 2 steps, row 1: 1 step
  seq.key_lengths = {1, 2, 1};   // ids per step
  DenseValues& times = parsed.dense["times"];
  times.sequence = true;
  times.dim = 1;
  times.values = {0.5f, 1.5f, 2.5f};
  times.lengths = {2, 1};
  ParsedBatch slice = parsed.Slice(1, 2);
  EXPECT_EQ(slice.sparse.at("clicks").values, (std::vector<int64_t>{8}));
  EXPECT_EQ(slice.dense.at("times").values, (std::vector<float>{2.5f}));
  Batch batch = ToBatch(std::move(parsed));
  const SequenceIds& ids = batch.base().sequences.at("clicks");
  EXPECT_EQ(ids.step_lengths[0].item<int>(), 2);
  EXPECT_EQ(ids.key_offsets[3].item<int64_t>(), 4);
  EXPECT_EQ(batch.base().dense_sequences.at("times").values.size(0), 3);
  EXPECT_TRUE(batch.base().sparse.empty());
}

TEST(Dataset, UnsupportedDatasetTypeAndSchemaFromInputFieldsStr) {
  auto config = ParsePipelineConfigText(R"(data_config { dataset_type: OdpsDataset })", "t");
  EXPECT_TZREC_ERROR(Dataset(config.data_config(), {}, "x", DatasetMode::kTrain, 1),
                     "data_config.dataset_type: OdpsDataset not supported yet");
  config = ParsePipelineConfigText(
      R"(data_config { input_fields_str: "a:INT64; b : string;c:DOUBLE;" })", "t");
  CsvOptions options;
  ResolveCsvSchema(config.data_config(), &options);
  EXPECT_EQ(options.column_names, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(options.column_types["a"], ColumnType::kInt64);
  EXPECT_EQ(options.column_types["b"], ColumnType::kString);
  EXPECT_EQ(options.column_types["c"], ColumnType::kDouble);
  config = ParsePipelineConfigText(R"(data_config { input_fields_str: "a:ARRAY<INT64>" })", "t");
  EXPECT_TZREC_ERROR(ResolveCsvSchema(config.data_config(), &options), "not supported yet");
}

TEST(Flags, FormsSwitchesAndUnknown) {
  Flags flags("x", "test", {{"alpha", "a"}, {"beta", "b", false, "7"}, {"go", "g", true}});
  ASSERT_TRUE(flags.Parse({"--alpha=1", "--go", "--unknown", "v", "--beta", "3"}));
  EXPECT_EQ(flags.Get("alpha"), "1");
  EXPECT_EQ(flags.GetInt("beta"), 3);
  EXPECT_TRUE(flags.GetSwitch("go"));
  EXPECT_EQ(flags.unknown().size(), 1u);
  Flags defaults("x", "test", {{"beta", "b", false, "7"}, {"go", "g", true}});
  ASSERT_TRUE(defaults.Parse({}));
  EXPECT_EQ(defaults.GetInt("beta"), 7);
  EXPECT_FALSE(defaults.GetSwitch("go"));
  Flags missing("x", "test", {{"alpha", "a"}});
  EXPECT_TZREC_ERROR(missing.Parse({"--alpha"}), "needs a value");
  EXPECT_NE(missing.Help().find("--alpha"), std::string::npos);
}

}  // namespace
}  // namespace tzrec
