#include "tzrec/train/checkpoint.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tzrec/common/error.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"

namespace tzrec {
namespace {

constexpr char kPrefix[] = "model.ckpt-";

void WriteTensorDict(const std::string& path, const std::map<std::string, at::Tensor>& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& kv : tensors) {
    // Pickling a view writes its whole storage: tables are views into one fused buffer.
    const at::Tensor& t = kv.second;
    bool owns_storage = t.is_contiguous() && t.storage_offset() == 0 &&
                        t.storage().nbytes() == static_cast<size_t>(t.numel()) * t.element_size();
    dict.insert(kv.first, owns_storage ? t : t.clone(at::MemoryFormat::Contiguous));
  }
  // The same archive torch::jit::pickle_save builds (and torch.load reads), but streamed to
  // the file: pickle_save assembles it in memory first, which doubled peak RSS at every save
  // of a large table.
  std::vector<char> pickle_bytes;
  torch::jit::Pickler pickler(
      [&](const char* data, size_t size) { pickle_bytes.insert(pickle_bytes.end(), data, data + size); },
      /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr);
  pickler.protocol();
  pickler.pushIValue(c10::IValue(dict));
  pickler.stop();
  std::string tmp = TempSiblingPath(path);
  std::FILE* file = std::fopen(tmp.c_str(), "wb");
  if (!file) Fail("cannot write '", tmp, "'");
  bool write_failed = false;
  try {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) -> size_t {
      if (size > 0 && std::fwrite(data, 1, size, file) != size) write_failed = true;
      return size;
    });
    torch::jit::writeArchiveAndTensors("data", pickle_bytes.data(), pickle_bytes.size(),
                                       pickler.tensorData(), writer);
    writer.writeEndOfFile();
  } catch (...) {
    std::fclose(file);
    std::remove(tmp.c_str());
    throw;
  }
  if (std::fclose(file) != 0 || write_failed) {
    std::remove(tmp.c_str());
    Fail("cannot write '", path, "' (disk full?)");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    Fail("cannot move '", tmp, "' to '", path, "'");
  }
}

std::map<std::string, at::Tensor> ReadTensorDict(const std::string& path) {
  std::string bytes = ReadFileToString(path);
  c10::IValue value;
  try {
    value = torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const std::exception& e) {
    Fail("cannot read checkpoint file '", path, "': ", e.what());
  }
  if (!value.isGenericDict()) Fail("checkpoint file '", path, "' is not a tensor dict");
  std::map<std::string, at::Tensor> out;
  for (const auto& entry : value.toGenericDict()) {
    out[entry.key().toStringRef()] = entry.value().toTensor();
  }
  return out;
}

// Name -> tensor of the model's dense state.
std::map<std::string, at::Tensor> DenseTensors(Model& model) {
  std::map<std::string, at::Tensor> tensors;
  for (const auto& item : model.named_parameters()) tensors[item.key()] = item.value();
  for (const auto& item : model.named_buffers()) tensors[item.key()] = item.value();
  return tensors;
}

// Table names come from configs: keep file names to a safe alphabet.
std::string TableFileName(const std::string& table) {
  std::string name;
  for (unsigned char c : table) {
    if (std::isalnum(c) || c == '_' || c == '-' || c == '.') {
      name += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      name += buf;
    }
  }
  return name + ".pt";
}

int64_t StepOf(const std::string& name) {
  int64_t step = 0;
  if (!StartsWith(name, kPrefix) || !ParseInt64(name.substr(sizeof(kPrefix) - 1), &step)) {
    return -1;
  }
  return step;
}

}  // namespace

std::vector<CheckpointRef> ListCheckpoints(const std::string& model_dir) {
  std::vector<CheckpointRef> found;
  if (!IsDirectory(model_dir)) return found;
  for (const auto& name : ListDirectory(model_dir)) {
    int64_t step = StepOf(name);
    std::string path = JoinPath(model_dir, name);
    if (step >= 0 && IsDirectory(path)) found.push_back({path, step});
  }
  std::sort(found.begin(), found.end(),
            [](const CheckpointRef& a, const CheckpointRef& b) { return a.step < b.step; });
  return found;
}

