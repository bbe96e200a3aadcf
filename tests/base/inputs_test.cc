// Validated inputs and bounded resources (issue 12): config files and their nesting, repeated
// singular fields, CSV record caps, directory inputs, the cgroup memory limit, feature numbers
// checked with their field paths, and gen_data on configs TorchEasyRec ships.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "gen_data_test_util.h"
#include "test_util.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/strings.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/data/csv_reader.h"
#include "tzrec/features/feature.h"
#include "tzrec/fg/feature_generator.h"
#include "tzrec/fg/feature_info.h"
#include "tzrec/metrics/auc.h"
#include "tzrec/metrics/xauc.h"

namespace tzrec {
namespace {

using testing::TempDir;
using testing::WriteFile;
using namespace gen_data_test;  // NOLINT

std::string Nested(int depth, char open, char close, const std::string& inner) {
  return std::string(depth, open) + inner + std::string(depth, close);
}

// ------------------------------------------------------------------------ config files

TEST(ConfigInputs, DirectoryAsConfigIsAnError) {
  TempDir dir;
  EXPECT_TZREC_ERROR(LoadPipelineConfig(dir.path()), "is a directory, not a config file");
}

TEST(ConfigInputs, SingularFieldGivenTwiceKeepsTheLastValue) {
  // As TorchEasyRec's mind_mock.config does with negative_sampler.attr_delimiter.
  auto config = ParsePipelineConfigText(R"(
    data_config {
      batch_size: 8
      negative_sampler { attr_delimiter: "," attr_delimiter: "\x02" }
      batch_size: 32
    })", "twice.config");
  EXPECT_EQ(config.data_config().batch_size(), 32);
  EXPECT_EQ(config.data_config().negative_sampler().attr_delimiter(), "\x02");
  // Repeated fields still append, and real errors are still errors.
  config = ParsePipelineConfigText(R"(data_config { label_fields: "a" label_fields: "b" })", "x");
  EXPECT_EQ(config.data_config().label_fields_size(), 2);
  EXPECT_TZREC_ERROR(ParsePipelineConfigText("data_config { batch_size: 1 nope: 2 }", "bad.config"),
                     "bad.config");
}

TEST(ConfigInputs, DeeplyNestedJsonConfigIsAnError) {
  TempDir dir;
  WriteFile(dir.File("deep.json"), "{\"data_config\": " + Nested(40000, '[', ']', "1") + "}");
  EXPECT_TZREC_ERROR(LoadPipelineConfig(dir.File("deep.json")), "nests deeper than 100 levels");
}

TEST(ConfigInputs, DeeplyNestedTextConfigIsAnError) {
  // custom_feature.operator_params is a google.protobuf.Struct, which nests without bound
  // (Struct -> Value -> Struct); protobuf's default recursion limit is INT_MAX, so this
  // overflowed the stack.
  std::string deep = "feature_configs { custom_feature { operator_params { ";
  const int levels = 20000;
  for (int i = 0; i < levels; ++i) deep += "fields { key: \"a\" value { struct_value { ";
  for (int i = 0; i < levels; ++i) deep += "} } } ";
  deep += "} } }";
  EXPECT_TZREC_ERROR(ParsePipelineConfigText(deep, "deep.config"), "cannot parse pipeline config 'deep.config'");
  // Moderate nesting parses.
  auto config = ParsePipelineConfigText(
      R"(feature_configs { custom_feature { operator_params { fields { key: "a" value { struct_value { fields { key: "b" value { number_value: 1 } } } } } } } })",
      "ok.config");
  EXPECT_EQ(config.feature_configs_size(), 1);
}

TEST(ConfigInputs, DeeplyNestedEditConfigJsonIsAnError) {
  protos::EasyRecConfig config;
  EXPECT_TZREC_ERROR(
      EditConfigJson(&config, "{\"data_config.label_fields\": " + Nested(40000, '[', ']', "1") + "}"),
      "--edit_config_json: JSON nests deeper than 100 levels");
  EXPECT_TZREC_ERROR(EditConfigJson(&config, Nested(40000, '{', '}', "")), "nests deeper");
  // Selector conditions recurse too.
  const std::string path = "feature_configs" + Nested(5000, '[', ']', "x=1");
  EXPECT_TZREC_ERROR(EditConfigJson(&config, "{\"" + path + "\": 1}"), "nests selectors deeper");
  // Found by tests/fuzz/edit_config_fuzz.cc: a condition without a key read past an empty
  // vector.
  config.add_feature_configs()->mutable_id_feature()->set_feature_name("a");
  EXPECT_TZREC_ERROR(EditConfigJson(&config, R"({"feature_configs[=0].id_feature.": 1})"),
                     "condition without a key");
  // Ordinary nesting is fine.
  EditConfigJson(&config, R"({"data_config.label_fields": ["a", "b"]})");
  EXPECT_EQ(config.data_config().label_fields_size(), 2);
}

// ------------------------------------------------------------------------------- CSV

TEST(CsvInputs, RecordLongerThanTheCapFailsNamingFileAndLine) {
  TempDir dir;
  WriteFile(dir.File("long.csv"), "a,b\n1,2\n" + std::string(5000, 'x') + ",3\n");
  CsvOptions options;
  options.column_names = {"a", "b"};
  options.max_record_bytes = 1024;
  CsvFileReader reader(dir.File("long.csv"), options);
  RecordBatch batch;
  EXPECT_TZREC_ERROR(reader.Next(100, &batch),
                     dir.File("long.csv") + ":3: record is longer than 1024 bytes");
  // Within the cap it reads.
  options.max_record_bytes = 6000;
  CsvFileReader fine(dir.File("long.csv"), options);
  ASSERT_TRUE(fine.Next(100, &batch));
  EXPECT_EQ(batch.num_rows(), 3u);
}

TEST(CsvInputs, EndlessLineStopsAtTheCapFromTheEnvironment) {
  ASSERT_EQ(setenv(kCsvMaxRecordBytesEnv, "3000000", 1), 0);
  CsvOptions options;
  EXPECT_EQ(options.max_record_bytes, 3000000);
  options.column_names = {"a"};
  CsvFileReader reader("/dev/zero", options);
  RecordBatch batch;
  EXPECT_TZREC_ERROR(reader.Next(1, &batch), "/dev/zero:1: record is longer than 3000000 bytes");
  ASSERT_EQ(setenv(kCsvMaxRecordBytesEnv, "lots", 1), 0);
  EXPECT_TZREC_ERROR(CsvMaxRecordBytes(), "TZREC_CSV_MAX_RECORD_BYTES='lots' must be a positive");
  ASSERT_EQ(unsetenv(kCsvMaxRecordBytesEnv), 0);
  EXPECT_EQ(CsvOptions().max_record_bytes, kDefaultCsvMaxRecordBytes);
}

// The record rules written out one byte at a time: the reader's piecewise scan must agree.
struct SimpleCsvRecord {
  int64_t line = 0;
  std::vector<std::string> fields;
};
std::vector<SimpleCsvRecord> SimpleCsvParse(const std::string& s, char delim) {
  std::vector<SimpleCsvRecord> records;
  size_t i = 0, n = s.size();
  int64_t line = 1;
  while (true) {
    while (i < n && (s[i] == '\n' || s[i] == '\r')) {  // empty lines, stray CRs
      if (s[i] == '\n') ++line;
      ++i;
    }
    if (i >= n) break;
    SimpleCsvRecord record;
    record.line = line;
    record.fields.emplace_back();
    bool quoted = false, start = true;
    while (i < n) {
      const char c = s[i++];
      std::string& f = record.fields.back();
      if (quoted) {
        if (c == '"') {
          if (i < n && s[i] == '"') {
            f += '"';
            ++i;
          } else {
            quoted = false;
          }
        } else {
          if (c == '\n') ++line;
          f += c;
        }
      } else if (c == '"' && start) {
        quoted = true;
        start = false;
      } else if (c == delim) {
        record.fields.emplace_back();
        start = true;
      } else if (c == '\n') {
        ++line;
        break;
      } else if (c == '\r' && i < n && s[i] == '\n') {
        continue;
      } else {
        f += c;
        start = false;
      }
    }
    records.push_back(std::move(record));
  }
  return records;
}

TEST(CsvInputs, ReadsWhatASimpleByteParserReadsAcrossBufferRefills) {
  for (const char delim : {',', '\t'}) {
    std::mt19937 rng(delim);
    auto pick = [&](const std::string& from) { return from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng)]; };
    auto chance = [&](int percent) { return std::uniform_int_distribution<int>(0, 99)(rng) < percent; };
    const std::string plain = std::string("abcXYZ0123456789 .;|-_\r\"") + (delim == ',' ? "\t" : ",");
    const std::string inside = plain + delim + "\n\r";
    const int columns = 5;
    std::string text;
    // ~3 MB: several 1 MiB buffers, so records and quoted fields straddle refills.
    while (text.size() < 3u << 20) {
      if (chance(3)) text += chance(50) ? "\n" : "\r\n";  // empty line
      for (int c = 0; c < columns; ++c) {
        if (c > 0) text += delim;
        const int length = std::uniform_int_distribution<int>(0, chance(2) ? 3000 : 12)(rng);
        if (chance(15)) {
          text += '"';
          for (int k = 0; k < length; ++k) {
            const char ch = chance(5) ? '"' : pick(inside);
            text += ch == '"' ? std::string("\"\"") : std::string(1, ch);  // a lone quote would end it
          }
          text += '"';
          if (chance(10)) text += "tail";
        } else {
          for (int k = 0; k < length; ++k) {
            char ch = pick(plain);
            if (k == 0 && (ch == '"' || ch == '\r')) ch = 'q';  // would open a quote / be skipped at a record's start
            text += ch;
          }
        }
      }
      text += chance(20) ? "\r\n" : "\n";
    }
    const std::vector<SimpleCsvRecord> expected = SimpleCsvParse(text, delim);
    TempDir dir;
    WriteFile(dir.File("data.csv"), text);
    CsvOptions options;
    options.delimiter = delim;
    options.column_names = {"a", "b", "c", "d", "e"};
    CsvFileReader reader(dir.File("data.csv"), options);
    RecordBatch batch;
    size_t row = 0;
    while (reader.Next(997, &batch)) {
      for (size_t r = 0; r < batch.num_rows(); ++r, ++row) {
        ASSERT_LT(row, expected.size());
        ASSERT_EQ(expected[row].fields.size(), static_cast<size_t>(columns)) << "row " << row;
        ASSERT_EQ(batch.line_numbers[r], expected[row].line) << "row " << row;
        for (int c = 0; c < columns; ++c) {
          ASSERT_EQ(std::string(batch.columns[c].StringAt(r)), expected[row].fields[c])
              << "row " << row << " column " << c << " line " << expected[row].line;
          ASSERT_EQ(batch.columns[c].IsNull(r), expected[row].fields[c].empty());
        }
      }
    }
    EXPECT_EQ(row, expected.size());
    EXPECT_GT(row, 10000u);
  }
}

