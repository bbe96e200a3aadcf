#!/usr/bin/env bash
# Negative sampler throughput next to what the trainer consumes: the sampler alone on a
# 1M-item table (load time, sampled rows/s per reader thread), the whole reader path with the
# sampler (read -> features -> sample -> item features of the sampled rows -> tensors) for
# TorchEasyRec's dssm_mock config on gen_data's data, and the DSSM trainer's samples/s on the
# same data, measured in the same invocation. Then the same for TDM: the reader path growing
# each batch with the tdm_sampler (tdm_fg_mock on gen_data's data and item tree: 1 + 8 ancestors
# + 45 negatives per input row) against the TDM trainer, both in rows after growth.
#
# Env: ITEMS (1000000), ROWS (204800), STEPS trainer steps timed (40), TDM_ROWS (20480).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
ITEMS=${ITEMS:-1000000}
ROWS=${ROWS:-204800}
STEPS=${STEPS:-40}
OUT=bench/out/sampler
mkdir -p $OUT
scripts/install_deps.sh >/dev/null
scripts/build.sh tzrec tzrec_micro_bench >/dev/null
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
use_best_openblas_core

build/tzrec_micro_bench sampler $OUT $ITEMS | grep '^sampler' | sed 's/^/[sampler] /'

CONFIG=tests/data/reference_configs/dssm_mock.config
if [ "$(cat $OUT/rows 2>/dev/null)" != "$ROWS" ]; then
  rm -rf $OUT/data
  build/tzrec gen_data --pipeline_config_path=$CONFIG --output_dir=$OUT/data --train_rows=$ROWS \
    --eval_rows=4096 --num_files=2 >/dev/null 2>&1
  echo "$ROWS" > $OUT/rows
fi
# The config as a user runs it, its sampler reading gen_data's item table.
sed "s#odps://{PROJECT}/tables/taobao_ad_feature_gl_bucketized_v1#$OUT/data/sampler/item_table.txt#" \
  $CONFIG > $OUT/dssm_mock.config
line=$(build/tzrec_micro_bench data $OUT/dssm_mock.config "$OUT/data/train/*.parquet" 1 | grep 'workers=1:')
echo "[sampler] reader path with sampling (dssm_mock, batch 8192, 1024 negatives): $line"
reader=$(echo "$line" | sed -n 's/.*: \([0-9]*\) rows\/s (.*/\1/p')

rm -rf $OUT/model
build/tzrec train_eval --pipeline_config_path=$OUT/dssm_mock.config --model_dir=$OUT/model \
  --train_input_path="$OUT/data/train/*.parquet" --eval_input_path="" \
  --edit_config_json="{\"train_config.num_epochs\": 0, \"train_config.num_steps\": $((STEPS + 6)),
    \"train_config.log_step_count_steps\": 5, \"data_config.num_workers\": 1}" >$OUT/train.log 2>&1
trainer=$(steady_samples_per_s $OUT/train.log 5 8192)
echo "[sampler] trainer (DSSM, $OMP_NUM_THREADS threads) consumes $trainer samples/s"
echo "one reader thread with sampling: $(awk -v a=$reader -v b=$trainer 'BEGIN {printf "%.2f", a/b}')x the trainer's consumption"

TDM_ROWS=${TDM_ROWS:-20480}
TDM_CONFIG=tests/data/reference_configs/tdm_fg_mock.config
if [ "$(cat $OUT/tdm_rows 2>/dev/null)" != "$TDM_ROWS" ]; then
  rm -rf $OUT/tdm_data
  build/tzrec gen_data --pipeline_config_path=$TDM_CONFIG --output_dir=$OUT/tdm_data --train_rows=$TDM_ROWS \
    --eval_rows=1024 >/dev/null 2>&1
  echo "$TDM_ROWS" > $OUT/tdm_rows
fi
TREE=$OUT/tdm_data/sampler/tdm_tree
# The tree tables in place of the config's empty paths (predict_edge_input_path first, so the
# second pattern finds only edge_input_path).
sed -e "s#predict_edge_input_path: \"\"#predict_edge_input_path: \"$TREE/predict_edge_table.txt\"#" \
  -e "s#edge_input_path: \"\"#edge_input_path: \"$TREE/edge_table.txt\"#" \
  -e "s#item_input_path: \"\"#item_input_path: \"$TREE/node_table.txt\"#" $TDM_CONFIG > $OUT/tdm_fg_mock.config
TDM_GROWN=$((1 + 8 + 45))
TDM_BATCH=$(sed -n 's/^ *batch_size: *\([0-9]*\).*/\1/p' $OUT/tdm_fg_mock.config | head -1)
line=$(build/tzrec_micro_bench data $OUT/tdm_fg_mock.config "$OUT/tdm_data/train/*.parquet" 1 | grep 'workers=1:')
echo "[sampler] reader path with the tdm_sampler (tdm_fg_mock, batch $TDM_BATCH grown ${TDM_GROWN}x): $line"
tdm_reader=$(echo "$line" | sed -n 's/.*: \([0-9]*\) rows\/s (.*/\1/p')
rm -rf $OUT/tdm_model
build/tzrec train_eval --pipeline_config_path=$OUT/tdm_fg_mock.config --model_dir=$OUT/tdm_model \
  --train_input_path="$OUT/tdm_data/train/*.parquet" --eval_input_path="" \
  --edit_config_json="{\"train_config.num_epochs\": 0, \"train_config.num_steps\": $((STEPS + 6)),
    \"train_config.log_step_count_steps\": 5, \"data_config.num_workers\": 1}" >$OUT/tdm_train.log 2>&1
tdm_trainer=$(steady_samples_per_s $OUT/tdm_train.log 5 $((TDM_BATCH * TDM_GROWN)))
echo "[sampler] trainer (TDM, $OMP_NUM_THREADS threads) consumes $tdm_trainer grown rows/s"
echo "one reader thread with the tdm_sampler: $(awk -v a=$tdm_reader -v b=$tdm_trainer 'BEGIN {printf "%.2f", a/b}')x the TDM trainer's consumption"
