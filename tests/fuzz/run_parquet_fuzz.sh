#!/usr/bin/env bash
# Builds the Parquet reader fuzzer (clang libFuzzer with ASan + UBSan) and runs it for
# FUZZ_SECONDS (default 60) over a seed corpus of small files written by our writer, plus the
# parquet-wasm/hyparquet interop files when tests/interop/node_modules exists. Not part of the
# default build or test run. Crashing inputs land in $FUZZ_OUT/artifacts (default build/fuzz).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${FUZZ_OUT:-build/fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
mkdir -p "$OUT/corpus" "$OUT/seeds" "$OUT/artifacts"
OUT=$(cd "$OUT" && pwd)

SOURCES=(src/tzrec/data/parquet/*.cc src/tzrec/data/record_batch.cc src/tzrec/common/fs.cc
         src/tzrec/common/strings.cc)
FLAGS=(-std=c++17 -g -O1 -Isrc -fsanitize=address,undefined -fno-sanitize-recover=undefined
       -fno-omit-frame-pointer)
LIBS=(-lsnappy -lzstd -llz4 -lz)
echo "[fuzz] building $OUT/parquet_reader_fuzz"
clang++ "${FLAGS[@]}" -fsanitize=fuzzer tests/fuzz/parquet_reader_fuzz.cc "${SOURCES[@]}" "${LIBS[@]}" \
  -o "$OUT/parquet_reader_fuzz"
clang++ "${FLAGS[@]}" tests/fuzz/make_parquet_seeds.cc "${SOURCES[@]}" "${LIBS[@]}" \
  -o "$OUT/make_parquet_seeds"
"$OUT/make_parquet_seeds" "$OUT/seeds"
if [ -f tests/interop/node_modules/parquet-wasm/package.json ] && command -v node >/dev/null; then
  (cd tests/interop && node write_files.mjs "$OUT/seeds" >/dev/null 2>&1) || true
  rm -f "$OUT/seeds/manifest.json"
fi
echo "[fuzz] running for ${FUZZ_SECONDS}s over $(ls "$OUT/seeds" | wc -l) seeds"
"$OUT/parquet_reader_fuzz" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -timeout=10 \
  -print_final_stats=1 -artifact_prefix="$OUT/artifacts/" "$OUT/corpus" "$OUT/seeds"
