// Feature-generation throughput (bench/fg_throughput.sh): raw rows -> encoded features per
// second for a pipeline config, single thread, then with fg_threads = 2, and CSV read + FG
// together, on data written by gen_data for the same config.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "tzrec/common/error.h"
#include "tzrec/common/fs.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/data/csv_reader.h"
#include "tzrec/input/dataset.h"
#include "tzrec/fg/feature_generator.h"
#include "tzrec/tools/gen_data.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s <pipeline.config> <rows> <data_dir>\n", argv[0]);
    return 2;
  }
  try {
    using namespace tzrec;
    auto config = LoadPipelineConfig(argv[1]);
    const int64_t rows = std::stoll(argv[2]);
    const std::string data_dir = argv[3];
    GenDataOptions gen;
    gen.output_dir = data_dir;
    gen.train_rows = rows;
    gen.eval_rows = 4096;
    gen.num_files = 1;
    auto data = GenerateMockData(config, gen);
    const auto& dc = config.data_config();
    CsvOptions csv;
    csv.delimiter = ParseCsvDelimiter(dc.delimiter());
    csv.with_header = dc.with_header();
    ResolveCsvSchema(dc, &csv);
    auto infos = fg::DescribeFeatures(config.feature_configs(), dc.fg_mode());
    fg::FeatureGenerator one(infos, dc.fg_mode(), dc.fg_encoded_multival_sep(), 1);
    fg::FeatureGenerator two(infos, dc.fg_mode(), dc.fg_encoded_multival_sep(), 2);
    csv.wanted_columns = one.input_columns();
    const size_t batch_rows = static_cast<size_t>(dc.batch_size());

    std::vector<RecordBatch> batches;
    auto read_start = Clock::now();
    for (const auto& file : ExpandInputPaths(data.train_pattern)) {
      CsvFileReader reader(file, csv);
      RecordBatch batch;
      while (reader.Next(batch_rows, &batch)) batches.push_back(batch);
    }
    const double read_seconds = Seconds(read_start);
    int64_t total_rows = 0;
    for (const auto& b : batches) total_rows += static_cast<int64_t>(b.num_rows());

    auto run = [&](const fg::FeatureGenerator& generator) {
      for (const auto& b : batches) {  // warm-up pass
        ParsedBatch out;
        generator.Generate(b, &out);
      }
      int64_t done = 0;
      auto start = Clock::now();
      while (Seconds(start) < 3.0) {
        for (const auto& b : batches) {
          ParsedBatch out;
          generator.Generate(b, &out);
          done += static_cast<int64_t>(b.num_rows());
        }
      }
      return static_cast<double>(done) / Seconds(start);
    };
    const double fg1 = run(one);
    const double fg2 = run(two);
    std::printf("features: %zu (%zu raw input columns), rows: %lld, batch %zu\n", infos.size(),
                one.input_columns().size(), static_cast<long long>(total_rows), batch_rows);
    std::printf("csv read: %.0f rows/s (1 thread)\n", static_cast<double>(total_rows) / read_seconds);
    std::printf("fg: %.0f rows/s per thread (fg_threads=1)\n", fg1);
    std::printf("fg: %.0f rows/s with fg_threads=2 (%.2fx)\n", fg2, fg2 / fg1);
    const double both = 1.0 / (1.0 / fg1 + read_seconds / static_cast<double>(total_rows));
    std::printf("csv read + fg: %.0f rows/s per reader thread\n", both);
    std::printf("fg_rows_per_thread=%.0f\n", fg1);
    std::printf("read_fg_rows_per_thread=%.0f\n", both);
  } catch (const tzrec::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
