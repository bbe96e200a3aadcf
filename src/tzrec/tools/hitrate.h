// Offline retrieval evaluation, TorchEasyRec's `hitrate` tool: each request's user embedding(s)
// search an index of the item embeddings (tools/faiss_index.h) for their top k, and the hit rate
// is the share of the request's ground-truth items among what was retrieved:
//   request hitrate = |retrieved ∩ gt| / |gt|,   total = Σ |retrieved ∩ gt| / Σ |gt|.
// Several interests per request (MIND): each interest retrieves its own top k and the hits are
// their union, or with topk_across_interests the top k of all interests together (an item
// found by several interests counts once, at its best distance). An all-zero interest vector
// (padding) retrieves nothing; requests without ground truth are skipped with a warning.
// No LibTorch. Runs in one process.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tzrec {

struct HitrateOptions {
  std::string user_gt_input;         // request id, gt items, user embedding(s) per row
  std::string item_embedding_input;  // item id, item embedding per row
  std::string total_hitrate_output;  // directory: part-0 with one column "hitrate"
  std::string hitrate_details_output;  // directory: part-0 with id, topk_ids, topk_dists, hitrate, hit_ids
  int64_t batch_size = 1024;
  std::string index_type = "IVFFlatIP";  // IVFFlatIP or IVFFlatL2
  int64_t top_k = 200;
  bool topk_across_interests = false;
  int64_t ivf_nlist = 1000;
  int64_t ivf_nprobe = 800;
  std::string item_id_field = "item_id";
  std::string item_embedding_field = "item_tower_emb";
  std::string request_id_field = "request_id";
  std::string gt_items_field = "gt_items";
  std::string user_embedding_field = "user_tower_emb";
  int64_t num_interests = 1;
  std::string num_interests_field;  // valid interests of each request (default: all)
  std::string reader_type;          // CsvReader, ParquetReader, or "" (by extension)
  std::string writer_type;          // CsvWriter, ParquetWriter, or "" (from the reader)
};

struct HitrateResult {
  double hitrate = 0;
  double hits = 0;
  double gt_items = 0;
  int64_t requests = 0;  // with ground truth
};

HitrateResult ComputeHitrate(const HitrateOptions& options);

int HitrateMain(const std::vector<std::string>& args);

}  // namespace tzrec
