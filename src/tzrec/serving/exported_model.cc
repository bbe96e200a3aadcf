#include "tzrec/serving/exported_model.h"

#include <ATen/ATen.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "tzrec/common/error.h"
#include "tzrec/common/flags.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/config/supported_fields.h"
#include "tzrec/data/safetensors.h"
#include "tzrec/serving/scripted_model.h"
#include "tzrec/embedding/table_quantization.h"
#include "tzrec/tools/create_fg_json.h"
#include "tzrec/train/checkpoint.h"
#include "tzrec/train/non_finite.h"
#include "tzrec/version.h"

namespace tzrec {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using Json = nlohmann::json;

constexpr char kFormatName[] = "tzrec-cpp-export";
constexpr char kTablePrefix[] = "embedding_group.";

// Feature-config string fields that name files (vocabularies, tokenizers, stop characters,
// custom operator libraries); `asset_dir` of the nearest enclosing message resolves relative
// ones, as feature generation does.
bool IsAssetField(const std::string& name) {
  return name == "vocab_file" || name == "stop_char_file" || name == "operator_lib_file";
}

using AssetVisitor = std::function<void(Message* owner, const FieldDescriptor* field,
                                        const std::string& resolved, const std::string& where)>;

void VisitAssets(Message* msg, std::string asset_dir, const std::string& where,
                 const AssetVisitor& visit) {
  const auto* descriptor = msg->GetDescriptor();
  const auto* reflection = msg->GetReflection();
  if (const FieldDescriptor* dir = descriptor->FindFieldByName("asset_dir");
      dir && dir->type() == FieldDescriptor::TYPE_STRING && reflection->HasField(*msg, dir)) {
    asset_dir = reflection->GetString(*msg, dir);
  }
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    const std::string path = where + "." + field->name();
    if (field->type() == FieldDescriptor::TYPE_MESSAGE) {
      if (field->is_repeated()) {
        for (int j = 0; j < reflection->FieldSize(*msg, field); ++j) {
          VisitAssets(reflection->MutableRepeatedMessage(msg, field, j), asset_dir,
                      StrCat(path, "[", j, "]"), visit);
        }
      } else if (reflection->HasField(*msg, field)) {
        VisitAssets(reflection->MutableMessage(msg, field), asset_dir, path, visit);
      }
    } else if (field->type() == FieldDescriptor::TYPE_STRING && !field->is_repeated() &&
               IsAssetField(field->name()) && reflection->HasField(*msg, field)) {
      std::string value = reflection->GetString(*msg, field);
      // Empty, or an operator bundled with the FG runtime ("pyfg/lib/..."): not a file of ours.
      if (value.empty() || StartsWith(value, "pyfg/lib/")) continue;
      if (value[0] != '/' && !asset_dir.empty()) value = JoinPath(asset_dir, value);
      visit(msg, field, value, path);
    }
  }
}

void VisitConfigAssets(protos::EasyRecConfig* config, const AssetVisitor& visit) {
  for (int i = 0; i < config->feature_configs_size(); ++i) {
    VisitAssets(config->mutable_feature_configs(i), "", StrCat("feature_configs[", i, "]"), visit);
  }
}

// Sets asset_dir to `dir` in every message of the feature configs that has that field.
void SetAssetDirs(Message* msg, const std::string& dir) {
  const auto* descriptor = msg->GetDescriptor();
  const auto* reflection = msg->GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    if (field->name() == "asset_dir" && field->type() == FieldDescriptor::TYPE_STRING) {
      reflection->SetString(msg, field, dir);
    } else if (field->type() == FieldDescriptor::TYPE_MESSAGE) {
      if (field->is_repeated()) {
        for (int j = 0; j < reflection->FieldSize(*msg, field); ++j) {
          SetAssetDirs(reflection->MutableRepeatedMessage(msg, field, j), dir);
        }
      } else if (reflection->HasField(*msg, field)) {
        SetAssetDirs(reflection->MutableMessage(msg, field), dir);
      }
    }
  }
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string AbsolutePath(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  char* cwd = getcwd(nullptr, 0);
  std::string out = JoinPath(cwd ? cwd : ".", path);
  std::free(cwd);
  return out;
}

