#include "tzrec/tools/faiss_index.h"

#include <faiss/IndexFlat.h>
#include <faiss/IndexHNSW.h>
#include <faiss/IndexIVFFlat.h>
#include <faiss/impl/FaissException.h>
#include <faiss/impl/io.h>
#include <faiss/index_io.h>

#include <cmath>

#include "tzrec/common/error.h"
#include "tzrec/common/flags.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"
#include "tzrec/data/csv_reader.h"
#include "tzrec/data/parquet/parquet_reader.h"

namespace tzrec {
namespace {

constexpr char kIndexFile[] = "faiss_index";
constexpr char kIdMappingFile[] = "id_mapping";

// FAISS reports misuse by exception; the message names the call that failed.
template <typename Fn>
void CallFaiss(const std::string& what, Fn fn) {
  try {
    fn();
  } catch (const faiss::FaissException& e) {
    Fail(what, ": ", e.msg);
  }
}

}  // namespace

void ForEachTableBatch(const std::string& path, const std::string& reader_type,
                       const std::vector<std::string>& columns, int64_t batch_size,
                       const std::function<void(const RecordBatch&)>& visit) {
  if (reader_type == "OdpsReader") Fail("--reader_type=OdpsReader: MaxCompute is not supported (use CsvReader or ParquetReader)");
  if (!reader_type.empty() && reader_type != "CsvReader" && reader_type != "ParquetReader") {
    Fail("--reader_type=", reader_type, ": unknown (CsvReader or ParquetReader)");
  }
  if (batch_size <= 0) Fail("--batch_size must be > 0");
  const std::vector<std::string> files = ExpandInputPaths(path);
  if (files.empty()) Fail("no file matches '", path, "'");
  for (const std::string& file : files) {
    const bool parquet = reader_type.empty() ? EndsWith(file, ".parquet") : reader_type == "ParquetReader";
    RecordBatch batch;
    auto check = [&](const RecordBatch& b) {
      for (const std::string& column : columns) {
        if (!b.Find(column)) Fail(file, ": no column '", column, "'");
      }
    };
    if (parquet) {
      ParquetReadOptions options;
      options.columns = columns;
      options.list_separator = ",";
      options.nested_list_separator = ";";
      ParquetFileReader reader(file, options);
      while (reader.Next(static_cast<size_t>(batch_size), &batch)) {
        check(batch);
        visit(batch);
      }
    } else {
      CsvOptions options;
      options.with_header = true;
      options.wanted_columns = columns;
      CsvFileReader reader(file, options);
      while (reader.Next(static_cast<size_t>(batch_size), &batch)) {
        check(batch);
        visit(batch);
      }
    }
  }
}

std::vector<float> ParseEmbeddingText(std::string_view text, const std::string& where) {
  std::vector<float> values;
  ForEachPiece(text, ";", [&](std::string_view interest) {
    ForEachPiece(interest, ",", [&](std::string_view item) {
      float v = 0;
      if (!ParseFloat(Trim(item), &v) || !std::isfinite(v)) {
        Fail(where, ": '", Printable(item), "' is not a finite number");
      }
      values.push_back(v);
    });
  });
  return values;
}

EmbeddingRows ReadEmbeddingTable(const std::string& path, const std::string& id_field,
                                  const std::string& embedding_field, const std::string& reader_type,
                                  int64_t batch_size) {
  if (id_field.empty() || embedding_field.empty()) Fail("--id_field and --embedding_field are required");
  EmbeddingRows table;
  ForEachTableBatch(path, reader_type, {id_field, embedding_field}, batch_size, [&](const RecordBatch& batch) {
    const Column& ids = *batch.Find(id_field);
    const Column& embeddings = *batch.Find(embedding_field);
    for (size_t r = 0; r < batch.num_rows(); ++r) {
      const std::string where = batch.RowLocation(r) + " column '" + embedding_field + "'";
      if (ids.IsNull(r) || ids.TextAt(r).empty()) Fail(batch.RowLocation(r), ": empty id in '", id_field, "'");
      if (embeddings.IsNull(r)) Fail(where, ": no embedding");
      const std::vector<float> values = ParseEmbeddingText(embeddings.TextAt(r), where);
      if (values.empty()) Fail(where, ": empty embedding");
      if (table.dim == 0) table.dim = static_cast<int64_t>(values.size());
      if (static_cast<int64_t>(values.size()) != table.dim) {
        Fail(where, ": ", values.size(), " values, but the first embedding has ", table.dim);
      }
      table.ids.push_back(ids.TextAt(r));
      table.values.insert(table.values.end(), values.begin(), values.end());
    }
  });
  if (table.ids.empty()) Fail("'", path, "' has no rows");
  return table;
}

FaissIndex::FaissIndex(const EmbeddingRows& table, const FaissIndexOptions& options)
    : ids_(table.ids), dim_(table.dim) {
  const std::string& type = options.index_type;
  const bool ivf = StartsWith(type, "IVFFlat");
  const bool hnsw = StartsWith(type, "HNSWFlat");
  const bool ip = EndsWith(type, "IP");
  if (!(ivf || hnsw) || !(ip || EndsWith(type, "L2")) || type.size() != (ivf ? 9u : 10u)) {
    Fail("--index_type=", type, ": unknown (IVFFlatIP, HNSWFlatIP, IVFFlatL2, HNSWFlatL2)");
  }
  inner_product_ = ip;
  const int64_t n = static_cast<int64_t>(table.ids.size());
  if (dim_ <= 0 || static_cast<int64_t>(table.values.size()) != n * dim_) Fail("embedding table: inconsistent shape");
  const faiss::MetricType metric = ip ? faiss::METRIC_INNER_PRODUCT : faiss::METRIC_L2;
  if (ivf) {
    if (options.ivf_nlist <= 0) Fail("--ivf_nlist must be > 0");
    // k-means needs at least one point per list; FAISS would stop with a terse message.
    if (options.ivf_nlist > n) {
      Fail("--ivf_nlist=", options.ivf_nlist, " is more than the ", n, " embeddings to cluster (use at most ", n,
           "; about sqrt(rows) to 4*sqrt(rows) is usual)");
    }
    faiss::IndexFlat* quantizer = ip ? static_cast<faiss::IndexFlat*>(new faiss::IndexFlatIP(dim_))
                                     : static_cast<faiss::IndexFlat*>(new faiss::IndexFlatL2(dim_));
    auto index = std::make_unique<faiss::IndexIVFFlat>(quantizer, dim_, static_cast<size_t>(options.ivf_nlist), metric);
    index->own_fields = true;
    CallFaiss("training the IVF index", [&] { index->train(n, table.values.data()); });
    index_ = std::move(index);
  } else {
    if (options.hnsw_m <= 0 || options.hnsw_ef_construction <= 0) Fail("--hnsw_M and --hnsw_efConstruction must be > 0");
    auto index = std::make_unique<faiss::IndexHNSWFlat>(dim_, options.hnsw_m, metric);
    index->hnsw.efConstruction = options.hnsw_ef_construction;
    index_ = std::move(index);
  }
  CallFaiss("adding embeddings to the index", [&] { index_->add(n, table.values.data()); });
  LOG_INFO << "built a " << type << " index of " << n << " embeddings of dim " << dim_;
}

FaissIndex::FaissIndex(FaissIndex&&) noexcept = default;
FaissIndex& FaissIndex::operator=(FaissIndex&&) noexcept = default;
FaissIndex::~FaissIndex() = default;

void FaissIndex::Write(const std::string& dir) const {
  MakeDirs(dir);
  faiss::VectorIOWriter writer;
  CallFaiss("writing the index", [&] { faiss::write_index(index_.get(), &writer); });
  WriteFileAtomic(JoinPath(dir, kIndexFile), reinterpret_cast<const char*>(writer.data.data()), writer.data.size());
  std::string mapping;
  for (const std::string& id : ids_) mapping += id + "\n";
  WriteFileAtomic(JoinPath(dir, kIdMappingFile), mapping);
  SyncDirectory(dir);
  LOG_INFO << "wrote " << JoinPath(dir, kIndexFile) << " (" << (writer.data.size() >> 10) << " KiB) and "
           << kIdMappingFile;
}

FaissIndex FaissIndex::Read(const std::string& dir) {
  const std::string index_path = JoinPath(dir, kIndexFile);
  const std::string mapping_path = JoinPath(dir, kIdMappingFile);
  if (!PathExists(index_path) || !PathExists(mapping_path)) {
    Fail("'", dir, "' has no ", kIndexFile, " and ", kIdMappingFile, " (written by create_faiss_index)");
  }
  FaissIndex out;
  CallFaiss("reading " + index_path, [&] { out.index_.reset(faiss::read_index(index_path.c_str())); });
  out.dim_ = out.index_->d;
  out.inner_product_ = out.index_->metric_type == faiss::METRIC_INNER_PRODUCT;
  for (std::string& id : Split(ReadFileToString(mapping_path), "\n")) {
    if (!id.empty()) out.ids_.push_back(std::move(id));
  }
  if (static_cast<int64_t>(out.ids_.size()) != out.index_->ntotal) {
    Fail(mapping_path, ": ", out.ids_.size(), " ids for an index of ", out.index_->ntotal, " embeddings");
  }
  return out;
}

FaissIndex::Result FaissIndex::Search(const float* queries, int64_t num_queries, int64_t k, int64_t nprobe,
                                      int64_t ef_search) const {
  if (k <= 0) Fail("--top_k must be > 0");
  if (auto* ivf = dynamic_cast<faiss::IndexIVF*>(index_.get()); ivf && nprobe > 0) {
    ivf->nprobe = static_cast<size_t>(std::min<int64_t>(nprobe, static_cast<int64_t>(ivf->nlist)));
  }
  if (auto* graph = dynamic_cast<faiss::IndexHNSW*>(index_.get()); graph && ef_search > 0) {
    graph->hnsw.efSearch = static_cast<int>(ef_search);
  }
  Result result;
  result.distances.resize(static_cast<size_t>(num_queries * k));
  result.positions.resize(static_cast<size_t>(num_queries * k));
  static_assert(sizeof(faiss::Index::idx_t) == sizeof(int64_t));
  CallFaiss("searching the index", [&] {
    index_->search(num_queries, queries, k, result.distances.data(),
                   reinterpret_cast<faiss::Index::idx_t*>(result.positions.data()));
  });
  return result;
}

int CreateFaissIndexMain(const std::vector<std::string>& args) {
  Flags flags("create_faiss_index",
              "Builds a FAISS index of item embeddings (e.g. predict's output of an exported item/ "
              "tower) and writes <index_output_dir>/faiss_index and id_mapping.",
              {{"embedding_input_path", "embedding table: CSV with a header or Parquet (globs)"},
               {"batch_size", "rows read at a time", false, "1024"},
               {"index_output_dir", "directory for faiss_index and id_mapping"},
               {"index_type", "IVFFlatIP, HNSWFlatIP, IVFFlatL2 or HNSWFlatL2", false, "IVFFlatIP"},
               {"ivf_nlist", "lists of an IVFFlat index", false, "1000"},
               {"hnsw_M", "neighbours per node of an HNSWFlat index", false, "32"},
               {"hnsw_efConstruction", "candidate list size while building an HNSWFlat index", false, "200"},
               {"id_field", "id column"},
               {"embedding_field", "embedding column"},
               {"reader_type", "CsvReader or ParquetReader (default: by file extension)"},
               {"odps_data_quota_name", "MaxCompute quota (MaxCompute is not supported)"}});
  if (!flags.Parse(args)) return 0;
  if (flags.Get("embedding_input_path").empty()) Fail("--embedding_input_path is required");
  if (flags.Get("index_output_dir").empty()) Fail("--index_output_dir is required");
  FaissIndexOptions options;
  options.index_type = flags.Get("index_type");
  options.ivf_nlist = flags.GetInt("ivf_nlist");
  options.hnsw_m = static_cast<int>(flags.GetInt("hnsw_M"));
  options.hnsw_ef_construction = static_cast<int>(flags.GetInt("hnsw_efConstruction"));
  const EmbeddingRows table =
      ReadEmbeddingTable(flags.Get("embedding_input_path"), flags.Get("id_field"), flags.Get("embedding_field"),
                         flags.Get("reader_type"), flags.GetInt("batch_size"));
  FaissIndex(table, options).Write(flags.Get("index_output_dir"));
  return 0;
}

}  // namespace tzrec
