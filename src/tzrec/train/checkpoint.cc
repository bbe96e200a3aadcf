#include "tzrec/train/checkpoint.h"

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
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
#include "tzrec/optim/adadelta.h"
#include "tzrec/train/non_finite.h"
#include "tzrec/train/tensor_archive.h"

namespace tzrec {
namespace {

constexpr char kPrefix[] = "model.ckpt-";

// LibTorch's messages carry a C++ backtrace after the first line.
std::string FirstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

// Files of a checkpoint being written, with their digests for meta.json.
class CheckpointFiles {
 public:
  explicit CheckpointFiles(std::string dir) : dir_(std::move(dir)) {}
  const std::string& dir() const { return dir_; }
  void Tensors(const std::string& relative, const std::map<std::string, at::Tensor>& tensors,
               int64_t step) {
    for (const auto& [name, tensor] : tensors) {
      if (AllFinite(tensor)) continue;
      // A checkpoint with NaN weights would be resumed from and poison every later run.
      Fail("not saving the checkpoint of step ", step, ": ", relative, " [", name, "] has ",
           Describe(CountNonFinite(tensor)), " values");
    }
    digests_[relative] = WriteTensorArchive(JoinPath(dir_, relative), tensors);
  }
  void Bytes(const std::string& relative, const std::string& bytes) {
    WriteFileAtomic(JoinPath(dir_, relative), bytes);
    digests_[relative] = DigestOf(bytes);
  }
  nlohmann::json Json() const {
    nlohmann::json files = nlohmann::json::object();
    for (const auto& [name, digest] : digests_) {
      files[name] = {{"size", digest.size}, {"crc32", digest.crc32}};
    }
    return files;
  }

 private:
  std::string dir_;
  std::map<std::string, FileDigest> digests_;
};

// A checkpoint's files as meta.json lists them (empty for checkpoints without the list: older
// ones, or from other tools), read back verified.
class CheckpointReader {
 public:
  explicit CheckpointReader(std::string path) : path_(std::move(path)) {
    const std::string meta_file = JoinPath(path_, "meta.json");
    if (!PathExists(meta_file)) return;
    nlohmann::json meta;
    try {
      meta = nlohmann::json::parse(ReadFileToString(meta_file));
    } catch (const std::exception& e) {
      Fail("checkpoint '", path_, "': meta.json is not valid JSON (", e.what(), ")");
    }
    if (!meta.is_object()) Fail("checkpoint '", path_, "': meta.json is not a JSON object");
    if (!meta.contains("files")) return;
    const auto& files = meta["files"];
    if (!files.is_object()) Fail("checkpoint '", path_, "': meta.json \"files\" is not an object");
    for (const auto& [name, entry] : files.items()) {
      if (!entry.is_object() || !entry.contains("size") || !entry.contains("crc32") ||
          !entry["size"].is_number_unsigned() || !entry["crc32"].is_number_unsigned()) {
        Fail("checkpoint '", path_, "': meta.json entry for '", name, "' needs size and crc32");
      }
      if (name.find("..") != std::string::npos || (!name.empty() && name[0] == '/')) {
        Fail("checkpoint '", path_, "': meta.json names a file outside the checkpoint: '", name, "'");
      }
      expected_[name] = {entry["size"].get<int64_t>(), entry["crc32"].get<uint32_t>()};
      const std::string file = JoinPath(path_, name);
      if (!PathExists(file)) {
        Fail("checkpoint '", path_, "' is incomplete: ", name, " (listed in its meta.json) is missing");
      }
    }
  }
  const std::string& path() const { return path_; }
  bool verified() const { return !expected_.empty(); }
  bool Has(const std::string& relative) const { return PathExists(JoinPath(path_, relative)); }
  // The file's bytes, checked against meta.json's size and CRC-32 when listed there.
  std::string Read(const std::string& relative) const {
    const std::string file = JoinPath(path_, relative);
    std::string bytes = ReadFileToString(file);
    auto it = expected_.find(relative);
    if (it != expected_.end()) {
      const FileDigest actual = DigestOf(bytes);
      if (actual.size != it->second.size || actual.crc32 != it->second.crc32) {
        Fail("checkpoint file '", file, "' is corrupt: ", actual.size, " bytes with CRC-32 ",
             actual.crc32, ", but meta.json recorded ", it->second.size, " bytes with CRC-32 ",
             it->second.crc32);
      }
    }
    return bytes;
  }
  std::map<std::string, at::Tensor> Tensors(const std::string& relative) const {
    return ParseTensorArchive(Read(relative), JoinPath(path_, relative));
  }

