// Storage types of exported embedding tables (TorchEasyRec's QUANT_EMB / QUANT_EC_EMB):
// FP32, FP16, or INT8 row-wise in TorchRec's fused layout - each row is `dim` uint8 codes then
// a 2-byte fp16 scale and a 2-byte fp16 bias, w ~= code * scale + bias (the layout of FBGEMM's
// 8-bit "SBHalf" rows that TorchRec's quantized EmbeddingBagCollection stores). A dim-16 row
// is 20 bytes instead of 64.
// Stateless functions; thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace tzrec {

enum class TableDtype { kFP32, kFP16, kINT8 };

const char* TableDtypeName(TableDtype dtype);  // "FP32", "FP16", "INT8"
// QUANT_EMB-style setting: "" -> `default_dtype`; "0" / "FP32" -> FP32; "1" -> INT8 (on);
// "FP16", "INT8"; INT4/INT2 and anything else fail naming `what`.
TableDtype ParseTableQuantization(const std::string& value, TableDtype default_dtype,
                                  const std::string& what);
bool ParseTableDtypeName(const std::string& name, TableDtype* dtype);

// Bytes of one row of a `dim` table stored as `dtype`.
int64_t TableRowBytes(TableDtype dtype, int64_t dim);

// fp32 [rows, dim] -> the stored form: fp32 [rows, dim], fp16 [rows, dim] or uint8
// [rows, dim + 4]. INT8 per row: scale = (max - min) / 255 rounded to fp16 (1 when that is 0),
// bias = min rounded to fp16, code = round((w - bias) / scale) clamped to [0, 255].
at::Tensor QuantizeTable(const at::Tensor& weight, TableDtype dtype);
// Fails naming `what` unless `stored` is the stored form of a `dim` table of `dtype`.
void CheckStoredTable(const at::Tensor& stored, TableDtype dtype, int64_t dim, const std::string& what);
// True when every value the stored table decodes to is finite (for INT8 rows: their scale and
// bias, which is the same thing, without decoding the table).
bool StoredTableFinite(const at::Tensor& stored, TableDtype dtype, int64_t dim);
// The stored form back to fp32 [rows, dim]; `stored` is checked against dtype and dim, errors
// naming `what`.
at::Tensor DequantizeTable(const at::Tensor& stored, TableDtype dtype, int64_t dim,
                           const std::string& what);

}  // namespace tzrec
