#include "tzrec/train/feature_selection.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>
#include <sstream>

#include "tzrec/common/error.h"
#include "tzrec/common/flags.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/train/checkpoint.h"

namespace tzrec {
namespace {

std::string ShortestDouble(double value) {
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

std::string FileName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::string SelectFeatures(const FeatureSelectionOptions& options) {
  if (options.output_dir.empty()) Fail("--output_dir is required");
  if (options.topk <= 0) Fail("--topk must be > 0, got ", options.topk);
  protos::EasyRecConfig config = LoadPipelineConfig(options.pipeline_config_path);
  const std::string model_dir = options.model_dir.empty() ? config.model_dir() : options.model_dir;
  if (!config.model_config().has_variational_dropout()) {
    Fail(options.pipeline_config_path, ": model_config.variational_dropout is not set; nothing ranks the features");
  }
  auto checkpoint = LatestCheckpoint(model_dir);
  if (!checkpoint) Fail("no checkpoint in '", model_dir, "'");
  const auto tensors = LoadCheckpointTensors(checkpoint->path);

  // Per group: features by dropout ratio, ascending (the most useful first).
  std::map<std::string, std::vector<std::pair<std::string, double>>> ranked;
  for (const auto& group : config.model_config().feature_groups()) {
    if (group.group_type() == protos::SEQUENCE || group.group_type() == protos::JAGGED_SEQUENCE) continue;
    std::vector<std::string> names(group.feature_names().begin(), group.feature_names().end());
    for (int e = 0; e < group.sequence_encoders_size(); ++e) names.push_back(StrCat(group.group_name(), "_seq_encoder_", e));
    if (names.size() < 2) continue;  // no variational dropout on a single feature
    const std::string key = "group_variational_dropouts." + group.group_name() + ".feature_p";
    auto it = tensors.find(key);
    if (it == tensors.end()) Fail("checkpoint '", checkpoint->path, "' has no ", key);
    const at::Tensor p = it->second.to(at::kDouble).sigmoid().contiguous();
    if (p.numel() != static_cast<int64_t>(names.size())) {
      Fail("checkpoint '", checkpoint->path, "': ", key, " has ", p.numel(), " values for the ", names.size(),
           " features of group '", group.group_name(), "' in the config");
    }
    auto& ratios = ranked[group.group_name()];
    for (size_t i = 0; i < names.size(); ++i) ratios.emplace_back(names[i], p[i].item<double>());
    std::stable_sort(ratios.begin(), ratios.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  }
  if (ranked.empty()) Fail("no feature group has a variational dropout (every DEEP / WIDE group has one feature)");

  MakeDirs(options.output_dir);
  std::set<std::string> kept;
  for (const auto& [group, ratios] : ranked) {
    std::ostringstream csv;
    csv << "feature_name,mean_drop_p\n";
    for (const auto& [name, ratio] : ratios) csv << name << "," << ShortestDouble(ratio) << "\n";
    WriteFileAtomic(JoinPath(options.output_dir, "feature_dropout_ratio_" + group + ".csv"), csv.str());
    for (size_t i = 0; i < ratios.size() && static_cast<int64_t>(i) < options.topk; ++i) kept.insert(ratios[i].first);
    LOG_INFO << "group " << group << ": " << std::min<int64_t>(options.topk, ratios.size()) << " of " << ratios.size()
             << " features kept";
  }
  // Features of sequence groups and of groups without a variational dropout stay (TorchEasyRec
  // drops the latter from feature_configs although their groups still name them).
  for (auto& group : *config.mutable_model_config()->mutable_feature_groups()) {
    auto r = ranked.find(group.group_name());
    if (r == ranked.end()) {
      kept.insert(group.feature_names().begin(), group.feature_names().end());
    } else {
      std::vector<std::string> names;
      for (const std::string& name : group.feature_names()) {
        for (size_t i = 0; i < r->second.size() && static_cast<int64_t>(i) < options.topk; ++i) {
          if (r->second[i].first == name) names.push_back(name);
        }
      }
      group.clear_feature_names();
      for (const std::string& name : names) group.add_feature_names(name);
    }
    for (const auto& sequence : group.sequence_groups()) kept.insert(sequence.feature_names().begin(), sequence.feature_names().end());
  }
  google::protobuf::RepeatedPtrField<protos::FeatureConfig> features;
  for (const auto& feature : config.feature_configs()) {
    const auto* which = feature.GetReflection()->GetOneofFieldDescriptor(feature, feature.GetDescriptor()->FindOneofByName("feature"));
    if (!which) continue;
    const auto& message = feature.GetReflection()->GetMessage(feature, which);
    const auto* name_field = message.GetDescriptor()->FindFieldByName("feature_name");
    const std::string name = name_field ? message.GetReflection()->GetString(message, name_field) : "";
    if (which->name() == "sequence_feature" || kept.count(name)) *features.Add() = feature;
  }
  config.mutable_feature_configs()->Swap(&features);
  if (options.clear_variational_dropout) config.mutable_model_config()->clear_variational_dropout();
  const std::string path = JoinPath(options.output_dir, FileName(options.pipeline_config_path));
  SavePipelineConfig(config, path);
  LOG_INFO << "feature selection written to " << path;
  return path;
}

int FeatureSelectionMain(const std::vector<std::string>& args) {
  Flags flags("feature_selection",
              "Ranks each feature group's features by their learnt variational dropout ratio, writes "
              "feature_dropout_ratio_<group>.csv and the pipeline config reduced to each group's topk features.",
              {{"pipeline_config_path", "pipeline config of the trained model"},
               {"model_dir", "model directory (default: the config's); its latest checkpoint is read"},
               {"output_dir", "directory for the CSV files and the reduced config"},
               {"topk", "features kept per group", false, "100"},
               {"visualize", "draw the ratios (not available: no plotting library; the CSV files hold them)", true},
               {"clear_variational_dropout", "remove model_config.variational_dropout from the reduced config", true}});
  if (!flags.Parse(args)) return 0;
  if (flags.GetSwitch("visualize")) {
    Fail("--visualize: tzrec-cpp has no plotting library; feature_dropout_ratio_<group>.csv holds the ratios");
  }
  FeatureSelectionOptions options;
  options.pipeline_config_path = flags.Get("pipeline_config_path");
  options.model_dir = flags.Get("model_dir");
  options.output_dir = flags.Get("output_dir");
  options.topk = flags.GetInt("topk");
  options.clear_variational_dropout = flags.GetSwitch("clear_variational_dropout");
  SelectFeatures(options);
  return 0;
}

}  // namespace tzrec
