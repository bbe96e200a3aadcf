// Learned embeddings of dense features (feature config `autodis` / `mlp`), as TorchEasyRec's
// DenseEmbeddingCollection computes them, as one torch module owned by the model: its
// parameters are dense parameters (the dense optimizer trains them, checkpoints and exports
// save them as "dense_embedding.<key>_<name>").
//
//   mlp, value_dim 1:  e = x * proj_w                                   proj_w [D]
//   mlp, value_dim V:  e = x proj_w                                     proj_w [V, D]
//   autodis:           h = leaky_relu(x * proj_w)                       proj_w [C]
//                      a = softmax((h proj_m^T + keep_prob * h) / temperature)   proj_m [C, C]
//                      e = a meta_emb                                   meta_emb [C, D]
// Initialised as TorchEasyRec does (normal; glorot-like standard deviations). Not thread-safe
// to build; Forward may run on several threads.
#pragma once

#include <torch/nn/module.h>

#include <map>
#include <string>

#include "tzrec/features/feature.h"
#include "tzrec/script/script_writer.h"

namespace tzrec {

class DenseEmbeddingsImpl : public torch::nn::Module {
 public:
  // Parameters for `feature`'s dense embedding under `key` (made once per key; a key names
  // one embedding, e.g. a tower prefix + the feature name). Returns the key.
  std::string Add(const std::string& key, const Feature& feature);
  // values [B, value_dim] -> [B, embedding_dim].
  at::Tensor Forward(const std::string& key, const at::Tensor& values) const;
  // The same as TorchScript over the local `values`.
  std::string Script(ScriptWriter& w, const std::string& key, const std::string& values) const;

 private:
  struct Entry {
    DenseEmbeddingSpec spec;
    int value_dim = 1;
    at::Tensor proj_w, proj_m, meta_emb;
  };
  const Entry& Get(const std::string& key) const;
  std::map<std::string, Entry> entries_;
};
TORCH_MODULE(DenseEmbeddings);

}  // namespace tzrec