SafetensorsDtype SafetensorsDtypeOf(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return SafetensorsDtype::kF32;
    case at::kHalf: return SafetensorsDtype::kF16;
    case at::kByte: return SafetensorsDtype::kU8;
    case at::kLong: return SafetensorsDtype::kI64;
    case at::kInt: return SafetensorsDtype::kI32;
    case at::kDouble: return SafetensorsDtype::kF64;
    case at::kBool: return SafetensorsDtype::kBool;
    default: Fail("export: cannot store a tensor of ", t.scalar_type());
  }
}

at::ScalarType TorchDtypeOf(SafetensorsDtype dtype, const std::string& what) {
  switch (dtype) {
    case SafetensorsDtype::kF32: return at::kFloat;
    case SafetensorsDtype::kF16: return at::kHalf;
    case SafetensorsDtype::kU8: return at::kByte;
    case SafetensorsDtype::kI64: return at::kLong;
    case SafetensorsDtype::kI32: return at::kInt;
    case SafetensorsDtype::kF64: return at::kDouble;
    case SafetensorsDtype::kBool: return at::kBool;
    default: Fail(what, ": unexpected dtype ", SafetensorsDtypeName(dtype));
  }
}

// A view of a mapped tensor (valid while `file` lives).
at::Tensor TensorOf(const SafetensorsTensor& t, const std::string& what) {
  return at::from_blob(const_cast<void*>(t.data), t.shape,
                       at::TensorOptions().dtype(TorchDtypeOf(t.dtype, what)));
}

// The input signature of the features, in TorchEasyRec's names.
Json InputSignature(const Pipeline& pipeline) {
  Json inputs = Json::array();
  auto add = [&](const std::string& name, const char* dtype, Json shape) {
    inputs.push_back({{"name", name}, {"dtype", dtype}, {"shape", std::move(shape)}});
  };
  for (const auto& feature : pipeline.features) {
    const std::string& f = feature->name();
    if (feature->is_sparse()) {
      add(f + ".values", "int64", {-1});
      add(f + ".lengths", "int64", {-1});
      if (feature->weighted()) add(f + ".weights", "float32", {-1});
    } else {
      add(f + ".values", "float32", {-1, feature->value_dim()});
      if (feature->is_sequence()) add(f + ".lengths", "int64", {-1});
    }
  }
  return inputs;
}

Json OutputSignature(const Model& model) {
  Json outputs = Json::array();
  for (const auto& [name, dims] : model.OutputShapes()) {
    Json shape = {-1};
    for (int64_t dim : dims) shape.push_back(dim);
    outputs.push_back({{"name", name}, {"dtype", "float32"}, {"shape", shape}});
  }
  return outputs;
}

std::string EnvOr(const std::string& value, bool from_env, const char* name) {
  if (!value.empty() || !from_env) return value;
  const char* env = std::getenv(name);
  return env ? env : "";
}

}  // namespace

std::string ChooseExportCheckpoint(const protos::EasyRecConfig& config,
                                   const std::string& checkpoint_path) {
  if (!checkpoint_path.empty()) {
    auto ckpt = LatestCheckpoint(checkpoint_path);
    if (!ckpt) Fail("--checkpoint_path: no checkpoint at '", checkpoint_path, "'");
    return ckpt->path;
  }
  const std::string type = config.export_config().exporter_type();
  if (type != "latest" && type != "best") {
    Fail("export_config.exporter_type: '", type, "' (latest or best)");
  }
  if (type == "best") {
    const std::string results = JoinPath(config.model_dir(), "train_eval_result_v2.txt");
    const auto& export_config = config.export_config();
    std::vector<int64_t> steps;
    std::map<int64_t, std::string> path_of;
    for (const auto& ckpt : ListCheckpoints(config.model_dir())) {
      steps.push_back(ckpt.step);
      path_of[ckpt.step] = ckpt.path;
    }
    auto best = BestEvaluatedStep(results, export_config.best_exporter_metric(),
                                  export_config.metric_larger_is_better(), steps);
    if (!best) {
      Fail("export_config.exporter_type is 'best' but no checkpoint in ", config.model_dir(),
           " has an evaluation result in ", results);
    }
    LOG_INFO << "best checkpoint by " << export_config.best_exporter_metric() << ": "
             << path_of[*best];
    return path_of[*best];
  }
  auto latest = LatestCheckpoint(config.model_dir());
  if (!latest) Fail("no checkpoint found in model_dir '", config.model_dir(), "'");
  return latest->path;
}

