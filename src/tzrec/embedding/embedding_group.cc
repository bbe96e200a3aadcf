#include "tzrec/embedding/embedding_group.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/index_copy.h>
#include <ATen/ops/zeros.h>

#include <algorithm>

#include "tzrec/common/error.h"

namespace tzrec {
namespace {

// TorchEasyRec reads embedding_dim only for features its groups use (a config may leave it out
// of the others).
void RequireEmbeddingDim(const Feature& feature) {
  if (feature.embedding_dim() <= 0) Fail(feature.config_path(), ".embedding_dim must be set and > 0");
}

// Steps per row of a sequence feature (int32 [B]).
const at::Tensor& StepLengths(const Feature* feature, const Batch& batch) {
  if (feature->is_sparse()) return batch.Sequence(feature->name(), feature->data_group()).step_lengths;
  return batch.DenseSeq(feature->name(), feature->data_group()).step_lengths;
}

int64_t MaxLength(const at::Tensor& lengths) {
  const at::Tensor l = lengths.contiguous();
  const int32_t* p = l.data_ptr<int32_t>();
  int64_t most = 0;
  for (int64_t i = 0; i < l.numel(); ++i) most = std::max<int64_t>(most, p[i]);
  return most;
}

bool SameLengths(const at::Tensor& a, const at::Tensor& b) {
  if (a.data_ptr() == b.data_ptr()) return true;
  if (a.numel() != b.numel()) return false;
  const at::Tensor x = a.contiguous(), y = b.contiguous();
  return std::equal(x.data_ptr<int32_t>(), x.data_ptr<int32_t>() + x.numel(), y.data_ptr<int32_t>());
}

}  // namespace

at::Tensor PadJagged(const at::Tensor& values, const at::Tensor& lengths, int64_t max_length) {
  const int64_t rows = lengths.numel();
  const int64_t longest = MaxLength(lengths);
  const int64_t steps = max_length >= 0 ? max_length : longest;
  TZREC_CHECK(longest <= steps, "a sequence of ", longest, " steps does not fit ", steps);
  const int64_t total = values.size(0);
  at::Tensor index = at::empty({total}, at::TensorOptions().dtype(at::kLong));
  int64_t* idx = index.data_ptr<int64_t>();
  const at::Tensor l = lengths.contiguous();
  const int32_t* len = l.data_ptr<int32_t>();
  int64_t j = 0;
  for (int64_t b = 0; b < rows; ++b) {
    TZREC_CHECK(j + len[b] <= total, "sequence lengths sum past the ", total, " values");
    for (int32_t t = 0; t < len[b]; ++t) idx[j++] = b * steps + t;
  }
  TZREC_CHECK(j == total, "sequence lengths sum to ", j, " but there are ", total, " values");
  at::Tensor padded = at::zeros({rows * steps, values.size(1)}, values.options());
  return at::index_copy(padded, 0, index, values).view({rows, steps, values.size(1)});
}

EmbeddingGroup::EmbeddingGroup(
    EmbeddingCollection* collection, const std::vector<const Feature*>& features,
    const google::protobuf::RepeatedPtrField<protos::FeatureGroupConfig>& groups, Options options) {
  std::map<std::string, const Feature*> by_name;
  for (const Feature* f : features) by_name[f->name()] = f;
  for (int g = 0; g < groups.size(); ++g) {
    const auto& group = groups.Get(g);
    std::string where = StrCat(options.where, "[", g, "]");
    const std::string& name = group.group_name();
    if (groups_.count(name) || sequence_groups_.count(name)) {
      Fail(where, ".group_name: duplicate group '", name, "'");
    }
    const auto type = group.group_type();
    const std::string suffix = group.embedding_name_suffix().empty() ? "" : "_" + group.embedding_name_suffix();
    if (type == protos::SEQUENCE || type == protos::JAGGED_SEQUENCE) {
      if (group.sequence_groups_size() > 0 || group.sequence_encoders_size() > 0) {
        Fail(where, ": sequence_groups / sequence_encoders belong to DEEP groups, not to a ",
             protos::FeatureGroupType_Name(type), " group");
      }
      AddSequenceGroup(collection, by_name, name, group.feature_names(), suffix,
                       type == protos::JAGGED_SEQUENCE, options, where);
      group_order_.push_back(name);
      continue;
    }
    const bool wide = type == protos::WIDE;
    if (wide && group.sequence_groups_size() > 0) Fail(where, ".sequence_groups: only DEEP groups nest sequence groups");
    if (group.feature_names_size() == 0 && group.sequence_groups_size() == 0) {
      Fail(where, ".feature_names is empty");
    }
    std::vector<Member> members;
    for (const auto& feature_name : group.feature_names()) {
      auto it = by_name.find(feature_name);
      if (it == by_name.end()) Fail(where, ".feature_names: unknown feature '", feature_name, "'");
      const Feature* feature = it->second;
      if (feature->is_sequence()) {
        Fail(where, ": sequence feature '", feature_name, "' in a ", wide ? "WIDE" : "DEEP",
             " group; put it in a SEQUENCE group or in this group's sequence_groups");
      }
      // One vector per row: a group's features must have the same rows (TorchEasyRec: a
      // feature group may not mix data groups).
      if (!members.empty() && members.front().feature->data_group() != feature->data_group()) {
        Fail(where, ": group '", name, "' mixes data groups: '", members.front().feature->name(), "' is in ",
             members.front().feature->data_group(), ", '", feature_name, "' in ", feature->data_group(),
             " (features reading the negative sampler's attr_fields are in __NEG__)");
      }
      Member member;
      member.feature = feature;
      if (feature->is_sparse()) {
        RequireEmbeddingDim(*feature);
        const int dim = wide ? options.wide_embedding_dim : feature->embedding_dim();
        const std::string table_name =
            options.table_prefix + feature->embedding_name() + suffix + (wide ? "_wide" : "");
        const int table = collection->AddTable(table_name, feature->num_embeddings(), dim,
                                               feature->trainable(), feature->name(),
                                               where + " feature '" + feature_name + "'", /*sequence=*/false,
                                               feature->zch(), feature->dynamicemb(), feature->table_data_type());
        member.lookup = collection->AddLookup(feature, table);
        member.dim = dim;
        member.table = table_name;
      } else {
        if (wide) Fail(where, ": WIDE groups take sparse features only, '", feature_name, "' is dense");
        AddDenseMember(&member, options);
      }
      members.push_back(member);
    }
    groups_[name] = std::move(members);
    group_order_.push_back(name);
    std::vector<std::string>& nested = nested_[name];
    for (int s = 0; s < group.sequence_groups_size(); ++s) {
      const auto& seq = group.sequence_groups(s);
      const std::string seq_where = StrCat(where, ".sequence_groups[", s, "]");
      std::string seq_name = seq.group_name();
      if (seq_name.empty()) {
        if (group.sequence_groups_size() > 1) {
          Fail(seq_where, ".group_name is required when a group has several sequence_groups");
        }
        seq_name = name;
      }
      if (sequence_groups_.count(seq_name) || (seq_name != name && groups_.count(seq_name))) {
        Fail(seq_where, ".group_name: duplicate group '", seq_name, "'");
      }
      const std::string seq_suffix = seq.embedding_name_suffix().empty() ? suffix : "_" + seq.embedding_name_suffix();
      AddSequenceGroup(collection, by_name, seq_name, seq.feature_names(), seq_suffix, false, options, seq_where);
      nested.push_back(seq_name);
    }
  }
}

void EmbeddingGroup::AddSequenceGroup(EmbeddingCollection* collection,
                                      const std::map<std::string, const Feature*>& by_name,
                                      const std::string& name,
                                      const google::protobuf::RepeatedPtrField<std::string>& feature_names,
                                      const std::string& suffix, bool jagged, const Options& options,
                                      const std::string& where) {
  SequenceGroup group;
  group.jagged = jagged;
  for (const auto& feature_name : feature_names) {
    auto it = by_name.find(feature_name);
    if (it == by_name.end()) Fail(where, ".feature_names: unknown feature '", feature_name, "'");
    const Feature* feature = it->second;
    Member member;
    member.feature = feature;
    member.dim = feature->output_dim();
    if (!feature->is_sparse()) AddDenseMember(&member, options);
    if (feature->is_sparse()) {
      RequireEmbeddingDim(*feature);
      const std::string table_name = options.table_prefix + feature->embedding_name() + suffix + kSequenceTableSuffix;
      const int table = collection->AddTable(table_name, feature->num_embeddings(), feature->embedding_dim(),
                                             feature->trainable(), feature->name(),
                                             where + " feature '" + feature_name + "'", /*sequence=*/true,
                                             feature->zch(), feature->dynamicemb(), feature->table_data_type());
      member.lookup = feature->is_sequence() ? collection->AddSequenceLookup(feature, table)
                                             : collection->AddLookup(feature, table);
      member.table = table_name;
    }
    (feature->is_sequence() ? group.sequence : group.query).push_back(member);
  }
  if (group.sequence.empty() && !options.query_only_sequence_groups) {
    Fail(where, ": sequence group '", name, "' has no sequence feature (its feature_names must include ",
         "at least one sequence feature, e.g. '<sequence_name>__<feature>')");
  }
  if (group.sequence.empty() && group.query.empty()) Fail(where, ": sequence group '", name, "' has no features");
  sequence_groups_[name] = std::move(group);
  sequence_order_.push_back(name);
}

const std::vector<EmbeddingGroup::Member>& EmbeddingGroup::Members(const std::string& name) const {
  auto it = groups_.find(name);
  if (it == groups_.end()) {
    if (sequence_groups_.count(name)) {
      Fail("feature group '", name, "' is a sequence group; this input needs a DEEP group");
    }
    Fail("model needs feature group '", name, "' which the config lacks");
  }
  return it->second;
}

const EmbeddingGroup::SequenceGroup& EmbeddingGroup::SequenceGroupOf(const std::string& name) const {
  auto it = sequence_groups_.find(name);
  if (it == sequence_groups_.end()) {
    if (groups_.count(name)) Fail("feature group '", name, "' is not a SEQUENCE group");
    Fail("model needs sequence group '", name, "' which the config lacks");
  }
  return it->second;
}

std::vector<int> EmbeddingGroup::GroupDims(const std::string& name) const {
  std::vector<int> dims;
  for (const auto& m : Members(name)) dims.push_back(m.dim);
  return dims;
}

int EmbeddingGroup::GroupTotalDim(const std::string& name) const {
  int total = 0;
  for (const auto& m : Members(name)) total += m.dim;
  return total;
}

int EmbeddingGroup::QueryDim(const std::string& sequence_group) const {
  int total = 0;
  for (const auto& m : SequenceGroupOf(sequence_group).query) total += m.dim;
  return total;
}

int EmbeddingGroup::SequenceDim(const std::string& sequence_group) const {
  int total = 0;
  for (const auto& m : SequenceGroupOf(sequence_group).sequence) total += m.dim;
  return total;
}

const std::vector<std::string>& EmbeddingGroup::NestedSequenceGroups(const std::string& name) const {
  static const std::vector<std::string> kNone;
  auto it = nested_.find(name);
  return it == nested_.end() ? kNone : it->second;
}

void EmbeddingGroup::AddDenseMember(Member* member, const Options& options) {
  const Feature& feature = *member->feature;
  member->dim = feature.output_dim();
  if (feature.dense_embedding().kind == DenseEmbeddingSpec::Kind::kNone) return;
  TZREC_CHECK(options.dense_embeddings, "no module for the dense embedding of ", feature.name());
  dense_embeddings_ = options.dense_embeddings;
  member->dense_key = dense_embeddings_->Add(options.table_prefix + feature.name(), feature);
}

at::Tensor EmbeddingGroup::DenseInput(const Member& member, const at::Tensor& values) const {
  if (member.dense_key.empty()) return values;
  return dense_embeddings_->Forward(member.dense_key, values);
}

at::Tensor EmbeddingGroup::ConcatPooled(const std::vector<Member>& members, const LookupOutputs& lookups,
                                        const Batch& batch) const {
  // Neighbouring features that are neighbours in a storage output become one slice: every
  // slice costs a full-size gradient buffer in backward, so fewer slices is much faster.
  std::vector<at::Tensor> parts;
  int run_storage = -1, run_begin = 0, run_end = 0;
  auto flush = [&]() {
    if (run_storage < 0) return;
    const at::Tensor& full = lookups.storage_out[run_storage];
    const int64_t dim = lookups.storage_dim[run_storage];
    parts.push_back(run_begin == 0 && run_end * dim == full.size(1)
                        ? full
                        : full.narrow(1, run_begin * dim, (run_end - run_begin) * dim));
    run_storage = -1;
  };
  for (const auto& m : members) {
    if (m.lookup >= 0) {
      const int s = lookups.storage_of[m.lookup], k = lookups.position_of[m.lookup];
      if (s == run_storage && k == run_end) {
        ++run_end;
        continue;
      }
      flush();
      run_storage = s;
      run_begin = k;
      run_end = k + 1;
    } else {
      flush();
      parts.push_back(DenseInput(m, batch.Dense(m.feature->name(), m.feature->data_group())));
    }
  }
  flush();
  if (parts.empty()) return at::zeros({batch.size, 0}, at::TensorOptions().dtype(at::kFloat));
  return parts.size() == 1 ? parts[0] : at::cat(parts, 1);
}

void EmbeddingGroup::ForwardSequence(const std::string& name, const SequenceGroup& group,
                                     const LookupOutputs& lookups, const Batch& batch,
                                     std::map<std::string, at::Tensor>* out) const {
  (*out)[name + ".query"] = ConcatPooled(group.query, lookups, batch);
  if (group.sequence.empty()) return;  // query_only_sequence_groups
  std::vector<at::Tensor> values, lengths;
  bool same = true;
  for (const Member& m : group.sequence) {
    values.push_back(m.lookup >= 0 ? lookups.sequence_out[m.lookup]
                                   : batch.DenseSeq(m.feature->name(), m.feature->data_group()).values);
    lengths.push_back(StepLengths(m.feature, batch));
    same = same && SameLengths(lengths.front(), lengths.back());
  }
  (*out)[name + ".sequence_length"] = lengths.front().to(at::kLong);
  if (group.jagged) {
    if (!same) {
      Fail("JAGGED_SEQUENCE group '", name, "': its sequence features have different step counts ",
           "in one row; a jagged group needs sequences of one length per row");
    }
    (*out)[name + ".sequence"] = values.size() == 1 ? values[0] : at::cat(values, 1);
    return;
  }
  if (same) {
    at::Tensor jagged = values.size() == 1 ? values[0] : at::cat(values, 1);
    (*out)[name + ".sequence"] = PadJagged(jagged, lengths.front());
    return;
  }
  // Sequences of different lengths (separate sequence features): each padded to the longest.
  int64_t longest = 0;
  for (const at::Tensor& l : lengths) longest = std::max(longest, MaxLength(l));
  std::vector<at::Tensor> padded;
  for (size_t i = 0; i < values.size(); ++i) padded.push_back(PadJagged(values[i], lengths[i], longest));
  (*out)[name + ".sequence"] = at::cat(padded, 2);
}

std::map<std::string, at::Tensor> EmbeddingGroup::Forward(const LookupOutputs& lookups,
                                                          const Batch& batch) const {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, members] : groups_) {
    if (members.empty()) continue;  // a DEEP group of nested sequence groups only
    out[name] = ConcatPooled(members, lookups, batch);
  }
  for (const auto& [name, group] : sequence_groups_) ForwardSequence(name, group, lookups, batch, &out);
  return out;
}

}  // namespace tzrec

