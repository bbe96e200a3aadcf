#!/usr/bin/env bash
# Installs the Debian 12 packages tzrec-cpp needs (only what is missing) and selects the
# OpenMP build of OpenBLAS as the system BLAS: Debian's default reference BLAS trains 20-30x
# slower, and the pthread OpenBLAS fights LibTorch's OpenMP thread pool.
set -euo pipefail

PACKAGES=(
  build-essential cmake ccache pkg-config
  libtorch-dev libgloo-dev
  libprotobuf-dev protobuf-compiler
  libopenblas0-openmp
  libgoogle-perftools-dev
  nlohmann-json3-dev libdnnl-dev
  robin-map-dev  # hash-stored embedding tables (tsl::robin_map)
  libcpp-httplib-dev  # tzrec serve
  libopenblas-openmp-dev libfaiss-dev  # create_faiss_index, hitrate (the BLAS first: faiss needs one)
  python3-torch  # tests: scripted_model.pt loads in Python torch; bench references
  libgtest-dev googletest
  libsnappy-dev libzstd-dev zlib1g-dev liblz4-dev
  librdkafka-dev libflatbuffers-dev  # KafkaDataset (librdkafka, its mock cluster in tests; Arrow IPC)
  libfarmhash-dev libmuparser-dev libsentencepiece-dev sentencepiece libopencc-dev libutf8proc-dev
  clang libclang-rt-14-dev  # tests/fuzz (libFuzzer, ASan, UBSan)
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "[install_deps] installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

arch_dir=/usr/lib/x86_64-linux-gnu
if [ -e "$arch_dir/openblas-openmp/libblas.so.3" ]; then
  $SUDO update-alternatives --set libblas.so.3-x86_64-linux-gnu "$arch_dir/openblas-openmp/libblas.so.3" >/dev/null
  $SUDO update-alternatives --set liblapack.so.3-x86_64-linux-gnu "$arch_dir/openblas-openmp/liblapack.so.3" >/dev/null
  if update-alternatives --query libopenblas.so.0-x86_64-linux-gnu >/dev/null 2>&1; then
    $SUDO update-alternatives --set libopenblas.so.0-x86_64-linux-gnu "$arch_dir/openblas-openmp/libopenblas.so.0" >/dev/null || true
  fi
fi
echo "[install_deps] dependencies ready"