bool IsExportDir(const std::string& path) {
  return PathExists(JoinPath(path, kExportManifestFile));
}

nlohmann::json ReadExportManifest(const std::string& export_dir) {
  const std::string path = JoinPath(export_dir, kExportManifestFile);
  if (!PathExists(path) && IsExportDir(JoinPath(export_dir, "user")) &&
      IsExportDir(JoinPath(export_dir, "item"))) {
    Fail("'", export_dir, "' holds the towers of a retrieval model: use its user/ or item/ directory");
  }
  if (!PathExists(path) && IsExportDir(JoinPath(export_dir, "model")) &&
      IsExportDir(JoinPath(export_dir, "embedding"))) {
    Fail("'", export_dir, "' holds a TDM export: use its model/ directory (the ranker; tdm_retrieval) or ",
         "embedding/ (the item embeddings; tdm_cluster_tree)");
  }
  if (!PathExists(path)) Fail("'", export_dir, "' is not an export directory (no ", kExportManifestFile, ")");
  Json manifest = Json::parse(ReadFileToString(path), nullptr, false);
  if (manifest.is_discarded() || !manifest.is_object()) Fail(path, ": not a JSON object");
  if (manifest.value("format", "") != kFormatName) Fail(path, ": not a tzrec-cpp export manifest");
  const int version = manifest.value("format_version", 0);
  if (version < 1 || version > kExportFormatVersion) {
    Fail(path, ": format_version ", version, " is not readable by this tzrec (reads 1..",
         kExportFormatVersion, ")");
  }
  return manifest;
}

