// negative_sampler, negative_sampler_v2, hard_negative_sampler, hard_negative_sampler_v2
// (TorchEasyRec tzrec/datasets/sampler.py; GraphLearn's samplers they call):
//   negative_sampler    num_sample items drawn by item weight (alias table), none of them an
//                       item of the batch; shared by the whole batch.
//   negative_sampler_v2 per batch row, expand = ceil(num_sample / B) items drawn uniformly
//                       (GraphLearn's conditional "random" strategy ignores weights) that are
//                       not positive edges of the row's user; rows concatenated, the first
//                       num_sample kept.
//   hard_negative_*     the same regular negatives, then per row up to num_hard_sample items of
//                       the row's user in the hard-negative edge table (table order), with
//                       their (row, slot) in hard_neg_indices. num_hard_sample is required but
//                       TorchEasyRec's own dssm_fg_hard_negative_mock omits it (Python's text
//                       parser does not check): 0 takes all of the user's items, as GraphLearn's
//                       "full" neighbour strategy does.
// Exclusion is rejection sampling with a bound on tries per draw (a table made only of the
// batch's items would otherwise never finish); the last draw is then kept, as GraphLearn
// gives up the same way.
#include <algorithm>
#include <cmath>

#include "tzrec/common/error.h"
#include "tzrec/common/logging.h"
#include "tzrec/input/sampler.h"
#include "tzrec/protos/sampler.pb.h"

namespace tzrec {
namespace {

constexpr int kMaxTries = 64;

template <typename Config>
int64_t NumSample(const Config& config, bool eval) {
  return eval && config.has_num_eval_sample() ? config.num_eval_sample() : config.num_sample();
}

class NegativeSamplerBase : public Sampler {
 protected:
  template <typename Config>
  void Init(const Config& config, const std::string& item_path, const SamplerContext& context) {
    attr_fields_.assign(config.attr_fields().begin(), config.attr_fields().end());
    item_id_field_ = config.item_id_field();
    if (item_id_field_.empty()) Fail(context.where, ".item_id_field must be set");
    num_sample_ = NumSample(config, context.eval);
    items_ = LoadItemTable(item_path, config.field_delimiter(), config.attr_delimiter(),
                           attr_fields_.size(), context.where);
  }

  // Weighted draws excluding the batch's items.
  void DrawWeighted(const SamplerInput& input, int64_t count, std::mt19937_64& rng,
                    std::vector<uint32_t>* out) const {
    std::vector<uint32_t> exclude;
    exclude.reserve(input.item_ids.size());
    for (int64_t id : input.item_ids) {
      const int64_t index = items_->Find(id);
      if (index >= 0) exclude.push_back(static_cast<uint32_t>(index));
    }
    std::sort(exclude.begin(), exclude.end());
    for (int64_t i = 0; i < count; ++i) {
      uint32_t item = alias_.Draw(rng);
      for (int t = 1; t < kMaxTries && std::binary_search(exclude.begin(), exclude.end(), item); ++t) {
        item = alias_.Draw(rng);
      }
      out->push_back(item);
    }
  }

  // Per row, uniform draws that are not positive edges of the row's user.
  void DrawConditional(const SamplerInput& input, const SamplerEdgeTable& positives, int64_t count,
                       std::mt19937_64& rng, std::vector<uint32_t>* out) const {
    const int64_t rows = static_cast<int64_t>(input.user_ids.size());
    if (rows == 0) return;
    const int64_t expand = std::max<int64_t>(1, (count + rows - 1) / rows);
    std::uniform_int_distribution<uint32_t> uniform(0, static_cast<uint32_t>(items_->size() - 1));
    for (int64_t i = 0; i < count; ++i) {
      const int64_t user = input.user_ids[i / expand];
      uint32_t item = uniform(rng);
      for (int t = 1; t < kMaxTries && positives.Has(user, item); ++t) item = uniform(rng);
      out->push_back(item);
    }
  }

  void AddHard(const SamplerInput& input, const SamplerEdgeTable& hard, int64_t num_hard,
               SampledItems* out) const {
    for (size_t row = 0; row < input.user_ids.size(); ++row) {
      size_t count = 0;
      const uint32_t* items = hard.Begin(input.user_ids[row], &count);
      if (num_hard > 0) count = std::min<size_t>(count, static_cast<size_t>(num_hard));
      for (size_t slot = 0; slot < count; ++slot) {
        out->items.push_back(items[slot]);
        out->hard_neg_indices.push_back(static_cast<int32_t>(row));
        out->hard_neg_indices.push_back(static_cast<int32_t>(slot));
      }
    }
  }

