#!/usr/bin/env bash
# Builds the config fuzzers (clang libFuzzer with ASan + UBSan) and runs each for
# FUZZ_SECONDS (default 60): config_loader_fuzz (text-format and JSON pipeline configs, seeded
# with the reference configs) and edit_config_fuzz (--edit_config_json on dlrm_criteo, seeded
# with tests/fuzz/config_seeds). Needs the generated protos of a CMake build (BUILD_DIR,
# default build). Not part of the default build or test run. Crashing inputs land in
# $FUZZ_OUT/artifacts (default build/config_fuzz).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
OUT=${FUZZ_OUT:-build/config_fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
[ -d "$BUILD_DIR/gen/tzrec/protos" ] || { echo "run scripts/build.sh first (needs $BUILD_DIR/gen)"; exit 1; }
mkdir -p "$OUT/objects" "$OUT/artifacts" "$OUT/loader_corpus" "$OUT/loader_seeds" "$OUT/edit_corpus"
OUT=$(cd "$OUT" && pwd)

FLAGS=(-std=c++17 -g -O1 -Isrc -I"$BUILD_DIR/gen" -fsanitize=address,undefined
       -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
SOURCES=(src/tzrec/config/pipeline_config.cc src/tzrec/config/edit_config.cc
         src/tzrec/common/fs.cc src/tzrec/common/strings.cc src/tzrec/common/logging.cc
         "$BUILD_DIR"/gen/tzrec/protos/*.pb.cc "$BUILD_DIR"/gen/tzrec/protos/models/*.pb.cc)
objects=()
echo "[fuzz] compiling ${#SOURCES[@]} sources"
for src in "${SOURCES[@]}"; do
  obj="$OUT/objects/$(echo "$src" | tr '/' '_').o"
  if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ]; then
    clang++ "${FLAGS[@]}" -fsanitize=fuzzer-no-link -c "$src" -o "$obj"
  fi
  objects+=("$obj")
done
for target in config_loader_fuzz edit_config_fuzz; do
  clang++ "${FLAGS[@]}" -fsanitize=fuzzer "tests/fuzz/$target.cc" "${objects[@]}" -lprotobuf -lpthread \
    -o "$OUT/$target"
done

# Loader seeds: every reference config as text ('c' prefix: even byte) and as JSON ('d').
for config in tests/data/reference_configs/*.config examples/*.config; do
  [ -f "$config" ] || continue
  name=$(basename "$config" .config)
  { printf 'c'; cat "$config"; } >"$OUT/loader_seeds/$name.config"
done
printf 'd{"dataConfig": {"batchSize": 8, "labelFields": ["a"]}, "featureConfigs": [{"idFeature": {"featureName": "x", "embeddingDim": 4, "hashBucketSize": 10}}]}' \
  >"$OUT/loader_seeds/small.json"

# A small stack makes deep recursion show up as a crash rather than passing by luck.
ulimit -s 2048
run() {
  local target=$1; shift
  echo "[fuzz] running $target for ${FUZZ_SECONDS}s"
  "$OUT/$target" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$OUT/artifacts/$target-" "$@"
}
run config_loader_fuzz "$OUT/loader_corpus" "$OUT/loader_seeds"
run edit_config_fuzz "$OUT/edit_corpus" tests/fuzz/config_seeds