namespace {

// What every directory of one export shares.
struct ExportSettings {
  std::string checkpoint;
  int64_t step = 0;
  TableDtype pooled_dtype = TableDtype::kINT8;
  TableDtype sequence_dtype = TableDtype::kFP32;
  Json acc;
  std::vector<std::pair<std::string, std::string>> extra_files;  // name, content
  bool write_scripted_model = true;
  // export_config.mixed_precision: the precision predict and serve run the export's GEMMs in.
  std::string mixed_precision;
};

// The model of `config` restored from the checkpoint (its tower alone when `tower` is set).
std::unique_ptr<Pipeline> RestoredPipeline(const protos::EasyRecConfig& config, const std::string& tower,
                                           const std::string& checkpoint) {
  std::unique_ptr<Pipeline> pipeline = BuildFeatures(config, PipelineMode::kPredict);
  pipeline->tower = tower;
  BuildModel(pipeline.get(), nullptr);
  RestoreOptions restore;
  restore.restore_optimizer = false;
  restore.restore_rng = false;
  restore.require_all = true;  // an export with randomly initialised weights helps nobody
  restore.use_dense_ema = UseDenseEma(config.export_config(), config.train_config());
  RestoreCheckpoint(checkpoint, TrainingState{pipeline->model.get(), nullptr, nullptr}, restore);
  return pipeline;
}

// Writes one export directory's files into `staging` (to be renamed to `final_dir`).
void WriteExportDir(const ExportSettings& settings, const protos::EasyRecConfig& config,
                    Pipeline& pipeline, const std::string& final_dir, const std::string& staging) {
  MakeDirs(staging);
  // Assets: copied under md5 names; pipeline.config refers to them inside the export.
  protos::EasyRecConfig exported = config;
  std::map<std::string, std::string> copied;  // name -> content
  VisitConfigAssets(&exported, [&](Message* owner, const FieldDescriptor* field,
                                   const std::string& resolved, const std::string& where) {
    if (!PathExists(resolved) || IsDirectory(resolved)) {
      Fail(where, ": asset file '", resolved, "' not found");
    }
    std::string content = ReadFileToString(resolved);
    const std::string name = AssetCopyName(resolved, content);
    owner->GetReflection()->SetString(owner, field, name);
    copied.emplace(name, std::move(content));
  });
  for (int i = 0; i < exported.feature_configs_size(); ++i) {
    SetAssetDirs(exported.mutable_feature_configs(i), final_dir);
  }
  for (const auto& [name, content] : copied) WriteFileAtomic(JoinPath(staging, name), content);
  for (const auto& [name, content] : settings.extra_files) WriteFileAtomic(JoinPath(staging, name), content);
  SavePipelineConfig(exported, JoinPath(staging, "pipeline.config"));
  if (config.data_config().fg_mode() != protos::FG_NONE) {
    CreateFgJsonOptions fg;
    fg.fg_output_dir = staging;
    CreateFgJson(config, fg);
  }
  WriteFileAtomic(JoinPath(staging, "model_acc.json"), settings.acc.dump(4) + "\n");

  // Weights.
  Model& model = *pipeline.model;
  std::vector<at::Tensor> keep_alive;
  std::vector<SafetensorsTensor> tensors;
  auto add = [&](const std::string& name, at::Tensor t) {
    t = t.contiguous();
    keep_alive.push_back(t);
    SafetensorsTensor st;
    st.name = name;
    st.dtype = SafetensorsDtypeOf(t);
    st.shape.assign(t.sizes().begin(), t.sizes().end());
    st.data = t.data_ptr();
    st.bytes = t.numel() * t.element_size();
    tensors.push_back(std::move(st));
  };
  for (const auto& item : model.named_parameters()) add(item.key(), item.value().detach());
  for (const auto& item : model.named_buffers()) add(item.key(), item.value().detach());
  Json tables = Json::array();
  StoredTables fp32_tables, stored_tables;  // for the scripted model
  int64_t table_bytes = 0, fp32_bytes = 0;
  bool hashed_tables = false, indexed_tables = false;
  const auto& specs = model.embedding_collection().table_specs();
  std::map<std::string, const EmbeddingTableSpec*> spec_of;
  for (const auto& spec : specs) spec_of[spec.name] = &spec;
  model.embedding_collection().VisitTableStates(
      false, [&](const std::string& table, const std::map<std::string, at::Tensor>& state) {
        const EmbeddingTableSpec& spec = *spec_of.at(table);
        const at::Tensor weight = state.at("weight");
        const TableDtype dtype = spec.sequence ? settings.sequence_dtype : settings.pooled_dtype;
        const std::string name = kTablePrefix + table + ".weight";
        at::Tensor stored = QuantizeTable(weight.detach().to(at::kFloat), dtype);
        table_bytes += stored.numel() * stored.element_size();
        fp32_bytes += weight.numel() * 4;
        add(name, stored);
        Json entry = {{"name", table}, {"tensor", name}, {"rows", spec.rows}, {"dim", spec.dim},
                      {"sequence", spec.sequence}, {"dtype", TableDtypeName(dtype)}};
        auto ids = state.find("ids");
        if (ids != state.end()) {
          // Hash-stored: the trained rows only; serving gives other ids their initial values.
          const std::string ids_name = kTablePrefix + table + ".ids";
          add(ids_name, ids->second);
          entry["ids"] = ids_name;
          entry["storage"] = "hash";
          entry["init_seed"] = static_cast<uint64_t>(state.at("init_seed").item<int64_t>());
          hashed_tables = true;
        }
        if (spec.zch || spec.dynamicemb) {
          // The id index (managed collisions or the dynamic table): serving maps raw ids to rows
          // as training did.
          const std::string kind = spec.zch ? "zch" : "dynamicemb";
          Json index = Json::object();
          for (const auto& [key, tensor] : state) {
            if (key.rfind(kind + "_", 0) != 0) continue;
            const std::string tensor_name = kTablePrefix + table + "." + key;
            add(tensor_name, tensor);
            index[key] = tensor_name;
          }
          entry[kind] = std::move(index);
          indexed_tables = true;
        }
        if (ids == state.end() && !spec.zch && !spec.dynamicemb && settings.write_scripted_model) {
          fp32_tables[table] = {weight.detach().to(at::kFloat), TableDtype::kFP32, spec.dim};
          stored_tables[table] = {stored, dtype, spec.dim};
        }
        tables.push_back(entry);
      });
  WriteSafetensors(JoinPath(staging, kExportWeightsFile), tensors,
                   {{"format", kFormatName}, {"manifest", kExportManifestFile}});
  std::string scripted_skipped = "--noscripted_model";
  if (settings.write_scripted_model && (hashed_tables || indexed_tables)) {
    scripted_skipped = hashed_tables ? "hash-stored embedding tables have no TorchScript lookup"
                                     : "zch / dynamicemb tables' id index has no TorchScript form";
    LOG_INFO << kScriptedModelFile << " not written: " << scripted_skipped;
  } else if (settings.write_scripted_model) {
    scripted_skipped = WriteScriptedModel(model, pipeline.FeaturePointers(), fp32_tables,
                                          stored_tables, JoinPath(staging, kScriptedModelFile));
    fp32_tables.clear();
    stored_tables.clear();
    if (!scripted_skipped.empty()) LOG_INFO << kScriptedModelFile << " not written: " << scripted_skipped;
  }

  Json manifest;
  manifest["format"] = kFormatName;
  manifest["format_version"] = kExportFormatVersion;
  manifest["tzrec_version"] = kTzrecVersion;
  const auto* member = config.model_config().GetReflection()->GetOneofFieldDescriptor(
      config.model_config(), config.model_config().GetDescriptor()->FindOneofByName("model"));
  manifest["model"] = member ? member->name() : "";
  if (!model.tower().empty()) manifest["tower"] = model.tower();
  manifest["checkpoint"] = {{"path", settings.checkpoint}, {"global_step", settings.step}};
  manifest["weights"] = kExportWeightsFile;
  if (scripted_skipped.empty()) {
    manifest["scripted_model"] = kScriptedModelFile;
  } else {
    manifest["scripted_model_skipped"] = scripted_skipped;
  }
  manifest["pipeline_config"] = "pipeline.config";
  if (config.data_config().fg_mode() != protos::FG_NONE) manifest["fg_json"] = "fg.json";
  manifest["fg_mode"] = protos::FgMode_Name(config.data_config().fg_mode());
  manifest["mixed_precision"] = settings.mixed_precision;
  manifest["quantization"] = {{"QUANT_EMB", TableDtypeName(settings.pooled_dtype)},
                              {"QUANT_EC_EMB", TableDtypeName(settings.sequence_dtype)},
                              {"int8_layout", "rowwise: uint8[dim], fp16 scale, fp16 bias"}};
  manifest["tables"] = std::move(tables);
  manifest["table_bytes"] = table_bytes;
  manifest["table_bytes_fp32"] = fp32_bytes;
  manifest["inputs"] = InputSignature(pipeline);
  manifest["outputs"] = OutputSignature(model);
  WriteFileAtomic(JoinPath(staging, kExportManifestFile), manifest.dump(2) + "\n");
  SyncDirectory(staging);
  LOG_INFO << "exported " << (model.tower().empty() ? "" : "the " + model.tower() + " tower of ")
           << settings.checkpoint << " (step " << settings.step << ") to " << final_dir << ": tables "
           << (table_bytes >> 10) << " KiB (" << TableDtypeName(settings.pooled_dtype) << " pooled, "
           << TableDtypeName(settings.sequence_dtype) << " sequence; fp32 would be "
           << (fp32_bytes >> 10) << " KiB)";
}

}  // namespace

