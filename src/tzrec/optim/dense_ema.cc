#include "tzrec/optim/dense_ema.h"

#include <ATen/ATen.h>

#include "tzrec/common/error.h"
#include "tzrec/config/supported_fields.h"
#include "tzrec/common/strings.h"

namespace tzrec {
namespace {

const bool kEmaField = HonourMessageFields("tzrec.protos.DenseOptimizer", {"ema"});

}  // namespace

DenseEma::DenseEma(std::vector<std::pair<std::string, at::Tensor>> parameters, double decay,
                   const std::string& where)
    : decay_(decay) {
  if (!(decay >= 0.0 && decay <= 1.0)) Fail(where, ".decay: ", decay, " is not in [0, 1]");
  for (auto& [name, p] : parameters) {
    names_.push_back(name);
    parameters_.push_back(p);
    averages_.push_back(p.detach().clone());
  }
}

void DenseEma::Update() {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (updates_ == 0) {
      averages_[i].copy_(parameters_[i]);
    } else {
      averages_[i].lerp_(parameters_[i].detach(), 1.0 - decay_);
    }
  }
  ++updates_;
}

void DenseEma::Swap() {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    at::Tensor live = parameters_[i].detach().clone();
    parameters_[i].detach().copy_(averages_[i]);
    averages_[i].copy_(live);
  }
}

void DenseEma::Reset() {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) averages_[i].copy_(parameters_[i]);
  updates_ = 0;
}

std::map<std::string, at::Tensor> DenseEma::State() const {
  std::map<std::string, at::Tensor> state;
  for (size_t i = 0; i < names_.size(); ++i) state[names_[i]] = averages_[i];
  state[kCountKey] = at::scalar_tensor(updates_, at::TensorOptions().dtype(at::kLong));
  return state;
}

void DenseEma::LoadState(const std::map<std::string, at::Tensor>& state, const std::string& file,
                         bool partial) {
  auto count = state.find(kCountKey);
  if (count == state.end() || count->second.numel() != 1) {
    Fail("'", file, "' has no ", kCountKey, " count");
  }
  std::vector<at::Tensor> loaded;
  for (size_t i = 0; i < names_.size(); ++i) {
    auto it = state.find(names_[i]);
    if (it == state.end()) {
      if (!partial) Fail("'", file, "' has no average of dense parameter ", names_[i]);
      loaded.push_back(averages_[i]);
      continue;
    }
    if (it->second.sizes() != averages_[i].sizes()) {
      Fail("'", file, "': the average of ", names_[i], " has shape ", it->second.sizes(),
           " but the parameter has ", averages_[i].sizes());
    }
    if (!at::isfinite(it->second).all().item<bool>()) {
      Fail("'", file, "': the average of ", names_[i], " has non-finite values");
    }
    loaded.push_back(it->second);
  }
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < names_.size(); ++i) {
    if (!loaded[i].is_same(averages_[i])) averages_[i].copy_(loaded[i]);
  }
  updates_ = count->second.to(at::kLong).item<int64_t>();
}

}  // namespace tzrec
