// Data positions and exact resume: TorchEasyRec's row split, dataloader_state.json, and
// datasets (Parquet and CSV) that continue after the consumed rows with any worker count.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "test_util.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/data/data_position.h"
#include "tzrec/input/dataset.h"
#include "tzrec/data/parquet/parquet_writer.h"
#include "tzrec/features/feature.h"

namespace tzrec {
namespace {

using testing::TempDir;
using testing::WriteFile;

std::vector<std::pair<int64_t, int64_t>> Pairs(const std::vector<RowInterval>& intervals) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& i : intervals) out.emplace_back(i.begin, i.end);
  return out;
}

TEST(DataPosition, SliceRowsSplitsLikeTorchEasyRec) {
  // 10 rows over 3 readers: the first 10 % 3 readers get one more row.
  EXPECT_EQ(SliceRows(10, 0, 3, 4, false).begin, 0);
  EXPECT_EQ(SliceRows(10, 0, 3, 4, false).end, 4);
  EXPECT_EQ(SliceRows(10, 1, 3, 4, false).begin, 4);
  EXPECT_EQ(SliceRows(10, 1, 3, 4, false).end, 7);
  EXPECT_EQ(SliceRows(10, 2, 3, 4, false).end, 10);
  // 9 rows, 2 readers, batch 4: reader 0 would get 5 = one full batch + 1 while reader 1 ends
  // on a batch boundary; with drop_redundant_bs_eq_one the stray row is dropped.
  EXPECT_EQ(SliceRows(9, 0, 2, 4, true).end, 4);
  EXPECT_EQ(SliceRows(9, 0, 2, 4, false).end, 5);
  EXPECT_EQ(SliceRows(9, 1, 2, 4, true).begin, 5);
  EXPECT_EQ(SliceRows(9, 1, 2, 4, true).end, 9);
}

TEST(DataPosition, RemainingIntervalsAreResplitOverTheCurrentReaders) {
  DataloaderState state = DataloaderState::FromJson(
      R"({"p:0": 3, "p:5": 6, "other:0": 99, "__epochs_completed__": 2})", "state.json");
  EXPECT_EQ(state.epochs_completed(), 2);
  // Readers started at 0 and 5 and consumed up to rows 3 and 6.
  auto remaining = RemainingIntervals(&state, "p", 10);
  EXPECT_EQ(Pairs(remaining), (std::vector<std::pair<int64_t, int64_t>>{{4, 5}, {7, 10}}));
  // 4 rows left over 2 readers: 2 each, mapped back onto the intervals.
  EXPECT_EQ(Pairs(WorkerIntervals(remaining, 0, 2, 1, false)),
            (std::vector<std::pair<int64_t, int64_t>>{{4, 5}, {7, 8}}));
  EXPECT_EQ(Pairs(WorkerIntervals(remaining, 1, 2, 1, false)),
            (std::vector<std::pair<int64_t, int64_t>>{{8, 10}}));
  // No entry for the path: everything remains.
  EXPECT_EQ(Pairs(RemainingIntervals(&state, "q", 10)),
            (std::vector<std::pair<int64_t, int64_t>>{{0, 10}}));
  EXPECT_EQ(Pairs(RemainingIntervals(nullptr, "p", 10)),
            (std::vector<std::pair<int64_t, int64_t>>{{0, 10}}));
}

TEST(DataloaderState, ConsumeKeepsTheLargestRowAndRoundTripsThroughJson) {
  DataloaderState state;
  RowPositions a;
  a.AddRange("f:0", 0, 5);
  a.AddRange("g:0", 10, 2);
  state.Consume(a);
  RowPositions b;
  b.AddRange("f:0", 2, 1);  // an older row (shuffle): the largest stays
  state.Consume(b);
  EXPECT_EQ(state.consumed().at("f:0"), 4);
  EXPECT_EQ(state.consumed().at("g:0"), 11);
  DataloaderState copy = DataloaderState::FromJson(state.ToJson(), "x");
  EXPECT_EQ(copy.consumed(), state.consumed());
  state.FinishEpoch();
  EXPECT_TRUE(state.empty());
  EXPECT_EQ(state.epochs_completed(), 1);
  EXPECT_TZREC_ERROR(DataloaderState::FromJson("{", "ckpt/dataloader_state.json"),
                     "ckpt/dataloader_state.json: not valid JSON");
  EXPECT_TZREC_ERROR(DataloaderState::FromJson(R"({"f:0": "x"})", "s.json"),
                     "s.json: 'f:0' must map to an integer row");
  // Slicing and appending keep each row's source.
  RowPositions joined = a.Slice(3, 7);
  joined.Append(b);
  EXPECT_EQ(joined.size(), 5u);
  EXPECT_EQ(joined.sources[joined.source[4]], "f:0");
  EXPECT_EQ(joined.row[4], 2);
  EXPECT_EQ(joined.sources[joined.source[2]], "g:0");
}

// Parquet files of 7, 13 and 20 rows: user = row % 100, clk = global row index.
std::string WriteParquetRows(const TempDir& dir) {
  int64_t row = 0;
  int index = 0;
  for (int rows : {7, 13, 20}) {
    RecordBatch batch;
    batch.columns.resize(2);
    batch.columns[0].name = "user";
    batch.columns[0].type = ColumnType::kInt64;
    batch.columns[1].name = "clk";
    batch.columns[1].type = ColumnType::kDouble;
    for (int r = 0; r < rows; ++r, ++row) {
      batch.line_numbers.push_back(r + 1);
      batch.columns[0].ints.push_back(row % 100);
      batch.columns[0].valid.push_back(1);
      batch.columns[1].doubles.push_back(static_cast<double>(row));
      batch.columns[1].valid.push_back(1);
    }
    ParquetWriteOptions options;
    options.row_group_rows = 6;  // several row groups per file
    ParquetFileWriter writer(dir.File("part-" + std::to_string(index++) + ".parquet"),
                             {ParquetFieldSpec::Plain("user", ParquetType::kInt64),
                              ParquetFieldSpec::Plain("clk", ParquetType::kDouble)},
                             options);
    writer.Write(batch);
    writer.Close();
  }
  return dir.path() + "/part-*.parquet";
}