protos::EasyRecConfig TowerExportConfig(const protos::EasyRecConfig& config, const std::string& tower) {
  std::unique_ptr<Pipeline> pipeline = BuildFeatures(config, PipelineMode::kPredict);
  // The whole model's definition, tables not allocated: it only names the tower's features.
  std::shared_ptr<Model> model = CreateModel(ModelContextOf(*pipeline));
  std::set<std::string> wanted;
  for (const Feature* feature : model->TowerFeatures(tower)) wanted.insert(feature->name());
  const std::vector<fg::FeatureInfo> infos =
      fg::DescribeFeatures(config.feature_configs(), config.data_config().fg_mode());
  std::map<std::string, const fg::FeatureInfo*> by_name;
  for (const auto& info : infos) by_name[info.name] = &info;
  // The tower's feature configs and, under FG_DAG, every feature they read (transitively).
  std::set<int> keep;
  std::vector<const fg::FeatureInfo*> pending;
  for (const auto& info : infos) {
    if (wanted.count(info.name)) pending.push_back(&info);
  }
  std::set<std::string> seen;
  while (!pending.empty()) {
    const fg::FeatureInfo* info = pending.back();
    pending.pop_back();
    if (!seen.insert(info->name).second) continue;
    int index = -1;
    if (std::sscanf(info->config_path.c_str(), "feature_configs[%d]", &index) != 1 || index < 0 ||
        index >= config.feature_configs_size()) {
      Fail("internal: cannot locate the feature config of '", info->name, "' (", info->config_path, ")");
    }
    keep.insert(index);
    for (const auto& input : info->inputs) {
      if (input.side != fg::Side::kFeature) continue;
      auto it = by_name.find(input.column);
      if (it != by_name.end()) pending.push_back(it->second);
    }
  }
  protos::EasyRecConfig out = config;
  out.clear_feature_configs();
  for (int index : keep) *out.add_feature_configs() = config.feature_configs(index);
  return out;
}

