#!/usr/bin/env bash
# Distributed training throughput on this machine: DeepFM (bench/configs/deepfm_criteo_bench.config,
# batch 4096 per rank) as 1 rank x 2 threads against 2 ranks x 1 thread (tzrec launch: shared-memory
# collectives, or Gloo on loopback with TZREC_SHM_COLLECTIVES=0; data-parallel dense and
# embeddings; then with row_wise tables). Prints samples/s of every round and, last, the ratios of
# the medians and the transport the ranks used.
# Env: STEPS timed steps (60), ROWS generated rows (409600; reuses bench/out/data if present),
# RUNS rounds (3; the ratios are of the medians).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
STEPS=${STEPS:-60}
RUNS=${RUNS:-3}
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
median() { sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
one_rank() {
  rm -rf $OUT/dist1
  OMP_NUM_THREADS=2 build/tzrec train_eval --pipeline_config_path=$CONFIG --model_dir=$OUT/dist1 \
    --train_input_path="$OUT/data/train/*.csv" --eval_input_path="" --edit_config_json="$EDITS" \
    >$OUT/dist1.log 2>&1
  rate $OUT/dist1.log 1
}
# two_ranks NAME PORT EXTRA_EDITS: 2 ranks x 1 thread; rank 0's steady rate times 2.
two_ranks() {
  rm -rf $OUT/$1
  OMP_NUM_THREADS=1 build/tzrec launch --nproc_per_node 2 --master_port $2 -- train_eval \
    --pipeline_config_path=$CONFIG --model_dir=$OUT/$1 --train_input_path="$OUT/data/train/*.csv" \
    --eval_input_path="" --edit_config_json="${EDITS%\}}$3}" >$OUT/$1.log 2>&1
  grep '^\[rank 0\]' $OUT/$1.log > $OUT/$1_rank0.log
  rate $OUT/$1_rank0.log 2
}
# RUNS rounds, each running the three set-ups back to back, so machine noise (2 ranks on 2
# vCPUs wait for each other, and suffer most from a stolen core) hits every set-up alike; the
# ratios are of the medians.
ones=() twos=() rowwises=()
for run in $(seq 1 $RUNS); do
  one=$(one_rank)
  two=$(two_ranks dist2 29633 "")
  # The same with model-parallel tables (row_wise: ids and pooled embeddings by alltoall).
  rowwise=$(two_ranks dist2rw 29634 ", \"train_config.global_embedding_constraints.sharding_types\": [\"row_wise\"]")
  echo "[dist] run $run: 1 rank x 2 threads $one, 2 ranks x 1 thread $two (global batch 8192), row_wise $rowwise samples/s:" \
    "ratios $(awk -v a=$two -v b=$one 'BEGIN {printf "%.2f", a/b}') data_parallel, $(awk -v a=$rowwise -v b=$one 'BEGIN {printf "%.2f", a/b}') row_wise"
  ones+=($one) twos+=($two) rowwises+=($rowwise)
done
one=$(printf '%s\n' "${ones[@]}" | median)
two=$(printf '%s\n' "${twos[@]}" | median)
rowwise=$(printf '%s\n' "${rowwises[@]}" | median)
transport=$(grep -o -m1 'collectives \(through shared memory\|over Gloo (TCP)\)' $OUT/dist2rw.log || echo "collectives: unknown")
echo "[dist] 2-rank runs: $transport"
echo "[dist] medians of $RUNS: 1 rank x 2 threads: $one samples/s; 2 ranks x 1 thread: $two; row_wise tables: $rowwise"
echo "dist ratio (2 ranks x 1 thread / 1 rank x 2 threads) = $(awk -v a=$two -v b=$one 'BEGIN {printf "%.2f", a/b}')" \
  "data_parallel, $(awk -v a=$rowwise -v b=$one 'BEGIN {printf "%.2f", a/b}') row_wise"
