// Sequence encoders: turn one sequence group's inputs (embedding/embedding_group.h:
// "<g>.query" [B, Dq], "<g>.sequence" [B, T, Ds], "<g>.sequence_length" [B]) into one vector
// per row, as TorchEasyRec's modules/sequence.py does:
//   din_encoder              target attention: MLP over [q, s, q - s, q * s] per step, Linear(1),
//                            padded steps at -2^31 + 1, softmax over steps, weighted sum -> [B, Ds]
//   simple_attention         softmax(s . q) over the valid steps, weighted sum -> [B, Ds]
//   pooling_encoder          sum, or mean over the true length (at least 1) -> [B, Ds]
//   self_attention_encoder   Q/K/V Linear, multi-head self-attention (padded keys masked), mean
//                            over the valid steps -> [B, multihead_attn_dim]
//   multi_window_din_encoder PReLU(Linear(MLP([s, q * s, q]))) weights per step, summed per
//                            window of windows_len steps and divided by the window's valid
//                            steps, then the query -> [B, (windows + 1) * Ds]
// The query is zero-padded to Ds (extra sequence-only features go last); Dq > Ds is an error.
// `max_seq_length` > 0 keeps the first that many steps. Encoders register under their
// SeqEncoderConfig oneof name with the fields they honour. One thread at a time.
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <string>

#include "tzrec/common/registry.h"
#include "tzrec/protos/seq_encoder.pb.h"
#include "tzrec/script/script_writer.h"

namespace tzrec {

struct SequenceInputs {
  at::Tensor query;     // [B, Dq]
  at::Tensor sequence;  // [B, T, Ds]
  at::Tensor lengths;   // int64 [B]
};

class SequenceEncoder : public torch::nn::Module {
 public:
  explicit SequenceEncoder(std::string input) : input_(std::move(input)) {}
  // The sequence group it reads.
  const std::string& input() const { return input_; }
  virtual int64_t output_dim() const = 0;
  virtual at::Tensor Encode(const SequenceInputs& inputs) = 0;
  // Encode's inference form as TorchScript over the locals of the group's query [B, Dq],
  // sequence [B, T, Ds] and int64 lengths [B]; returns the output local. Encoders without one
  // throw ScriptUnsupported.
  virtual std::string Script(ScriptWriter& w, const std::string& query, const std::string& sequence,
                             const std::string& lengths, const std::string& name) const;

 private:
  std::string input_;
};

struct SequenceEncoderContext {
  const protos::SeqEncoderConfig* config = nullptr;
  int64_t query_dim = 0;
  int64_t sequence_dim = 0;
  std::string where;  // config path of the encoder's message, for errors
};

using SequenceEncoderFactory = std::function<std::shared_ptr<SequenceEncoder>(const SequenceEncoderContext&)>;
// Slot tzrec.protos.SeqEncoderConfig / seq_module.
Registry<SequenceEncoderFactory>& SequenceEncoderRegistry();
// The input group named by the encoder config (its oneof member's `input`).
std::string SequenceEncoderInput(const protos::SeqEncoderConfig& config, const std::string& where);
void SetSequenceEncoderInput(protos::SeqEncoderConfig* config, const std::string& input);
std::shared_ptr<SequenceEncoder> CreateSequenceEncoder(const SequenceEncoderContext& context);

// A DIN encoder (also what multi_tower_din's din_towers build).
std::shared_ptr<SequenceEncoder> MakeDinEncoder(const std::string& input, int64_t query_dim,
                                                int64_t sequence_dim, const protos::MLP& attn_mlp,
                                                int64_t max_seq_length, const std::string& where);

// Helpers shared by the encoders.
// Keeps the first `max_seq_length` steps (> 0) of `inputs`, lengths clamped to it.
SequenceInputs TruncateSteps(const SequenceInputs& inputs, int64_t max_seq_length);
// bool [B, T]: step t < length of its row.
at::Tensor StepMask(const at::Tensor& lengths, int64_t steps);
// TorchEasyRec's score of a padded step, -(2^31) + 1: exp of it underflows to 0 next to any
// real score.
constexpr double kPaddingScore = -2147483647.0;
// Softmax over the last dim with masked-out entries at -2^31 + 1 (TorchEasyRec's padding
// score: a row without steps attends uniformly to its zero padding).
at::Tensor MaskedSoftmax(const at::Tensor& scores, const at::Tensor& mask);
// [B, Dq] zero-padded on the right to `dim` columns (Dq > dim fails naming `where`).
at::Tensor PadQuery(const at::Tensor& query, int64_t dim);
void CheckQueryDim(int64_t query_dim, int64_t sequence_dim, const std::string& where);
// TruncateSteps as TorchScript: rebinds `sequence` and `lengths` to the first `max_seq_length`
// steps (> 0; otherwise leaves them).
void ScriptTruncateSteps(ScriptWriter& w, int64_t max_seq_length, std::string* sequence, std::string* lengths);

}  // namespace tzrec