// ------------------------------------------------------------------- files and memory

TEST(FileInputs, DirectoryInputReadsTheDataFilesInIt) {
  TempDir dir;
  MakeDirs(dir.File("table/sub"));
  for (const char* name : {"part-1.csv", "part-0.csv", ".part-0.csv.crc", "_SUCCESS", "sub/x.csv"}) {
    WriteFile(dir.File(std::string("table/") + name), "1\n");
  }
  EXPECT_EQ(ExpandInputPaths(dir.File("table")),
            (std::vector<std::string>{dir.File("table/part-0.csv"), dir.File("table/part-1.csv")}));
  // A trailing slash, and several inputs, work the same; a wildcard skips directories.
  EXPECT_EQ(ExpandInputPaths(dir.File("table/")).size(), 2u);
  // An explicit wildcard is taken literally: it matches _SUCCESS, not dot files or sub/.
  EXPECT_EQ(ExpandInputPaths(dir.File("table/*")).size(), 3u);
  EXPECT_EQ(ExpandInputPaths(dir.File("table") + "," + dir.File("table/sub")).size(), 3u);
  MakeDirs(dir.File("empty"));
  WriteFile(dir.File("empty/_SUCCESS"), "");
  EXPECT_TRUE(ExpandInputPaths(dir.File("empty")).empty());
  EXPECT_TZREC_ERROR(ReadFileToString(dir.File("table")), "is a directory, not a file");
}

