#include "tzrec/config/supported_fields.h"

#include <google/protobuf/descriptor.h>

#include <algorithm>
#include <map>
#include <set>

#include "tzrec/common/error.h"
#include "tzrec/common/registry.h"
#include "tzrec/common/strings.h"

namespace tzrec {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// Pipeline-level fields, relative to EasyRecConfig. Messages that are registry slots
// (model_config, feature_configs, optimizers, losses, metrics) only need their field named
// here: their content is checked against the registrations.
const std::vector<std::string>& PipelineFields() {
  static const std::vector<std::string> kFields = {
      "train_input_path",
      "eval_input_path",
      "model_dir",
      "train_config.sparse_optimizer",
      "train_config.dense_optimizer",
      "train_config.num_steps",
      "train_config.num_epochs",
      "train_config.save_checkpoints_steps",
      "train_config.save_checkpoints_epochs",
      "train_config.save_checkpoints_timestamp_interval",  // event time (train/event_time_saves.h)
      "train_config.save_checkpoints_timestamps",
      "train_config.save_checkpoints_timestamp_quorum",
      "train_config.fine_tune_checkpoint",
      "train_config.fine_tune_ckpt_param_map",
      "train_config.gradient_accumulation_steps",
      "train_config.grad_clipping",  // checked by the trainer
      "train_config.mixed_precision",  // BF16 GEMMs (modules/fast_linear.h)
      "train_config.grad_scaler.*",
      "export_config.mixed_precision",
      "train_config.log_step_count_steps",
      "train_config.is_profiling",
      "train_config.keep_checkpoint_max",
      "train_config.use_tensorboard",
      "train_config.tensorboard_summaries",  // loss and learning_rate (others refused by the trainer)
      "train_config.global_embedding_constraints.*",  // checked by the sharding planner
      "export_config.exporter_type",  // tzrec export (best: by best_exporter_metric)
      "export_config.best_exporter_metric",
      "export_config.metric_larger_is_better",
      "export_config.use_dense_ema",
      "eval_config.use_dense_ema",
      "eval_config.num_steps",
      "eval_config.log_step_count_steps",
      "data_config",  // its own fields: kDataConfigFields below
      "model_config",
      "feature_configs",
  };
  return kFields;
}

// Oneof members that will never be a model here, with the reason.
const std::map<std::string, std::string>& Explained() {
  static const std::map<std::string, std::string> kExplained = {
      {"tzrec.protos.ModelConfig/model/simple_multi_task",
       "(TorchEasyRec has no SimpleMultiTask model either, only its config message; use mmoe, "
       "ple or dbmtl with task_towers)"},
  };
  return kExplained;
}

std::map<std::string, std::vector<std::string>>& BaseFields() {
  static std::map<std::string, std::vector<std::string>> fields;
  return fields;
}

// data_config: dataset_type / fg_mode values are checked by the dataset; fields only one dataset
// type reads are declared by its reader registration (input/dataset_reader.h), the sampler
// oneof's by the samplers (input/sampler.h). MaxCompute read settings have no effect on other
// datasets, as in TorchEasyRec (the dataset logs that).
const bool kDataConfigFields = HonourMessageFields(
    "tzrec.protos.DataConfig",
    {"batch_size", "dataset_type", "fg_encoded_multival_sep", "label_fields", "num_workers",
     "pin_memory", "eval_batch_size", "drop_remainder", "fg_threads", "sample_weight_fields",
     "fg_mode", "shuffle", "shuffle_buffer_size", "in_order", "force_base_data_group",
     "odps_data_quota_name", "odps_data_compression", "is_orderby_partition"});

enum class Coverage { kNone, kPartial, kFull };

Coverage Covered(const std::string& field, const std::vector<std::string>& patterns) {
  Coverage best = Coverage::kNone;
  for (const auto& p : patterns) {
    if (p == "*" || p == field || p == field + ".*") return Coverage::kFull;
    if (StartsWith(p, field + ".")) best = Coverage::kPartial;
  }
  return best;
}

// Patterns for the children of `field`.
std::vector<std::string> Below(const std::string& field, const std::vector<std::string>& patterns) {
  std::vector<std::string> out;
  for (const auto& p : patterns) {
    if (p == "*" || p == field || p == field + ".*") {
      out.push_back("*");
    } else if (StartsWith(p, field + ".")) {
      out.push_back(p.substr(field.size() + 1));
    }
  }
  return out;
}

bool IsSlotType(const Descriptor* type) {
  const HonouredFields& honoured = HonouredFields::Global();
  if (BaseFields().count(type->full_name())) return true;
  for (int i = 0; i < type->oneof_decl_count(); ++i) {
    if (honoured.OneofMembers(type->full_name(), type->oneof_decl(i)->name())) return true;
  }
  return !honoured.EnumSlots(type->full_name()).empty();
}

class Walker {
 public:
  std::vector<UnsupportedField> found;

