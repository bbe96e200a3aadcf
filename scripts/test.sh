#!/usr/bin/env bash
# Installs what is missing, builds everything and runs the whole test suite (CTest).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc)" --timeout 900
