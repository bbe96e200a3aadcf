// tzrec feature_selection: ranks the features of each DEEP / WIDE group by the dropout ratio
// its variational dropout learnt (model_config.variational_dropout; lower = more useful) and
// writes feature_dropout_ratio_<group>.csv per group plus the pipeline config reduced to each
// group's topk features, as TorchEasyRec's tool does. No LibTorch model is built: the ratios
// are read from the checkpoint's group_variational_dropouts.<group>.feature_p tensors, the
// feature names from the config (a group's features, then its sequence encoders as
// "<group>_seq_encoder_<i>", the order of the group's vector).
#pragma once

#include <string>
#include <vector>

namespace tzrec {

struct FeatureSelectionOptions {
  std::string pipeline_config_path;
  std::string model_dir;   // default: the config's model_dir; its latest checkpoint is read
  std::string output_dir;
  int64_t topk = 100;
  bool clear_variational_dropout = false;
};

// Returns the reduced config's path.
std::string SelectFeatures(const FeatureSelectionOptions& options);

int FeatureSelectionMain(const std::vector<std::string>& args);

}  // namespace tzrec
