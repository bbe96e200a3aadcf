#include "tzrec/tools/tdm_cluster_tree.h"

#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>
#include <omp.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <numeric>
#include <thread>

#include "tzrec/common/error.h"
#include "tzrec/common/flags.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"
#include "tzrec/tools/faiss_index.h"

namespace tzrec {
namespace {

constexpr int kClusterSeed = 1234;

struct Job {
  int64_t code = 0;
  std::vector<int64_t> items;
};

// Squared L2 distance of item `item` to centre `centre`.
float Distance(const float* embeddings, int64_t dim, int64_t item, const float* centre) {
  const float* x = embeddings + item * dim;
  float sum = 0;
  for (int64_t d = 0; d < dim; ++d) {
    const float diff = x[d] - centre[d];
    sum += diff * diff;
  }
  return sum;
}

// `items` split into n balanced clusters (see the header).
std::vector<std::vector<int64_t>> BalancedKMeans(const std::vector<float>& embeddings, int64_t dim,
                                                 const std::vector<int64_t>& items, int64_t n) {
  const int64_t count = static_cast<int64_t>(items.size());
  std::vector<float> data(count * dim);
  for (int64_t i = 0; i < count; ++i) {
    std::copy_n(embeddings.data() + items[i] * dim, dim, data.data() + i * dim);
  }
  faiss::ClusteringParameters params;
  params.seed = kClusterSeed;
  params.min_points_per_centroid = 1;  // small nodes are clustered too, without warnings
  faiss::Clustering clustering(static_cast<int>(dim), static_cast<size_t>(n), params);
  faiss::IndexFlatL2 index(dim);
  clustering.train(count, data.data(), index);
  const float* centres = clustering.centroids.data();
  auto distance = [&](int64_t i, int64_t c) { return Distance(data.data(), dim, i, centres + c * dim); };
  std::vector<std::vector<int64_t>> members(n);  // positions in `items`
  for (int64_t i = 0; i < count; ++i) {
    int64_t best = 0;
    for (int64_t c = 1; c < n; ++c) {
      if (distance(i, c) < distance(i, best)) best = c;
    }
    members[best].push_back(i);
  }
  const size_t average = static_cast<size_t>(count / n);
  auto nearest_first = [&](std::vector<int64_t>* positions, int64_t c) {
    std::stable_sort(positions->begin(), positions->end(),
                     [&](int64_t a, int64_t b) { return distance(a, c) < distance(b, c); });
  };
  std::vector<std::vector<int64_t>> clusters(n);
  std::vector<int64_t> remain;
  for (int64_t c = 0; c < n; ++c) {
    if (members[c].size() <= average) {
      clusters[c] = members[c];
      continue;
    }
    nearest_first(&members[c], c);
    clusters[c].assign(members[c].begin(), members[c].begin() + average);
    remain.insert(remain.end(), members[c].begin() + average, members[c].end());
  }
  for (int64_t c = 0; c < n && !remain.empty(); ++c) {
    if (clusters[c].size() >= average) continue;
    const size_t take = std::min(remain.size(), average - clusters[c].size());
    nearest_first(&remain, c);
    clusters[c].insert(clusters[c].end(), remain.begin(), remain.begin() + take);
    remain.erase(remain.begin(), remain.begin() + take);
  }
  clusters[0].insert(clusters[0].end(), remain.begin(), remain.end());
  for (auto& cluster : clusters) {
    for (int64_t& position : cluster) position = items[position];
  }
  return clusters;
}

}  // namespace

std::vector<int64_t> ClusterTdmCodes(const std::vector<float>& embeddings, int64_t count, int64_t dim,
                                     int64_t n_cluster, int parallel) {
  if (n_cluster < 2) Fail("--n_cluster must be >= 2, got ", n_cluster);
  if (count < 2) Fail("tdm_cluster_tree: at least 2 items are needed, got ", count);
  TZREC_CHECK(static_cast<int64_t>(embeddings.size()) == count * dim, "embeddings of count x dim");
  std::vector<int64_t> codes(count, -1);
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<Job> jobs;
  int64_t busy = 0;
  std::exception_ptr failure;
  Job root;
  root.items.resize(count);
  std::iota(root.items.begin(), root.items.end(), 0);
  jobs.push_back(std::move(root));
  auto work = [&] {
    omp_set_num_threads(1);  // parallel over nodes, not inside one k-means
    while (true) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mutex);
        changed.wait(lock, [&] { return !jobs.empty() || busy == 0 || failure; });
        if (jobs.empty() || failure) return;
        job = std::move(jobs.front());
        jobs.pop_front();
        ++busy;
      }
      std::vector<Job> children;
      try {
        const int64_t n = n_cluster;
        if (static_cast<int64_t>(job.items.size()) <= n) {
          for (size_t i = 0; i < job.items.size(); ++i) codes[job.items[i]] = n * job.code + static_cast<int64_t>(i) + 1;
        } else {
          std::vector<std::vector<int64_t>> clusters = BalancedKMeans(embeddings, dim, job.items, n);
          for (int64_t c = 0; c < n; ++c) {
            const int64_t code = n * job.code + c + 1;
            if (clusters[c].size() == 1) {
              codes[clusters[c][0]] = code;
            } else if (clusters[c].size() > 1) {
              Job child;
              child.code = code;
              child.items = std::move(clusters[c]);
              children.push_back(std::move(child));
            }
          }
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!failure) failure = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mutex);
        for (Job& child : children) jobs.push_back(std::move(child));
        --busy;
      }
      changed.notify_all();
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < std::max(1, parallel); ++t) threads.emplace_back(work);
  for (auto& thread : threads) thread.join();
  if (failure) std::rethrow_exception(failure);
  for (int64_t code : codes) TZREC_CHECK(code > 0, "every item gets a leaf code");
  return codes;
}

