// IdFeature: categorical ids (single or multi-value) looked up in an embedding table.
#include "tzrec/common/error.h"
#include "tzrec/features/feature.h"

namespace tzrec {
namespace {

class IdFeature : public Feature {
 public:
  IdFeature(const protos::IdFeature& config, FeatureContext context)
      : Feature(std::move(context)) {
    // Row-count precedence as TorchEasyRec: hash_bucket_size > num_buckets (> vocab_*,
    // which the config validator rejects for now).
    int64_t rows = 0;
    if (config.has_hash_bucket_size()) {
      rows = static_cast<int64_t>(config.hash_bucket_size());
    } else if (config.has_num_buckets()) {
      rows = static_cast<int64_t>(config.num_buckets());
    }
    InitSparse(config.feature_name(), rows, static_cast<int>(config.embedding_dim()),
               config.embedding_name(), config.pooling(), config.fg_encoded_default_value(),
               config.trainable());
  }
  std::string type() const override { return "id_feature"; }
};

const FeatureRegistration kRegisterIdFeature(
    "id_feature", [](const protos::FeatureConfig& config, FeatureContext context) {
      return std::unique_ptr<Feature>(new IdFeature(config.id_feature(), std::move(context)));
    });

}  // namespace
}  // namespace tzrec