namespace tzrec {
namespace {

// Dtypes are ScalarType numbers in this source (4 = int64, 6 = float32; script_writer.h).
constexpr char kPoolMethod[] = R"(def _tzrec_pool(self, rows: Tensor, lengths: Tensor, mean: bool) -> Tensor:
    bags = lengths.size(0)
    segment = torch.repeat_interleave(torch.arange(bags, dtype=4), lengths)
    pooled = torch.zeros([bags, rows.size(1)], dtype=6).index_add(0, segment, rows)
    if mean:
        pooled = pooled / torch.clamp(lengths, min=1).to(6).unsqueeze(1)
    return pooled
)";

// Sequence steps padded to [B, T, D] (T: `steps`, or the longest row when negative), as
// PadJagged does it.
constexpr char kPadMethod[] = R"(def _tzrec_pad(self, values: Tensor, lengths: Tensor, steps: int) -> Tensor:
    rows = lengths.size(0)
    if steps < 0:
        steps = int(torch.max(lengths)) if rows > 0 else 0
    starts = torch.cumsum(lengths, 0) - lengths
    row = torch.repeat_interleave(torch.arange(rows, dtype=4), lengths)
    position = torch.arange(values.size(0), dtype=4) - torch.repeat_interleave(starts, lengths)
    padded = torch.zeros([rows * steps, values.size(1)], dtype=6).index_copy(0, row * steps + position, values)
    return padded.view([rows, steps, values.size(1)])
)";

