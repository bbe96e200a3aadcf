#include "tzrec/input/sampler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>

#include "tzrec/common/error.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"
#include "tzrec/data/csv_reader.h"
#include "tzrec/data/parquet/parquet_reader.h"

namespace tzrec {
namespace {

constexpr size_t kChunkRows = 65536;

// The column name without its GraphLearn type suffix ("id:int64" -> "id").
std::string BaseName(const std::string& name) { return name.substr(0, name.find(':')); }

char FieldDelimiter(const std::string& configured) {
  return configured.empty() ? '\t' : ParseCsvDelimiter(configured);
}

// Calls `fn(records, columns, file_index)` for every chunk of every file of `input_path`, with
// `columns[i]` the column whose base name is `wanted[i]`. Parquet files (.parquet) are read by
// column name, every other file as delimited text with a header line.
template <typename Fn>
std::vector<std::string> ScanTable(const std::string& input_path, char delimiter,
                                   const std::vector<std::string>& wanted, const std::string& where,
                                   Fn&& fn) {
  std::vector<std::string> files;
  try {
    files = ExpandInputPaths(input_path);
  } catch (const Error& e) {
    Fail(where, ": ", e.what());
  }
  if (files.empty()) Fail(where, ": '", input_path, "' has no files");
  for (size_t f = 0; f < files.size(); ++f) {
    const std::string& file = files[f];
    RecordBatch records;
    std::vector<const Column*> columns(wanted.size());
    auto resolve = [&] {
      for (size_t i = 0; i < wanted.size(); ++i) {
        columns[i] = nullptr;
        // "a|b": either name (TDM's tables call attrs "feature", userid/itemid src_id/dst_id).
        const std::vector<std::string> accepted = Split(wanted[i], "|");
        for (const Column& column : records.columns) {
          if (std::find(accepted.begin(), accepted.end(), BaseName(column.name)) != accepted.end()) columns[i] = &column;
        }
        if (!columns[i]) {
          std::vector<std::string> names;
          for (const Column& column : records.columns) names.push_back(column.name);
          Fail(file, ": ", where, " needs a column '", Join(accepted, "' or '"), "' (header: ", Join(names, ", "),
               "; GraphLearn tables name their columns as e.g. 'id:int64')");
        }
      }
    };
    if (EndsWith(file, ".parquet")) {
      ParquetFileReader reader(file);
      while (reader.Next(kChunkRows, &records)) {
        resolve();
        fn(records, columns, f);
      }
    } else {
      CsvOptions options;
      options.delimiter = delimiter;
      options.with_header = true;
      CsvFileReader reader(file, options);
      while (reader.Next(kChunkRows, &records)) {
        resolve();
        fn(records, columns, f);
      }
    }
  }
  return files;
}

float CellWeight(const RecordBatch& records, const Column& column, size_t row) {
  float value = NAN;
  if (!column.IsNull(row)) {
    switch (column.type) {
      case ColumnType::kInt64: value = static_cast<float>(column.ints[row]); break;
      case ColumnType::kDouble: value = static_cast<float>(column.doubles[row]); break;
      case ColumnType::kString: ParseFloat(column.StringAt(row), &value); break;
    }
  }
  if (!std::isfinite(value) || value < 0) {
    Fail(records.RowLocation(row), ": column '", column.name,
         "' must be a finite weight >= 0, got '",
         column.IsNull(row) ? std::string("null") : Printable(column.TextAt(row)), "'");
  }
  return value;
}

template <typename T>
std::shared_ptr<const T> Cached(const std::string& key, const std::function<std::shared_ptr<const T>()>& load) {
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<const T>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto hit = cache[key].lock()) return hit;
  std::shared_ptr<const T> loaded = load();
  cache[key] = loaded;
  return loaded;
}

}  // namespace

int64_t IdAt(const RecordBatch& records, const Column& column, size_t row, const std::string& what) {
  if (!column.IsNull(row)) {
    switch (column.type) {
      case ColumnType::kInt64: return column.ints[row];
      case ColumnType::kDouble:
        if (column.doubles[row] == std::floor(column.doubles[row])) {
          return static_cast<int64_t>(column.doubles[row]);
        }
        break;
      case ColumnType::kString: {
        int64_t value;
        if (ParseInt64(column.StringAt(row), &value)) return value;
        break;
      }
    }
  }
  Fail(records.RowLocation(row), ": ", what, " must be an int64 id, got '",
       column.IsNull(row) ? std::string("null") : Printable(column.TextAt(row)), "'");
}

