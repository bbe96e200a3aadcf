// TDM (model_config.tdm), TorchEasyRec's Tree-based Deep Model ranker: a multi-window DIN
// encoder (modules/sequence_encoder.h, `multiwindow_din`: windows_len and attn_mlp) over the
// config's SEQUENCE group, whose query is the tree node's (item) features, concatenated with
// every other group (DEEP, in config order), then the `final` MLP and Linear(num_class; TDM's
// configs use 2 with softmax cross entropy). Its rows are the data's user-item pairs plus the
// tdm_sampler's tree nodes (input/tdm_sampler.h): ancestors labelled 1, per-level negatives 0.
#include <ATen/ops/cat.h>
#include <torch/nn/modules/linear.h>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/models/model.h"
#include "tzrec/modules/mlp.h"
#include "tzrec/modules/sequence_encoder.h"
#include "tzrec/protos/models/match_model.pb.h"

namespace tzrec {
namespace {

constexpr char kWhere[] = "model_config.tdm";

class TDM : public Model {
 public:
  explicit TDM(const ModelContext& context) : Model(context) {
    const protos::TDM& config = this->config().tdm();
    AddRankHead();
    InitInput();
    for (const auto& group : this->config().feature_groups()) {
      if (group.group_type() == protos::SEQUENCE) {
        if (!sequence_group_.empty()) {
          Fail(kWhere, ": one SEQUENCE feature group is read (the tree node's history); '", sequence_group_, "' and '",
               group.group_name(), "' are two");
        }
        sequence_group_ = group.group_name();
      } else if (group.group_type() == protos::DEEP) {
        other_groups_.push_back(group.group_name());
      } else {
        Fail(kWhere, ": feature group '", group.group_name(), "' is ", protos::FeatureGroupType_Name(group.group_type()),
             "; TDM reads one SEQUENCE group and DEEP groups");
      }
    }
    if (sequence_group_.empty()) Fail(kWhere, ": a SEQUENCE feature group (the user's history) is required");
    if (!config.has_multiwindow_din()) Fail(kWhere, ".multiwindow_din is required");
    protos::SeqEncoderConfig encoder_config;
    auto* multi_window = encoder_config.mutable_multi_window_din_encoder();
    multi_window->set_input(sequence_group_);
    *multi_window->mutable_attn_mlp() = config.multiwindow_din().attn_mlp();
    *multi_window->mutable_windows_len() = config.multiwindow_din().windows_len();
    SequenceEncoderContext encoder_context;
    encoder_context.config = &encoder_config;
    encoder_context.query_dim = embedding_group().QueryDim(sequence_group_);
    encoder_context.sequence_dim = embedding_group().SequenceDim(sequence_group_);
    encoder_context.where = std::string(kWhere) + ".multiwindow_din";
    encoder_ = register_module("multiwindow_din", CreateSequenceEncoder(encoder_context));
    int64_t total = encoder_->output_dim();
    for (const std::string& group : other_groups_) total += InputDim(group);
    final_ = register_module("deep_mlp", MLP(total, config.final(), std::string(kWhere) + ".final"));
    output_ = register_module("output_mlp", torch::nn::Linear(final_->output_dim(),
                                                                  static_cast<int64_t>(heads()[0]->num_class())));
  }

  Predictions Predict(const Batch& batch) override {
    auto grouped = BuildInput(batch);
    std::vector<at::Tensor> parts = {encoder_->Encode({grouped.at(sequence_group_ + ".query"),
                                                       grouped.at(sequence_group_ + ".sequence"),
                                                       grouped.at(sequence_group_ + ".sequence_length")})};
    for (const std::string& group : other_groups_) parts.push_back(grouped.at(group));
    const at::Tensor joined = parts.size() == 1 ? parts[0] : at::cat(parts, 1);
    return HeadPredictions({output_->forward(final_->forward(joined))});
  }

  void WriteScript(ScriptWriter& w, const StoredTables& tables) const override {
    const std::map<std::string, std::string> grouped = ScriptInput(w, tables);
    std::vector<std::string> parts = {encoder_->Script(w, grouped.at(sequence_group_ + ".query"),
                                                       grouped.at(sequence_group_ + ".sequence"),
                                                       grouped.at(sequence_group_ + ".sequence_length"), "multiwindow_din")};
    for (const std::string& group : other_groups_) parts.push_back(grouped.at(group));
    std::string joined = parts[0];
    if (parts.size() > 1) joined = w.Let("tdm_input", "torch.cat([" + Join(parts, ", ") + "], 1)");
    ScriptHeadPredictions(w, {ScriptLinear(w, *output_, final_->Script(w, joined, "deep_mlp"), "output_mlp")});
  }

 private:
  std::string sequence_group_;
  std::vector<std::string> other_groups_;
  std::shared_ptr<SequenceEncoder> encoder_;
  MLP final_{nullptr};
  torch::nn::Linear output_{nullptr};
};

std::shared_ptr<Model> MakeTDM(const ModelContext& context) { return std::make_shared<TDM>(context); }

}  // namespace

TZREC_REGISTER(ModelRegistry(), "tdm", MakeTDM, "multiwindow_din.windows_len", "multiwindow_din.attn_mlp.*",
               "final.*");

}  // namespace tzrec
