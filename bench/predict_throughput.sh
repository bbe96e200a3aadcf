#!/usr/bin/env bash
# Predict throughput: `tzrec predict` rows/s for the Criteo DeepFM bench model
# (bench/configs/deepfm_criteo_bench.config) end to end - reading the input files, parsing,
# the forward pass and writing part-0.csv - from an FP32 export, an INT8 export and the
# checkpoint, on Parquet and CSV input; against the PyTorch-eager reference model
# (bench/reference/train_reference.py --predict_passes) running only its forward over
# batches already in memory, so the reference gets no I/O cost at all. Both sides use the same
# threads, BLAS and batch size (4096); rows/s of each side is the median of RUNS interleaved
# runs. Last line: `predict ratio=<ours parquet fp32 / reference> rows_per_sec=<ours>`.
#
# Env: RUNS (3), ROWS predicted (409600), THREADS (all cores).
# OPENBLAS_CORETYPE is set to the CPU's best OpenBLAS core for both sides (use_best_openblas_core).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
RUNS=${RUNS:-3}
ROWS=${ROWS:-409600}
THREADS=${THREADS:-$(nproc)}
OUT=bench/out/predict
mkdir -p $OUT

scripts/install_deps.sh
if ! /usr/bin/python3 -c "import torch, numpy" 2>/dev/null; then
  echo "[bench] installing python3-torch for the reference implementation"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-torch python3-numpy >/dev/null
fi
scripts/build.sh tzrec >/dev/null
TCMALLOC=$(ls /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 2>/dev/null || true)
export OMP_NUM_THREADS=$THREADS
use_best_openblas_core

prepare_criteo_export $OUT $ROWS

median() { sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

# ours MODEL_FLAGS INPUT_GLOB: rows/s as predict logs it (first batch requested to last row
# written; model loading is not counted).
ours() {
  rm -rf $OUT/pred
  local type=CsvDataset
  case "$2" in *.parquet) type=ParquetDataset ;; esac
  build/tzrec predict $1 --predict_input_path="$2" --predict_output_path=$OUT/pred \
    --dataset_type=$type --writer_type=CsvWriter --batch_size=4096 >$OUT/predict.log 2>&1
  sed -n 's/.*Predict: wrote [0-9]* rows to .* (\([0-9]*\) rows\/s).*/\1/p' $OUT/predict.log
}
reference() {
  LD_PRELOAD=$TCMALLOC /usr/bin/python3 bench/reference/train_reference.py --model deepfm \
    --train "$OUT/csv/train/*.csv" --batch_size 4096 --threads $THREADS --steps 0 \
    --predict_passes 2 >$OUT/reference.log 2>&1
  sed -n 's/^reference_predict_rows_per_sec=//p' $OUT/reference.log
}

declare -a names=("parquet fp32 export" "parquet int8 export" "parquet checkpoint" "csv fp32 export")
declare -a flags=("--scripted_model_path=$OUT/export_fp32" "--scripted_model_path=$OUT/export_int8"
                  "--pipeline_config_path=$OUT/model/pipeline.config"
                  "--scripted_model_path=$OUT/export_fp32")
declare -a inputs=("$OUT/parquet/train/*.parquet" "$OUT/parquet/train/*.parquet"
                   "$OUT/parquet/train/*.parquet" "$OUT/csv/train/*.csv")
declare -A results
ratios=()
for run in $(seq 1 $RUNS); do
  line="[bench] run $run:"
  for i in "${!names[@]}"; do
    r=$(ours "${flags[$i]}" "${inputs[$i]}")
    results[$i]+="$r "
    line+=" ${names[$i]} $r,"
  done
  ref=$(reference)
  results[ref]+="$ref "
  ratios+=("$(awk -v o=$(echo ${results[0]} | awk '{print $NF}') -v r=$ref 'BEGIN {printf "%.3f", o/r}')")
  echo "$line reference forward only $ref rows/s; ratio ${ratios[-1]}"
done
for i in "${!names[@]}"; do
  echo "ours ${names[$i]}: $(echo ${results[$i]} | tr ' ' '\n' | median) rows/s (median of $RUNS)"
done
echo "reference (forward only, batches in memory): $(echo ${results[ref]} | tr ' ' '\n' | median) rows/s"
echo "BLAS cores: ours $(sed -n 's/.*runtime: OpenBLAS core \([A-Za-z0-9]*\).*/\1/p' $OUT/predict.log | head -1)," \
  "reference $(sed -n 's/.*blas_core=\([A-Za-z0-9]*\).*/\1/p' $OUT/reference.log | head -1)"
echo "predict ratio=$(printf '%s\n' "${ratios[@]}" | median | awk '{printf "%.2f", $1}') rows_per_sec=$(echo ${results[0]} | tr ' ' '\n' | median)"
