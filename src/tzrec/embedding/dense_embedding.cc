#include "tzrec/embedding/dense_embedding.h"

#include <ATen/ops/leaky_relu.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/softmax.h>

#include <cmath>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"

namespace tzrec {
namespace {

// LibTorch parameter names may not contain dots.
std::string ParameterName(const std::string& key, const char* name) {
  std::string out = key + "_" + name;
  for (char& c : out) {
    if (c == '.') c = '_';
  }
  return out;
}

std::string Float(float value) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", value);
  return buf;
}

}  // namespace

std::string DenseEmbeddingsImpl::Add(const std::string& key, const Feature& feature) {
  if (entries_.count(key)) return key;
  const DenseEmbeddingSpec& spec = feature.dense_embedding();
  TZREC_CHECK(spec.kind != DenseEmbeddingSpec::Kind::kNone, feature.name());
  Entry entry;
  entry.spec = spec;
  entry.value_dim = feature.value_dim();
  const int64_t dim = feature.embedding_dim();
  if (spec.kind == DenseEmbeddingSpec::Kind::kMlp) {
    at::Tensor w = entry.value_dim == 1
                       ? at::randn({dim}) * std::sqrt(2.0 / (1.0 + dim))
                       : at::randn({entry.value_dim, dim}) * std::sqrt(2.0 / (entry.value_dim + dim));
    entry.proj_w = register_parameter(ParameterName(key, "proj_w"), w);
  } else {
    const int64_t c = spec.num_channels;
    entry.meta_emb = register_parameter(ParameterName(key, "meta_emb"), at::randn({c, dim}));
    entry.proj_w = register_parameter(ParameterName(key, "proj_w"), at::randn({c}) * std::sqrt(2.0 / (1.0 + c)));
    entry.proj_m = register_parameter(ParameterName(key, "proj_m"), at::randn({c, c}) * std::sqrt(1.0 / c));
  }
  entries_.emplace(key, std::move(entry));
  return key;
}

const DenseEmbeddingsImpl::Entry& DenseEmbeddingsImpl::Get(const std::string& key) const {
  auto it = entries_.find(key);
  TZREC_CHECK(it != entries_.end(), "no dense embedding '", key, "'");
  return it->second;
}

at::Tensor DenseEmbeddingsImpl::Forward(const std::string& key, const at::Tensor& values) const {
  const Entry& e = Get(key);
  if (e.spec.kind == DenseEmbeddingSpec::Kind::kMlp) {
    return e.value_dim == 1 ? values * e.proj_w : at::matmul(values, e.proj_w);
  }
  const at::Tensor hidden = at::leaky_relu(values * e.proj_w, 0.01);                      // [B, C]
  const at::Tensor mixed = at::matmul(hidden, e.proj_m.t()) + e.spec.keep_prob * hidden;  // [B, C]
  return at::matmul(at::softmax(mixed / e.spec.temperature, -1), e.meta_emb);             // [B, D]
}

std::string DenseEmbeddingsImpl::Script(ScriptWriter& w, const std::string& key, const std::string& values) const {
  const Entry& e = Get(key);
  const std::string hint = ParameterName(key, "emb");
  const std::string proj_w = w.Tensor(ParameterName(key, "proj_w"), e.proj_w.detach());
  if (e.spec.kind == DenseEmbeddingSpec::Kind::kMlp) {
    return w.Let(hint, e.value_dim == 1 ? values + " * " + proj_w : "torch.matmul(" + values + ", " + proj_w + ")");
  }
  const std::string proj_m = w.Tensor(ParameterName(key, "proj_m"), e.proj_m.detach());
  const std::string meta = w.Tensor(ParameterName(key, "meta_emb"), e.meta_emb.detach());
  const std::string scaled = w.Let(hint + "_x", values + " * " + proj_w);
  const std::string hidden = w.Let(hint + "_h", "torch.where(" + scaled + " > 0, " + scaled + ", 0.01 * " + scaled + ")");
  const std::string mixed = w.Let(hint + "_m", "torch.matmul(" + hidden + ", " + proj_m + ".t()) + " +
                                                   Float(e.spec.keep_prob) + " * " + hidden);
  return w.Let(hint, "torch.matmul(torch.softmax(" + mixed + " / " + Float(e.spec.temperature) + ", -1), " + meta + ")");
}

}  // namespace tzrec
