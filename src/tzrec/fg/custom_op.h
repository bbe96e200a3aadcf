// custom_feature: a feature operator loaded from a shared library through a small C ABI
// (see tzrec_fg_custom_op.h for the contract an operator library implements).
#pragma once

#include <memory>

#include "tzrec/fg/feature_info.h"
#include "tzrec/fg/feature_op.h"

namespace tzrec::fg {

// Loads `operator_lib_file` and creates operator `operator_name` with `operator_params`;
// errors name the feature's config path, the library and the operator.
std::unique_ptr<FeatureOp> CreateCustomOp(const FeatureInfo& info);

}  // namespace tzrec::fg
