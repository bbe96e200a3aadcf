#!/usr/bin/env bash
# Data path throughput: rows/s from CSV and from Parquet files to training Batches (read ->
# parse features -> tensors), per reader thread, on Criteo-shaped data (13 dense + 26 sparse
# columns + label, the deepfm bench config), and how that compares with what the trainer
# consumes (DeepFM samples/s on the same machine, measured in the same invocation).
#
# Env: ROWS (409600), WORKERS ("1 2"), STEPS trainer steps timed (40).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
ROWS=${ROWS:-409600}
WORKERS=${WORKERS:-"1 2"}
STEPS=${STEPS:-40}
OUT=bench/out
mkdir -p $OUT
scripts/install_deps.sh >/dev/null
scripts/build.sh tzrec tzrec_micro_bench >/dev/null
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}

CSV_CONFIG=bench/configs/deepfm_criteo_bench.config
PARQUET_CONFIG=$OUT/deepfm_criteo_bench_parquet.config
sed -e 's/dataset_type: CsvDataset/dataset_type: ParquetDataset/' \
    -e 's#bench/out/data/#bench/out/data_parquet/#g' $CSV_CONFIG > $PARQUET_CONFIG
for kind in csv parquet; do
  dir=$OUT/data; config=$CSV_CONFIG
  [ $kind = parquet ] && { dir=$OUT/data_parquet; config=$PARQUET_CONFIG; }
  if [ "$(cat $dir/rows 2>/dev/null)" != "$ROWS" ]; then
    rm -rf $dir
    build/tzrec gen_data --pipeline_config_path=$config --output_dir=$dir --train_rows=$ROWS \
      --eval_rows=40960 --num_files=4 >/dev/null 2>&1
    echo "$ROWS" > $dir/rows
  fi
done
echo "[data] $ROWS rows in 4 files, $(du -sh $OUT/data/train | cut -f1) CSV, $(du -sh $OUT/data_parquet/train | cut -f1) Parquet (snappy)"

declare -A PER_THREAD
for kind in csv parquet; do
  for w in $WORKERS; do
    if [ $kind = csv ]; then line=$(build/tzrec_micro_bench data $CSV_CONFIG "$OUT/data/train/*.csv" $w)
    else line=$(build/tzrec_micro_bench data $PARQUET_CONFIG "$OUT/data_parquet/train/*.parquet" $w); fi
    line=$(echo "$line" | grep "workers=$w:")
    echo "[data] $kind $line"
    [ $w = 1 ] && PER_THREAD[$kind]=$(echo "$line" | sed -n 's/.*: \([0-9]*\) rows\/s (.*/\1/p')
  done
done

# What the trainer consumes: DeepFM steady-state samples/s (same measure as train_throughput.sh).
rm -rf $OUT/deepfm
build/tzrec train_eval --pipeline_config_path=$CSV_CONFIG --eval_input_path="" \
  --edit_config_json="{\"train_config.num_epochs\": 0, \"train_config.num_steps\": $((STEPS + 21)),
    \"train_config.log_step_count_steps\": 20}" >$OUT/data_trainer.log 2>&1
trainer=$(steady_samples_per_s $OUT/data_trainer.log 20 4096)
echo "[data] trainer (DeepFM, $OMP_NUM_THREADS threads) consumes $trainer samples/s"
for kind in csv parquet; do
  echo "$kind: ${PER_THREAD[$kind]} rows/s per reader thread = $(awk -v a=${PER_THREAD[$kind]} -v b=$trainer 'BEGIN {printf "%.2f", a/b}')x the trainer's consumption"
done
