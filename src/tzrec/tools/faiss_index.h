// Nearest-neighbour search over exported tower embeddings, for TorchEasyRec's
// `create_faiss_index` and `hitrate` tools (tools/hitrate.h), on Debian's FAISS (libfaiss-dev):
// IVFFlat and HNSWFlat indexes with inner-product or L2 metric, written as FAISS writes them
// (`faiss_index`, readable by Python's faiss.read_index) beside `id_mapping` (one original id
// per line, in index order).
//
// Embedding tables are what `tzrec predict` writes for a tower (or any CSV with a header, or
// Parquet): an id column and an embedding column, the embedding a list of floats (Parquet
// LIST<FLOAT>/LIST<DOUBLE>) or text "0.1,0.2,..." (several interests: "...;..." or a
// LIST<LIST<...>>). No LibTorch.
//
// Thread-safety: a FaissIndex is built and written by one thread; Search may run from one
// thread at a time (FAISS parallelises inside with OpenMP).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tzrec/data/record_batch.h"

namespace faiss {
struct Index;
}

namespace tzrec {

// Reads the record batches of `path` (comma-separated globs) with only `columns`, in file order.
// `reader_type`: "CsvReader", "ParquetReader", or "" to choose by extension (.parquet or CSV
// with a header). Fails naming the file when a column is missing.
void ForEachTableBatch(const std::string& path, const std::string& reader_type,
                       const std::vector<std::string>& columns, int64_t batch_size,
                       const std::function<void(const RecordBatch&)>& visit);

// The floats of one embedding cell: values split by ',' (interests by ';', flattened). Fails
// naming `where` on a value that is not a finite number.
std::vector<float> ParseEmbeddingText(std::string_view text, const std::string& where);

// Ids and embeddings of a table, one embedding of `dim` floats per row.
struct EmbeddingRows {
  std::vector<std::string> ids;
  std::vector<float> values;  // ids.size() * dim
  int64_t dim = 0;
};

// Reads `id_field` and `embedding_field` of every row; all embeddings must have one width, and
// ids must not be empty (errors name file and line).
EmbeddingRows ReadEmbeddingTable(const std::string& path, const std::string& id_field,
                                  const std::string& embedding_field, const std::string& reader_type,
                                  int64_t batch_size);

struct FaissIndexOptions {
  std::string index_type = "IVFFlatIP";  // IVFFlatIP, HNSWFlatIP, IVFFlatL2, HNSWFlatL2
  int64_t ivf_nlist = 1000;
  int hnsw_m = 32;
  int hnsw_ef_construction = 200;
};

class FaissIndex {
 public:
  // Builds (IVF: trains on all rows, then adds them) the index of `table`'s embeddings.
  FaissIndex(const EmbeddingRows& table, const FaissIndexOptions& options);
  // Reads `<dir>/faiss_index` and `<dir>/id_mapping`.
  static FaissIndex Read(const std::string& dir);
  FaissIndex(FaissIndex&&) noexcept;
  FaissIndex& operator=(FaissIndex&&) noexcept;
  ~FaissIndex();

  // Writes `<dir>/faiss_index` and `<dir>/id_mapping` (dir is created; each file atomically).
  void Write(const std::string& dir) const;

  struct Result {
    std::vector<float> distances;   // queries * k: inner products (larger first) or squared L2
    std::vector<int64_t> positions;  // queries * k: index rows, -1 where fewer than k were found
  };
  // The k nearest rows of each of `num_queries` queries (`dim` floats each). `nprobe` (IVF)
  // and `ef_search` (HNSW) trade speed for recall; 0 keeps the index's setting.
  Result Search(const float* queries, int64_t num_queries, int64_t k, int64_t nprobe = 0,
                int64_t ef_search = 0) const;

  const std::string& id(int64_t position) const { return ids_[static_cast<size_t>(position)]; }
  int64_t size() const { return static_cast<int64_t>(ids_.size()); }
  int64_t dim() const { return dim_; }
  bool inner_product() const { return inner_product_; }

 private:
  FaissIndex() = default;
  std::unique_ptr<faiss::Index> index_;
  std::vector<std::string> ids_;
  int64_t dim_ = 0;
  bool inner_product_ = true;
};

// `tzrec create_faiss_index` (TorchEasyRec's flags): an index of an item embedding table.
int CreateFaissIndexMain(const std::vector<std::string>& args);

}  // namespace tzrec