std::string ExportModel(const ExportOptions& options) {
  if (options.pipeline_config_path.empty()) Fail("--pipeline_config_path is required");
  if (options.export_dir.empty()) Fail("--export_dir is required");
  const std::string export_dir = AbsolutePath(options.export_dir);
  if (PathExists(export_dir)) Fail("export_dir '", options.export_dir, "' already exists");
  protos::EasyRecConfig config = LoadPipelineConfig(options.pipeline_config_path);
  CheckConfigSupported(config);
  ExportSettings settings;
  settings.pooled_dtype = ParseTableQuantization(
      EnvOr(options.quant_emb, options.quant_from_environment, "QUANT_EMB"), TableDtype::kINT8,
      "QUANT_EMB");
  settings.sequence_dtype = ParseTableQuantization(
      EnvOr(options.quant_ec_emb, options.quant_from_environment, "QUANT_EC_EMB"),
      TableDtype::kFP32, "QUANT_EC_EMB");
  settings.acc = {{"SPARSE_INT64", "1"}};
  for (const char* name : {"QUANT_EMB", "QUANT_EC_EMB"}) {
    const std::string value = EnvOr(std::string(name) == "QUANT_EMB" ? options.quant_emb
                                                                       : options.quant_ec_emb,
                                    options.quant_from_environment, name);
    if (!value.empty()) settings.acc[name] = value;
  }
  if (!options.additional_export_config.empty()) {
    Json extra = Json::parse(options.additional_export_config, nullptr, false);
    if (extra.is_discarded() || !extra.is_object()) {
      Fail("--additional_export_config: not a JSON object: ", options.additional_export_config);
    }
    for (auto& [key, value] : extra.items()) settings.acc[key] = value;
  }
  // Extra files, read before anything is written.
  for (const std::string& file : Split(options.asset_files, ",")) {
    if (file.empty()) continue;
    if (!PathExists(file) || IsDirectory(file)) Fail("--asset_files: '", file, "' is not a file");
    settings.extra_files.emplace_back(BaseName(file), ReadFileToString(file));
  }
  settings.write_scripted_model = options.write_scripted_model;
  // As TorchEasyRec: the export's own setting counts, not training's (a difference is logged).
  settings.mixed_precision = config.export_config().mixed_precision();
  GemmPrecisionFor(settings.mixed_precision, "export_config.mixed_precision");  // validates
  if (settings.mixed_precision != config.train_config().mixed_precision()) {
    LOG_WARNING << "export_config.mixed_precision '" << settings.mixed_precision
                << "' differs from train_config.mixed_precision '"
                << config.train_config().mixed_precision() << "'; the export uses '"
                << settings.mixed_precision << "'";
  }
  settings.checkpoint = ChooseExportCheckpoint(config, options.checkpoint_path);
  settings.step = LatestCheckpoint(settings.checkpoint)->step;

  // A retrieval model exports each tower alone (TorchEasyRec's user/ and item/ directories),
  // with only the tower's features, tables and weights: each side is scored on its own. TDM
  // exports its item embedding tower (embedding/) and the whole model (model/).
  std::vector<Model::ExportPart> parts;
  {
    std::unique_ptr<Pipeline> features = BuildFeatures(config, PipelineMode::kPredict);
    parts = CreateModel(ModelContextOf(*features))->ExportParts();
  }

  // Everything goes into a hidden sibling first.
  const std::string staging = TempSiblingPath(export_dir);
  RemoveAll(staging);
  try {
    for (const Model::ExportPart& part : parts) {
      const protos::EasyRecConfig part_config = part.tower.empty() ? config : TowerExportConfig(config, part.tower);
      std::unique_ptr<Pipeline> pipeline = RestoredPipeline(part_config, part.tower, settings.checkpoint);
      ExportSettings part_settings = settings;
      if (!part.assets) part_settings.extra_files.clear();
      const std::string final_dir = part.dir.empty() ? export_dir : JoinPath(export_dir, part.dir);
      const std::string staged = part.dir.empty() ? staging : JoinPath(staging, part.dir);
      WriteExportDir(part_settings, part_config, *pipeline, final_dir, staged);
    }
    SyncDirectory(staging);
    if (PathExists(export_dir)) Fail("export_dir '", options.export_dir, "' appeared while exporting");
    if (std::rename(staging.c_str(), export_dir.c_str()) != 0) {
      Fail("cannot rename ", staging, " to ", export_dir, ": ", std::strerror(errno));
    }
  } catch (...) {
    RemoveAll(staging);
    throw;
  }
  return export_dir;
}

