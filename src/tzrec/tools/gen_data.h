// `tzrec gen_data`: mock train/eval data for a pipeline config, with a planted signal.
//
// Every feature column the config reads is generated (sparse ids Zipf-distributed inside
// the feature's bucket range, some multi-valued and some null; dense values Gaussian), and
// each label is drawn from a hidden factorisation machine over those features: a first-order
// weight per id and dense value, plus pairwise dot products of hidden per-id vectors. Hidden
// parameters are derived from a hash of (feature, id), so even 40M-bucket features need no
// storage. The oracle AUC (the hidden model's own probabilities on the eval rows) is
// reported and saved, so tests can ask a trained model to come close to it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tzrec/protos/pipeline.pb.h"

namespace tzrec {

struct GenDataOptions {
  std::string output_dir;
  int64_t train_rows = 100000;
  int64_t eval_rows = 20000;
  int num_files = 2;              // train files (eval gets one file per 4 train files, >= 1)
  uint64_t seed = 2024;
  double multi_value_fraction = 0.1;  // share of sparse values that get a second id
  double null_fraction = 0.02;        // share of sparse values left empty
  double zipf_exponent = 1.1;
};

struct GenDataResult {
  std::string train_pattern;   // glob of the train files
  std::string eval_pattern;
  double oracle_auc = 0.0;     // on the eval rows
  double positive_rate = 0.0;  // of the first label, over train rows
};

GenDataResult GenerateMockData(const protos::EasyRecConfig& config, const GenDataOptions& options);

// CLI entry point: `tzrec gen_data --pipeline_config_path=... --output_dir=...`.
int GenDataMain(const std::vector<std::string>& args);

}  // namespace tzrec
