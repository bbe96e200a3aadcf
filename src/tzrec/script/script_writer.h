// ScriptWriter: a model's inference forward written as TorchScript source, with the tensors it
// reads, so that serving/scripted_model.cc can turn it into a torch::jit::Module
// (scripted_model.pt) while models, modules and losses never include the JIT.
//
// Each component that has a TorchScript form appends its statements (Let) and returns the name
// of the local holding its result; tensors it needs become module attributes (Tensor). The
// forward is `forward(self, data: Dict[str, Tensor], device: str = "cpu") -> Dict[str,
// Tensor]`, TorchEasyRec's scripted-model signature: `data` holds the generated features in
// TorchEasyRec's names (<feature>.values / .lengths / .weights), the result the predictions
// (Output). Only aten operators are written (torch.<op>), so any LibTorch or Python torch of a
// compatible version loads the file without our libraries. Without Python's resolver,
// `torch.int64` is not a value in TorchScript source: dtypes are written as their ScalarType
// numbers (4 = int64, 6 = float32), as the serialized code shows them. A component without a TorchScript
// form calls Unsupported(), which throws ScriptUnsupported; the exporter then skips the file.
//
// Not thread-safe (one writer per export).
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tzrec {

class ScriptUnsupported : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A double as a TorchScript float literal (round-trips exactly; always has a '.' or exponent).
std::string ScriptFloat(double value);
// A list of ints as a TorchScript list literal, e.g. "[-1, 4, 8]".
std::string ScriptIntList(const std::vector<int64_t>& values);

class ScriptWriter {
 public:
  [[noreturn]] static void Unsupported(const std::string& why);

  // Registers a detached, contiguous copy of `tensor` as a module attribute named after `hint`
  // (sanitised, made unique); returns "self.<name>". The same `key` (when not empty) returns the
  // attribute registered first, so a shared table is stored once.
  std::string Tensor(const std::string& hint, const at::Tensor& tensor, const std::string& key = "");
  // Appends `<local> = <expression>` to forward; returns the new local's name.
  std::string Let(const std::string& hint, const std::string& expression);
  // A local computed once per `key` (e.g. one feature's ids read once): `make` runs the first
  // time and its result is remembered.
  template <typename Make>
  std::string Once(const std::string& key, Make make) {
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    std::string local = make();
    memo_[key] = local;
    return local;
  }
  // The expression reading model input `name` (a generated feature tensor).
  std::string Input(const std::string& name);
  // Sets prediction `name` to local `local` (a later call for the same name replaces it).
  void Output(const std::string& name, const std::string& local);
  // Removes prediction `name` and returns its local (to publish it under another name).
  std::string TakeOutput(const std::string& name);
  // A helper method of the module, defined once under `name` (its full `def` source).
  void Method(const std::string& name, const std::string& source);

  // The whole module source: helper methods, then forward.
  std::string Source() const;
  const std::vector<std::pair<std::string, at::Tensor>>& tensors() const { return tensors_; }
  std::vector<std::string> output_names() const;
  const std::set<std::string>& input_names() const { return inputs_; }

 private:
  std::string Unique(const std::string& hint);

  std::vector<std::pair<std::string, at::Tensor>> tensors_;
  std::map<std::string, std::string> tensor_keys_;
  std::map<std::string, std::string> memo_;
  std::set<std::string> names_;
  std::vector<std::string> body_;
  std::map<std::string, std::string> outputs_;
  std::map<std::string, std::string> methods_;
  std::set<std::string> inputs_;
};

}  // namespace tzrec
