// `tzrec tdm_cluster_tree` (TorchEasyRec's tools/tdm/cluster_tree.py): rebuilds TDM's item tree
// from learnt item embeddings (predict through a TDM export's embedding/ directory), so that
// items the model sees alike share ancestors, and writes the same tables as tdm_init_tree.
//
// Clustering, as TorchEasyRec's TreeCluster: the items of node `code` (all items at the root,
// code 0) are split by k-means into n_cluster clusters, then balanced: a cluster keeps at most
// floor(items / n_cluster) items, those nearest its centre; the overflow, nearest first, fills
// the short clusters in cluster order, and what is left joins cluster 0. Cluster i becomes node
// n_cluster * code + i + 1; a cluster of one item is that item's leaf; a node of at most
// n_cluster items gives each its own child leaf. Leaves then move to the last level
// (tools/tdm_tree.h). The k-means is FAISS's (Debian's libfaiss, already the index library of
// create_faiss_index) with a fixed seed, where TorchEasyRec uses scikit-learn's KMeans: trees
// differ in detail, not in kind. Nodes are clustered on `parallel` threads; the result does not
// depend on their number.
//
// Thread safety: ClusterTdmCodes and BuildClusteredTdmTree use their own threads and share
// nothing; call them from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tzrec/tools/tdm_tree.h"

namespace tzrec {

struct TdmClusterOptions {
  TdmTreeOptions tree;          // item_input_path, item_id_field, attr and raw attr fields, outputs
  std::string embedding_field = "item_emb";
  int parallel = 16;
};

// The leaf code of each of `count` items with embeddings `embeddings` [count x dim], by the
// balanced recursive k-means above.
std::vector<int64_t> ClusterTdmCodes(const std::vector<float>& embeddings, int64_t count, int64_t dim,
                                     int64_t n_cluster, int parallel);

// Reads the items with their embeddings and builds their clustered tree.
TdmTree BuildClusteredTdmTree(const TdmClusterOptions& options);

int TdmClusterTreeMain(const std::vector<std::string>& args);

}  // namespace tzrec
