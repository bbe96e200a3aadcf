#include "tzrec/tools/gen_data_tasks.h"

#include <google/protobuf/descriptor.h>

#include <algorithm>
#include <functional>

#include "tzrec/common/error.h"
#include "tzrec/common/logging.h"

namespace tzrec::gen_data_internal {
namespace {

// Bias of a task's own logit: tasks that no other task gates (clk-like, ~30% positives) and
// tasks drawn only where the tasks they depend on are positive (buy-like: under a tenth
// overall).
constexpr double kRootBias = -1.5;
constexpr double kDependentBias = -2.5;


using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// String field `name` of `message` (empty when absent); `*set` tells whether it is set.
std::string StringField(const Message& message, const char* name, bool* set = nullptr) {
  const FieldDescriptor* field = message.GetDescriptor()->FindFieldByName(name);
  if (set) *set = false;
  if (!field || field->is_repeated() || field->cpp_type() != FieldDescriptor::CPPTYPE_STRING) {
    return "";
  }
  const Reflection* reflection = message.GetReflection();
  std::string value = reflection->GetString(message, field);
  if (set) *set = reflection->HasField(message, field) || !value.empty();
  return value;
}

std::vector<std::string> RepeatedStringField(const Message& message, const char* name) {
  const FieldDescriptor* field = message.GetDescriptor()->FindFieldByName(name);
  std::vector<std::string> values;
  if (!field || !field->is_repeated() || field->cpp_type() != FieldDescriptor::CPPTYPE_STRING) {
    return values;
  }
  const Reflection* reflection = message.GetReflection();
  for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
    values.push_back(reflection->GetRepeatedString(message, field, i));
  }
  return values;
}

int64_t IntegerField(const Message& message, const char* name, int64_t fallback) {
  const FieldDescriptor* field = message.GetDescriptor()->FindFieldByName(name);
  if (!field || field->is_repeated()) return fallback;
  const Reflection* reflection = message.GetReflection();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_UINT32: return reflection->GetUInt32(message, field);
    case FieldDescriptor::CPPTYPE_INT32: return reflection->GetInt32(message, field);
    case FieldDescriptor::CPPTYPE_UINT64:
      return static_cast<int64_t>(reflection->GetUInt64(message, field));
    case FieldDescriptor::CPPTYPE_INT64: return reflection->GetInt64(message, field);
    default: return fallback;
  }
}

// Whether the repeated LossConfig field `name` of `message` holds only l2_loss terms (and at
// least one).
bool OnlyL2Losses(const Message& message, const char* name) {
  const FieldDescriptor* field = message.GetDescriptor()->FindFieldByName(name);
  if (!field || !field->is_repeated() || field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
    return false;
  }
  const Reflection* reflection = message.GetReflection();
  const int n = reflection->FieldSize(message, field);
  if (n == 0) return false;
  for (int i = 0; i < n; ++i) {
    const Message& loss = reflection->GetRepeatedMessage(message, field, i);
    const auto* oneof = loss.GetDescriptor()->FindOneofByName("loss");
    const FieldDescriptor* chosen =
        oneof ? loss.GetReflection()->GetOneofFieldDescriptor(loss, oneof) : nullptr;
    if (!chosen || chosen->name() != "l2_loss") return false;
  }
  return true;
}

// The task towers of the model message chosen in model_config's `model` oneof: the elements
// of its repeated `task_towers` field, whatever the model (found by reflection).
}  // namespace

std::vector<const Message*> TaskTowers(const protos::ModelConfig& model) {
  std::vector<const Message*> towers;
  const auto* oneof = model.GetDescriptor()->FindOneofByName("model");
  const FieldDescriptor* chosen =
      oneof ? model.GetReflection()->GetOneofFieldDescriptor(model, oneof) : nullptr;
  if (!chosen || chosen->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) return towers;
  const Message& body = model.GetReflection()->GetMessage(model, chosen);
  const FieldDescriptor* field = body.GetDescriptor()->FindFieldByName("task_towers");
  if (!field || !field->is_repeated() || field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
    return towers;
  }
  const Reflection* reflection = body.GetReflection();
  for (int i = 0; i < reflection->FieldSize(body, field); ++i) {
    towers.push_back(&reflection->GetRepeatedMessage(body, field, i));
  }
  return towers;
}

