// create_faiss_index and hitrate (tools/faiss_index.h, tools/hitrate.h) against brute force:
// an IVFFlat index searching all its lists returns exactly the brute-force top k (inner product
// and L2), HNSW finds nearly all of them, an index read back searches as the one written, and
// hit rates (one interest, several with the union or the merged top k, padding and per-request
// interest counts, requests without ground truth) equal a loop over brute-force neighbours.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "test_util.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/strings.h"
#include "tzrec/data/csv_reader.h"
#include "tzrec/data/parquet/parquet_reader.h"
#include "tzrec/data/parquet/parquet_writer.h"
#include "tzrec/tools/faiss_index.h"
#include "tzrec/tools/hitrate.h"

namespace tzrec {
namespace {

using testing::TempDir;
using testing::WriteFile;

EmbeddingRows RandomTable(int64_t rows, int64_t dim, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  EmbeddingRows table;
  table.dim = dim;
  for (int64_t r = 0; r < rows; ++r) {
    table.ids.push_back("item" + std::to_string(r));
    for (int64_t d = 0; d < dim; ++d) table.values.push_back(normal(rng));
  }
  return table;
}

// Brute-force top k of `query`: positions and scores (inner product, or squared L2 distance).
std::vector<std::pair<float, int64_t>> BruteForce(const EmbeddingRows& table, const float* query, int64_t k, bool ip) {
  std::vector<std::pair<float, int64_t>> all;
  const int64_t rows = static_cast<int64_t>(table.ids.size());
  for (int64_t r = 0; r < rows; ++r) {
    double score = 0;
    for (int64_t d = 0; d < table.dim; ++d) {
      const double x = table.values[r * table.dim + d], q = query[d];
      score += ip ? x * q : (x - q) * (x - q);
    }
    all.emplace_back(static_cast<float>(score), r);
  }
  std::sort(all.begin(), all.end(), [&](const auto& a, const auto& b) { return ip ? a.first > b.first : a.first < b.first; });
  all.resize(static_cast<size_t>(k));
  return all;
}

TEST(FaissIndex, IvfSearchingEveryListIsExactAndHnswNearlySo) {
  const EmbeddingRows items = RandomTable(2000, 16, 7);
  const EmbeddingRows queries = RandomTable(50, 16, 8);
  const int64_t k = 10;
  for (const std::string type : {"IVFFlatIP", "IVFFlatL2", "HNSWFlatIP", "HNSWFlatL2"}) {
    SCOPED_TRACE(type);
    FaissIndexOptions options;
    options.index_type = type;
    options.ivf_nlist = 20;
    const FaissIndex index(items, options);
    EXPECT_EQ(index.size(), 2000);
    EXPECT_EQ(index.inner_product(), EndsWith(type, "IP"));
    const FaissIndex::Result found = index.Search(queries.values.data(), 50, k, /*nprobe=*/20, /*ef_search=*/128);
    int64_t agree = 0;
    for (int64_t q = 0; q < 50; ++q) {
      const auto expected = BruteForce(items, &queries.values[q * 16], k, index.inner_product());
      std::set<int64_t> want;
      for (const auto& [score, position] : expected) want.insert(position);
      for (int64_t j = 0; j < k; ++j) {
        const int64_t position = found.positions[q * k + j];
        agree += want.count(position);
        if (StartsWith(type, "IVF")) {
          EXPECT_EQ(position, expected[j].second) << q << "," << j;
          EXPECT_NEAR(found.distances[q * k + j], expected[j].first, 1e-3 * (1 + std::abs(expected[j].first)));
        }
      }
    }
    EXPECT_GE(agree, StartsWith(type, "IVF") ? 500 : 475) << "of 500";
  }
}

TEST(FaissIndex, AnIndexReadBackSearchesAsTheOneWritten) {
  TempDir dir;
  const EmbeddingRows items = RandomTable(300, 8, 1);
  FaissIndexOptions options;
  options.ivf_nlist = 10;
  const FaissIndex index(items, options);
  index.Write(dir.File("index"));
  EXPECT_EQ(Split(ReadFileToString(dir.File("index/id_mapping")), "\n")[299], "item299");
  const FaissIndex read = FaissIndex::Read(dir.File("index"));
  EXPECT_EQ(read.size(), 300);
  EXPECT_EQ(read.dim(), 8);
  EXPECT_EQ(read.id(17), "item17");
  const EmbeddingRows queries = RandomTable(5, 8, 2);
  const auto a = index.Search(queries.values.data(), 5, 7, 10);
  const auto b = read.Search(queries.values.data(), 5, 7, 10);
  EXPECT_EQ(a.positions, b.positions);
  EXPECT_EQ(a.distances, b.distances);
  WriteFile(dir.File("index/id_mapping"), "only_one\n");
  EXPECT_TZREC_ERROR(FaissIndex::Read(dir.File("index")), "1 ids for an index of 300 embeddings");
  EXPECT_TZREC_ERROR(FaissIndex::Read(dir.File("nothing")), "has no faiss_index and id_mapping");
}

TEST(FaissIndex, EmbeddingTablesFromCsvAndParquetAndTheirErrors) {
  TempDir dir;
  // predict's CSV form: the embedding quoted as one cell.
  WriteFile(dir.File("emb.csv"), "item_tower_emb,item_id\n\"0.5,1,-2\",a\n\"1e-3,0,3\",b\n");
  EmbeddingRows csv = ReadEmbeddingTable(dir.File("emb.csv"), "item_id", "item_tower_emb", "", 1);
  EXPECT_EQ(csv.ids, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(csv.dim, 3);
  EXPECT_EQ(csv.values, (std::vector<float>{0.5f, 1, -2, 1e-3f, 0, 3}));
  {
    ParquetFileWriter writer(dir.File("emb.parquet"), {ParquetFieldSpec::Plain("item_id", ParquetType::kInt64),
                                                      ParquetFieldSpec::List("item_tower_emb", ParquetType::kFloat)});
    ParquetColumn ids;
    ids.name = ids.values.name = "item_id";
    ids.values.type = ColumnType::kInt64;
    ids.values.ints = {11, 12};
    ids.values.valid = {1, 1};
    ParquetColumn emb;
    emb.name = emb.values.name = "item_tower_emb";
    emb.values.type = ColumnType::kDouble;
    emb.values.doubles = {0.25, -1, 2, 4};
    emb.values.valid = {1, 1, 1, 1};
    emb.lists.resize(1);
    emb.lists[0].Append(true, 2);
    emb.lists[0].Append(true, 2);
    writer.Write({ids, emb});
    writer.Close();
  }
  EmbeddingRows parquet = ReadEmbeddingTable(dir.File("emb.parquet"), "item_id", "item_tower_emb", "", 1024);
  EXPECT_EQ(parquet.ids, (std::vector<std::string>{"11", "12"}));
  EXPECT_EQ(parquet.values, (std::vector<float>{0.25f, -1, 2, 4}));

  WriteFile(dir.File("bad_dim.csv"), "id,emb\na,\"1,2\"\nb,\"1,2,3\"\n");
  EXPECT_TZREC_ERROR(ReadEmbeddingTable(dir.File("bad_dim.csv"), "id", "emb", "", 8),
                     "bad_dim.csv:3 column 'emb': 3 values, but the first embedding has 2");
  WriteFile(dir.File("bad_num.csv"), "id,emb\na,\"1,x\"\n");
  EXPECT_TZREC_ERROR(ReadEmbeddingTable(dir.File("bad_num.csv"), "id", "emb", "", 8), "'x' is not a finite number");
  WriteFile(dir.File("nan.csv"), "id,emb\na,\"1,nan\"\n");
  EXPECT_TZREC_ERROR(ReadEmbeddingTable(dir.File("nan.csv"), "id", "emb", "", 8), "'nan' is not a finite number");
  EXPECT_TZREC_ERROR(ReadEmbeddingTable(dir.File("emb.csv"), "id", "item_tower_emb", "", 8), "emb.csv: column 'id'");
  EXPECT_TZREC_ERROR(ReadEmbeddingTable(dir.File("emb.csv"), "item_id", "item_tower_emb", "OdpsReader", 8),
                     "MaxCompute is not supported");
  FaissIndexOptions options;
  EXPECT_TZREC_ERROR(FaissIndex(csv, options), "--ivf_nlist=1000 is more than the 2 embeddings");
  options.index_type = "IVFPQ";
  EXPECT_TZREC_ERROR(FaissIndex(csv, options), "--index_type=IVFPQ: unknown");
}

// Hit rate by brute force: each interest's top k (or the merged top k), unioned, against gt.
struct Request {
  std::string id;
  std::vector<std::vector<float>> interests;  // zero vectors: padding
  std::set<std::string> gt;
  int64_t valid = -1;  // num_interests_field (-1: all)
};

double ReferenceHitrate(const EmbeddingRows& items, const std::vector<Request>& requests, int64_t k, bool across,
                        std::map<std::string, double>* per_request) {
  double hits = 0, gt = 0;
  for (const Request& request : requests) {
    if (request.gt.empty()) continue;
    std::vector<std::pair<float, int64_t>> merged;
    std::set<std::string> retrieved;
    const int64_t count = request.valid < 0 ? static_cast<int64_t>(request.interests.size()) : request.valid;
    for (int64_t i = 0; i < count; ++i) {
      const auto& q = request.interests[i];
      if (std::all_of(q.begin(), q.end(), [](float v) { return v == 0; })) continue;
      for (const auto& [score, position] : BruteForce(items, q.data(), k, true)) {
        if (across) {
          merged.emplace_back(score, position);
        } else {
          retrieved.insert(items.ids[position]);
        }
      }
    }
    if (across) {
      std::sort(merged.begin(), merged.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      std::set<int64_t> seen;
      for (const auto& [score, position] : merged) {
        if (static_cast<int64_t>(seen.size()) == k) break;
        if (seen.insert(position).second) retrieved.insert(items.ids[position]);
      }
    }
    double h = 0;
    for (const std::string& item : request.gt) h += retrieved.count(item);
    (*per_request)[request.id] = h / static_cast<double>(request.gt.size());
    hits += h;
    gt += static_cast<double>(request.gt.size());
  }
  return hits / gt;
}

std::string Cells(const std::vector<float>& values) {
  std::string text;
  for (float v : values) text += (text.empty() ? "" : ",") + std::to_string(v);
  return text;
}

// `items` as predict writes an item tower's output: item_id, then the embedding as one cell.
void WriteItemCsv(const std::string& path, const EmbeddingRows& items) {
  std::string csv = "item_id,item_tower_emb\n";
  for (size_t r = 0; r < items.ids.size(); ++r) {
    const auto row = items.values.begin() + static_cast<int64_t>(r) * items.dim;
    csv += items.ids[r] + ",\"" + Cells(std::vector<float>(row, row + items.dim)) + "\"\n";
  }
  WriteFile(path, csv);
}

TEST(Hitrate, EqualsBruteForceForOneAndSeveralInterests) {
  TempDir dir;
  const int64_t dim = 8, k = 20;
  const EmbeddingRows items = RandomTable(400, dim, 3);
  WriteItemCsv(dir.File("items.csv"), items);
  // The CSV text rounds the item embeddings: the reference reads them back the same way.
  const EmbeddingRows read_items = ReadEmbeddingTable(dir.File("items.csv"), "item_id", "item_tower_emb", "", 64);

  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal;
  std::vector<Request> requests;
  for (int r = 0; r < 60; ++r) {
    Request request;
    request.id = "req" + std::to_string(r);
    for (int i = 0; i < 3; ++i) {
      std::vector<float> q(dim);
      for (float& v : q) v = normal(rng);
      if (r % 5 == 0 && i == 2) std::fill(q.begin(), q.end(), 0.0f);  // padding
      request.interests.push_back(q);
    }
    if (r % 7 == 0) request.valid = 1;
    // Ground truth: some near items (often retrieved), some random ones.
    for (const auto& [score, position] : BruteForce(read_items, request.interests[0].data(), 30, true)) {
      if (rng() % 3 == 0) request.gt.insert(read_items.ids[position]);
    }
    request.gt.insert(read_items.ids[rng() % 400]);
    if (r == 13) request.gt.clear();  // skipped
    requests.push_back(request);
  }
  for (const int interests : {1, 3}) {
    for (const bool across : {false, true}) {
      if (interests == 1 && across) continue;
      SCOPED_TRACE(::testing::Message() << interests << " interests, across " << across);
      std::string user_csv = "request_id,gt_items,user_tower_emb,n\n";
      std::vector<Request> used = requests;
      for (Request& request : used) {
        request.interests.resize(static_cast<size_t>(interests));
        if (request.valid > interests) request.valid = interests;
        std::vector<std::string> parts;
        for (const auto& q : request.interests) parts.push_back(Cells(q));
        user_csv += request.id + ",\"" + Join(std::vector<std::string>(request.gt.begin(), request.gt.end()), ",") +
                    "\",\"" + Join(parts, ";") + "\"," + std::to_string(request.valid < 0 ? interests : request.valid) + "\n";
      }
      const std::string tag = std::to_string(interests) + (across ? "_across" : "");
      WriteFile(dir.File("users" + tag + ".csv"), user_csv);
      // The reference reads the user embeddings back from the CSV text too.
      for (Request& request : used) {
        for (auto& q : request.interests) q = ParseEmbeddingText(Cells(q), "test");
      }
      std::map<std::string, double> expected_rates;
      const double expected = ReferenceHitrate(read_items, used, k, across, &expected_rates);

      HitrateOptions options;
      options.user_gt_input = dir.File("users" + tag + ".csv");
      options.item_embedding_input = dir.File("items.csv");
      options.total_hitrate_output = dir.File("total" + tag);
      options.hitrate_details_output = dir.File("details" + tag);
      options.top_k = k;
      options.ivf_nlist = 16;
      options.ivf_nprobe = 16;  // every list: exact
      options.num_interests = interests;
      options.num_interests_field = "n";
      options.topk_across_interests = across;
      options.batch_size = 7;
      const HitrateResult result = ComputeHitrate(options);
      EXPECT_EQ(result.requests, 59);
      EXPECT_NEAR(result.hitrate, expected, 1e-12);
      EXPECT_GT(result.hitrate, 0.1);
      double total = 0;
      ASSERT_TRUE(ParseDouble(Trim(Split(ReadFileToString(dir.File("total" + tag + "/part-0.csv")), "\n")[1]), &total));
      EXPECT_DOUBLE_EQ(total, result.hitrate);
      // Details: one row per request with ground truth, its rate and hits.
      CsvOptions csv;
      csv.with_header = true;
      CsvFileReader reader(dir.File("details" + tag + "/part-0.csv"), csv);
      RecordBatch batch;
      int64_t rows = 0;
      while (reader.Next(100, &batch)) {
        for (size_t r = 0; r < batch.num_rows(); ++r, ++rows) {
          const std::string id = batch.Find("id")->TextAt(r);
          double rate = 0;
          ASSERT_TRUE(ParseDouble(batch.Find("hitrate")->TextAt(r), &rate));
          EXPECT_NEAR(rate, expected_rates.at(id), 1e-6) << id;
          const std::string topk = batch.Find("topk_ids")->TextAt(r);
          const size_t lists = Split(topk, ";").size();
          if (across) EXPECT_EQ(lists, 1u) << id;
          if (!across) EXPECT_LE(lists, static_cast<size_t>(interests)) << id;
          EXPECT_EQ(Split(Split(topk, ";")[0], ",").size(), static_cast<size_t>(k)) << id;
        }
      }
      EXPECT_EQ(rows, 59);
    }
  }
}

// The commands with TorchEasyRec's flags write what the functions compute.
TEST(Hitrate, CommandsTakeTorchEasyRecsFlags) {
  TempDir dir;
  const EmbeddingRows items = RandomTable(60, 4, 11);
  WriteItemCsv(dir.File("items.csv"), items);
  WriteFile(dir.File("users.csv"), "request_id,gt_items,user_tower_emb\nu1,\"item1,item2\",\"1,0,0,0\"\nu2,item3,\"0,1,0,0\"\n");
  EXPECT_EQ(CreateFaissIndexMain({"--embedding_input_path=" + dir.File("items.csv"), "--index_output_dir",
                                  dir.File("index"), "--index_type=HNSWFlatIP", "--id_field=item_id",
                                  "--embedding_field=item_tower_emb", "--hnsw_M=8"}),
            0);
  const FaissIndex index = FaissIndex::Read(dir.File("index"));
  EXPECT_EQ(index.size(), 60);
  EXPECT_TRUE(index.inner_product());
  EXPECT_EQ(HitrateMain({"--user_gt_input=" + dir.File("users.csv"), "--item_embedding_input=" + dir.File("items.csv"),
                         "--total_hitrate_output=" + dir.File("total"), "--top_k=10", "--ivf_nlist=6",
                         "--ivf_nprobe=6"}),
            0);
  HitrateOptions options;
  options.user_gt_input = dir.File("users.csv");
  options.item_embedding_input = dir.File("items.csv");
  options.top_k = 10;
  options.ivf_nlist = options.ivf_nprobe = 6;
  double total = 0;
  ASSERT_TRUE(ParseDouble(Trim(Split(ReadFileToString(dir.File("total/part-0.csv")), "\n")[1]), &total));
  EXPECT_DOUBLE_EQ(total, ComputeHitrate(options).hitrate);
}

TEST(Hitrate, ParquetOutputsAndBadInputs) {
  TempDir dir;
  const EmbeddingRows items = RandomTable(50, 4, 9);
  WriteItemCsv(dir.File("items.csv"), items);
  WriteFile(dir.File("users.csv"), "request_id,gt_items,user_tower_emb\nu1,\"item1,item2\",\"1,0,0,0\"\nu2,item3,\"0,1,0,0\"\n");
  HitrateOptions options;
  options.user_gt_input = dir.File("users.csv");
  options.item_embedding_input = dir.File("items.csv");
  options.total_hitrate_output = dir.File("total");
  options.hitrate_details_output = dir.File("details");
  options.writer_type = "ParquetWriter";
  options.ivf_nlist = 5;
  options.top_k = 50;  // every item: everything is a hit
  const HitrateResult result = ComputeHitrate(options);
  EXPECT_DOUBLE_EQ(result.hitrate, 1.0);
  ParquetFileReader total(dir.File("total/part-0.parquet"), {});
  RecordBatch batch;
  ASSERT_TRUE(total.Next(10, &batch));
  EXPECT_EQ(batch.Find("hitrate")->TextAt(0), "1");
  ParquetReadOptions read;
  read.list_separator = ",";
  ParquetFileReader details(dir.File("details/part-0.parquet"), read);
  ASSERT_TRUE(details.Next(10, &batch));
  ASSERT_EQ(batch.num_rows(), 2u);
  EXPECT_EQ(batch.Find("id")->TextAt(0), "u1");
  EXPECT_EQ(batch.Find("hit_ids")->TextAt(0), "item1,item2");
  EXPECT_EQ(Split(batch.Find("topk_ids")->TextAt(1), ",").size(), 50u);

  EXPECT_TZREC_ERROR(ComputeHitrate(options), "exists already");
  options.total_hitrate_output = options.hitrate_details_output = "";
  options.num_interests = 1;
  WriteFile(dir.File("wide.csv"), "request_id,gt_items,user_tower_emb\nu1,item1,\"1,0,0,0,1,1,1,1\"\n");
  options.user_gt_input = dir.File("wide.csv");
  EXPECT_TZREC_ERROR(ComputeHitrate(options), "wide.csv:2 column 'user_tower_emb': 8 values; expected up to --num_interests=1");
  options.index_type = "HNSWFlatIP";
  EXPECT_TZREC_ERROR(ComputeHitrate(options), "hitrate searches an IVFFlatIP or IVFFlatL2 index");
}

}  // namespace
}  // namespace tzrec
