#include "tzrec/tools/hitrate.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <unordered_map>

#include <unistd.h>

#include "tzrec/common/error.h"
#include "tzrec/common/flags.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"
#include "tzrec/data/csv_reader.h"
#include "tzrec/data/parquet/parquet_writer.h"
#include "tzrec/tools/faiss_index.h"

namespace tzrec {
namespace {

// What one request retrieved: per interest (or one merged list) the ids and distances.
struct Retrieved {
  std::vector<std::vector<std::string>> ids;
  std::vector<std::vector<float>> distances;
};

void AppendFloatText(float value, std::string* out) {
  char buffer[32];
  const int n = std::snprintf(buffer, sizeof(buffer), "%.9g", value);
  out->append(buffer, static_cast<size_t>(n));
}

// part-0.csv or part-0.parquet in `dir`, moved into place only when complete.
class PartFile {
 public:
  PartFile(const std::string& dir, bool parquet, std::vector<ParquetFieldSpec> fields) : parquet_(parquet) {
    MakeDirs(dir);
    path_ = JoinPath(dir, parquet ? "part-0.parquet" : "part-0.csv");
    if (PathExists(path_)) Fail("'", path_, "' exists already (choose another directory)");
    if (parquet) {
      parquet_writer_ = std::make_unique<ParquetFileWriter>(path_, std::move(fields));
      return;
    }
    temp_path_ = TempSiblingPath(path_);
    csv_ = std::fopen(temp_path_.c_str(), "wb");
    if (!csv_) Fail("cannot write '", temp_path_, "': ", std::strerror(errno));
    std::string header;
    for (const auto& field : fields) header += (header.empty() ? "" : ",") + CsvField(field.name);
    WriteCsv(header + "\n");
  }
  ~PartFile() {
    if (csv_) {
      std::fclose(csv_);
      std::remove(temp_path_.c_str());
    }
  }
  bool parquet() const { return parquet_; }
  void WriteCsv(const std::string& text) {
    if (std::fwrite(text.data(), 1, text.size(), csv_) != text.size()) {
      Fail("cannot write '", temp_path_, "': ", std::strerror(errno));
    }
  }
  void WriteParquet(const std::vector<ParquetColumn>& columns) { parquet_writer_->Write(columns); }
  void Close() {
    if (parquet_writer_) {
      parquet_writer_->Close();
      return;
    }
    const bool ok = std::fflush(csv_) == 0 && fsync(fileno(csv_)) == 0;
    std::fclose(csv_);
    csv_ = nullptr;
    if (!ok || std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
      std::remove(temp_path_.c_str());
      Fail("cannot write '", path_, "': ", std::strerror(errno));
    }
  }

 private:
  bool parquet_;
  std::string path_, temp_path_;
  FILE* csv_ = nullptr;
  std::unique_ptr<ParquetFileWriter> parquet_writer_;
};

ParquetColumn OutputColumn(const std::string& name, ColumnType type) {
  ParquetColumn column;
  column.name = name;
  column.values.name = name;
  column.values.type = type;
  return column;
}

class DetailsWriter {
 public:
  DetailsWriter(const std::string& dir, bool parquet)
      : file_(dir, parquet,
              {ParquetFieldSpec::Plain("id", ParquetType::kString), ParquetFieldSpec::List("topk_ids", ParquetType::kString, 2),
               ParquetFieldSpec::List("topk_dists", ParquetType::kFloat, 2),
               ParquetFieldSpec::Plain("hitrate", ParquetType::kDouble), ParquetFieldSpec::List("hit_ids", ParquetType::kString)}) {
    Reset();
  }
  DetailsWriter(const DetailsWriter&) = delete;
  DetailsWriter& operator=(const DetailsWriter&) = delete;

