// pooling_encoder: the sum, or the mean over the true length (at least 1), of a sequence's
// steps (padded steps are zero, so the sum needs no mask).
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/sum.h>

#include "tzrec/common/error.h"
#include "tzrec/modules/sequence_encoder.h"

namespace tzrec {
namespace {

class PoolingEncoder : public SequenceEncoder {
 public:
  PoolingEncoder(const protos::PoolingEncoder& config, int64_t sequence_dim, const std::string& where)
      : SequenceEncoder(config.input()), dim_(sequence_dim),
        mean_(config.pooling_type() == "mean"), max_seq_length_(config.max_seq_length()) {
    if (config.pooling_type() != "mean" && config.pooling_type() != "sum") {
      Fail(where, ".pooling_type: '", config.pooling_type(), "' is not one of mean, sum");
    }
    if (max_seq_length_ < 0) Fail(where, ".max_seq_length must be >= 0, got ", max_seq_length_);
  }
  int64_t output_dim() const override { return dim_; }
  std::string Script(ScriptWriter& w, const std::string& query, const std::string& sequence_in,
                     const std::string& lengths_in, const std::string& name) const override {
    std::string sequence = sequence_in, lengths = lengths_in;
    ScriptTruncateSteps(w, max_seq_length_, &sequence, &lengths);
    const std::string sum = w.Let(name + "_sum", "torch.sum(" + sequence + ", [1])");
    if (!mean_) return sum;
    return w.Let(name + "_mean", sum + " / torch.clamp(" + lengths + ", min=1).to(6).unsqueeze(1)");
  }
  at::Tensor Encode(const SequenceInputs& raw) override {
    const SequenceInputs in = TruncateSteps(raw, max_seq_length_);
    at::Tensor sum = at::sum(in.sequence, 1);
    if (!mean_) return sum;
    return sum / at::clamp_min(in.lengths, 1).to(sum.scalar_type()).unsqueeze(1);
  }

 private:
  int64_t dim_;
  bool mean_;
  int64_t max_seq_length_;
};

std::shared_ptr<SequenceEncoder> Make(const SequenceEncoderContext& c) {
  return std::make_shared<PoolingEncoder>(c.config->pooling_encoder(), c.sequence_dim, c.where);
}

}  // namespace

TZREC_REGISTER(SequenceEncoderRegistry(), "pooling_encoder", Make, "name", "input", "pooling_type",
               "max_seq_length");

}  // namespace tzrec
