#include "tzrec/config/supported_fields.h"

#include <google/protobuf/descriptor.h>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"

namespace tzrec {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

enum class Coverage { kNone, kPartial, kFull };

Coverage Covered(const std::string& normalized, const std::vector<std::string>& supported) {
  Coverage best = Coverage::kNone;
  for (const auto& pattern : supported) {
    if (EndsWith(pattern, ".*")) {
      std::string root = pattern.substr(0, pattern.size() - 2);
      if (normalized == root || StartsWith(normalized, root + ".")) return Coverage::kFull;
      if (StartsWith(root, normalized + ".")) best = Coverage::kPartial;
    } else {
      if (normalized == pattern) return Coverage::kFull;
      if (StartsWith(pattern, normalized + ".")) best = Coverage::kPartial;
    }
  }
  return best;
}

void Walk(const Message& msg, const std::string& path, const std::string& normalized,
          const std::vector<std::string>& supported, std::vector<std::string>* unsupported) {
  std::vector<const FieldDescriptor*> fields;
  msg.GetReflection()->ListFields(msg, &fields);
  for (const FieldDescriptor* field : fields) {
    std::string field_path = path.empty() ? field->name() : path + "." + field->name();
    std::string field_norm = normalized.empty() ? field->name() : normalized + "." + field->name();
    Coverage coverage = Covered(field_norm, supported);
    if (coverage == Coverage::kFull) continue;
    bool is_message = field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
    if (coverage == Coverage::kNone || !is_message) {
      unsupported->push_back(field_path);
      continue;
    }
    const auto* reflection = msg.GetReflection();
    if (field->is_repeated()) {
      int size = reflection->FieldSize(msg, field);
      for (int i = 0; i < size; ++i) {
        Walk(reflection->GetRepeatedMessage(msg, field, i), StrCat(field_path, "[", i, "]"),
             field_norm, supported, unsupported);
      }
    } else {
      Walk(reflection->GetMessage(msg, field), field_path, field_norm, supported, unsupported);
    }
  }
}

}  // namespace

