// scripted_model.pt: the TorchScript form of an exported model, for Python's torch.jit.load,
// Triton's PyTorch backend and other LibTorch servers.
//
// The module is built from the model's own TorchScript writer (Model::WriteScript,
// script/script_writer.h): aten operators only, tables in their exported (maybe quantised)
// form, `forward(data: Dict[str, Tensor], device: str = "cpu") -> Dict[str, Tensor]` over the
// generated features in TorchEasyRec's names (<feature>.values int64 [N] / float [B, dim],
// <feature>.lengths int64 [B], <feature>.weights float [N]; sequence features: .lengths steps
// per row and .key_lengths ids per step) returning the predictions under the names Predict
// gives them. FG runs outside the module, as in TorchEasyRec. Models (or parts, e.g. some
// sequence encoders) without a TorchScript form get none; the manifest says why.
//
// Thread-safety: the functions are reentrant; a loaded module runs on any thread.
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <map>
#include <string>
#include <vector>

#include "tzrec/batch/batch.h"
#include "tzrec/embedding/embedding_group.h"
#include "tzrec/features/feature.h"
#include "tzrec/models/model.h"

namespace tzrec {

inline constexpr char kScriptedModelFile[] = "scripted_model.pt";

// The TorchScript module of `model` over `tables` (in eval mode). Throws ScriptUnsupported.
torch::jit::Module BuildScriptedModule(const Model& model, const StoredTables& tables);
// The module of a writer's source and tensors (float32 tensors as parameters, others buffers).
torch::jit::Module ModuleFromScript(const ScriptWriter& w);


// The scripted model's inputs for `batch`: every generated feature of `features` in
// TorchEasyRec's names and dtypes (ids and lengths int64).
std::map<std::string, at::Tensor> ScriptedInputs(const Batch& batch, const std::vector<const Feature*>& features);

// Runs forward on `inputs`; returns the predictions by name.
std::map<std::string, at::Tensor> RunScriptedModule(torch::jit::Module& module,
                                                    const std::map<std::string, at::Tensor>& inputs);

// Writes `path` (scripted_model.pt) for `model` with the exported `tables`, after checking the
// module on synthetic rows: with fp32 tables `fp32_tables` it must give Predict's outputs
// (|diff| <= 1e-5), and with `tables` finite outputs of the same names. Returns "" when
// written, else why not (no TorchScript form). A mismatch is an error (a defect, not an input).
std::string WriteScriptedModel(Model& model, const std::vector<const Feature*>& features,
                               const StoredTables& fp32_tables, const StoredTables& tables,
                               const std::string& path);

}  // namespace tzrec