AliasTable::AliasTable(const std::vector<float>& weights) {
  const size_t n = weights.size();
  TZREC_CHECK(n > 0 && n < (size_t{1} << 32), "alias table over ", n, " weights");
  double sum = 0;
  for (float w : weights) sum += w;
  TZREC_CHECK(sum > 0 && std::isfinite(sum), "alias table weights sum to ", sum);
  prob_.resize(n);
  alias_.resize(n);
  std::vector<double> scaled(n);
  std::vector<uint32_t> small, large;
  for (size_t i = 0; i < n; ++i) {
    scaled[i] = weights[i] * static_cast<double>(n) / sum;
    (scaled[i] < 1.0 ? small : large).push_back(static_cast<uint32_t>(i));
  }
  while (!small.empty() && !large.empty()) {
    const uint32_t s = small.back(), l = large.back();
    small.pop_back();
    prob_[s] = static_cast<float>(scaled[s]);
    alias_[s] = l;
    scaled[l] -= 1.0 - scaled[s];
    if (scaled[l] < 1.0) {
      large.pop_back();
      small.push_back(l);
    }
  }
  // What is left has probability 1 up to rounding.
  for (uint32_t i : large) prob_[i] = 1.0f, alias_[i] = i;
  for (uint32_t i : small) prob_[i] = 1.0f, alias_[i] = i;
}

uint32_t AliasTable::Draw(std::mt19937_64& rng) const {
  const uint64_t r = rng();
  // High bits pick the column, low 24 bits the coin: one engine call per draw.
  const uint32_t column = static_cast<uint32_t>(((r >> 32) * prob_.size()) >> 32);
  const float coin = static_cast<float>(r & 0xffffff) * (1.0f / 16777216.0f);
  return coin < prob_[column] ? column : alias_[column];
}

SamplerItemTable::SamplerItemTable(const std::string& input_path, const std::string& field_delimiter,
                     const std::string& attr_delimiter, size_t attr_count, const std::string& where)
    : attr_count_(attr_count), attr_delimiter_(attr_delimiter) {
  if (attr_delimiter_.empty()) Fail(where, ".attr_delimiter must not be empty");
  attr_offsets_.push_back(0);
  std::vector<std::string> wanted = {"id", "weight"};
  if (attr_count_ > 0) wanted.push_back("attrs|feature");
  files_ = ScanTable(input_path, FieldDelimiter(field_delimiter), wanted, where,
                     [&](const RecordBatch& records, const std::vector<const Column*>& columns, size_t file) {
    for (size_t row = 0; row < records.num_rows(); ++row) {
      ids_.push_back(IdAt(records, *columns[0], row, "column '" + columns[0]->name + "'"));
      weights_.push_back(CellWeight(records, *columns[1], row));
      if (attr_count_ > 0) {
        const Column& attrs = *columns[2];
        const std::string text = attrs.IsNull(row) ? std::string() : attrs.TextAt(row);
        std::vector<uint32_t> starts{0};
        for (size_t pos = text.find(attr_delimiter_); pos != std::string::npos;
             pos = text.find(attr_delimiter_, pos + attr_delimiter_.size())) {
          starts.push_back(static_cast<uint32_t>(pos + attr_delimiter_.size()));
        }
        if (starts.size() != attr_count_) {
          Fail(records.RowLocation(row), ": item ", ids_.back(), " has ", starts.size(),
               " attributes separated by '", Printable(attr_delimiter_), "', but ", where,
               ".attr_fields names ", attr_count_);
        }
        if (text.size() >= (size_t{1} << 32)) Fail(records.RowLocation(row), ": attrs too long");
        attr_starts_.insert(attr_starts_.end(), starts.begin(), starts.end());
        attr_text_ += text;
      }
      attr_offsets_.push_back(attr_text_.size());
      lines_.push_back(records.line_numbers[row]);
      file_of_.push_back(static_cast<uint32_t>(file));
    }
  });
  if (ids_.empty()) Fail(where, ": item table '", input_path, "' has no rows");
  if (ids_.size() >= (size_t{1} << 32) - 1) Fail(where, ": more than 2^32 items");
  double sum = 0;
  for (float w : weights_) sum += w;
  if (!(sum > 0)) Fail(where, ": every item of '", input_path, "' has weight 0");
  sorted_.resize(ids_.size());
  std::iota(sorted_.begin(), sorted_.end(), 0u);
  std::stable_sort(sorted_.begin(), sorted_.end(), [&](uint32_t a, uint32_t b) { return ids_[a] < ids_[b]; });
  for (size_t i = 1; i < sorted_.size(); ++i) {
    if (ids_[sorted_[i]] == ids_[sorted_[i - 1]]) {
      const uint32_t dup = sorted_[i];
      Fail(files_[file_of_[dup]], ":", lines_[dup], ": item id ", ids_[dup],
           " appears twice in the item table of ", where);
    }
  }
}

