#!/usr/bin/env bash
# Distributed training throughput on this machine: DeepFM (bench/configs/deepfm_criteo_bench.config,
# batch 4096 per rank) as 1 rank x 2 threads against 2 ranks x 1 thread (tzrec launch, Gloo on
# loopback, data-parallel dense and embeddings). Prints samples/s of both and their ratio.
# Env: STEPS timed steps (60), ROWS generated rows (409600; reuses bench/out/data if present).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
STEPS=${STEPS:-60}
ROWS=${ROWS:-409600}
OUT=bench/out
CONFIG=bench/configs/deepfm_criteo_bench.config
scripts/install_deps.sh >/dev/null
scripts/build.sh tzrec >/dev/null
if [ ! -f $OUT/data/oracle.json ] || [ "$(cat $OUT/data/rows 2>/dev/null)" != "$ROWS" ]; then
  rm -rf $OUT/data
  build/tzrec gen_data --pipeline_config_path=$CONFIG --output_dir=$OUT/data --train_rows=$ROWS \
    --eval_rows=40960 --num_files=4 >/dev/null 2>&1
  echo "$ROWS" > $OUT/data/rows
fi
EDITS="{\"train_config.num_epochs\": 0, \"train_config.num_steps\": $((STEPS + 21)),
  \"train_config.log_step_count_steps\": 20, \"data_config.num_workers\": 1}"
# Steady-state samples/s of one rank's log (steps after the first 20), times `ranks`.
rate() { steady_samples_per_s "$1" 20 $((4096 * $2)); }
rm -rf $OUT/dist1
OMP_NUM_THREADS=2 build/tzrec train_eval --pipeline_config_path=$CONFIG --model_dir=$OUT/dist1 \
  --train_input_path="$OUT/data/train/*.csv" --eval_input_path="" --edit_config_json="$EDITS" \
  >$OUT/dist1.log 2>&1
one=$(rate $OUT/dist1.log 1)
echo "[dist] 1 rank x 2 threads: $one samples/s"
rm -rf $OUT/dist2
OMP_NUM_THREADS=1 build/tzrec launch --nproc_per_node 2 --master_port 29633 -- train_eval \
  --pipeline_config_path=$CONFIG --model_dir=$OUT/dist2 --train_input_path="$OUT/data/train/*.csv" \
  --eval_input_path="" --edit_config_json="$EDITS" >$OUT/dist2.log 2>&1
grep '^\[rank 0\]' $OUT/dist2.log > $OUT/dist2_rank0.log
two=$(rate $OUT/dist2_rank0.log 2)
echo "[dist] 2 ranks x 1 thread: $two samples/s (global batch 8192)"
# The same with model-parallel tables (row_wise: ids and pooled embeddings by alltoall).
rm -rf $OUT/dist2rw
OMP_NUM_THREADS=1 build/tzrec launch --nproc_per_node 2 --master_port 29634 -- train_eval \
  --pipeline_config_path=$CONFIG --model_dir=$OUT/dist2rw --train_input_path="$OUT/data/train/*.csv" \
  --eval_input_path="" --edit_config_json="${EDITS%\}}, \"train_config.global_embedding_constraints.sharding_types\": [\"row_wise\"]}" \
  >$OUT/dist2rw.log 2>&1
grep '^\[rank 0\]' $OUT/dist2rw.log > $OUT/dist2rw_rank0.log
rowwise=$(rate $OUT/dist2rw_rank0.log 2)
echo "[dist] 2 ranks x 1 thread, row_wise tables: $rowwise samples/s"
echo "dist ratio (2 ranks x 1 thread / 1 rank x 2 threads) = $(awk -v a=$two -v b=$one 'BEGIN {printf "%.2f", a/b}')" \
  "data_parallel, $(awk -v a=$rowwise -v b=$one 'BEGIN {printf "%.2f", a/b}') row_wise"