  void Add(const std::string& id, const Retrieved& retrieved, double hitrate, const std::vector<std::string>& hit_ids) {
    if (!file_.parquet()) {
      // Interests joined by ';', their items by ',' (what hitrate reads back as a nested list).
      std::string ids, dists;
      for (size_t i = 0; i < retrieved.ids.size(); ++i) {
        if (i) ids += ';', dists += ';';
        ids += Join(retrieved.ids[i], ",");
        for (size_t j = 0; j < retrieved.distances[i].size(); ++j) {
          if (j) dists += ',';
          AppendFloatText(retrieved.distances[i][j], &dists);
        }
      }
      std::string rate;
      AppendFloatText(static_cast<float>(hitrate), &rate);
      file_.WriteCsv(CsvField(id) + "," + CsvField(ids) + "," + CsvField(dists) + "," + rate + "," +
                     CsvField(Join(hit_ids, ",")) + "\n");
      return;
    }
    columns_[0].values.AppendString(id, true);
    ParquetColumn& topk_ids = columns_[1];
    ParquetColumn& topk_dists = columns_[2];
    topk_ids.lists[0].Append(true, static_cast<uint32_t>(retrieved.ids.size()));
    topk_dists.lists[0].Append(true, static_cast<uint32_t>(retrieved.ids.size()));
    for (size_t i = 0; i < retrieved.ids.size(); ++i) {
      topk_ids.lists[1].Append(true, static_cast<uint32_t>(retrieved.ids[i].size()));
      topk_dists.lists[1].Append(true, static_cast<uint32_t>(retrieved.ids[i].size()));
      for (size_t j = 0; j < retrieved.ids[i].size(); ++j) {
        topk_ids.values.AppendString(retrieved.ids[i][j], true);
        topk_dists.values.doubles.push_back(retrieved.distances[i][j]);
        topk_dists.values.valid.push_back(1);
      }
    }
    columns_[3].values.doubles.push_back(hitrate);
    columns_[3].values.valid.push_back(1);
    columns_[4].lists[0].Append(true, static_cast<uint32_t>(hit_ids.size()));
    for (const std::string& hit : hit_ids) columns_[4].values.AppendString(hit, true);
    if (++pending_ >= 4096) Flush();
  }

  void Close() {
    Flush();
    file_.Close();
  }

 private:
  void Flush() {
    if (file_.parquet() && pending_ > 0) file_.WriteParquet(columns_);
    Reset();
  }
  void Reset() {
    pending_ = 0;
    columns_ = {OutputColumn("id", ColumnType::kString), OutputColumn("topk_ids", ColumnType::kString),
                OutputColumn("topk_dists", ColumnType::kDouble), OutputColumn("hitrate", ColumnType::kDouble),
                OutputColumn("hit_ids", ColumnType::kString)};
    columns_[1].lists.resize(2);
    columns_[2].lists.resize(2);
    columns_[4].lists.resize(1);
  }

