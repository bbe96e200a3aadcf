#!/usr/bin/env bash
# Feature-generation throughput: rows/s per thread of our FG engine (raw columns -> encoded
# features) on a 32-feature config using every FG feature type (bench/configs/fg_mixed_bench.config),
# also with fg_threads=2 and together with CSV reading, against the samples/s the trainer
# consumes on the same features (DeepFM, same machine, same invocation). Goal: FG never slows
# training down, i.e. FG rows/s per reader thread well above the trainer's samples/s.
#
# Env: ROWS (81920) rows generated, STEPS (40) timed training steps, OMP_NUM_THREADS (all cores).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
ROWS=${ROWS:-81920}
STEPS=${STEPS:-40}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
OUT=bench/out/fg
CONFIG=bench/configs/fg_mixed_bench.config
scripts/install_deps.sh >/dev/null
scripts/build.sh tzrec tzrec_fg_bench >/dev/null
mkdir -p $OUT
rm -rf $OUT/data
build/tzrec_fg_bench $CONFIG $ROWS $OUT/data | tee $OUT/fg_bench.log | sed 's/^/[fg] /'
fg=$(sed -n 's/^fg_rows_per_thread=//p' $OUT/fg_bench.log)
read_fg=$(sed -n 's/^read_fg_rows_per_thread=//p' $OUT/fg_bench.log)

# What the trainer consumes on these features (steady state, steps after the first 20).
rm -rf $OUT/model
build/tzrec train_eval --pipeline_config_path=$CONFIG --eval_input_path="" \
  --edit_config_json="{\"train_config.num_epochs\": 0, \"train_config.num_steps\": $((STEPS + 21)),
    \"data_config.num_workers\": 2, \"train_config.log_step_count_steps\": 20}" >$OUT/trainer.log 2>&1
trainer=$(steady_samples_per_s $OUT/trainer.log 20 4096)
echo "[fg] trainer (DeepFM on the same features, $OMP_NUM_THREADS threads) consumes $trainer samples/s"
echo "fg ratio: $(awk -v a=$fg -v b=$trainer 'BEGIN {printf "%.2f", a/b}')x per FG thread," \
  "$(awk -v a=$read_fg -v b=$trainer 'BEGIN {printf "%.2f", a/b}')x per reader thread (CSV read + FG)"
