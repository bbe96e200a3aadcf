#include "tzrec/fg/custom_op.h"

#include "tzrec/common/error.h"

namespace tzrec::fg {

std::unique_ptr<FeatureOp> CreateCustomOp(const FeatureInfo& info) {
  Fail(info.config_path, ": feature generation for custom_feature is not supported yet");
}

}  // namespace tzrec::fg
