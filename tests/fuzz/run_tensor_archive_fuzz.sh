#!/usr/bin/env bash
# Builds the checkpoint tensor-archive fuzzer (clang libFuzzer; our code with ASan + UBSan,
# linked against Debian's LibTorch) and runs it for FUZZ_SECONDS (default 60) over seed
# archives it writes itself. Not part of the default build or test run. Crashing inputs land
# in $FUZZ_OUT/artifacts (default build/fuzz-tensor-archive).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${FUZZ_OUT:-build/fuzz-tensor-archive}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
mkdir -p "$OUT/corpus" "$OUT/seeds" "$OUT/artifacts"
OUT=$(cd "$OUT" && pwd)
TORCH_INCLUDES=(-isystem /usr/include/torch/csrc/api/include)
SOURCES=(src/tzrec/train/tensor_archive.cc src/tzrec/common/fs.cc src/tzrec/common/strings.cc)
FLAGS=(-std=c++17 -g -O1 -Isrc "${TORCH_INCLUDES[@]}" -fsanitize=address,undefined
       -fno-sanitize=vptr -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
LIBS=(-ltorch -ltorch_cpu -lc10 -lz)
echo "[fuzz] building $OUT/tensor_archive_fuzz"
clang++ "${FLAGS[@]}" -fsanitize=fuzzer tests/fuzz/tensor_archive_fuzz.cc "${SOURCES[@]}" "${LIBS[@]}" \
  -o "$OUT/tensor_archive_fuzz"
# LibTorch is not built with ASan: its own allocations are not tracked as leaks.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
MAKE_SEEDS="$OUT/seeds" "$OUT/tensor_archive_fuzz"
echo "[fuzz] running for ${FUZZ_SECONDS}s over $(ls "$OUT/seeds" | wc -l) seeds"
# LibTorch's unpickler reserves a string's declared length (up to 4 GiB) before reading it:
# a transient, untouched allocation for a crafted file, followed by a clean error. Allow it.
"$OUT/tensor_archive_fuzz" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=6144 -malloc_limit_mb=6144 -timeout=10 \
  -print_final_stats=1 -artifact_prefix="$OUT/artifacts/" "$OUT/corpus" "$OUT/seeds"