// The pooled embedding of `feature` in `table_name`, as the fused lookup computes it; with
// `steps`, one pooled row per step of a sequence feature (its ids per step: ".key_lengths").
std::string ScriptPooledLookup(ScriptWriter& w, const Feature* feature, const std::string& table_name,
                               const StoredTables& tables, bool steps = false) {
  const std::string f = steps ? feature->name() + ".step" : feature->name();
  const std::string& input = feature->name();
  return w.Once("pooled:" + table_name + ":" + f, [&]() {
    auto it = tables.find(table_name);
    if (it == tables.end()) ScriptWriter::Unsupported("table '" + table_name + "' was not given");
    const StoredTable& table = it->second;
    const std::string ids = w.Once("ids:" + input, [&]() {
      return w.Let(input + "_ids", w.Input(input + ".values") + ".to(4)");
    });
    const std::string lengths = w.Once("lengths:" + f, [&]() {
      return w.Let(f + "_lengths", w.Input(input + (steps ? ".key_lengths" : ".lengths")) + ".to(4)");
    });
    std::string weights;
    if (feature->weighted()) {
      weights = w.Once("weights:" + input, [&]() {
        return w.Let(input + "_weights", w.Input(input + ".weights") + ".to(6)");
      });
    }
    const bool mean = feature->pooling() == "mean";
    const std::string hint = f + "_emb";
    if (table.dtype == TableDtype::kFP32 && !(mean && feature->weighted())) {
      const std::string weight = w.Tensor(table_name + "_weight", table.stored, "table:" + table_name);
      const std::string offsets = w.Once("offsets:" + f, [&]() {
        return w.Let(f + "_offsets", "torch.cumsum(" + lengths + ", 0) - " + lengths);
      });
      return w.Let(hint, "torch.embedding_bag(" + weight + ", " + ids + ", " + offsets + ", False, " +
                             (mean ? "1" : "0") + ", False, " + (weights.empty() ? "None" : weights) +
                             ", False)[0]");
    }
    std::string rows;
    if (table.dtype == TableDtype::kINT8) {
      // Rows of TorchRec's layout split into codes and fp16 scale / bias: w = code * scale + bias.
      const at::Tensor& stored = table.stored;
      const std::string codes = w.Tensor(table_name + "_codes", stored.narrow(1, 0, table.dim),
                                         "codes:" + table_name);
      const std::string scale = w.Tensor(
          table_name + "_scale", stored.narrow(1, table.dim, 2).contiguous().view(at::kHalf).reshape({-1}),
          "scale:" + table_name);
      const std::string bias = w.Tensor(
          table_name + "_bias", stored.narrow(1, table.dim + 2, 2).contiguous().view(at::kHalf).reshape({-1}),
          "bias:" + table_name);
      rows = w.Let(f + "_rows", "torch.index_select(" + codes + ", 0, " + ids + ").to(6) * " +
                                    "torch.index_select(" + scale + ", 0, " + ids +
                                    ").to(6).unsqueeze(1) + torch.index_select(" + bias +
                                    ", 0, " + ids + ").to(6).unsqueeze(1)");
    } else {
      const std::string weight = w.Tensor(table_name + "_weight", table.stored, "table:" + table_name);
      rows = w.Let(f + "_rows", "torch.index_select(" + weight + ", 0, " + ids + ").to(6)");
    }
    if (!weights.empty()) rows = w.Let(f + "_rows", rows + " * " + weights + ".unsqueeze(1)");
    w.Method("_tzrec_pool", kPoolMethod);
    return w.Let(hint, std::string("self._tzrec_pool(") + rows + ", " + lengths + ", " +
                           (mean ? "True" : "False") + ")");
  });
}

}  // namespace

