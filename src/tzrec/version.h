// tzrec-cpp version, written to model_dir/version.
#pragma once

namespace tzrec {
inline constexpr char kTzrecVersion[] = "0.1.0";
}  // namespace tzrec