 private:
  std::string path_;
  std::map<std::string, FileDigest> expected_;
};

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
                           int keep_checkpoint_max, bool write, int64_t keep_step) {
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
    CheckpointFiles files(tmp);
    files.Tensors("model.pt", DenseTensors(*state.model), step);
    MakeDirs(JoinPath(tmp, "embedding"));
    collection.VisitTableStates(true, [&](const std::string& table, const std::map<std::string, at::Tensor>& tensors) {
      files.Tensors("embedding/" + TableFileName(table), tensors, step);
    });
    SyncDirectory(JoinPath(tmp, "embedding"));
    auto save_optimizer = [&](const std::string& file, const torch::optim::Optimizer& optimizer) {
      torch::serialize::OutputArchive archive;
      optimizer.save(archive);
      std::ostringstream bytes;
      archive.save_to(bytes);
      files.Bytes(file, bytes.str());
    };
    if (state.dense_optimizer) save_optimizer("dense_optimizer.pt", *state.dense_optimizer);
    for (const auto& [index, optimizer] : state.part_optimizers) {
      save_optimizer(StrCat("part_optimizer_", index, ".pt"), *optimizer);
    }
    if (state.dense_ema) files.Tensors("dense_ema.pt", state.dense_ema->State(), step);
    {
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      std::map<std::string, at::Tensor> train_state = {
          {"rng_state", gen.get_state()},
          {"sparse_optimizer_step",
           at::scalar_tensor(state.sparse_optimizer ? state.sparse_optimizer->step() : 0,
                             at::TensorOptions().dtype(at::kLong))}};
      if (state.grad_scaler) {
        train_state["grad_scaler_scale"] = at::scalar_tensor(state.grad_scaler->scale(), at::kFloat);
        train_state["grad_scaler_growth_tracker"] =
            at::scalar_tensor(state.grad_scaler->growth_tracker(), at::TensorOptions().dtype(at::kLong));
      }
      files.Tensors("train_state.pt", train_state, step);
    }
    if (state.sharding_plan_json) files.Bytes("plan.json", *state.sharding_plan_json);
    if (state.dataloader_state) files.Bytes(DataloaderState::kFileName, state.dataloader_state->ToJson());
    nlohmann::json meta = {{"format", "tzrec-cpp-checkpoint/1"}, {"global_step", step},
                           {"files", files.Json()}};
    WriteFileAtomic(JoinPath(tmp, "meta.json"), meta.dump() + "\n");
    if (std::rename(tmp.c_str(), final_path.c_str()) != 0) {
      Fail("cannot move checkpoint into place at '", final_path, "'");
    }
    SyncDirectory(model_dir);
  } catch (...) {
    RemoveAll(tmp);
    throw;
  }
  LOG_INFO << "Saved checkpoint " << final_path;
  if (keep_checkpoint_max > 0) {
    auto all = ListCheckpoints(model_dir);
    for (size_t i = 0; i + keep_checkpoint_max < all.size(); ++i) {
      if (all[i].step == keep_step) continue;
      // Out of sight first: a crash during the removal leaves a hidden temp directory (removed
      // at the next start), never a half-deleted model.ckpt-N that looks like a checkpoint.
      const std::string doomed = TempSiblingPath(all[i].path);
      if (std::rename(all[i].path.c_str(), doomed.c_str()) != 0) {
        LOG_WARNING << "cannot remove old checkpoint " << all[i].path << ": " << std::strerror(errno);
        continue;
      }
      RemoveAll(doomed);
      LOG_INFO << "Removed old checkpoint " << all[i].path;
    }
  }
  return final_path;
}