std::optional<CheckpointRef> LatestCheckpoint(const std::string& path) {
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  std::string base = trimmed.substr(trimmed.find_last_of('/') + 1);
  if (StepOf(base) >= 0 || PathExists(JoinPath(trimmed, "model.pt"))) {
    if (!IsDirectory(trimmed)) return std::nullopt;
    return CheckpointRef{trimmed, std::max<int64_t>(0, StepOf(base))};
  }
  auto all = ListCheckpoints(trimmed);
  if (all.empty()) return std::nullopt;
  return all.back();
}

std::string SaveCheckpoint(const std::string& model_dir, int64_t step, const TrainingState& state,
                           int keep_checkpoint_max, bool write) {
  std::string final_path = JoinPath(model_dir, kPrefix + std::to_string(step));
  EmbeddingCollection& collection = state.model->embedding_collection();
  const bool gathers = collection.has_sharded_tables();
  if (!write) {
    // Take part in the gathers of the writer's table loop.
    if (gathers) collection.VisitTableStates(true, [](const std::string&, const auto&) {});
    return final_path;
  }
  if (IsDirectory(final_path)) {
    if (gathers) collection.VisitTableStates(true, [](const std::string&, const auto&) {});
    return final_path;
  }
  std::string tmp = TempSiblingPath(final_path);
  MakeDirs(tmp);
  try {
    WriteTensorDict(JoinPath(tmp, "model.pt"), DenseTensors(*state.model));
    MakeDirs(JoinPath(tmp, "embedding"));
    collection.VisitTableStates(true, [&](const std::string& table, const std::map<std::string, at::Tensor>& tensors) {
      WriteTensorDict(JoinPath(JoinPath(tmp, "embedding"), TableFileName(table)), tensors);
    });
    if (state.dense_optimizer) {
      torch::serialize::OutputArchive archive;
      state.dense_optimizer->save(archive);
      std::ostringstream bytes;
      archive.save_to(bytes);
      WriteFileAtomic(JoinPath(tmp, "dense_optimizer.pt"), bytes.str());
    }
    {
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      WriteTensorDict(JoinPath(tmp, "train_state.pt"),
                      {{"rng_state", gen.get_state()},
                       {"sparse_optimizer_step",
                        at::scalar_tensor(state.sparse_optimizer ? state.sparse_optimizer->step() : 0,
                                          at::TensorOptions().dtype(at::kLong))}});
    }
    if (state.sharding_plan_json) {
      WriteFileAtomic(JoinPath(tmp, "plan.json"), *state.sharding_plan_json);
    }
    if (state.dataloader_state) {
      WriteFileAtomic(JoinPath(tmp, DataloaderState::kFileName), state.dataloader_state->ToJson());
    }
    nlohmann::json meta = {{"format", "tzrec-cpp-checkpoint/1"}, {"global_step", step}};
    WriteFileAtomic(JoinPath(tmp, "meta.json"), meta.dump() + "\n");
    if (std::rename(tmp.c_str(), final_path.c_str()) != 0) {
      Fail("cannot move checkpoint into place at '", final_path, "'");
    }
  } catch (...) {
    RemoveAll(tmp);
    throw;
  }
  LOG_INFO << "Saved checkpoint " << final_path;
  if (keep_checkpoint_max > 0) {
    auto all = ListCheckpoints(model_dir);
    for (size_t i = 0; i + keep_checkpoint_max < all.size(); ++i) {
      RemoveAll(all[i].path);
      LOG_INFO << "Removed old checkpoint " << all[i].path;
    }
  }
  return final_path;
}

