#include "tzrec/fg/feature_generator.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <exception>
#include <functional>
#include <thread>
#include <map>
#include <unordered_map>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/fg/feature_op.h"

namespace tzrec::fg {

namespace {

void AppendNumberText(double value, std::string* out) {
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out->append(buffer, result.ptr);
}

// ------------------------------------------------------------------ reading input cells

// Where one input's values come from for this batch.
struct Source {
  const Column* column = nullptr;  // data column or a produced feature's text column
  bool constant = false;
  std::string constant_text;
  bool broadcast = false;  // one-row column over a larger batch
};

void FillItems(std::string_view text, std::string_view separator, bool raw, InputItems* out) {
  out->text = text;
  if (text.empty()) return;
  out->missing = false;
  if (raw) {
    out->items.push_back(text);
    return;
  }
  ForEachPiece(text, separator, [&](std::string_view piece) {
    if (!piece.empty()) out->items.push_back(piece);
  });
}

// Cell `row` of `source` as the values of a non-sequence input.
void CellItems(const Source& source, size_t row, const FeatureInput& input,
               const std::string& separator, InputItems* out) {
  out->Reset();
  if (source.constant) {
    FillItems(source.constant_text, separator, input.raw_text, out);
    return;
  }
  const Column& c = *source.column;
  if (source.broadcast) row = 0;
  if (c.IsNull(row)) return;
  switch (c.type) {
    case ColumnType::kInt64:
      out->scratch = std::to_string(c.ints[row]);
      break;
    case ColumnType::kDouble:
      out->scratch.clear();
      AppendNumberText(c.doubles[row], &out->scratch);
      break;
    case ColumnType::kString: {
      std::string_view text = c.StringAt(row);
      if (c.list_depth == 0) {
        FillItems(text, separator, input.raw_text, out);
        return;
      }
      out->text = text;
      if (text.empty()) return;
      out->missing = false;
      if (input.raw_text) {
        out->items.push_back(text);
        return;
      }
      // Lists: every level's items are values of the row.
      auto add = [&](std::string_view piece) {
        if (!piece.empty()) out->items.push_back(piece);
      };
      if (c.list_depth == 1) {
        ForEachPiece(text, c.list_separator, add);
      } else {
        ForEachPiece(text, c.nested_separator, [&](std::string_view sub) {
          ForEachPiece(sub, c.list_separator, add);
        });
      }
      return;
    }
  }
  out->text = out->scratch;
  out->missing = false;
  out->items.push_back(out->scratch);
}

// Steps of cell `row` of a sequence input, and how to split each step into values.
struct Steps {
  bool missing = true;
  std::vector<std::string_view> steps;
  std::string_view item_separator;
  std::string scratch;
};

void CellSteps(const Source& source, size_t row, const std::string& sequence_delim,
               const std::string& separator, Steps* out) {
  out->missing = true;
  out->steps.clear();
  out->item_separator = separator;
  std::string_view text;
  int depth = 0;
  std::string_view list_sep, nested_sep;
  if (source.constant) {
    text = source.constant_text;
  } else {
    const Column& c = *source.column;
    if (source.broadcast) row = 0;
    if (c.IsNull(row)) return;
    if (c.type == ColumnType::kInt64) {
      out->scratch = std::to_string(c.ints[row]);
      text = out->scratch;
    } else if (c.type == ColumnType::kDouble) {
      out->scratch.clear();
      AppendNumberText(c.doubles[row], &out->scratch);
      text = out->scratch;
    } else {
      text = c.StringAt(row);
      depth = c.list_depth;
      list_sep = c.list_separator;
      nested_sep = c.nested_separator;
    }
  }
  if (text.empty()) return;
  out->missing = false;
  if (depth == 0) {
    ForEachPiece(text, sequence_delim, [&](std::string_view step) { out->steps.push_back(step); });
  } else if (depth == 1) {
    // LIST<x>: each element is one step (still split by the feature separator).
    ForEachPiece(text, list_sep, [&](std::string_view step) { out->steps.push_back(step); });
  } else {
    ForEachPiece(text, nested_sep, [&](std::string_view step) { out->steps.push_back(step); });
    out->item_separator = list_sep;
  }
}

// ------------------------------------------------------------------ per-feature output

// Turns op values (+ default) into ids or floats and appends them to the feature's output.
class OutputWriter {
 public:
  // `op` is null under FG_BUCKETIZE (values arrive as text).
  OutputWriter(const FeatureInfo& info, const FeatureOp* op)
      : info_(info), kind_(op ? op->kind() : OpValues::Kind::kTexts) {
    dense_dim_ = std::max(info.value_dim, 1);
    if (!info.has_default_value) return;
    // The default is text before bucketizing, split like an input value.
    ForEachPiece(info.default_value, info.separator, [&](std::string_view piece) {
      if (!piece.empty()) default_texts_.emplace_back(piece);
    });
    if (kind_ == OpValues::Kind::kNumbers || !info.is_sparse) {
      for (const std::string& text : default_texts_) {
        double value;
        if (!ParseDouble(text, &value)) {
          Fail(info.config_path, ".default_value: '", Printable(info.default_value),
               "' is not a list of numbers");
        }
        default_numbers_.push_back(value);
      }
      // One default fills every dimension of a missing value, as pyfg does; a list must be
      // one value per dimension.
      if (!info.is_sparse && default_numbers_.size() == 1 && dense_dim_ > 1) {
        default_numbers_.assign(dense_dim_, default_numbers_[0]);
      }
      if (!info.is_sparse && !default_numbers_.empty() &&
          static_cast<int>(default_numbers_.size()) != dense_dim_) {
        Fail(info.config_path, ".default_value: '", Printable(info.default_value), "' has ",
             default_numbers_.size(), " values but value_dim is ", dense_dim_,
             " (give one value for all dimensions, or one per dimension)");
      }
    }
    if (kind_ == OpValues::Kind::kIds) {
      op->EncodeDefault(info.default_value, &default_ids_);
    }
  }