int64_t SamplerItemTable::Find(int64_t id) const {
  auto it = std::lower_bound(sorted_.begin(), sorted_.end(), id,
                             [&](uint32_t index, int64_t value) { return ids_[index] < value; });
  if (it == sorted_.end() || ids_[*it] != id) return -1;
  return *it;
}

std::string_view SamplerItemTable::Attr(uint32_t index, size_t attr) const {
  const uint64_t begin = attr_offsets_[index], end = attr_offsets_[index + 1];
  const std::string_view text(attr_text_.data() + begin, end - begin);
  const size_t start = attr_starts_[index * attr_count_ + attr];
  const size_t stop = attr + 1 < attr_count_ ? attr_starts_[index * attr_count_ + attr + 1] - attr_delimiter_.size()
                                             : text.size();
  return text.substr(start, stop - start);
}

RecordBatch SamplerItemTable::AttrRows(const std::vector<uint32_t>& items, const std::vector<size_t>& attrs,
                                const std::vector<std::string>& names) const {
  RecordBatch out;
  bool one_file = true;
  for (uint32_t item : items) one_file = one_file && file_of_[item] == file_of_[items.front()];
  out.source = items.empty() ? files_.front()
               : one_file    ? files_[file_of_[items.front()]]
                             : "the sampler's item table (" + Join(files_, ", ") + ")";
  out.line_numbers.reserve(items.size());
  for (uint32_t item : items) out.line_numbers.push_back(lines_[item]);
  out.columns.resize(attrs.size());
  for (size_t c = 0; c < attrs.size(); ++c) {
    Column& column = out.columns[c];
    column.name = names[c];
    column.valid.reserve(items.size());
    column.offsets.reserve(items.size() + 1);
    for (uint32_t item : items) {
      const std::string_view value = Attr(item, attrs[c]);
      // GraphLearn gives an empty attribute as empty text; the features read that as missing.
      column.AppendString(value, !value.empty());
    }
  }
  return out;
}

std::vector<int64_t> ReadUserIds(const std::string& input_path, const std::string& field_delimiter,
                                 const std::string& where) {
  std::vector<int64_t> users;
  ScanTable(input_path, FieldDelimiter(field_delimiter), {"id", "weight"}, where,
            [&](const RecordBatch& records, const std::vector<const Column*>& columns, size_t) {
    for (size_t row = 0; row < records.num_rows(); ++row) {
      users.push_back(IdAt(records, *columns[0], row, "column '" + columns[0]->name + "'"));
      CellWeight(records, *columns[1], row);
    }
  });
  std::sort(users.begin(), users.end());
  users.erase(std::unique(users.begin(), users.end()), users.end());
  return users;
}

SamplerEdgeTable::SamplerEdgeTable(const std::string& input_path, const std::string& field_delimiter,
                     const SamplerItemTable& items, const std::vector<int64_t>& users, const std::string& where) {
  struct Edge {
    int64_t user;
    uint32_t item;
  };
  std::vector<Edge> edges;
  ScanTable(input_path, FieldDelimiter(field_delimiter), {"userid|src_id", "itemid|dst_id", "weight"}, where,
            [&](const RecordBatch& records, const std::vector<const Column*>& columns, size_t) {
    for (size_t row = 0; row < records.num_rows(); ++row) {
      const int64_t user = IdAt(records, *columns[0], row, "column '" + columns[0]->name + "'");
      const int64_t item_id = IdAt(records, *columns[1], row, "column '" + columns[1]->name + "'");
      CellWeight(records, *columns[2], row);
      if (!users.empty() && !std::binary_search(users.begin(), users.end(), user)) {
        Fail(records.RowLocation(row), ": user ", user, " is not in the user table of ", where);
      }
      const int64_t item = items.Find(item_id);
      if (item < 0) Fail(records.RowLocation(row), ": item ", item_id, " is not in the item table of ", where);
      edges.push_back({user, static_cast<uint32_t>(item)});
    }
  });
  std::stable_sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) { return a.user < b.user; });
  offsets_.push_back(0);
  for (size_t i = 0; i < edges.size(); ++i) {
    if (i == 0 || edges[i].user != edges[i - 1].user) {
      if (i > 0) offsets_.push_back(i);
      users_.push_back(edges[i].user);
    }
    items_.push_back(edges[i].item);
  }
  if (!edges.empty()) offsets_.push_back(edges.size());
  sorted_ = items_;
  for (size_t u = 0; u < users_.size(); ++u) {
    std::sort(sorted_.begin() + offsets_[u], sorted_.begin() + offsets_[u + 1]);
  }
}