TEST(FileInputs, UsableMemoryIsTheLowerOfRamAndTheCgroupLimit) {
  TempDir dir;
  const int64_t gib = int64_t{1} << 30;
  WriteFile(dir.File("v2"), "2147483648\n");
  WriteFile(dir.File("unlimited_v2"), "max\n");
  WriteFile(dir.File("unlimited_v1"), "9223372036854771712\n");
  EXPECT_EQ(UsableMemoryBytes(64 * gib, {dir.File("v2")}), 2 * gib);
  EXPECT_EQ(UsableMemoryBytes(gib, {dir.File("v2")}), gib);
  EXPECT_EQ(UsableMemoryBytes(64 * gib, {dir.File("unlimited_v2"), dir.File("unlimited_v1"),
                                         dir.File("missing")}),
            64 * gib);
  EXPECT_EQ(UsableMemoryBytes(64 * gib, {dir.File("unlimited_v2"), dir.File("v2")}), 2 * gib);
  EXPECT_GT(UsableMemoryBytes(), 0);
}

// ------------------------------------------------------------------- feature numbers

void ExpectFeatureError(const std::string& feature_text, const std::string& message,
                        protos::FgMode mode = protos::FG_DAG) {
  SCOPED_TRACE(feature_text);
  auto config = ParsePipelineConfigText("feature_configs { " + feature_text + " }", "f.config");
  config.mutable_data_config()->set_fg_mode(mode);
  EXPECT_TZREC_ERROR(CreateFeatures(config.feature_configs(), config.data_config()), message);
}