  // Appends one value list (row or step); returns the number of values written.
  int32_t Write(OpValues* values, const RecordBatch& batch, size_t row, SparseValues* sparse,
                DenseValues* dense, std::string* produced) const {
    bool use_default = values->empty();
    if (!info_.is_sparse) {
      std::vector<double>& numbers = values->numbers;
      if (use_default) {
        numbers = default_numbers_;
      } else if (values->kind == OpValues::Kind::kTexts) {
        for (const std::string& text : values->texts) {
          double v;
          if (!ParseDouble(text, &v)) Fail(Where(batch, row), "'", Printable(text), "' is not a number");
          numbers.push_back(v);
        }
      }
      if (numbers.empty()) numbers.assign(dense_dim_, 0.0);
      if (static_cast<int>(numbers.size()) != dense_dim_) {
        Fail(Where(batch, row), numbers.size(), " values but value_dim is ", dense_dim_);
      }
      for (double v : numbers) {
        dense->values.push_back(static_cast<float>(v));
        if (produced) AppendProduced(v, produced);
      }
      return 1;
    }
    int32_t written = 0;
    std::string error;
    auto add_id = [&](int64_t id, float weight) {
      sparse->values.push_back(id);
      if (info_.weighted) sparse->weights.push_back(weight);
      if (produced) AppendProduced(static_cast<double>(id), produced);
      ++written;
    };
    const size_t limit = info_.type == "combo_feature" && info_.value_dim > 0
                             ? static_cast<size_t>(info_.value_dim)
                             : static_cast<size_t>(-1);
    if (use_default) {
      if (kind_ == OpValues::Kind::kIds) {
        for (int64_t id : default_ids_) add_id(id, 1.0f);
        return written;
      }
      if (kind_ == OpValues::Kind::kNumbers && info_.bucketizer->active()) {
        // A numeric op's default is a number (it hashes as one: 0 -> bucket 0).
        for (double number : default_numbers_) {
          int64_t id;
          if (!info_.bucketizer->FromNumber(number, &id, &error)) Fail(Where(batch, row), "default value: ", error);
          add_id(id, 1.0f);
        }
        return written;
      }
      for (const std::string& text : default_texts_) {
        if (static_cast<size_t>(written) >= limit) break;
        int64_t id;
        if (!Bucketize(text, &id, &error)) Fail(Where(batch, row), "default value: ", error);
        add_id(id, 1.0f);
      }
      return written;
    }
    switch (values->kind) {
      case OpValues::Kind::kIds:
        for (int64_t id : values->ids) {
          if (id < 0 || (info_.num_embeddings > 0 && id >= info_.num_embeddings)) {
            Fail(Where(batch, row), "token id ", id, " out of range [0, ", info_.num_embeddings, ")");
          }
          add_id(id, 1.0f);
        }
        break;
      case OpValues::Kind::kTexts:
        for (size_t i = 0; i < values->texts.size() && i < limit; ++i) {
          int64_t id;
          if (!Bucketize(values->texts[i], &id, &error)) Fail(Where(batch, row), error);
          add_id(id, values->weights.empty() ? 1.0f : values->weights[i]);
        }
        break;
      case OpValues::Kind::kNumbers:
        for (size_t i = 0; i < values->numbers.size() && i < limit; ++i) {
          int64_t id;
          if (!info_.bucketizer->FromNumber(values->numbers[i], &id, &error)) Fail(Where(batch, row), error);
          add_id(id, 1.0f);
        }
        break;
    }
    return written;
  }