namespace {

std::map<std::string, at::Tensor> LoadTensors(const CheckpointReader& reader) {
  if (!reader.Has("model.pt")) Fail("checkpoint '", reader.path(), "' has no model.pt");
  auto tensors = reader.Tensors("model.pt");
  std::string embedding_dir = JoinPath(reader.path(), "embedding");
  if (IsDirectory(embedding_dir)) {
    for (const auto& file : ListDirectory(embedding_dir)) {
      if (!EndsWith(file, ".pt")) continue;
      // Undo TableFileName's escaping.
      std::string table;
      std::string stem = file.substr(0, file.size() - 3);
      for (size_t i = 0; i < stem.size(); ++i) {
        int code = 0;
        if (stem[i] == '%' && i + 2 < stem.size() &&
            std::sscanf(stem.substr(i + 1, 2).c_str(), "%2x", &code) == 1) {
          table += static_cast<char>(code);
          i += 2;
        } else {
          table += stem[i];
        }
      }
      for (auto& kv : reader.Tensors("embedding/" + file)) {
        std::string key = "embedding_group." + table + ".weight";
        tensors[kv.first == "weight" ? key : key + "." + kv.first] = kv.second;
      }
    }
  }
  return tensors;
}

// The dense optimizer's state tensors (LibTorch's archive) checked like the others: inside
// their storages, the shape of their parameter, finite.
void ValidateDenseOptimizerState(torch::optim::Optimizer& optimizer, const std::string& file) {
  // LibTorch keys the state by the printed address of the parameter's TensorImpl.
  std::map<std::string, at::Tensor> params;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) params[c10::guts::to_string(p.unsafeGetTensorImpl())] = p;
  }
  for (const auto& [key, state] : optimizer.state()) {
    auto param = params.find(key);
    if (param == params.end()) Fail("'", file, "': optimizer state for an unknown parameter");
    std::vector<std::pair<const char*, at::Tensor>> tensors;
    if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(state.get())) {
      tensors = {{"exp_avg", adam->exp_avg()}, {"exp_avg_sq", adam->exp_avg_sq()},
                 {"max_exp_avg_sq", adam->max_exp_avg_sq()}};
    } else if (auto* adamw = dynamic_cast<torch::optim::AdamWParamState*>(state.get())) {
      tensors = {{"exp_avg", adamw->exp_avg()}, {"exp_avg_sq", adamw->exp_avg_sq()},
                 {"max_exp_avg_sq", adamw->max_exp_avg_sq()}};
    } else if (auto* adagrad = dynamic_cast<torch::optim::AdagradParamState*>(state.get())) {
      tensors = {{"sum", adagrad->sum()}};
    } else if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(state.get())) {
      tensors = {{"momentum_buffer", sgd->momentum_buffer()}};
    } else if (auto* rmsprop = dynamic_cast<torch::optim::RMSpropParamState*>(state.get())) {
      tensors = {{"square_avg", rmsprop->square_avg()}, {"momentum_buffer", rmsprop->momentum_buffer()},
                 {"grad_avg", rmsprop->grad_avg()}};
    } else if (auto* adadelta = dynamic_cast<AdadeltaParamState*>(state.get())) {
      tensors = {{"square_avg", adadelta->square_avg()}, {"acc_delta", adadelta->acc_delta()}};
    } else {
      Fail("'", file, "': unexpected optimizer state type");
    }
    for (const auto& [name, tensor] : tensors) {
      if (!tensor.defined()) continue;
      const std::string what = StrCat("'", file, "' state ", name);
      ValidateTensorStorage(tensor, what);
      if (tensor.sizes() != param->second.sizes()) {
        Fail(what, " has shape ", tensor.sizes(), " but its parameter has ", param->second.sizes());
      }
      if (!AllFinite(tensor)) Fail(what, " has ", Describe(CountNonFinite(tensor)), " values");
    }
  }
}

}  // namespace

