// RawFeature: numeric values, either dense (value_dim floats) or, with `boundaries`,
// bucketized into ids of a (len(boundaries)+1)-row embedding table. Under FG_NONE the data
// already holds the bucket ids, exactly as in TorchEasyRec.
#include "tzrec/common/error.h"
#include "tzrec/common/logging.h"
#include "tzrec/features/feature.h"

namespace tzrec {
namespace {

class RawFeature : public Feature {
 public:
  RawFeature(const protos::RawFeature& config, FeatureContext context)
      : Feature(std::move(context)) {
    for (int i = 1; i < config.boundaries_size(); ++i) {
      if (!(config.boundaries(i - 1) < config.boundaries(i))) {
        Fail(config_path(), ".boundaries must be strictly increasing");
      }
    }
    if (config.boundaries_size() > 0) {
      InitSparse(config.feature_name(), config.boundaries_size() + 1,
                 static_cast<int>(config.embedding_dim()), config.embedding_name(),
                 config.pooling(), config.fg_encoded_default_value(),
               config.trainable());
    } else {
      if (config.has_embedding_dim()) {
        // TorchEasyRec ignores it too: a dense feature only gets an embedding via autodis/mlp.
        LOG_WARNING << config_path() << ".embedding_dim has no effect without boundaries, "
                    << "autodis or mlp; the feature is used as raw dense values";
      }
      InitDense(config.feature_name(), static_cast<int>(config.value_dim()),
                config.fg_encoded_default_value());
    }
  }
  std::string type() const override { return "raw_feature"; }
};

const FeatureRegistration kRegisterRawFeature(
    "raw_feature", [](const protos::FeatureConfig& config, FeatureContext context) {
      return std::unique_ptr<Feature>(new RawFeature(config.raw_feature(), std::move(context)));
    });

}  // namespace
}  // namespace tzrec