namespace {

// One member's input as TorchScript: a pooled lookup, a sequence feature's steps ([S, D]), or
// a dense feature's values.
std::string ScriptMember(ScriptWriter& w, const Feature* feature, int lookup, const std::string& table,
                         const StoredTables& tables, const DenseEmbeddingsImpl* dense,
                         const std::string& dense_key) {
  // A feature of another data group (an item feature a negative sampler also fills) holds just
  // the request's rows at inference, where no sampler runs: an input like any other.
  if (lookup >= 0) return ScriptPooledLookup(w, feature, table, tables, feature->is_sequence());
  const std::string& f = feature->name();
  const std::string values = w.Once("dense:" + f, [&]() {
    return w.Let(f + "_dense", w.Input(f + ".values") + ".to(6).reshape([-1, " +
                                   std::to_string(feature->value_dim()) + "])");
  });
  if (dense_key.empty()) return values;
  return w.Once("dense_embedding:" + dense_key, [&]() { return dense->Script(w, dense_key, values); });
}

std::string ScriptConcat(ScriptWriter& w, const std::vector<std::string>& parts, const std::string& hint, int dim) {
  if (parts.size() == 1) return parts[0];
  std::string list;
  for (const std::string& part : parts) list += (list.empty() ? "" : ", ") + part;
  return w.Let(hint, "torch.cat([" + list + "], " + std::to_string(dim) + ")");
}

}  // namespace

