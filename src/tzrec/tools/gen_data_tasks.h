// Internal to `tzrec gen_data`: which label fields are tasks of the model's task towers, how
// they depend on each other, and which features are grouping keys (no LibTorch). Pure
// functions over the config; thread-safe.
#pragma once

#include <google/protobuf/message.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "tzrec/protos/model.pb.h"

namespace tzrec::gen_data_internal {

// Hashes of the hidden model's keys (splitmix64 finaliser; FNV-1a of text).
inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline uint64_t HashString(const std::string& text) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// One label field and how its label is drawn.
struct Task {
  std::string label;
  int label_index = 0;      // position in data_config.label_fields
  std::string tower;        // empty: no task tower names the label
  int num_class = 1;        // > 1: a class index drawn from a softmax over num_class logits
  bool regression = false;  // l2_loss-only tower: a continuous label
  // Not named by a task tower (or a single-task model): the shared logit with a bias shift
  // by label position and an independent draw (gen_data's behaviour before task towers).
  bool independent = true;
  std::vector<int> parents;  // tasks whose labels must all be positive for this one to be
  std::vector<int> gates;    // parents and their ancestors (their own draws gate this one)
  uint64_t salt = 0;         // key of the task-specific hidden model
  double bias = 0.0;
};

// The task towers of the model config's model message (its repeated `task_towers`), any model.
std::vector<const google::protobuf::Message*> TaskTowers(const protos::ModelConfig& model);

// One Task per label field, and in `order` an order in which every task comes after the tasks
// it depends on (relation_tower_names / intervention_tower_names, or for multi-task models
// without relations every tower after the first depends on the first).
std::vector<Task> PlanTasks(const protos::ModelConfig& model, const std::vector<std::string>& labels,
                            std::vector<int>* order);

// Features named as grouping_key (grouped metrics) or session_name (jrc_loss) anywhere in
// `message`.
void CollectGroupingKeys(const google::protobuf::Message& message, std::set<std::string>* keys);

}  // namespace tzrec::gen_data_internal