std::optional<int64_t> BestEvaluatedStep(const std::string& results_file, const std::string& metric,
                                         bool larger_is_better, const std::vector<int64_t>& steps) {
  std::map<int64_t, double> value_at_step;
  if (PathExists(results_file)) {
    std::ifstream in(results_file);
    std::string line;
    int64_t line_number = 0;
    while (std::getline(in, line)) {
      ++line_number;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      auto row = nlohmann::json::parse(line, nullptr, false);
      if (row.is_discarded() || !row.is_object() || !row.contains("global_step") ||
          !row["global_step"].is_number_integer()) {
        Fail(results_file, ":", line_number, ": not a JSON object with an integer global_step");
      }
      if (!row.contains(metric) || !row[metric].is_number()) {
        Fail(results_file, ":", line_number, ": has no metric '", metric,
             "' (export_config.best_exporter_metric; multi-task metrics are '<metric>_<tower>')");
      }
      value_at_step[row["global_step"].get<int64_t>()] = row[metric].get<double>();
    }
  }
  std::optional<int64_t> best;
  double best_value = 0.0;
  for (int64_t step : steps) {
    auto it = value_at_step.find(step);
    if (it == value_at_step.end()) continue;
    if (!best || (larger_is_better ? it->second > best_value : it->second < best_value)) {
      best = step;
      best_value = it->second;
    }
  }
  return best;
}

std::map<std::string, at::Tensor> LoadCheckpointTensors(const std::string& checkpoint_path) {
  return LoadTensors(CheckpointReader(checkpoint_path));
}

std::map<std::string, std::string> ReadCheckpointParamMap(const std::string& path) {
  std::map<std::string, std::string> map;
  std::istringstream lines(ReadFileToString(path));
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    std::istringstream words(line);
    std::string name, source, extra;
    if (!(words >> name)) continue;
    if (!(words >> source) || (words >> extra)) {
      Fail(path, ":", number, ": expected '<model state name> <checkpoint state name>', got '",
           line, "'");
    }
    map[name] = source;
  }
  return map;
}