  std::string Where(const RecordBatch& batch, size_t row) const {
    return StrCat(batch.RowLocation(row), ": feature '", info_.name, "' (", info_.config_path, "): ");
  }
  int dense_dim() const { return dense_dim_; }

 private:
  bool Bucketize(const std::string& text, int64_t* id, std::string* error) const {
    if (!info_.bucketizer->active()) {
      // FG_DAG stubs without a bucketizer pass text on; ids must already be integers.
      if (!ParseInt64(text, id)) {
        *error = StrCat("'", Printable(text), "' needs a bucketizer (hash_bucket_size, ...)");
        return false;
      }
      return true;
    }
    return info_.bucketizer->FromText(text, id, error);
  }
  static void AppendProduced(double value, std::string* produced) {
    if (!produced->empty() && produced->back() != ';') produced->push_back('\x1d');
    if (value == std::floor(value) && std::abs(value) < 9e15) {
      produced->append(std::to_string(static_cast<int64_t>(value)));
    } else {
      AppendNumberText(value, produced);
    }
  }

  const FeatureInfo& info_;
  OpValues::Kind kind_;
  int dense_dim_ = 1;
  std::vector<std::string> default_texts_;
  std::vector<double> default_numbers_;
  std::vector<int64_t> default_ids_;
};

}  // namespace

// ------------------------------------------------------------------ FeatureGenerator

FeatureGenerator::~FeatureGenerator() = default;

FeatureGenerator::FeatureGenerator(std::vector<FeatureInfo> features, protos::FgMode fg_mode,
                                   std::string encoded_multival_sep, int threads)
    : fg_mode_(fg_mode), encoded_sep_(std::move(encoded_multival_sep)), threads_(std::max(1, threads)) {
  TZREC_CHECK(fg_mode != protos::FG_NONE, "FG_NONE data needs no feature generation");
  // Dependency order for FG_DAG: a feature comes after the features its `feature:` inputs name.
  std::map<std::string, size_t> by_name;
  for (size_t i = 0; i < features.size(); ++i) by_name[features[i].name] = i;
  std::vector<int> state(features.size(), 0);  // 0 new, 1 visiting, 2 done
  std::vector<size_t> order;
  std::function<void(size_t, std::vector<std::string>&)> visit = [&](size_t i, std::vector<std::string>& path) {
    if (state[i] == 2) return;
    path.push_back(features[i].name);
    if (state[i] == 1) Fail(features[i].config_path, ": feature dependency cycle: ", Join(path, " -> "));
    state[i] = 1;
    if (fg_mode == protos::FG_DAG) {
      for (const FeatureInput& input : features[i].inputs) {
        if (input.side != Side::kFeature) continue;
        auto it = by_name.find(input.name);
        if (it == by_name.end()) {
          Fail(features[i].config_path, ": input 'feature:", input.name, "' names no feature");
        }
        visit(it->second, path);
      }
    }
    state[i] = 2;
    path.pop_back();
    order.push_back(i);
  };
  for (size_t i = 0; i < features.size(); ++i) {
    std::vector<std::string> path;
    visit(i, path);
  }
  for (size_t i : order) features_.push_back(std::move(features[i]));
  by_name.clear();
  for (size_t i = 0; i < features_.size(); ++i) by_name[features_[i].name] = i;
  consumed_.assign(features_.size(), false);
  producers_.resize(features_.size());
  for (size_t i = 0; i < features_.size(); ++i) {
    const FeatureInfo& info = features_[i];
    if (fg_mode_ != protos::FG_BUCKETIZE) ops_.push_back(CreateFeatureOp(info));
    else ops_.push_back(nullptr);
    OutputWriter check_defaults(info, ops_.back().get());  // default_value errors at start
    (void)check_defaults;
    for (const FeatureInput& input : info.inputs) {
      int producer = -1;
      if (fg_mode_ == protos::FG_DAG && input.side == Side::kFeature) {
        producer = static_cast<int>(by_name.at(input.name));
        consumed_[producer] = true;
      }
      producers_[i].push_back(producer);
    }
    for (const std::string& column : InputColumns(info, fg_mode_)) {
      if (std::find(input_columns_.begin(), input_columns_.end(), column) == input_columns_.end()) {
        input_columns_.push_back(column);
      }
    }
  }
}

void FeatureGenerator::Generate(const RecordBatch& batch, ParsedBatch* out) const {
  const size_t rows = batch.num_rows();
  // Below a few hundred rows per thread, starting threads costs more than it saves.
  const size_t threads = std::min<size_t>(threads_, rows / 256);
  if (threads <= 1) {
    GenerateRows(batch, 0, rows, out);
    return;
  }
  std::vector<ParsedBatch> parts(threads);
  std::vector<std::exception_ptr> errors(threads);
  std::vector<std::thread> workers;
  for (size_t t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      try {
        GenerateRows(batch, rows * t / threads, rows * (t + 1) / threads, &parts[t]);
      } catch (...) {
        errors[t] = std::current_exception();
      }
    });
  }
  for (auto& worker : workers) worker.join();
  for (const auto& error : errors) {
    if (error) std::rethrow_exception(error);  // the first part's error: the earliest row
  }
  for (auto& part : parts) {
    for (auto& kv : part.sparse) out->sparse[kv.first].Append(kv.second);
    for (auto& kv : part.dense) {
      DenseValues& dense = out->dense[kv.first];
      dense.dim = kv.second.dim;
      dense.Append(kv.second);
    }
  }
}