const std::vector<std::string>& SupportedConfigFields() {
  // FG-time fields (expression, default_value, separator, normalizer, fg_value_type) are
  // accepted for features: under FG_NONE the data is already encoded, so they have no effect
  // by definition, exactly as in TorchEasyRec.
  static const std::vector<std::string> kFields = {
      "train_input_path",
      "eval_input_path",
      "model_dir",
      // train_config
      "train_config.sparse_optimizer.sgd_optimizer.*",
      "train_config.sparse_optimizer.adagrad_optimizer.*",
      "train_config.sparse_optimizer.rowwise_adagrad_optimizer.*",
      "train_config.sparse_optimizer.adam_optimizer.*",
      "train_config.sparse_optimizer.constant_learning_rate",
      "train_config.dense_optimizer.sgd_optimizer.lr",
      "train_config.dense_optimizer.sgd_optimizer.momentum",
      "train_config.dense_optimizer.sgd_optimizer.weight_decay",
      "train_config.dense_optimizer.sgd_optimizer.dampening",
      "train_config.dense_optimizer.sgd_optimizer.nesterov",
      "train_config.dense_optimizer.sgd_optimizer.fused",
      "train_config.dense_optimizer.adam_optimizer.lr",
      "train_config.dense_optimizer.adam_optimizer.beta1",
      "train_config.dense_optimizer.adam_optimizer.beta2",
      "train_config.dense_optimizer.adam_optimizer.weight_decay",
      "train_config.dense_optimizer.adam_optimizer.eps",
      "train_config.dense_optimizer.adam_optimizer.amsgrad",
      "train_config.dense_optimizer.adam_optimizer.fused",
      "train_config.dense_optimizer.adamw_optimizer.lr",
      "train_config.dense_optimizer.adamw_optimizer.beta1",
      "train_config.dense_optimizer.adamw_optimizer.beta2",
      "train_config.dense_optimizer.adamw_optimizer.weight_decay",
      "train_config.dense_optimizer.adamw_optimizer.eps",
      "train_config.dense_optimizer.adamw_optimizer.amsgrad",
      "train_config.dense_optimizer.adamw_optimizer.fused",
      "train_config.dense_optimizer.constant_learning_rate",
      "train_config.num_steps",
      "train_config.num_epochs",
      "train_config.save_checkpoints_steps",
      "train_config.save_checkpoints_epochs",
      "train_config.fine_tune_checkpoint",
      "train_config.log_step_count_steps",
      "train_config.keep_checkpoint_max",
      "train_config.use_tensorboard",  // only `false` is accepted (checked by the trainer)
      "train_config.global_embedding_constraints.*",  // checked by the sharding planner
      // eval_config
      "eval_config.num_steps",
      "eval_config.log_step_count_steps",
      // data_config (dataset_type / fg_mode values are checked by the dataset)
      "data_config.batch_size",
      "data_config.dataset_type",
      "data_config.fg_encoded_multival_sep",
      "data_config.label_fields",
      "data_config.num_workers",
      "data_config.pin_memory",
      "data_config.input_fields.*",
      "data_config.delimiter",
      "data_config.with_header",
      "data_config.eval_batch_size",
      "data_config.drop_remainder",
      "data_config.fg_threads",
      "data_config.sample_weight_fields",
      "data_config.fg_mode",
      "data_config.shuffle",
      "data_config.shuffle_buffer_size",
      "data_config.input_fields_str",
      "data_config.in_order",
      // model_config (group_type and num_class values are checked by the model)
      "model_config.feature_groups.group_name",
      "model_config.feature_groups.feature_names",
      "model_config.feature_groups.group_type",
      "model_config.num_class",
      "model_config.losses.binary_cross_entropy.*",
      "model_config.metrics.auc.*",
      "model_config.deepfm.deep.*",
      "model_config.deepfm.final.*",
      "model_config.deepfm.wide_embedding_dim",
      "model_config.dlrm.dense_mlp.*",
      "model_config.dlrm.final.*",
      "model_config.dlrm.arch_with_sparse",
  };
  static const std::vector<std::string> kWithFeatures = [] {
    std::vector<std::string> fields = kFields;
    // Feature generation (src/tzrec/fg/) honours these on every feature type it implements,
    // plain, as sequence_<type>, and inside a grouped sequence_feature.
    const std::vector<std::string> common = {
        "feature_name", "expression", "embedding_dim", "embedding_name", "pooling",
        "default_value", "separator", "fg_encoded_default_value", "fg_value_type", "trainable",
        "stub_type", "hash_bucket_size", "num_buckets", "vocab_list", "vocab_dict", "vocab_file",
        "asset_dir", "default_bucketize_value", "boundaries", "value_dim", "normalizer",
        "weighted", "sequence_length", "sequence_delim", "sequence_fields", "map", "key",
        "combiner", "need_discrete", "need_key", "value_separator", "nested_map", "pkey", "skey",
        "show_pkey", "show_skey", "variables", "query", "title", "method", "document",
        "kv_delimiter", "value_map", "tokenizer_type", "text_normalizer.*", "operator_name",
        "operator_lib_file", "operator_params.*", "is_op_thread_safe", "embedding_constraints.*"};
    const std::vector<std::string> types = {
        "id_feature", "raw_feature", "combo_feature", "lookup_feature", "match_feature",
        "expr_feature", "overlap_feature", "tokenize_feature", "kv_dot_product",
        "bool_mask_feature", "combine_feature", "custom_feature"};
    for (const std::string& type : types) {
      for (const std::string& prefix :
           {"feature_configs." + type, "feature_configs.sequence_" + type,
            "feature_configs.sequence_feature.features." + type}) {
        for (const std::string& field : common) fields.push_back(prefix + "." + field);
      }
    }
    for (const char* field : {"sequence_name", "sequence_length", "sequence_delim", "sequence_pk"}) {
      fields.push_back(std::string("feature_configs.sequence_feature.") + field);
    }
    return fields;
  }();
  return kWithFeatures;
}

std::vector<std::string> FindUnsupportedFields(const Message& config,
                                               const std::vector<std::string>& supported) {
  std::vector<std::string> unsupported;
  Walk(config, "", "", supported, &unsupported);
  return unsupported;
}

void CheckConfigSupported(const Message& config) {
  auto unsupported = FindUnsupportedFields(config, SupportedConfigFields());
  if (unsupported.empty()) return;
  std::string message;
  for (const auto& path : unsupported) message += (message.empty() ? "" : "\n") + path + ": not supported yet";
  Fail(message);
}

}  // namespace tzrec