  PartFile file_;
  std::vector<ParquetColumn> columns_;
  int64_t pending_ = 0;
};

bool AllZero(const float* values, int64_t n) {
  return std::all_of(values, values + n, [](float v) { return v == 0.0f; });
}

}  // namespace

HitrateResult ComputeHitrate(const HitrateOptions& options) {
  if (options.user_gt_input.empty() || options.item_embedding_input.empty()) {
    Fail("--user_gt_input and --item_embedding_input are required");
  }
  if (options.index_type != "IVFFlatIP" && options.index_type != "IVFFlatL2") {
    Fail("--index_type=", options.index_type, ": hitrate searches an IVFFlatIP or IVFFlatL2 index");
  }
  if (options.num_interests <= 0) Fail("--num_interests must be > 0");
  if (options.top_k <= 0) Fail("--top_k must be > 0");
  if (options.ivf_nprobe <= 0) Fail("--ivf_nprobe must be > 0");
  if (const char* world = std::getenv("WORLD_SIZE"); world && std::atoi(world) > 1) {
    Fail("hitrate runs in one process (WORLD_SIZE is ", world, ")");
  }
  std::string writer_type = options.writer_type;
  if (writer_type.empty()) {
    const std::vector<std::string> files = ExpandInputPaths(options.user_gt_input);
    const bool parquet_input = options.reader_type.empty() ? !files.empty() && EndsWith(files.front(), ".parquet")
                                                           : options.reader_type == "ParquetReader";
    writer_type = parquet_input ? "ParquetWriter" : "CsvWriter";
  }
  if (writer_type != "CsvWriter" && writer_type != "ParquetWriter") {
    Fail("--writer_type=", writer_type, ": not supported (CsvWriter, ParquetWriter)");
  }
  const bool parquet = writer_type == "ParquetWriter";

  const EmbeddingRows items = ReadEmbeddingTable(options.item_embedding_input, options.item_id_field,
                                                  options.item_embedding_field, options.reader_type, options.batch_size);
  FaissIndexOptions index_options;
  index_options.index_type = options.index_type;
  index_options.ivf_nlist = options.ivf_nlist;
  const FaissIndex index(items, index_options);
  const int64_t dim = index.dim();
  const bool ip = index.inner_product();
  // An item found by several interests counts once, at its best distance.
  auto better = [ip](float a, float b) { return ip ? a > b : a < b; };

  std::unique_ptr<DetailsWriter> details;
  if (!options.hitrate_details_output.empty()) details = std::make_unique<DetailsWriter>(options.hitrate_details_output, parquet);

  std::vector<std::string> columns = {options.request_id_field, options.gt_items_field, options.user_embedding_field};
  if (!options.num_interests_field.empty()) columns.push_back(options.num_interests_field);
  HitrateResult result;
  int64_t skipped = 0;
  ForEachTableBatch(options.user_gt_input, options.reader_type, columns, options.batch_size, [&](const RecordBatch& batch) {
    const Column& request_ids = *batch.Find(options.request_id_field);
    const Column& gt_column = *batch.Find(options.gt_items_field);
    const Column& embeddings = *batch.Find(options.user_embedding_field);
    const Column* valid_interests = options.num_interests_field.empty() ? nullptr : batch.Find(options.num_interests_field);
    const size_t rows = batch.num_rows();
    // Queries of every row: num_interests slots each (absent interests stay zero: no result).
    std::vector<float> queries(rows * static_cast<size_t>(options.num_interests * dim), 0.0f);
    std::vector<int64_t> interests(rows, 0);
    for (size_t r = 0; r < rows; ++r) {
      const std::string where = batch.RowLocation(r) + " column '" + options.user_embedding_field + "'";
      if (embeddings.IsNull(r)) Fail(where, ": no embedding");
      const std::vector<float> values = ParseEmbeddingText(embeddings.TextAt(r), where);
      const int64_t count = static_cast<int64_t>(values.size());
      if (count == 0 || count % dim != 0 || count / dim > options.num_interests) {
        Fail(where, ": ", count, " values; expected up to --num_interests=", options.num_interests, " embeddings of dim ",
             dim, " (the item embeddings' width)");
      }
      interests[r] = count / dim;
      if (valid_interests) {
        int64_t valid = 0;
        if (valid_interests->IsNull(r) || !ParseInt64(valid_interests->TextAt(r), &valid) || valid < 0) {
          Fail(batch.RowLocation(r), ": column '", options.num_interests_field, "' is not a count");
        }
        interests[r] = std::min(interests[r], valid);
      }
      std::copy(values.begin(), values.end(), queries.begin() + static_cast<int64_t>(r) * options.num_interests * dim);
    }
    const int64_t k = options.top_k;
    const FaissIndex::Result found =
        index.Search(queries.data(), static_cast<int64_t>(rows) * options.num_interests, k, options.ivf_nprobe);
    for (size_t r = 0; r < rows; ++r) {
      const std::string request = request_ids.IsNull(r) ? "" : request_ids.TextAt(r);
      std::set<std::string> gt;
      if (!gt_column.IsNull(r)) {
        ForEachPiece(gt_column.TextAt(r), ",", [&](std::string_view item) {
          item = Trim(item);
          if (!item.empty()) gt.insert(std::string(item));
        });
      }
      if (gt.empty()) {
        if (++skipped <= 5) LOG_WARNING << batch.RowLocation(r) << ": request '" << request << "' has no ground-truth items; skipped";
        continue;
      }
      Retrieved retrieved;
      std::vector<std::pair<float, std::string>> merged;
      std::unordered_map<std::string, size_t> merged_at;
      for (int64_t i = 0; i < interests[r]; ++i) {
        const int64_t query = static_cast<int64_t>(r) * options.num_interests + i;
        if (AllZero(&queries[static_cast<size_t>(query * dim)], dim)) continue;  // padding
        std::vector<std::string> ids;
        std::vector<float> distances;
        for (int64_t j = 0; j < k; ++j) {
          const int64_t position = found.positions[static_cast<size_t>(query * k + j)];
          if (position < 0) continue;
          const float distance = found.distances[static_cast<size_t>(query * k + j)];
          ids.push_back(index.id(position));
          distances.push_back(distance);
          if (!options.topk_across_interests) continue;
          auto [it, inserted] = merged_at.emplace(ids.back(), merged.size());
          if (inserted) {
            merged.emplace_back(distance, ids.back());
          } else if (better(distance, merged[it->second].first)) {
            merged[it->second].first = distance;
          }
        }
        if (!options.topk_across_interests) {
          retrieved.ids.push_back(std::move(ids));
          retrieved.distances.push_back(std::move(distances));
        }
      }
      if (options.topk_across_interests) {
        std::stable_sort(merged.begin(), merged.end(),
                         [&](const auto& a, const auto& b) { return better(a.first, b.first); });
        if (static_cast<int64_t>(merged.size()) > k) merged.resize(static_cast<size_t>(k));
        retrieved.ids.emplace_back();
        retrieved.distances.emplace_back();
        for (auto& [distance, id] : merged) {
          retrieved.ids[0].push_back(id);
          retrieved.distances[0].push_back(distance);
        }
      }
      std::set<std::string> hit_set;
      for (const auto& list : retrieved.ids) {
        for (const std::string& id : list) {
          if (gt.count(id)) hit_set.insert(id);
        }
      }
      const double rate = static_cast<double>(hit_set.size()) / static_cast<double>(gt.size());
      result.hits += static_cast<double>(hit_set.size());
      result.gt_items += static_cast<double>(gt.size());
      ++result.requests;
      if (details) details->Add(request, retrieved, rate, std::vector<std::string>(hit_set.begin(), hit_set.end()));
    }
  });
  if (skipped > 0) LOG_WARNING << skipped << " request(s) without ground-truth items were skipped";
  if (result.gt_items == 0) Fail("'", options.user_gt_input, "': no request has ground-truth items");
  result.hitrate = result.hits / result.gt_items;
  if (details) details->Close();
  LOG_INFO << "Total hitrate: " << result.hitrate << " (" << result.hits << " of " << result.gt_items
           << " ground-truth items in the top " << options.top_k << " of " << result.requests << " requests)";
  if (!options.total_hitrate_output.empty()) {
    PartFile total(options.total_hitrate_output, parquet, {ParquetFieldSpec::Plain("hitrate", ParquetType::kDouble)});
    if (parquet) {
      ParquetColumn column = OutputColumn("hitrate", ColumnType::kDouble);
      column.values.doubles.push_back(result.hitrate);
      column.values.valid.push_back(1);
      total.WriteParquet({column});
    } else {
      char buffer[32];
      std::snprintf(buffer, sizeof(buffer), "%.17g\n", result.hitrate);
      total.WriteCsv(buffer);
    }
    total.Close();
  }
  return result;
}

int HitrateMain(const std::vector<std::string>& args) {
  Flags flags("hitrate",
              "Offline retrieval evaluation: searches the item embeddings (an IVFFlat FAISS index) "
              "with each request's user embedding(s) and reports the share of its ground-truth "
              "items found in the top k.",
              {{"user_gt_input", "table of request id, ground-truth items and user embedding(s)"},
               {"item_embedding_input", "table of item id and item embedding"},
               {"total_hitrate_output", "directory for part-0 with the total hit rate"},
               {"hitrate_details_output", "directory for part-0 with id, topk_ids, topk_dists, hitrate, hit_ids"},
               {"batch_size", "rows read at a time", false, "1024"},
               {"index_type", "IVFFlatIP or IVFFlatL2", false, "IVFFlatIP"},
               {"top_k", "items retrieved per interest", false, "200"},
               {"topk_across_interests", "keep the top k of all interests together", true},
               {"ivf_nlist", "lists of the IVFFlat index", false, "1000"},
               {"ivf_nprobe", "lists searched per query", false, "800"},
               {"item_id_field", "item id column", false, "item_id"},
               {"item_embedding_field", "item embedding column", false, "item_tower_emb"},
               {"request_id_field", "request id column", false, "request_id"},
               {"gt_items_field", "ground-truth items column (list or comma-separated)", false, "gt_items"},
               {"user_embedding_field", "user embedding column", false, "user_tower_emb"},
               {"num_interests", "user embeddings per request", false, "1"},
               {"num_interests_field", "column with each request's number of valid interests"},
               {"reader_type", "CsvReader or ParquetReader (default: by file extension)"},
               {"writer_type", "CsvWriter or ParquetWriter (default: from the input)"},
               {"odps_data_quota_name", "MaxCompute quota (MaxCompute is not supported)"}});
  if (!flags.Parse(args)) return 0;
  HitrateOptions options;
  options.user_gt_input = flags.Get("user_gt_input");
  options.item_embedding_input = flags.Get("item_embedding_input");
  options.total_hitrate_output = flags.Get("total_hitrate_output");
  options.hitrate_details_output = flags.Get("hitrate_details_output");
  options.batch_size = flags.GetInt("batch_size");
  options.index_type = flags.Get("index_type");
  options.top_k = flags.GetInt("top_k");
  options.topk_across_interests = flags.GetSwitch("topk_across_interests");
  options.ivf_nlist = flags.GetInt("ivf_nlist");
  options.ivf_nprobe = flags.GetInt("ivf_nprobe");
  options.item_id_field = flags.Get("item_id_field");
  options.item_embedding_field = flags.Get("item_embedding_field");
  options.request_id_field = flags.Get("request_id_field");
  options.gt_items_field = flags.Get("gt_items_field");
  options.user_embedding_field = flags.Get("user_embedding_field");
  options.num_interests = flags.GetInt("num_interests");
  options.num_interests_field = flags.Get("num_interests_field");
  options.reader_type = flags.Get("reader_type");
  options.writer_type = flags.Get("writer_type");
  ComputeHitrate(options);
  return 0;
}

}  // namespace tzrec
