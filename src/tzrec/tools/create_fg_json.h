// `tzrec create_fg_json`: the fg.json of a pipeline config (TorchEasyRec's
// `python -m tzrec.tools.create_fg_json`), for offline feature generation and serving.
//
// fg.json is `{"features": [...]}` with one entry per feature config entry in config order
// (a few types emit two: lookup_feature with value_dim > 1 as a `<name>__lookup` stub plus a
// raw_feature, tokenize_feature with a text_normalizer as a `<name>__text_norm` stub plus the
// tokenizer), and one `{"sequence_name", "sequence_length", "sequence_delim", "sequence_pk",
// "features"}` block per grouped sequence, placed where its first sub-feature appears. The
// per-type keys follow TorchEasyRec's `fg_json()` (see the comments in the .cc file).
// Asset files (vocab files, tokenizer files, stop-char files, custom operator libraries) are
// copied next to fg.json as `<stem>_<md5 of the bytes><ext>` and referenced by that bare name.
//
// Stateless functions; safe to call from several threads on different output directories.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tzrec/protos/pipeline.pb.h"

namespace tzrec {

// One asset file fg.json refers to: copied from `source_path` to `<dir>/<name>`.
struct FgAsset {
  std::string source_path;  // resolved (asset_dir applied)
  std::string name;         // <stem>_<md5hex><ext>
  std::string content;      // the file's bytes
};

// Builds fg.json for `config.feature_configs`. When `assets` is non-null, asset files are read
// (failing with the feature's config path and the file when one cannot be read), listed in
// `*assets` and referenced by their copied names; when it is null, fg.json refers to the
// resolved source paths. `remove_bucketizer` drops hash_bucket_size, vocab_list, vocab_dict,
// boundaries, num_buckets and (except for tokenize_feature) vocab_file from every entry.
nlohmann::ordered_json BuildFgJson(const protos::EasyRecConfig& config, bool remove_bucketizer,
                                   std::vector<FgAsset>* assets);

struct CreateFgJsonOptions {
  std::string fg_output_dir;                 // required
  std::string fg_resource_name = "fg.json";  // file name of fg.json inside fg_output_dir
  bool remove_bucketizer = false;
  bool has_reserves = false;                 // add a top-level "reserves" list
  std::vector<std::string> reserves;         // column names passed through by offline FG
};

// Writes `<fg_output_dir>/<fg_resource_name>` (4-space indent, atomically) and the asset
// files. Nothing is written when building fails. Returns the path of the written fg.json.
std::string CreateFgJson(const protos::EasyRecConfig& config, const CreateFgJsonOptions& options);

// The name an asset file is copied under: `<stem>_<md5 of content><ext>` of the file name of
// `path` (Python's os.path.splitext rules).
std::string AssetCopyName(const std::string& path, std::string_view content);

// MD5 (RFC 1321) of `data` as 32 lower-case hex digits.
std::string Md5Hex(std::string_view data);

// CLI entry point: `tzrec create_fg_json --pipeline_config_path=... --fg_output_dir=...`.
int CreateFgJsonMain(const std::vector<std::string>& args);

}  // namespace tzrec