std::map<std::string, std::string> EmbeddingGroup::Script(ScriptWriter& w, const StoredTables& tables) const {
  std::map<std::string, std::string> out;
  for (const std::string& name : group_order_) {
    auto members = groups_.find(name);
    if (members == groups_.end()) continue;  // a SEQUENCE group (below)
    std::vector<std::string> parts;
    for (const Member& m : members->second) parts.push_back(ScriptMember(w, m.feature, m.lookup, m.table, tables, dense_embeddings_, m.dense_key));
    if (!parts.empty()) out[name] = ScriptConcat(w, parts, name + "_input", 1);
  }
  for (const std::string& name : sequence_order_) {
    const SequenceGroup& group = sequence_groups_.at(name);
    if (group.jagged) ScriptWriter::Unsupported("JAGGED_SEQUENCE group '" + name + "'");
    if (group.sequence.empty()) {  // query_only_sequence_groups
      std::vector<std::string> query;
      for (const Member& m : group.query) query.push_back(ScriptMember(w, m.feature, m.lookup, m.table, tables, dense_embeddings_, m.dense_key));
      if (query.empty()) ScriptWriter::Unsupported("sequence group '" + name + "' without features");
      out[name + ".query"] = ScriptConcat(w, query, name + "_query", 1);
      continue;
    }
    // Steps per row of every sequence feature; the group pads them all to the longest (with
    // equal lengths, what Forward's concatenate-then-pad gives too).
    std::vector<std::string> lengths, steps;
    for (const Member& m : group.sequence) {
      const std::string& f = m.feature->name();
      lengths.push_back(w.Once("step_lengths:" + f, [&]() {
        return w.Let(f + "_step_lengths", w.Input(f + ".lengths") + ".to(4)");
      }));
      steps.push_back(ScriptMember(w, m.feature, m.lookup, m.table, tables, dense_embeddings_, m.dense_key));
    }
    std::string longest = "int(torch.max(" + lengths[0] + "))";
    if (lengths.size() > 1) {
      std::string maxima;
      for (const std::string& l : lengths) maxima += (maxima.empty() ? "" : ", ") + ("torch.max(" + l + ")");
      longest = "int(torch.max(torch.stack([" + maxima + "])))";
    }
    const std::string rows = w.Let(name + "_rows", lengths[0] + ".size(0)");
    const std::string t = w.Let(name + "_steps", longest + " if " + rows + " > 0 else 0");
    w.Method("_tzrec_pad", kPadMethod);
    std::vector<std::string> padded;
    for (size_t i = 0; i < steps.size(); ++i) {
      padded.push_back(w.Let(name + "_padded", "self._tzrec_pad(" + steps[i] + ", " + lengths[i] + ", " + t + ")"));
    }
    out[name + ".sequence"] = ScriptConcat(w, padded, name + "_sequence", 2);
    out[name + ".sequence_length"] = lengths[0];
    std::vector<std::string> query;
    for (const Member& m : group.query) query.push_back(ScriptMember(w, m.feature, m.lookup, m.table, tables, dense_embeddings_, m.dense_key));
    out[name + ".query"] = query.empty() ? w.Let(name + "_query", "torch.zeros([" + rows + ", 0], dtype=6)")
                                         : ScriptConcat(w, query, name + "_query", 1);
  }
  return out;
}

}  // namespace tzrec