const uint32_t* SamplerEdgeTable::Begin(int64_t user, size_t* count) const {
  auto it = std::lower_bound(users_.begin(), users_.end(), user);
  if (it == users_.end() || *it != user) {
    *count = 0;
    return nullptr;
  }
  const size_t u = it - users_.begin();
  *count = offsets_[u + 1] - offsets_[u];
  return items_.data() + offsets_[u];
}

bool SamplerEdgeTable::Has(int64_t user, uint32_t item) const {
  auto it = std::lower_bound(users_.begin(), users_.end(), user);
  if (it == users_.end() || *it != user) return false;
  const size_t u = it - users_.begin();
  return std::binary_search(sorted_.begin() + offsets_[u], sorted_.begin() + offsets_[u + 1], item);
}

RecordBatch SamplerItemTable::InputAttrRows(const std::vector<uint32_t>& items, const std::vector<std::string>& attr_fields,
                                            const std::vector<std::string>& input_columns) const {
  std::vector<size_t> attrs;
  std::vector<std::string> names;
  for (size_t a = 0; a < attr_fields.size(); ++a) {
    if (std::find(input_columns.begin(), input_columns.end(), attr_fields[a]) == input_columns.end()) continue;
    attrs.push_back(a);
    names.push_back(attr_fields[a]);
  }
  return AttrRows(items, attrs, names);
}

RecordBatch Sampler::AttrRows(const SampledItems& sampled, const std::vector<std::string>& input_columns) const {
  return items_->InputAttrRows(sampled.items, attr_fields_, input_columns);
}

Registry<SamplerFactory>& SamplerRegistry() {
  static Registry<SamplerFactory> registry("sampler", {ConfigSlot{"tzrec.protos.DataConfig", "sampler"}});
  return registry;
}

std::shared_ptr<const Sampler> CreateSampler(const protos::DataConfig& data_config, bool eval) {
  const auto* oneof = data_config.GetDescriptor()->FindOneofByName("sampler");
  const auto* which = data_config.GetReflection()->GetOneofFieldDescriptor(data_config, oneof);
  if (!which) return nullptr;
  SamplerContext context;
  context.config = &data_config.GetReflection()->GetMessage(data_config, which);
  context.where = "data_config." + which->name();
  context.eval = eval;
  return SamplerRegistry().Get(which->name())(context);
}

std::shared_ptr<const SamplerItemTable> LoadItemTable(const std::string& input_path,
                                               const std::string& field_delimiter,
                                               const std::string& attr_delimiter,
                                               size_t attr_count, const std::string& where) {
  const std::string key = StrCat(input_path, '\n', field_delimiter, '\n', attr_delimiter, '\n', attr_count);
  return Cached<SamplerItemTable>(key, [&] {
    auto table = std::make_shared<const SamplerItemTable>(input_path, field_delimiter, attr_delimiter, attr_count, where);
    LOG_INFO << where << ": " << table->size() << " items from " << input_path;
    return table;
  });
}

std::shared_ptr<const SamplerEdgeTable> LoadEdgeTable(const std::string& input_path,
                                               const std::string& field_delimiter,
                                               std::shared_ptr<const SamplerItemTable> items,
                                               const std::string& user_input_path,
                                               const std::string& where) {
  const std::string key = StrCat(input_path, '\n', field_delimiter, '\n', user_input_path, '\n',
                                 reinterpret_cast<uintptr_t>(items.get()));
  return Cached<SamplerEdgeTable>(key, [&] {
    const std::vector<int64_t> users =
        user_input_path.empty() ? std::vector<int64_t>() : ReadUserIds(user_input_path, field_delimiter, where);
    auto table = std::make_shared<const SamplerEdgeTable>(input_path, field_delimiter, *items, users, where);
    LOG_INFO << where << ": " << table->num_edges() << " edges from " << input_path;
    return table;
  });
}

}  // namespace tzrec
