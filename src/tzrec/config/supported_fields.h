// The one table of config fields tzrec-cpp honours today, and the check that rejects the rest.
//
// Every field set in a user's config must be honoured or rejected: a field that parses but is
// not honoured yet fails before training with "<field path>: not supported yet". Components
// additionally check values they only partly support (e.g. dataset_type).
#pragma once

#include <string>
#include <vector>

#include <google/protobuf/message.h>

namespace tzrec {

// Patterns of supported paths with list indices removed, e.g. "feature_configs.id_feature.
// num_buckets"; a trailing ".*" supports a whole subtree.
const std::vector<std::string>& SupportedConfigFields();

// Returns the paths (with indices, e.g. "model_config.train_metrics[0]") of every set field
// not covered by `supported`, reported at the shallowest unsupported level.
std::vector<std::string> FindUnsupportedFields(const google::protobuf::Message& config,
                                               const std::vector<std::string>& supported);

// Throws listing every unsupported field as "<path>: not supported yet".
void CheckConfigSupported(const google::protobuf::Message& config);

}  // namespace tzrec