std::map<std::string, at::Tensor> LoadCheckpointTensors(const std::string& checkpoint_path) {
  std::string model_file = JoinPath(checkpoint_path, "model.pt");
  if (!PathExists(model_file)) Fail("checkpoint '", checkpoint_path, "' has no model.pt");
  auto tensors = ReadTensorDict(model_file);
  std::string embedding_dir = JoinPath(checkpoint_path, "embedding");
  if (IsDirectory(embedding_dir)) {
    for (const auto& file : ListDirectory(embedding_dir)) {
      if (!EndsWith(file, ".pt")) continue;
      // Undo TableFileName's escaping.
      std::string table;
      std::string stem = file.substr(0, file.size() - 3);
      for (size_t i = 0; i < stem.size(); ++i) {
        if (stem[i] == '%' && i + 2 < stem.size()) {
          table += static_cast<char>(std::stoi(stem.substr(i + 1, 2), nullptr, 16));
          i += 2;
        } else {
          table += stem[i];
        }
      }
      for (auto& kv : ReadTensorDict(JoinPath(embedding_dir, file))) {
        std::string key = "embedding_group." + table + ".weight";
        tensors[kv.first == "weight" ? key : key + "." + kv.first] = kv.second;
      }
    }
  }
  return tensors;
}

void RestoreCheckpoint(const std::string& checkpoint_path, const TrainingState& state,
                       const RestoreOptions& options) {
  auto saved = LoadCheckpointTensors(checkpoint_path);
  c10::NoGradGuard no_grad;
  size_t restored = 0;
  auto restore = [&](const std::string& name, at::Tensor target, bool warn) {
    auto it = saved.find(name);
    if (it == saved.end()) {
      if (warn) LOG_WARNING << "Skip restore state [" << name << "]: not in " << checkpoint_path;
      return;
    }
    if (it->second.sizes() != target.sizes()) {
      Fail("checkpoint '", checkpoint_path, "': state [", name, "] has shape ",
           it->second.sizes(), " but the model needs ", target.sizes());
    }
    target.copy_(it->second);
    ++restored;
  };
  for (auto& kv : DenseTensors(*state.model)) restore(kv.first, kv.second, true);
  // Tables: "embedding_group.<table>.weight[.<state>]" keys back to {table: {name: tensor}}.
  std::map<std::string, std::map<std::string, at::Tensor>> tables;
  const std::string prefix = "embedding_group.";
  for (auto& [key, tensor] : saved) {
    if (!StartsWith(key, prefix)) continue;
    const std::string rest = key.substr(prefix.size());
    const size_t weight = rest.rfind(".weight");
    if (weight == std::string::npos) continue;
    const std::string table = rest.substr(0, weight);
    const std::string tail = rest.substr(weight + 7);
    tables[table][tail.empty() ? "weight" : tail.substr(1)] = tensor;
  }
  restored += state.model->embedding_collection().RestoreTables(
      tables, options.restore_optimizer, "checkpoint '" + checkpoint_path + "'",
      [&](const std::string& what) {
        LOG_WARNING << "Skip restore state [embedding table " << what << "]: not in " << checkpoint_path;
      });
  LOG_INFO << "Restored " << restored << " tensors from " << checkpoint_path;
  if (options.restore_optimizer) {
    std::string dense_file = JoinPath(checkpoint_path, "dense_optimizer.pt");
    if (state.dense_optimizer && PathExists(dense_file)) {
      torch::serialize::InputArchive archive;
      archive.load_from(dense_file);
      state.dense_optimizer->load(archive);
    }
  }
  std::string state_file = JoinPath(checkpoint_path, "train_state.pt");
  if (options.restore_rng && PathExists(state_file)) {
    auto train_state = ReadTensorDict(state_file);
    auto it = train_state.find("rng_state");
    if (it != train_state.end()) {
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(it->second);
    }
    auto step = train_state.find("sparse_optimizer_step");
    if (step != train_state.end() && state.sparse_optimizer && options.restore_optimizer) {
      state.sparse_optimizer->set_step(step->second.item<int64_t>());
    }
  }
}

}  // namespace tzrec