void FeatureGenerator::GenerateRows(const RecordBatch& batch, size_t row_begin, size_t row_end,
                                    ParsedBatch* out) const {
  const size_t rows = batch.num_rows();
  // Text form of produced outputs that later features read (FG_DAG).
  std::vector<Column> produced(features_.size());
  std::vector<InputItems> items;
  std::vector<Steps> steps;
  OpValues values;
  std::string produced_cell;
  for (size_t f = 0; f < features_.size(); ++f) {
    const FeatureInfo& info = features_[f];
    const FeatureOp* op = ops_[f].get();
    // Resolve sources.
    std::vector<FeatureInput> inputs = info.inputs;
    if (fg_mode_ == protos::FG_BUCKETIZE) {
      // The column holds the value before bucketizing, split like FG-encoded data.
      FeatureInput self;
      self.name = self.column = info.name;
      self.is_sequence = info.is_sequence;
      inputs = {self};
    }
    std::vector<Source> sources(inputs.size());
    for (size_t k = 0; k < inputs.size(); ++k) {
      const FeatureInput& input = inputs[k];
      Source& source = sources[k];
      if (input.is_all) {
        source.constant = true;
        continue;
      }
      if (input.side == Side::kConst && fg_mode_ != protos::FG_BUCKETIZE) {
        source.constant = true;
        source.constant_text = input.name;
        continue;
      }
      int producer = fg_mode_ == protos::FG_BUCKETIZE ? -1 : producers_[f][k];
      source.column = producer >= 0 ? &produced[producer] : batch.Find(input.column);
      if (!source.column) {
        Fail(batch.source, ": column '", input.column, "' for feature '", info.name, "' (",
             info.config_path, ") is missing");
      }
      if (producer < 0 && source.column->size() != rows) {
        if (source.column->size() == 1) {
          source.broadcast = true;
        } else {
          Fail(batch.source, ": column '", input.column, "' has ", source.column->size(),
               " rows, expected ", rows);
        }
      }
    }
    const std::string& separator =
        fg_mode_ == protos::FG_BUCKETIZE ? encoded_sep_ : info.separator;
    OutputWriter writer(info, op);
    SparseValues* sparse = nullptr;
    DenseValues* dense = nullptr;
    SparseValues stub_sparse;
    DenseValues stub_dense;
    if (info.is_sparse) {
      sparse = info.stub ? &stub_sparse : &out->sparse[info.name];
      sparse->sequence = info.is_sequence;
    } else {
      dense = info.stub ? &stub_dense : &out->dense[info.name];
      dense->dim = writer.dense_dim();
      dense->sequence = info.is_sequence;
    }
    Column* produced_column = consumed_[f] ? &produced[f] : nullptr;
    if (produced_column) {
      produced_column->name = info.name;
      produced_column->list_depth = info.is_sequence ? 2 : 1;
      produced_column->list_separator = "\x1d";
      produced_column->nested_separator = ";";
    }
    items.resize(inputs.size());
    steps.resize(inputs.size());
    auto compute = [&](size_t row) {
      values.Clear();
      std::string error;
      if (op) {
        values.kind = op->kind();
        if (!op->Compute(items, &values, &error)) Fail(writer.Where(batch, row), error);
      } else {
        // FG_BUCKETIZE: the cell's values as they are.
        values.kind = OpValues::Kind::kTexts;
        for (std::string_view item : items[0].items) values.texts.emplace_back(item);
      }
    };
    // Produced columns (FG_DAG) are indexed by batch row: pad the rows before this range.
    if (produced_column) {
      for (size_t row = 0; row < row_begin; ++row) produced_column->AppendString("", false);
    }
    for (size_t row = row_begin; row < row_end; ++row) {
      produced_cell.clear();
      std::string* cell = produced_column ? &produced_cell : nullptr;
      if (!info.is_sequence) {
        for (size_t k = 0; k < inputs.size(); ++k) {
          if (inputs[k].is_all) continue;
          CellItems(sources[k], row, inputs[k], separator, &items[k]);
        }
        compute(row);
        int32_t n = writer.Write(&values, batch, row, sparse, dense, cell);
        if (sparse) sparse->lengths.push_back(n);
      } else {
        // Sequence: split sequence inputs into steps; other inputs apply to every step.
        size_t num_steps = 0;
        bool any_sequence = false;
        // custom_feature (pyfg's SeqExpr: cur_time - clk_time_seq): a one-step input
        // broadcasts over the other inputs' steps.
        const bool broadcast_one_step = info.type == "custom_feature" && fg_mode_ != protos::FG_BUCKETIZE;
        for (size_t k = 0; k < inputs.size(); ++k) {
          if (inputs[k].is_all) continue;
          if (inputs[k].is_sequence || fg_mode_ == protos::FG_BUCKETIZE) {
            CellSteps(sources[k], row, info.sequence_delim, separator, &steps[k]);
            const size_t n = steps[k].steps.size();
            const bool broadcasts = broadcast_one_step && (n == 1 || num_steps == 1);
            if (any_sequence && !steps[k].missing && num_steps != 0 && n != num_steps && !broadcasts) {
              Fail(writer.Where(batch, row), "sequence inputs have different lengths (",
                   num_steps, " vs ", steps[k].steps.size(), ")");
            }
            if (!steps[k].missing) num_steps = std::max(num_steps, steps[k].steps.size());
            any_sequence = true;
          } else {
            CellItems(sources[k], row, inputs[k], separator, &items[k]);
          }
        }
        if (info.sequence_length > 0) num_steps = std::min<size_t>(num_steps, info.sequence_length);
        int32_t written_steps = 0;
        for (size_t s = 0; s < num_steps; ++s) {
          for (size_t k = 0; k < inputs.size(); ++k) {
            if (inputs[k].is_all || !(inputs[k].is_sequence || fg_mode_ == protos::FG_BUCKETIZE)) continue;
            items[k].Reset();
            const size_t step = broadcast_one_step && steps[k].steps.size() == 1 ? 0 : s;
            if (step < steps[k].steps.size()) {
              FillItems(steps[k].steps[step], steps[k].item_separator, inputs[k].raw_text, &items[k]);
            }
          }
          compute(row);
          if (cell && s > 0) cell->push_back(';');
          int32_t n = writer.Write(&values, batch, row, sparse, dense, cell);
          if (sparse) sparse->key_lengths.push_back(n);
          ++written_steps;
        }
        if (num_steps == 0 && info.has_default_value) {
          // An empty sequence becomes one default step.
          values.Clear();
          values.kind = op ? op->kind() : OpValues::Kind::kTexts;
          int32_t n = writer.Write(&values, batch, row, sparse, dense, cell);
          if (sparse) sparse->key_lengths.push_back(n);
          written_steps = 1;
        }
        if (sparse) sparse->lengths.push_back(written_steps);
        if (dense) dense->lengths.push_back(written_steps);
      }
      if (produced_column) produced_column->AppendString(produced_cell, true);
    }
  }
}

}  // namespace tzrec::fg
