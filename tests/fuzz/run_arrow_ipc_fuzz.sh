#!/usr/bin/env bash
# Builds the Arrow IPC decoder fuzzer (clang libFuzzer, ASan + UBSan; no LibTorch) and runs it
# for FUZZ_SECONDS (default 60). Seeds: apache-arrow's payloads of the interop dataset
# (tests/interop/write_arrow.mjs; needs `npm ci` there). Not part of the default build or test
# run. Crashing inputs land in $FUZZ_OUT/artifacts (default build/fuzz-arrow-ipc).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${FUZZ_OUT:-build/fuzz-arrow-ipc}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
mkdir -p "$OUT/corpus" "$OUT/seeds" "$OUT/artifacts"
OUT=$(cd "$OUT" && pwd)
(cd tests/interop && node write_arrow.mjs dataset "$OUT/seeds") && rm -f "$OUT/seeds/manifest.json"
SOURCES=(src/tzrec/data/arrow_ipc.cc src/tzrec/data/record_batch.cc src/tzrec/common/strings.cc)
FLAGS=(-std=c++17 -g -O1 -Isrc -fsanitize=address,undefined -fno-sanitize=vptr
       -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
echo "[fuzz] building $OUT/arrow_ipc_fuzz"
clang++ "${FLAGS[@]}" -fsanitize=fuzzer tests/fuzz/arrow_ipc_fuzz.cc "${SOURCES[@]}" -o "$OUT/arrow_ipc_fuzz"
echo "[fuzz] running for ${FUZZ_SECONDS}s over $(ls "$OUT/seeds" | wc -l) seeds"
"$OUT/arrow_ipc_fuzz" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=4096 -timeout=10 \
  -print_final_stats=1 -artifact_prefix="$OUT/artifacts/" "$OUT/corpus" "$OUT/seeds"