// One task per label field, with tower, classes, losses and dependencies from the model's
// task towers; returned with `*order`, an order in which every task follows its parents.
std::vector<Task> PlanTasks(const protos::ModelConfig& model,
                            const std::vector<std::string>& labels, std::vector<int>* order) {
  std::vector<Task> tasks(labels.size());
  for (size_t l = 0; l < labels.size(); ++l) {
    tasks[l].label = labels[l];
    tasks[l].label_index = static_cast<int>(l);
    tasks[l].salt = SplitMix64(HashString("task:" + labels[l]));
  }
  std::vector<const Message*> towers = TaskTowers(model);
  if (towers.empty()) {
    // Single-task model: its num_class and losses describe the first label.
    tasks[0].num_class = static_cast<int>(std::max<uint32_t>(1, model.num_class()));
    tasks[0].regression = tasks[0].num_class == 1 && OnlyL2Losses(model, "losses");
  }
  std::map<std::string, int> by_tower;  // tower name -> task
  std::vector<int> tower_tasks;         // per tower: its task, or -1
  bool any_relations = false;
  for (size_t i = 0; i < towers.size(); ++i) {
    const Message& tower = *towers[i];
    bool set = false;
    std::string label = StringField(tower, "label_name", &set);
    // BayesTaskTower and friends: label_name defaults to label_fields in order.
    if (!set && i < labels.size()) label = labels[i];
    const std::string name = StringField(tower, "tower_name");
    auto it = std::find(labels.begin(), labels.end(), label);
    int t = it == labels.end() ? -1 : static_cast<int>(it - labels.begin());
    if (t >= 0 && !tasks[t].independent) t = -1;  // two towers on one label: the first wins
    tower_tasks.push_back(t);
    if (t < 0) {
      LOG_WARNING << "gen_data: task tower '" << name << "' label '" << label
                  << "' is not a free data_config.label_fields entry; no label drawn for it";
      continue;
    }
    Task& task = tasks[t];
    task.independent = false;
    task.tower = name;
    task.num_class = static_cast<int>(std::max<int64_t>(1, IntegerField(tower, "num_class", 1)));
    task.regression = task.num_class == 1 && OnlyL2Losses(tower, "losses");
    by_tower[name] = t;
    if (!RepeatedStringField(tower, "relation_tower_names").empty() ||
        !RepeatedStringField(tower, "intervention_tower_names").empty()) {
      any_relations = true;
    }
  }
  for (size_t i = 0; i < towers.size(); ++i) {
    const int t = tower_tasks[i];
    if (t < 0) continue;
    std::vector<int> parents;
    if (any_relations) {
      for (const char* field : {"relation_tower_names", "intervention_tower_names"}) {
        for (const auto& name : RepeatedStringField(*towers[i], field)) {
          auto it = by_tower.find(name);
          if (it == by_tower.end()) {
            Fail("gen_data: task tower '", tasks[t].tower, "' relates to unknown tower '", name,
                 "'");
          }
          parents.push_back(it->second);
        }
      }
    } else if (i > 0 && tower_tasks[0] >= 0) {
      // Multi-task model without relations: later tasks convert from the first.
      parents.push_back(tower_tasks[0]);
    }
    for (int p : parents) {
      // A continuous label has no positives to gate on.
      auto& mine = tasks[t].parents;
      if (p != t && !tasks[p].regression && std::find(mine.begin(), mine.end(), p) == mine.end()) {
        mine.push_back(p);
      }
    }
  }
  // Kahn's order, lowest label position first (label order when parents come first).
  order->clear();
  std::vector<bool> done(tasks.size(), false);
  while (order->size() < tasks.size()) {
    int next = -1;
    for (size_t t = 0; t < tasks.size() && next < 0; ++t) {
      if (done[t]) continue;
      bool ready = true;
      for (int p : tasks[t].parents) ready = ready && done[p];
      if (ready) next = static_cast<int>(t);
    }
    if (next < 0) Fail("gen_data: the task towers' relation_tower_names form a cycle");
    done[next] = true;
    order->push_back(next);
    std::set<int> gates;
    for (int p : tasks[next].parents) {
      gates.insert(p);
      gates.insert(tasks[p].gates.begin(), tasks[p].gates.end());
    }
    tasks[next].gates.assign(gates.begin(), gates.end());
  }
  for (auto& task : tasks) {
    if (task.regression) {
      task.bias = 0.0;
    } else if (task.independent) {
      task.bias = -1.0 - 0.5 * task.label_index;  // gen_data's bias shift before task towers
    } else {
      task.bias = task.gates.empty() ? kRootBias : kDependentBias;
    }
  }
  return tasks;
}

// Values of every set string field named grouping_key (GroupedAUC, GroupedXAUC) or
// session_name (JRCLoss, ListwiseRankLoss) anywhere in `message`.
void CollectGroupingKeys(const Message& message, std::set<std::string>* keys) {
  const Reflection* reflection = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (field->is_repeated()) {
        for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
          CollectGroupingKeys(reflection->GetRepeatedMessage(message, field, i), keys);
        }
      } else {
        CollectGroupingKeys(reflection->GetMessage(message, field), keys);
      }
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING && !field->is_repeated() &&
               (field->name() == "grouping_key" || field->name() == "session_name")) {
      const std::string value = reflection->GetString(message, field);
      if (!value.empty()) keys->insert(value);
    }
  }
}

}  // namespace tzrec::gen_data_internal
