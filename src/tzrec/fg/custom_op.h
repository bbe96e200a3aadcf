// custom_feature: a feature operator loaded from a shared library through a small C ABI
// (see tzrec_fg_custom_op.h for the contract an operator library implements).
//
// `operator_lib_file` is dlopen()ed (RTLD_NOW | RTLD_LOCAL), relative to the feature's
// asset_dir when it has one. TorchEasyRec's official pyfg libraries
// (pyfg/lib/libedit_distance.so, libseq_expr.so, libregex_replace.so, also as the
// "<stem>_<md5>.so" asset copies TorchEasyRec makes) map to tzrec's built-in operator library
// libtzrec_fg_builtin_ops.so (builtin_ops/), found next to the running program or at
// $TZREC_FG_BUILTIN_OPS. The operator gets `operator_params` as JSON and the input names;
// numeric outputs get the feature's normalizer. With `is_op_thread_safe: false` (the default)
// calls into one operator instance are serialised by a mutex, so the FeatureOp is
// thread-safe either way.
#pragma once

#include <memory>

#include "tzrec/fg/feature_info.h"
#include "tzrec/fg/feature_op.h"

namespace tzrec::fg {

// Loads `operator_lib_file` and creates operator `operator_name` with `operator_params`;
// errors name the feature's config path, the library and the operator.
std::unique_ptr<FeatureOp> CreateCustomOp(const FeatureInfo& info);

}  // namespace tzrec::fg
