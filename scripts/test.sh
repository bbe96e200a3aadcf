#!/usr/bin/env bash
# Installs what is missing, builds everything and runs the whole test suite (CTest).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
# Independent Parquet implementations (parquet-wasm, hyparquet) for the interop tests; the
# tests skip themselves, visibly, when these could not be installed.
if (cd tests/interop && { timeout 600 npm ci --no-audit --no-fund || timeout 600 npm install --no-audit --no-fund; }) \
    >/tmp/tzrec-npm-install.log 2>&1; then
  echo "[test] Parquet interop: node packages ready"
else
  echo "[test] skipping Parquet interop: npm unreachable (see /tmp/tzrec-npm-install.log)"
fi
cd build
ctest --output-on-failure -j "$(nproc)" --timeout 900