std::unique_ptr<Pipeline> LoadExportedPipeline(
    const std::string& export_dir_arg, PipelineMode mode,
    const std::function<void(protos::EasyRecConfig*)>& adjust) {
  const std::string export_dir = AbsolutePath(export_dir_arg);
  Json manifest = ReadExportManifest(export_dir);
  protos::EasyRecConfig config =
      LoadPipelineConfig(JoinPath(export_dir, manifest.value("pipeline_config", "pipeline.config")));
  // Assets are the copies inside this directory, wherever it was moved.
  VisitConfigAssets(&config, [&](Message* owner, const FieldDescriptor* field, const std::string&,
                                 const std::string&) {
    const std::string name = owner->GetReflection()->GetString(*owner, field);
    owner->GetReflection()->SetString(owner, field, JoinPath(export_dir, BaseName(name)));
  });
  for (int i = 0; i < config.feature_configs_size(); ++i) {
    SetAssetDirs(config.mutable_feature_configs(i), "");
  }
  if (adjust) adjust(&config);
  CheckConfigSupported(config);
  std::unique_ptr<Pipeline> pipeline = BuildFeatures(config, mode);
  pipeline->tower = manifest.value("tower", "");
  if (!manifest.contains("tables") || !manifest["tables"].is_array()) {
    Fail(JoinPath(export_dir, kExportManifestFile), ": no tables list");
  }
  // INT8 tables stay INT8 in memory (TZREC_DEQUANTIZE_TABLES=1: fp32, for comparisons).
  const char* dequantize = std::getenv("TZREC_DEQUANTIZE_TABLES");
  const bool keep_int8 = !(dequantize && std::string(dequantize) == "1");
  for (const Json& table : manifest["tables"]) {
    if (keep_int8 && table.value("dtype", "") == "INT8") {
      pipeline->int8_tables.insert(table.value("name", ""));
    }
    if (table.contains("ids")) pipeline->hash_tables.insert(table.value("name", ""));
  }
  BuildModel(pipeline.get(), nullptr);

  const std::string weights_path = JoinPath(export_dir, manifest.value("weights", kExportWeightsFile));
  SafetensorsFile weights = SafetensorsFile::Open(weights_path);
  Model& model = *pipeline->model;
  c10::NoGradGuard no_grad;
  auto load_dense = [&](const std::string& name, at::Tensor target) {
    const SafetensorsTensor& t = weights.Get(name);
    const std::string what = weights_path + ": [" + name + "]";
    at::Tensor source = TensorOf(t, what);
    if (source.sizes() != target.sizes() || source.scalar_type() != target.scalar_type()) {
      Fail(what, " is ", source.scalar_type(), " ", source.sizes(), " but the model needs ",
           target.scalar_type(), " ", target.sizes());
    }
    if (!AllFinite(source)) Fail(what, " has non-finite values");
    target.copy_(source);
  };
  for (const auto& item : model.named_parameters()) load_dense(item.key(), item.value());
  for (const auto& item : model.named_buffers()) load_dense(item.key(), item.value());
  std::map<std::string, std::map<std::string, at::Tensor>> tables;
  for (const Json& table : manifest["tables"]) {
    const std::string name = table.value("name", "");
    const std::string tensor = table.value("tensor", "");
    const std::string what = weights_path + ": table [" + name + "]";
    TableDtype dtype;
    if (!ParseTableDtypeName(table.value("dtype", ""), &dtype)) {
      Fail(what, ": unknown dtype '", table.value("dtype", ""), "'");
    }
    at::Tensor stored = TensorOf(weights.Get(tensor), what);
    const int64_t dim = table.value("dim", 0);
    CheckStoredTable(stored, dtype, dim, what);
    if (!StoredTableFinite(stored, dtype, dim)) Fail(what, " has non-finite values");
    // INT8 tables kept INT8 take the stored rows as they are; others are decoded to fp32.
    tables[name]["weight"] = pipeline->int8_tables.count(name) ? stored
                                                               : DequantizeTable(stored, dtype, dim, what);
    if (table.contains("ids")) {
      tables[name]["ids"] = TensorOf(weights.Get(table.value("ids", "")), what + " ids");
    }
    for (const char* kind : {"zch", "dynamicemb"}) {
      if (!table.contains(kind)) continue;
      if (!table[kind].is_object()) Fail(what, ": ", kind, " is not an object");
      for (const auto& [key, tensor_name] : table[kind].items()) {
        if (!tensor_name.is_string()) Fail(what, ": ", kind, ".", key, " is not a tensor name");
        tables[name][key] = TensorOf(weights.Get(tensor_name.get<std::string>()), what + " " + key);
      }
    }
  }
  for (EmbeddingTable* table : model.embedding_collection().tables()) {
    for (const Json& entry : manifest["tables"]) {
      if (entry.value("name", "") == table->name() && entry.contains("init_seed")) {
        table->storage()->SetRowInitSeed(table, entry["init_seed"].get<uint64_t>());
      }
    }
  }
  model.embedding_collection().RestoreTables(tables, false, "export '" + export_dir + "'",
                                             [&](const std::string& what) {
                                               Fail("export '", export_dir, "' has no ", what);
                                             });
  model.set_gemm_precision(GemmPrecisionFor(
      manifest.value("mixed_precision", ""), JoinPath(export_dir, kExportManifestFile) + ": mixed_precision"));
  model.eval();
  LOG_INFO << "loaded export " << export_dir << " (" << manifest.value("model", "")
           << (pipeline->tower.empty() ? "" : " " + pipeline->tower + " tower") << ", step "
           << manifest["checkpoint"].value("global_step", int64_t{-1}) << ", tables "
           << manifest["quantization"].value("QUANT_EMB", "") << ")";
  return pipeline;
}