TEST(FeatureNumbers, OutOfRangeValuesNameTheirField) {
  ExpectFeatureError(R"(id_feature { feature_name: "a" expression: "user:a" embedding_dim: 400000000 hash_bucket_size: 10 })",
                     "feature_configs[0].id_feature.embedding_dim 400000000 is larger than 65536");
  ExpectFeatureError(R"(id_feature { feature_name: "a" expression: "user:a" embedding_dim: 4 hash_bucket_size: 0 })",
                     "feature_configs[0].id_feature.hash_bucket_size must be > 0");
  ExpectFeatureError(R"(id_feature { feature_name: "a" expression: "user:a" embedding_dim: 4 num_buckets: 18446744073709551615 })",
                     "feature_configs[0].id_feature.num_buckets 18446744073709551615 is larger than");
  ExpectFeatureError(R"(id_feature { feature_name: "a" expression: "user:a" embedding_dim: 4 hash_bucket_size: 10000000000000 })",
                     "hash_bucket_size 10000000000000 is larger than 1099511627776");
  ExpectFeatureError(R"(raw_feature { feature_name: "a" expression: "user:a" value_dim: 4000000000 })",
                     "feature_configs[0].raw_feature.value_dim 4000000000 is larger than 65536");
  ExpectFeatureError(R"(raw_feature { feature_name: "a" expression: "user:a" embedding_dim: 4 boundaries: [1, 3, 2] })",
                     "feature_configs[0].raw_feature.boundaries must be strictly increasing");
  ExpectFeatureError(R"(raw_feature { feature_name: "a" expression: "user:a" embedding_dim: 4 boundaries: [nan] })",
                     "feature_configs[0].raw_feature.boundaries[0] is NaN");
}

TEST(FeatureNumbers, DenseDefaultValueIsOneValueOrOnePerDimension) {
  auto config = ParsePipelineConfigText(
      R"(feature_configs { raw_feature { feature_name: "a" expression: "user:a" value_dim: 4 default_value: "1\x1d2" } })",
      "f.config");
  auto infos = fg::DescribeFeatures(config.feature_configs(), protos::FG_DAG);
  EXPECT_TZREC_ERROR(fg::FeatureGenerator(infos, protos::FG_DAG, ","),
                     "has 2 values but value_dim is 4 (give one value for all dimensions");
}

TEST(FeatureNumbers, VocabFileThatIsADirectoryOrEmptyIsAnErrorAtStart) {
  TempDir dir;
  MakeDirs(dir.File("vocab_dir"));
  WriteFile(dir.File("empty.txt"), "\n\n");
  const std::string base = R"(id_feature { feature_name: "a" expression: "user:a" embedding_dim: 4 default_bucketize_value: 0 vocab_file: ")";
  ExpectFeatureError(base + dir.File("vocab_dir") + "\" }",
                     "feature_configs[0].id_feature.vocab_file: '" + dir.File("vocab_dir") + "' is a directory");
  ExpectFeatureError(base + dir.File("empty.txt") + "\" }",
                     "feature_configs[0].id_feature.vocab_file: '" + dir.File("empty.txt") + "' holds no tokens");
}