TdmTree BuildClusteredTdmTree(const TdmClusterOptions& options) {
  if (options.embedding_field.empty()) Fail("--embedding_field is required");
  std::vector<float> embeddings;
  int64_t dim = 0;
  std::vector<bool> numeric, integer;
  std::vector<TdmTree::Leaf> leaves = ReadTdmLeaves(
      options.tree, {options.embedding_field},
      [&](const RecordBatch& batch, size_t row) {
        const Column& column = *batch.Find(options.embedding_field);
        const std::string where = batch.RowLocation(row) + " column '" + options.embedding_field + "'";
        if (column.IsNull(row)) Fail(where, ": no embedding");
        const std::vector<float> values = ParseEmbeddingText(column.TextAt(row), where);
        if (values.empty()) Fail(where, ": empty embedding");
        if (dim == 0) dim = static_cast<int64_t>(values.size());
        if (static_cast<int64_t>(values.size()) != dim) {
          Fail(where, ": ", values.size(), " values, but the first embedding has ", dim);
        }
        embeddings.insert(embeddings.end(), values.begin(), values.end());
      },
      &numeric, &integer);
  const int64_t count = static_cast<int64_t>(leaves.size());
  LOG_INFO << "tdm_cluster_tree: " << count << " items, embeddings of " << dim << " floats; clustering on "
           << options.parallel << " threads";
  std::vector<int64_t> codes = ClusterTdmCodes(embeddings, count, dim, options.tree.n_cluster, options.parallel);
  TdmTree tree(std::move(leaves), std::move(codes), options.tree.n_cluster, numeric, integer);
  tree.SetAttrNames(options.tree.attr_fields, options.tree.raw_attr_fields);
  return tree;
}

int TdmClusterTreeMain(const std::vector<std::string>& args) {
  Flags flags("tdm_cluster_tree",
              "Rebuilds TDM's item tree by balanced k-means over learnt item embeddings (predict "
              "through a TDM export's embedding/ directory) and writes the node, edge and "
              "predict-edge tables, node features and serving tree.",
              {{"item_input_path", "items with their embeddings (CSV with a header or Parquet; comma-separated globs)"},
               {"item_id_field", "item id column"},
               {"embedding_field", "embedding column (a list of floats)", false, "item_emb"},
               {"attr_fields", "comma-separated categorical attribute columns (non-leaf nodes: modes), in "
                               "the tdm_sampler's attr_fields order"},
               {"raw_attr_fields", "comma-separated numeric attribute columns (non-leaf nodes: means)"},
               {"attr_delimiter", "delimiter of the node table's feature column", false, ","},
               {"tree_output_dir", "directory for serving_tree"},
               {"node_edge_output_file", "directory for the node and edge tables"},
               {"parallel", "threads clustering nodes", false, "16"},
               {"n_cluster", "branching factor of the tree", false, "2"},
               {"reader_type", "CsvReader or ParquetReader (default: by file extension)"},
               {"odps_data_quota_name", "MaxCompute quota (MaxCompute is not supported)"}});
  if (!flags.Parse(args)) return 0;
  TdmClusterOptions options;
  options.tree.item_input_path = flags.Get("item_input_path");
  options.tree.item_id_field = flags.Get("item_id_field");
  options.embedding_field = flags.Get("embedding_field");
  for (const auto& name : Split(flags.Get("attr_fields"), ",")) {
    if (!Trim(name).empty()) options.tree.attr_fields.emplace_back(Trim(name));
  }
  for (const auto& name : Split(flags.Get("raw_attr_fields"), ",")) {
    if (!Trim(name).empty()) options.tree.raw_attr_fields.emplace_back(Trim(name));
  }
  options.tree.attr_delimiter = flags.Get("attr_delimiter");
  options.tree.tree_output_dir = flags.Get("tree_output_dir");
  options.tree.node_edge_output_file = flags.Get("node_edge_output_file");
  options.tree.n_cluster = flags.GetInt("n_cluster");
  options.tree.reader_type = flags.Get("reader_type");
  options.parallel = static_cast<int>(flags.GetInt("parallel"));
  if (options.parallel < 1) Fail("--parallel must be at least 1");
  if (options.tree.item_input_path.empty()) Fail("--item_input_path is required");
  if (options.tree.node_edge_output_file.empty()) Fail("--node_edge_output_file is required");
  const TdmTree tree = BuildClusteredTdmTree(options);
  LOG_INFO << "tdm_cluster_tree: " << tree.levels().back().size() << " items, " << tree.levels().size()
           << " levels, n_cluster " << tree.n_cluster();
  tree.WriteNodeEdgeTables(options.tree.node_edge_output_file, options.tree.attr_delimiter);
  if (!options.tree.tree_output_dir.empty()) tree.WriteServingTree(options.tree.tree_output_dir);
  LOG_INFO << "tdm_cluster_tree: wrote " << options.tree.node_edge_output_file;
  return 0;
}

}  // namespace tzrec