std::string WriteCsvRows(const TempDir& dir) {
  int row = 0;
  for (int f = 0; f < 3; ++f) {
    std::string content = "user,clk\n";
    for (int r = 0; r < 7 + 6 * f; ++r, ++row) {
      content += std::to_string(row % 100) + "," + std::to_string(row) + "\n";
    }
    WriteFile(dir.File("part-" + std::to_string(f) + ".csv"), content);
  }
  return dir.path() + "/part-*.csv";
}

struct ReadSetup {
  std::vector<std::unique_ptr<Feature>> features;
  protos::DataConfig data;
};

ReadSetup MakeSetup(const char* dataset_type, int workers) {
  auto config = ParsePipelineConfigText(
      std::string(R"(feature_configs { id_feature { feature_name: "user" num_buckets: 100 embedding_dim: 2 } }
         data_config { batch_size: 4 with_header: true label_fields: "clk" dataset_type: )") +
          dataset_type + " }",
      "t");
  ReadSetup setup;
  setup.features = CreateFeatures(config.feature_configs(), config.data_config());
  setup.data = config.data_config();
  setup.data.set_num_workers(workers);
  return setup;
}

// Reads up to `max_batches` batches (all when < 0), recording rows and consuming them into
// `state` as the trainer does; the stream is then dropped as a killed process would drop it.
std::vector<int> Consume(const ReadSetup& setup, const std::string& pattern, int64_t max_batches,
                         DataloaderState* state, const DataloaderState* resume) {
  Dataset dataset(setup.data, {setup.features[0].get()}, pattern, DatasetMode::kTrain, 1);
  auto stream = dataset.Open(0, resume);
  std::vector<int> rows;
  ParsedBatch batch;
  for (int64_t b = 0; (max_batches < 0 || b < max_batches) && stream->Next(&batch); ++b) {
    for (float clk : batch.labels.at("clk")) rows.push_back(static_cast<int>(clk));
    EXPECT_EQ(batch.positions.size(), static_cast<size_t>(batch.size));
    state->Consume(batch.positions);
  }
  return rows;
}

void ExpectResumeIsExact(const char* dataset_type, const std::string& pattern, int total) {
  for (int before : {1, 2, 3}) {
    for (int after : {1, 2, 3}) {
      SCOPED_TRACE(::testing::Message() << dataset_type << " workers " << before << " -> " << after);
      DataloaderState state;
      std::vector<int> rows = Consume(MakeSetup(dataset_type, before), pattern, 3, &state, nullptr);
      DataloaderState saved = DataloaderState::FromJson(state.ToJson(), "state");
      std::vector<int> rest = Consume(MakeSetup(dataset_type, after), pattern, -1, &state, &saved);
      rows.insert(rows.end(), rest.begin(), rest.end());
      std::multiset<int> seen(rows.begin(), rows.end());
      EXPECT_EQ(seen.size(), static_cast<size_t>(total)) << "duplicates or gaps";
      EXPECT_EQ(std::set<int>(rows.begin(), rows.end()).size(), static_cast<size_t>(total));
      EXPECT_EQ(*seen.begin(), 0);
      EXPECT_EQ(*seen.rbegin(), total - 1);
    }
  }
}

TEST(ParquetDataset, ReadersSplitRowsAndResumeExactlyWithAnyWorkerCount) {
  TempDir dir;
  const std::string pattern = WriteParquetRows(dir);
  // Uninterrupted, any worker count: every row once (40 rows: no 1-row stragglers to drop).
  for (int workers : {1, 2, 3, 5}) {
    DataloaderState state;
    auto rows = Consume(MakeSetup("ParquetDataset", workers), pattern, -1, &state, nullptr);
    EXPECT_EQ(std::set<int>(rows.begin(), rows.end()).size(), 40u) << workers;
    EXPECT_EQ(rows.size(), 40u) << workers;
  }
  // One worker reads in file order across file and row group boundaries.
  DataloaderState state;
  auto rows = Consume(MakeSetup("ParquetDataset", 1), pattern, -1, &state, nullptr);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(rows[i], i);
  EXPECT_EQ(state.consumed().at(pattern + ":0"), 39);
  ExpectResumeIsExact("ParquetDataset", pattern, 40);
}

TEST(CsvDataset, ResumeSkipsConsumedRowsWithAnyWorkerCount) {
  TempDir dir;
  ExpectResumeIsExact("CsvDataset", WriteCsvRows(dir), 7 + 13 + 19);
}

TEST(ParquetDataset, MissingColumnNamesTheFile) {
  TempDir dir;
  const std::string pattern = WriteParquetRows(dir);
  ReadSetup setup = MakeSetup("ParquetDataset", 1);
  setup.data.clear_label_fields();
  setup.data.add_label_fields("label");
  EXPECT_TZREC_ERROR(Dataset(setup.data, {setup.features[0].get()}, pattern, DatasetMode::kTrain, 1),
                     "part-0.parquet");
}

}  // namespace
}  // namespace tzrec