  void Walk(const Message& msg, const std::string& path, std::vector<std::string> patterns) {
    const Descriptor* type = msg.GetDescriptor();
    std::map<std::string, std::string> notes;
    if (IsSlotType(type)) {
      bool replace = false;
      std::vector<std::string> slot = SlotPatterns(msg, &notes, &replace);
      // A oneof slot's content is the registrations' alone (the parent only allows the field);
      // enum slots (dataset_type) add to what the parent allows.
      if (replace) patterns.clear();
      patterns.insert(patterns.end(), slot.begin(), slot.end());
    }
    std::vector<const FieldDescriptor*> fields;
    msg.GetReflection()->ListFields(msg, &fields);
    for (const FieldDescriptor* field : fields) {
      const std::string name = field->name();
      const std::string field_path = path.empty() ? name : path + "." + name;
      const bool is_message = field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
      const Coverage coverage = Covered(name, patterns);
      if (coverage == Coverage::kNone || (!is_message && coverage != Coverage::kFull)) {
        auto note = notes.find(name);
        found.push_back({field_path, note == notes.end() ? "" : note->second});
        continue;
      }
      if (!is_message) continue;
      const std::vector<std::string> below = Below(name, patterns);
      const auto* reflection = msg.GetReflection();
      if (field->is_repeated()) {
        for (int i = 0; i < reflection->FieldSize(msg, field); ++i) {
          Walk(reflection->GetRepeatedMessage(msg, field, i), StrCat(field_path, "[", i, "]"), below);
        }
      } else {
        Walk(reflection->GetMessage(msg, field), field_path, below);
      }
    }
  }

 private:
  // The fields a registry-slot message honours: its declared base fields, each registered
  // member of its oneof slots with that member's fields, and the fields its enum slots' set
  // values (any of their members, for fields read by one dataset type only) declare.
  std::vector<std::string> SlotPatterns(const Message& msg, std::map<std::string, std::string>* notes,
                                        bool* replace) {
    const Descriptor* type = msg.GetDescriptor();
    const HonouredFields& honoured = HonouredFields::Global();
    std::vector<std::string> patterns;
    auto base = BaseFields().find(type->full_name());
    if (base != BaseFields().end()) {
      patterns = base->second;
      *replace = true;
    }
    for (int i = 0; i < type->oneof_decl_count(); ++i) {
      const auto* oneof = type->oneof_decl(i);
      const HonouredFields::Members* members = honoured.OneofMembers(type->full_name(), oneof->name());
      if (!members) continue;
      *replace = true;
      std::string known;
      for (const auto& kv : *members) known += (known.empty() ? "" : ", ") + kv.first;
      for (int f = 0; f < oneof->field_count(); ++f) {
        const std::string member = oneof->field(f)->name();
        auto it = members->find(member);
        if (it == members->end()) {
          auto explained = Explained().find(type->full_name() + "/" + oneof->name() + "/" + member);
          (*notes)[member] = explained != Explained().end() ? explained->second
                                                             : "(supported: " + known + ")";
          continue;
        }
        // The member itself is honoured (even with no fields set), its fields only as listed.
        patterns.push_back(member + ".");
        for (const auto& p : it->second) patterns.push_back(member + "." + p);
      }
    }
    for (const auto& [field, members] : honoured.EnumSlots(type->full_name())) {
      (void)field;
      for (const auto& kv : *members) {
        for (const auto& p : kv.second) patterns.push_back(p);
      }
    }
    return patterns;
  }
};

}  // namespace

bool HonourMessageFields(const std::string& message_type, std::vector<std::string> fields) {
  auto& mine = BaseFields()[message_type];
  mine.insert(mine.end(), fields.begin(), fields.end());
  return true;
}

std::vector<UnsupportedField> FindUnsupportedFields(const Message& config) {
  Walker walker;
  walker.Walk(config, "", PipelineFields());
  return walker.found;
}

void CheckConfigSupported(const Message& config) {
  auto unsupported = FindUnsupportedFields(config);
  if (unsupported.empty()) return;
  std::string message;
  for (const auto& u : unsupported) {
    message += (message.empty() ? "" : "\n") + u.path + ": not supported yet" +
               (u.note.empty() ? "" : " " + u.note);
  }
  Fail(message);
}

}  // namespace tzrec