  AliasTable alias_;
};

class NegativeSamplerV1 : public NegativeSamplerBase {
 public:
  explicit NegativeSamplerV1(const SamplerContext& context) {
    const auto& config = static_cast<const protos::NegativeSampler&>(*context.config);
    Init(config, config.input_path(), context);
    // TorchEasyRec stores item_id_delim but never reads it; so the field does nothing here too.
    if (config.has_item_id_delim()) LOG_INFO << context.where << ".item_id_delim has no effect";
    alias_ = AliasTable(items_->weights());
  }
  SampledItems Sample(const SamplerInput& input, std::mt19937_64& rng) const override {
    SampledItems out;
    DrawWeighted(input, num_sample_, rng, &out.items);
    out.num_negatives = static_cast<int64_t>(out.items.size());
    return out;
  }
};

class NegativeSamplerV2 : public NegativeSamplerBase {
 public:
  explicit NegativeSamplerV2(const SamplerContext& context) {
    const auto& config = static_cast<const protos::NegativeSamplerV2&>(*context.config);
    Init(config, config.item_input_path(), context);
    user_id_field_ = config.user_id_field();
    positives_ = LoadEdgeTable(config.pos_edge_input_path(), config.field_delimiter(), items_,
                               config.user_input_path(), context.where + ".pos_edge_input_path");
  }
  SampledItems Sample(const SamplerInput& input, std::mt19937_64& rng) const override {
    SampledItems out;
    DrawConditional(input, *positives_, num_sample_, rng, &out.items);
    out.num_negatives = static_cast<int64_t>(out.items.size());
    return out;
  }

 private:
  std::shared_ptr<const SamplerEdgeTable> positives_;
};

class HardNegativeSamplerV1 : public NegativeSamplerBase {
 public:
  explicit HardNegativeSamplerV1(const SamplerContext& context) {
    const auto& config = static_cast<const protos::HardNegativeSampler&>(*context.config);
    Init(config, config.item_input_path(), context);
    alias_ = AliasTable(items_->weights());
    user_id_field_ = config.user_id_field();
    num_hard_ = config.num_hard_sample();
    hard_ = LoadEdgeTable(config.hard_neg_edge_input_path(), config.field_delimiter(), items_,
                          config.user_input_path(), context.where + ".hard_neg_edge_input_path");
  }
  SampledItems Sample(const SamplerInput& input, std::mt19937_64& rng) const override {
    SampledItems out;
    DrawWeighted(input, num_sample_, rng, &out.items);
    out.num_negatives = static_cast<int64_t>(out.items.size());
    AddHard(input, *hard_, num_hard_, &out);
    return out;
  }

 private:
  int64_t num_hard_ = 0;
  std::shared_ptr<const SamplerEdgeTable> hard_;
};

class HardNegativeSamplerV2 : public NegativeSamplerBase {
 public:
  explicit HardNegativeSamplerV2(const SamplerContext& context) {
    const auto& config = static_cast<const protos::HardNegativeSamplerV2&>(*context.config);
    Init(config, config.item_input_path(), context);
    user_id_field_ = config.user_id_field();
    num_hard_ = config.num_hard_sample();
    positives_ = LoadEdgeTable(config.pos_edge_input_path(), config.field_delimiter(), items_,
                               config.user_input_path(), context.where + ".pos_edge_input_path");
    hard_ = LoadEdgeTable(config.hard_neg_edge_input_path(), config.field_delimiter(), items_,
                          config.user_input_path(), context.where + ".hard_neg_edge_input_path");
  }
  SampledItems Sample(const SamplerInput& input, std::mt19937_64& rng) const override {
    SampledItems out;
    DrawConditional(input, *positives_, num_sample_, rng, &out.items);
    out.num_negatives = static_cast<int64_t>(out.items.size());
    AddHard(input, *hard_, num_hard_, &out);
    return out;
  }

 private:
  int64_t num_hard_ = 0;
  std::shared_ptr<const SamplerEdgeTable> positives_;
  std::shared_ptr<const SamplerEdgeTable> hard_;
};

template <typename T>
std::shared_ptr<const Sampler> Make(const SamplerContext& context) {
  return std::make_shared<const T>(context);
}

}  // namespace

TZREC_REGISTER(SamplerRegistry(), "negative_sampler", Make<NegativeSamplerV1>, "input_path",
               "num_sample", "attr_fields", "item_id_field", "attr_delimiter", "num_eval_sample",
               "field_delimiter", "item_id_delim");
TZREC_REGISTER(SamplerRegistry(), "negative_sampler_v2", Make<NegativeSamplerV2>, "user_input_path",
               "item_input_path", "pos_edge_input_path", "num_sample", "attr_fields", "item_id_field",
               "user_id_field", "attr_delimiter", "num_eval_sample", "field_delimiter");
TZREC_REGISTER(SamplerRegistry(), "hard_negative_sampler", Make<HardNegativeSamplerV1>,
               "user_input_path", "item_input_path", "hard_neg_edge_input_path", "num_sample",
               "num_hard_sample", "attr_fields", "item_id_field", "user_id_field", "attr_delimiter",
               "num_eval_sample", "field_delimiter");
TZREC_REGISTER(SamplerRegistry(), "hard_negative_sampler_v2", Make<HardNegativeSamplerV2>,
               "user_input_path", "item_input_path", "pos_edge_input_path",
               "hard_neg_edge_input_path", "num_sample", "num_hard_sample", "attr_fields",
               "item_id_field", "user_id_field", "attr_delimiter", "num_eval_sample",
               "field_delimiter");

}  // namespace tzrec