int ExportMain(const std::vector<std::string>& args) {
  Flags flags("export",
              "Exports a checkpoint as a self-contained directory for predict and serve: "
              "weights and tables (model.safetensors), manifest, pipeline.config, fg.json and "
              "assets. QUANT_EMB (default INT8; FP16, FP32, 0 = off) sets the pooled tables' "
              "storage, QUANT_EC_EMB (default off) the sequence tables'.",
              {{"pipeline_config_path", "path to the pipeline config"},
               {"checkpoint_path", "checkpoint directory (default: latest in model_dir, or best "
                                   "with export_config.exporter_type: \"best\")"},
               {"export_dir", "directory to create (must not exist)"},
               {"asset_files", "comma-separated files to copy into the export"},
               {"additional_export_config", "JSON object merged into model_acc.json"},
               {"noscripted_model", "do not write scripted_model.pt (the TorchScript copy of the "
                                    "model and its tables for torch.jit.load)", true},
               {"item_input_path", "accepted for TorchEasyRec compatibility, where it feeds the "
                                   "item tower's tracing; tzrec exports without tracing"}});
  if (!flags.Parse(args)) return 0;
  ExportOptions options;
  options.pipeline_config_path = flags.Get("pipeline_config_path");
  options.checkpoint_path = flags.Get("checkpoint_path");
  options.export_dir = flags.Get("export_dir");
  options.asset_files = flags.Get("asset_files");
  options.additional_export_config = flags.Get("additional_export_config");
  options.write_scripted_model = !flags.GetSwitch("noscripted_model");
  if (!flags.Get("item_input_path").empty()) {
    LOG_INFO << "--item_input_path is not needed: tzrec writes the towers without tracing them on data";
  }
  ExportModel(options);
  return 0;
}

}  // namespace tzrec
