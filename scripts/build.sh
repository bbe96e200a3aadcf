#!/usr/bin/env bash
# Configures and builds tzrec-cpp into build/ (Release, ccache). Optional arguments are the
# targets to build (default: everything, including the test binary).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
if [ "$#" -gt 0 ]; then
  targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  cmake --build "$BUILD_DIR" -j "$(nproc)" "${targets[@]}"
else
  cmake --build "$BUILD_DIR" -j "$(nproc)"
fi