void RestoreCheckpoint(const std::string& checkpoint_path, const TrainingState& state,
                       const RestoreOptions& options) {
  CheckpointReader reader(checkpoint_path);
  if (!reader.verified()) {
    LOG_INFO << "Checkpoint " << checkpoint_path << " lists no file checksums (not written by "
             << "tzrec-cpp, or by an older version): its files are read unverified";
  }
  auto saved = LoadTensors(reader);
  for (const auto& [name, source] : options.param_map) {
    auto it = saved.find(source);
    if (it == saved.end()) {
      LOG_WARNING << "fine_tune_ckpt_param_map: [" << source << "] (for [" << name << "]) is not in "
                  << checkpoint_path;
      continue;
    }
    LOG_INFO << "Remap restore state [" << name << "] from [" << source << "]";
    saved[name] = it->second;
  }
  for (const auto& [name, tensor] : saved) {
    if (!AllFinite(tensor)) {
      Fail("checkpoint '", checkpoint_path, "': [", name, "] has ", Describe(CountNonFinite(tensor)),
           " values; these weights cannot be evaluated or trained from");
    }
  }
  c10::NoGradGuard no_grad;
  size_t restored = 0;
  std::vector<std::string> missing;
  auto restore = [&](const std::string& name, at::Tensor target, bool warn) {
    auto it = saved.find(name);
    if (it == saved.end()) {
      if (warn) missing.push_back(name);
      return;
    }
    if (it->second.sizes() != target.sizes()) {
      Fail("checkpoint '", checkpoint_path, "': state [", name, "] has shape ",
           it->second.sizes(), " but the model needs ", target.sizes());
    }
    if (it->second.scalar_type() != target.scalar_type()) {
      Fail("checkpoint '", checkpoint_path, "': state [", name, "] is ", it->second.scalar_type(),
           " but the model needs ", target.scalar_type());
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
      [&](const std::string& what) { missing.push_back("embedding table " + what); });
  for (const std::string& name : missing) {
    if (options.require_all) {
      // Continuing a run: a state that is not there would silently restart from random init.
      Fail("checkpoint '", checkpoint_path, "' has no state [", name,
           "] (a file of it is missing, or the model changed since it was written)");
    }
    LOG_WARNING << "Skip restore state [" << name << "]: not in " << checkpoint_path;
  }
  LOG_INFO << "Restored " << restored << " tensors from " << checkpoint_path;
  const bool has_ema = reader.Has("dense_ema.pt");
  const std::string ema_file = JoinPath(checkpoint_path, "dense_ema.pt");
  if (state.dense_ema) {
    // Continuing needs the averages as they were; fine-tuning keeps those of the parameters
    // the checkpoint has, and the rest start from the restored weights.
    state.dense_ema->Reset();
    if (has_ema) {
      state.dense_ema->LoadState(reader.Tensors("dense_ema.pt"), ema_file, !options.require_all);
    } else {
      LOG_WARNING << "Dense EMA checkpoint [" << ema_file << "] not found; EMA will restart from "
                  << "the next optimizer step.";
    }
  }
  if (options.use_dense_ema) {
    if (has_ema) {
      auto averages = reader.Tensors("dense_ema.pt");
      size_t swapped = 0;
      for (auto& [name, target] : DenseTensors(*state.model)) {
        auto it = averages.find(name);
        if (it == averages.end()) continue;
        if (it->second.sizes() != target.sizes() || !AllFinite(it->second)) {
          Fail("'", ema_file, "': the average of [", name, "] has shape ", it->second.sizes(),
               " or non-finite values; the model needs ", target.sizes());
        }
        target.copy_(it->second);
        ++swapped;
      }
      LOG_INFO << "Using the dense EMA weights of " << swapped << " parameters from " << ema_file;
    } else {
      LOG_WARNING << "Dense EMA checkpoint [" << ema_file << "] not found; using original model "
                  << "parameters.";
    }
  }
  auto restore_optimizer = [&](const std::string& file, torch::optim::Optimizer& optimizer) {
    const std::string path = JoinPath(checkpoint_path, file);
    if (!reader.Has(file)) {
      if (options.require_all) {
        Fail("checkpoint '", checkpoint_path, "' has no ", file, " (use ",
             "--ignore_restore_optimizer to continue without the optimizer state)");
      }
      return;
    }
    std::istringstream bytes(reader.Read(file));
    try {
      torch::serialize::InputArchive archive;
      archive.load_from(bytes);
      optimizer.load(archive);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      Fail("cannot read the dense optimizer state '", path, "': ", FirstLine(e.what()));
    }
    ValidateDenseOptimizerState(optimizer, path);
  };
  if (options.restore_optimizer && state.dense_optimizer) restore_optimizer("dense_optimizer.pt", *state.dense_optimizer);
  if (options.restore_optimizer) {
    for (const auto& [index, optimizer] : state.part_optimizers) {
      restore_optimizer(StrCat("part_optimizer_", index, ".pt"), *optimizer);
    }
  }
  const std::string state_file = JoinPath(checkpoint_path, "train_state.pt");
  if (options.restore_rng && reader.Has("train_state.pt")) {
    auto train_state = reader.Tensors("train_state.pt");
    auto it = train_state.find("rng_state");
    if (it != train_state.end()) {
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      try {
        gen.set_state(it->second);
      } catch (const std::exception& e) {
        Fail("'", state_file, "': rng_state is not a CPU generator state: ", FirstLine(e.what()));
      }
    }
    auto step = train_state.find("sparse_optimizer_step");
    if (step != train_state.end() && state.sparse_optimizer && options.restore_optimizer) {
      if (step->second.numel() != 1 || step->second.scalar_type() != at::kLong ||
          step->second.item<int64_t>() < 0) {
        Fail("'", state_file, "': sparse_optimizer_step must be one non-negative int64");
      }
      state.sparse_optimizer->set_step(step->second.item<int64_t>());
    }
    if (state.grad_scaler && options.restore_optimizer) {
      auto scale = train_state.find("grad_scaler_scale");
      auto tracker = train_state.find("grad_scaler_growth_tracker");
      if (scale == train_state.end() || tracker == train_state.end()) {
        LOG_WARNING << "'" << state_file << "' has no grad scaler state (saved without "
                    << "train_config.grad_scaler); the scale starts at init_scale "
                    << state.grad_scaler->scale();
      } else {
        if (scale->second.numel() != 1 || tracker->second.numel() != 1 ||
            tracker->second.scalar_type() != at::kLong) {
          Fail("'", state_file, "': grad_scaler_scale / grad_scaler_growth_tracker must be one value each");
        }
        state.grad_scaler->SetState(scale->second.item<float>(), tracker->second.item<int64_t>(),
                                    "'" + state_file + "'");
      }
    }
  }
}

}  // namespace tzrec
