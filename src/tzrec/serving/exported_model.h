// Export directories: what `tzrec export` writes and what predict and serving load.
//
// An export directory is self-contained (moving it elsewhere keeps it working):
//   tzrec_model.json   manifest: format version, model type, checkpoint and step, the input
//                      signature in TorchEasyRec's names (<feature>.values / .lengths /
//                      .weights), the outputs (probs, logits, probs_<tower>, ...), every table
//                      with its storage type, and the quantisation settings
//   model.safetensors  dense parameters and buffers by module path (fp32) and embedding tables
//                      as "embedding_group.<table>.weight" without optimizer state: fp32, fp16,
//                      or INT8 row-wise in TorchRec's layout (table_quantization.h)
//   pipeline.config    the config, asset paths rewritten to the copied files
//   fg.json + assets   as create_fg_json writes them (<stem>_<md5><ext>)
//   model_acc.json     {"SPARSE_INT64": "1", QUANT_EMB / QUANT_EC_EMB when set, plus
//                      --additional_export_config}, as TorchEasyRec writes it
//   scripted_model.pt  the TorchScript form (serving/scripted_model.h) where the model has one;
//                      the manifest names it, or says why it is missing
// A retrieval model (Model::is_match_model) is exported as TorchEasyRec does it: export_dir
// holds one such directory per tower, user/ and item/, each with only its tower's features
// (pipeline.config's feature_configs and fg.json), tables and weights; the manifest names the
// tower, and the output is "<tower>_tower_emb" [-1, D].
// It is written into a hidden sibling directory and renamed into place, so a directory that
// exists is complete.
//
// Thread-safety: ExportModel and LoadExportedPipeline are not reentrant for one path; the
// loaded Pipeline is used by one thread at a time (its Model).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "tzrec/pipeline/pipeline.h"

namespace tzrec {

inline constexpr char kExportManifestFile[] = "tzrec_model.json";
inline constexpr char kExportWeightsFile[] = "model.safetensors";
inline constexpr int kExportFormatVersion = 1;

struct ExportOptions {
  std::string pipeline_config_path;
  std::string checkpoint_path;  // default: latest (or best, export_config) in model_dir
  std::string export_dir;       // must not exist
  std::string asset_files;      // comma-separated files copied into export_dir
  std::string additional_export_config;  // JSON object merged into model_acc.json
  // QUANT_EMB / QUANT_EC_EMB (the environment when unset here): pooled tables default INT8,
  // sequence tables FP32.
  std::string quant_emb;
  std::string quant_ec_emb;
  bool quant_from_environment = true;
  // scripted_model.pt (serving/scripted_model.h) for models with a TorchScript form.
  bool write_scripted_model = true;
};

// Writes the export directory; returns its path.
std::string ExportModel(const ExportOptions& options);

// The checkpoint an export of `config` uses: `checkpoint_path` (a checkpoint or a model_dir),
// else model_dir's latest, or with export_config.exporter_type "best" the step whose
// train_eval_result_v2.txt line is best by best_exporter_metric.
std::string ChooseExportCheckpoint(const protos::EasyRecConfig& config,
                                   const std::string& checkpoint_path);

// `config` with only the feature configs tower `tower` of its retrieval model reads (and,
// under FG_DAG, the features those read), as an exported tower's pipeline.config holds them.
protos::EasyRecConfig TowerExportConfig(const protos::EasyRecConfig& config, const std::string& tower);

// True when `path` holds a tzrec_model.json.
bool IsExportDir(const std::string& path);

// Builds the pipeline of an export directory in `mode` (kPredict or kEval) with its weights
// loaded (tables dequantised to fp32); `adjust` may change the config first (predict's
// --edit_config_json, batch size, dataset type). Errors name the directory and the file or
// tensor.
std::unique_ptr<Pipeline> LoadExportedPipeline(
    const std::string& export_dir, PipelineMode mode,
    const std::function<void(protos::EasyRecConfig*)>& adjust = nullptr);

// The manifest of an export directory.
nlohmann::json ReadExportManifest(const std::string& export_dir);

int ExportMain(const std::vector<std::string>& args);

}  // namespace tzrec
