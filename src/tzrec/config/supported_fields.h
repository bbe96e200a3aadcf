// Which config fields tzrec-cpp honours, and the check that rejects the rest before training.
//
// Every field set in a user's config must be honoured or rejected: a field that parses but is
// not honoured fails with "<field path>: not supported yet". The knowledge is spread where it
// belongs: this file lists only pipeline-level fields (train/eval/data settings); everything
// behind a registry (models, feature types, losses, metrics, train metrics, optimizers,
// learning-rate schedules, dataset readers) is checked against the fields its registration
// declares (common/registry.h). The check is type-directed: whenever the walk reaches a
// message that is a registry slot (e.g. a LossConfig inside a task tower), the set oneof
// member must be registered and its fields honoured by that registration.
// Components additionally validate values they only partly support.
#pragma once

#include <google/protobuf/message.h>

#include <string>
#include <vector>

namespace tzrec {

struct UnsupportedField {
  std::string path;  // e.g. "model_config.mmoe.task_towers[0].losses[1].l2_loss"
  std::string note;  // e.g. "(supported: binary_cross_entropy, ...)", may be empty
};

// Every set field of `config` (an EasyRecConfig) that nothing honours, reported at the
// shallowest unsupported level.
std::vector<UnsupportedField> FindUnsupportedFields(const google::protobuf::Message& config);

// Throws listing every unsupported field as "<path>: not supported yet[ note]".
void CheckConfigSupported(const google::protobuf::Message& config);

// Declares the fields of a registry-slot message outside its oneofs (e.g. TrainMetricConfig's
// decay_rate) as honoured. Called from static initialisers of the component that reads them.
bool HonourMessageFields(const std::string& message_type, std::vector<std::string> fields);

}  // namespace tzrec
