#!/usr/bin/env bash
# KafkaDataset throughput: Arrow IPC messages (written by apache-arrow JS from gen_data Parquet,
# ROWS_PER_MESSAGE rows each) produced to an in-process librdkafka mock cluster, then read
# into training Batches (consume -> decode -> parse features -> tensors) by 1 and 2 reader
# threads; reported as messages/s and rows/s beside the Parquet reader on the same rows and
# what the trainer consumes (DeepFM samples/s), all measured in this invocation.
#
# Env: ROWS (409600), ROWS_PER_MESSAGE (1024), STEPS trainer steps timed (40).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
use_best_openblas_core  # for the trainer whose consumption is the yardstick
ROWS=${ROWS:-409600}
ROWS_PER_MESSAGE=${ROWS_PER_MESSAGE:-1024}
STEPS=${STEPS:-40}
OUT=bench/out
mkdir -p $OUT
scripts/install_deps.sh >/dev/null
scripts/build.sh tzrec tzrec_micro_bench >/dev/null
if [ ! -f tests/interop/node_modules/apache-arrow/package.json ]; then
  (cd tests/interop && npm ci --no-audit --no-fund >/dev/null 2>&1)
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}

CONFIG=$OUT/deepfm_criteo_bench_kafka.config
sed -e 's/dataset_type: CsvDataset/dataset_type: ParquetDataset/' \
    -e 's#bench/out/data/#bench/out/data_kafka/#g' -e 's#\*\.csv#*.parquet#g' bench/configs/deepfm_criteo_bench.config > $CONFIG
DATA=$OUT/data_kafka
MESSAGES=$OUT/kafka_messages
if [ "$(cat $DATA/rows 2>/dev/null)" != "$ROWS.$ROWS_PER_MESSAGE" ]; then
  rm -rf $DATA $MESSAGES
  build/tzrec gen_data --pipeline_config_path=$CONFIG --output_dir=$DATA --train_rows=$ROWS \
    --eval_rows=4096 --num_files=1 >/dev/null 2>&1
  train_file=$(cd $DATA/train && ls "$PWD"/*.parquet | head -1)
  mkdir -p $MESSAGES
  messages_dir=$(cd $MESSAGES && pwd)
  (cd tests/interop && node write_arrow.mjs messages "$train_file" "$messages_dir" $ROWS_PER_MESSAGE stream >/dev/null)
  echo "$ROWS.$ROWS_PER_MESSAGE" > $DATA/rows
fi
echo "[kafka] $ROWS rows in $(ls $MESSAGES | wc -l) messages of $ROWS_PER_MESSAGE rows ($(du -sh $MESSAGES | cut -f1) Arrow IPC)"

declare -A KAFKA PARQUET
while read -r line; do
  echo "[kafka] $line"
  w=$(echo "$line" | sed -n 's/^kafka workers=\([0-9]*\):.*/\1/p')
  KAFKA[$w]=$(echo "$line" | sed -n 's/.*(\([0-9]*\) rows\/s per worker thread).*/\1/p')
done < <(build/tzrec_micro_bench kafka $CONFIG $MESSAGES 2>/dev/null | grep '^kafka workers=')
while read -r line; do
  echo "[kafka] parquet $line"
  w=$(echo "$line" | sed -n 's/.*workers=\([0-9]*\):.*/\1/p')
  PARQUET[$w]=$(echo "$line" | sed -n 's/.*(\([0-9]*\) rows\/s per worker thread).*/\1/p')
done < <(build/tzrec_micro_bench data $CONFIG "$DATA/train/*.parquet" 2>/dev/null | grep 'workers=')

# What the trainer consumes: DeepFM steady-state samples/s (as data_throughput.sh measures it).
rm -rf $OUT/deepfm_kafka
build/tzrec train_eval --pipeline_config_path=$CONFIG --model_dir=$OUT/deepfm_kafka --eval_input_path="" \
  --train_input_path="$DATA/train/*.parquet" \
  --edit_config_json="{\"train_config.num_epochs\": 0, \"train_config.num_steps\": $((STEPS + 21)),
    \"train_config.log_step_count_steps\": 20}" >$OUT/kafka_trainer.log 2>&1
trainer=$(steady_samples_per_s $OUT/kafka_trainer.log 20 4096)
echo "[kafka] trainer (DeepFM, $OMP_NUM_THREADS threads) consumes $trainer samples/s"
echo "kafka: ${KAFKA[1]} rows/s per reader thread = $(awk -v a=${KAFKA[1]} -v b=${PARQUET[1]} 'BEGIN {printf "%.2f", a/b}')x parquet's ${PARQUET[1]}, $(awk -v a=${KAFKA[1]} -v b=$trainer 'BEGIN {printf "%.2f", a/b}')x the trainer's consumption"
