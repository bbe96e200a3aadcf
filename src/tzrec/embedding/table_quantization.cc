#include "tzrec/embedding/table_quantization.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tzrec/common/error.h"

namespace tzrec {
namespace {

constexpr int64_t kInt8Tail = 4;  // fp16 scale + fp16 bias

}  // namespace

const char* TableDtypeName(TableDtype dtype) {
  switch (dtype) {
    case TableDtype::kFP32: return "FP32";
    case TableDtype::kFP16: return "FP16";
    case TableDtype::kINT8: return "INT8";
  }
  return "?";
}

bool ParseTableDtypeName(const std::string& name, TableDtype* dtype) {
  for (TableDtype d : {TableDtype::kFP32, TableDtype::kFP16, TableDtype::kINT8}) {
    if (name == TableDtypeName(d)) {
      *dtype = d;
      return true;
    }
  }
  return false;
}

TableDtype ParseTableQuantization(const std::string& value, TableDtype default_dtype,
                                  const std::string& what) {
  if (value.empty()) return default_dtype;
  if (value == "0") return TableDtype::kFP32;
  if (value == "1") return TableDtype::kINT8;
  std::string upper = value;
  std::transform(upper.begin(), upper.end(), upper.begin(), ::toupper);
  TableDtype dtype;
  if (ParseTableDtypeName(upper, &dtype)) return dtype;
  if (upper == "INT4" || upper == "INT2") {
    Fail(what, "=", value, ": not supported yet (FP32, FP16, INT8, or 0 for no quantisation)");
  }
  Fail(what, "=", value, ": unknown (FP32, FP16, INT8, or 0 for no quantisation)");
}

int64_t TableRowBytes(TableDtype dtype, int64_t dim) {
  switch (dtype) {
    case TableDtype::kFP32: return 4 * dim;
    case TableDtype::kFP16: return 2 * dim;
    case TableDtype::kINT8: return dim + kInt8Tail;
  }
  return 0;
}

at::Tensor QuantizeTable(const at::Tensor& weight, TableDtype dtype) {
  TZREC_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kFloat, "QuantizeTable: fp32 [rows, dim]");
  at::Tensor w = weight.contiguous();
  if (dtype == TableDtype::kFP32) return w.clone();
  if (dtype == TableDtype::kFP16) return w.to(at::kHalf);
  const int64_t rows = w.size(0), dim = w.size(1);
  at::Tensor out = at::empty({rows, dim + kInt8Tail}, at::kByte);
  const float* src = w.data_ptr<float>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  at::parallel_for(0, rows, 1024, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = src + r * dim;
      uint8_t* codes = dst + r * (dim + kInt8Tail);
      float lo = 0.0f, hi = 0.0f;
      if (dim > 0) {
        lo = *std::min_element(row, row + dim);
        hi = *std::max_element(row, row + dim);
      }
      c10::Half scale_h = (hi - lo) / 255.0f;
      float scale = static_cast<float>(scale_h);
      // A constant row (or one whose range underflows fp16) still decodes to its value.
      if (scale == 0.0f || !std::isfinite(1.0f / scale)) {
        scale_h = 1.0f;
        scale = 1.0f;
      }
      const c10::Half bias_h = lo;
      const float bias = static_cast<float>(bias_h);
      const float inverse = 1.0f / scale;
      for (int64_t d = 0; d < dim; ++d) {
        const float q = std::nearbyint((row[d] - bias) * inverse);
        codes[d] = static_cast<uint8_t>(std::min(255.0f, std::max(0.0f, q)));
      }
      std::memcpy(codes + dim, &scale_h.x, 2);
      std::memcpy(codes + dim + 2, &bias_h.x, 2);
    }
  });
  return out;
}

bool StoredTableFinite(const at::Tensor& stored, TableDtype dtype, int64_t dim) {
  if (dtype != TableDtype::kINT8) return at::isfinite(stored).all().item<bool>();
  // code * scale + bias with code <= 255 and fp16 scale and bias stays within fp32's range.
  at::Tensor tail = stored.narrow(1, dim, kInt8Tail).contiguous().view(at::kHalf);
  return at::isfinite(tail).all().item<bool>();
}

void CheckStoredTable(const at::Tensor& stored, TableDtype dtype, int64_t dim, const std::string& what) {
  const at::ScalarType expected = dtype == TableDtype::kFP32   ? at::kFloat
                                  : dtype == TableDtype::kFP16 ? at::kHalf
                                                               : at::kByte;
  const int64_t width = dtype == TableDtype::kINT8 ? dim + kInt8Tail : dim;
  if (stored.dim() != 2 || stored.scalar_type() != expected || stored.size(1) != width) {
    Fail(what, ": a ", TableDtypeName(dtype), " table of dim ", dim, " is stored as ",
         at::toString(expected), " [rows, ", width, "], found ", at::toString(stored.scalar_type()),
         " ", stored.sizes());
  }
}

at::Tensor DequantizeTable(const at::Tensor& stored, TableDtype dtype, int64_t dim,
                           const std::string& what) {
  CheckStoredTable(stored, dtype, dim, what);
  if (dtype != TableDtype::kINT8) return stored.to(at::kFloat).contiguous();
  at::Tensor s = stored.contiguous();
  const int64_t rows = s.size(0);
  at::Tensor out = at::empty({rows, dim}, at::kFloat);
  const uint8_t* src = s.data_ptr<uint8_t>();
  float* dst = out.data_ptr<float>();
  at::parallel_for(0, rows, 1024, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const uint8_t* codes = src + r * (dim + kInt8Tail);
      c10::Half scale_h, bias_h;
      std::memcpy(&scale_h.x, codes + dim, 2);
      std::memcpy(&bias_h.x, codes + dim + 2, 2);
      const float scale = static_cast<float>(scale_h), bias = static_cast<float>(bias_h);
      for (int64_t d = 0; d < dim; ++d) dst[r * dim + d] = codes[d] * scale + bias;
    }
  });
  return out;
}

}  // namespace tzrec