TEST(FeatureNumbers, UnsetSequenceLengthMeansNoTruncation) {
  auto config = ParsePipelineConfigText(R"(
    feature_configs { sequence_id_feature { feature_name: "s" expression: "user:s" embedding_dim: 4 hash_bucket_size: 10 } }
    feature_configs { sequence_feature { sequence_name: "g" features { id_feature { feature_name: "i" expression: "item:i" embedding_dim: 4 hash_bucket_size: 10 } } } }
  )", "seq.config");
  auto infos = fg::DescribeFeatures(config.feature_configs(), protos::FG_DAG);
  ASSERT_EQ(infos.size(), 2u);
  EXPECT_EQ(infos[0].sequence_length, 0);
  EXPECT_EQ(infos[1].sequence_length, 0);
}

// ------------------------------------------------------------------------- metrics

TEST(MetricInputs, NaNPredictionsAndLabelsGiveDefinedResults) {
  // Ties are runs of equal values; NaN equals nothing, so tie loops must not meet it.
  const float nan = std::nanf("");
  std::vector<float> probs = {0.2f, nan, 0.7f, 0.7f, nan, 0.1f};
  std::vector<float> labels = {0, 1, 1, 0, 0, 1};
  EXPECT_TRUE(std::isnan(ExactAuc(probs, labels)));
  std::vector<float> nan_labels = {0, nan, 1, nan, 0, 1};
  std::vector<float> finite = {0.2f, 0.3f, 0.7f, 0.7f, 0.4f, 0.1f};
  EXPECT_TRUE(std::isfinite(ExactXauc(finite.data(), nan_labels.data(), finite.size())));
  EXPECT_TRUE(std::isfinite(ExactXauc(probs.data(), nan_labels.data(), probs.size())));
  BinnedAuc binned;
  binned.Update(probs.data(), labels.data(), static_cast<int64_t>(probs.size()));
  EXPECT_TRUE(std::isfinite(binned.Compute()));
}

// ------------------------------------------------------- gen_data on TorchEasyRec configs

TEST(GenDataConfigs, ExpressionOfLogGetsInputsItCanTakeAndFinishes) {
  // dlrm_criteo normalizes its dense inputs with log(x+3): negative draws gave NaN features,
  // labels and oracle probabilities.
  TempDir dir;
  auto config = Config("dlrm_criteo.config", kParquet);
  auto result = Generate(config, dir.File("data"), 2000, 1000);
  EXPECT_TRUE(std::isfinite(result.oracle_auc));
  EXPECT_GT(result.oracle_auc, 0.6);
}

TEST(GenDataConfigs, NullRawFeatureWithValueDimGetsTheDefaultInEveryDimension) {
  TempDir dir;
  // As TorchEasyRec's dssm and tdm mock configs: gen_data leaves some raw values null, and
  // the default "0" must fill all 4 dimensions.
  auto config = LoadPipelineConfig(testing::SourceDir() + "/examples/deepfm_fg_dag.config");
  EditConfigJson(&config, R"({"feature_configs[raw_feature.feature_name=age].raw_feature.value_dim": 4})");
  auto result = Generate(config, dir.File("data"), 3000, 500);
  auto rows = ReadBack(config, result.train_pattern);
  EXPECT_EQ(rows.size, 3000);
}

TEST(GenDataConfigs, FieldUsedAsLabelAndFeatureIsWrittenOnce) {
  // As pepnet_taobao's `occupation`: a label field that is also a feature's column.
  TempDir dir;
  auto config = Config("deepfm_criteo.config",
                       R"({"data_config.dataset_type": "CsvDataset", "data_config.with_header": true})");
  const std::string feature = "int_0";
  config.mutable_data_config()->add_label_fields(feature);
  auto result = Generate(config, dir.File("data"), 200, 100);
  const std::string first = ExpandInputPaths(result.train_pattern).at(0);
  const std::string header = ReadFileToString(first).substr(0, ReadFileToString(first).find('\n'));
  int count = 0;
  for (auto piece : SplitView(header, ",")) count += piece == feature;
  EXPECT_EQ(count, 1) << header;
  auto rows = ReadBack(config, result.train_pattern);
  EXPECT_EQ(rows.size, 200);
}

}  // namespace
}  // namespace tzrec
