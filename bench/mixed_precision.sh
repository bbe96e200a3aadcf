#!/usr/bin/env bash
# Mixed precision: DeepFM (bench/configs/deepfm_criteo_bench.config, batch 4096) trained with
# train_config.mixed_precision "BF16", and with FP16 embedding tables (every id feature's
# data_type "FP16", fp32 compute), against the same config in fp32, in one invocation on the
# same generated Criteo-like data, threads and allocator. Prints the samples/s of each (runs
# interleaved so machine noise hits all alike; median of the per-run ratios), each side's
# step-phase breakdown and table memory, the eval AUC of each after one epoch for several
# seeds, and as its last line:
# `deepfm bf16 ratio=<x> auc_diff=<bf16 - fp32 mean AUC> fp16_tables ratio=<y> auc_diff=<z>`.
#
# BF16 needs AVX512-BF16 (oneDNN's native BF16 GEMMs); elsewhere tzrec trains BF16 configs in
# fp32 and says so, and this bench reports a ratio near 1.
#
# Env: RUNS (3), STEPS timed steps (60), WARMUP (20), THREADS (all cores), TRAIN_ROWS (409600),
# SEEDS for the AUC comparison ("2024 2025 2026").
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
use_best_openblas_core
RUNS=${RUNS:-3}
STEPS=${STEPS:-60}
WARMUP=${WARMUP:-20}
THREADS=${THREADS:-$(nproc)}
TRAIN_ROWS=${TRAIN_ROWS:-409600}
SEEDS=${SEEDS:-"2024 2025 2026"}
OUT=bench/out/mixed_precision
CONFIG=bench/configs/deepfm_criteo_bench.config
mkdir -p $OUT

scripts/install_deps.sh
scripts/build.sh tzrec >/dev/null
if grep -qw avx512_bf16 /proc/cpuinfo; then
  echo "[bench] AVX512-BF16: yes (oneDNN BF16 GEMMs)"
else
  echo "[bench] AVX512-BF16: no - BF16 runs in fp32 here, expect a ratio near 1"
fi

if [ ! -f $OUT/data/oracle.json ] || [ "$(cat $OUT/data/rows 2>/dev/null)" != "$TRAIN_ROWS" ]; then
  rm -rf $OUT/data
  build/tzrec gen_data --pipeline_config_path=$CONFIG --output_dir=$OUT/data \
    --train_rows=$TRAIN_ROWS --eval_rows=40960 --num_files=4 >/dev/null 2>&1
  echo "$TRAIN_ROWS" > $OUT/data/rows
fi
export OMP_NUM_THREADS=$THREADS
TRAIN="\"train_input_path\": \"$OUT/data/train/*.csv\""
EVAL="\"eval_input_path\": \"$OUT/data/eval/*.csv\""

median() { sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
mean() { awk '{s+=$1; n++} END {printf "%.4f", s/n}'; }

# The config edits of a variant: FP32, BF16 (mixed precision) or FP16T (FP16 tables).
variant() {
  case $1 in
    FP32) echo '"train_config.mixed_precision": ""' ;;
    BF16) echo '"train_config.mixed_precision": "BF16"' ;;
    FP16T) echo '"train_config.mixed_precision": "", "feature_configs[id_feature.num_buckets>0].id_feature.data_type": "FP16"' ;;
  esac
}

# rate VARIANT: steady samples/s of a timed run (no evaluation).
rate() {
  local precision=$1 log=$OUT/rate_$1.log
  rm -rf $OUT/model_$precision
  LOG_LEVEL=DEBUG build/tzrec train_eval --pipeline_config_path=$CONFIG --model_dir=$OUT/model_$precision \
    --edit_config_json="{$TRAIN, \"eval_input_path\": \"\", $(variant $precision),
      \"train_config.num_epochs\": 0, \"train_config.num_steps\": $((WARMUP + STEPS + 1)),
      \"train_config.log_step_count_steps\": $WARMUP}" >$log 2>&1
  steady_samples_per_s $log $WARMUP 4096
}

ratios=(); table_ratios=(); bf=(); fp=(); ft=()
for run in $(seq 1 $RUNS); do
  fp+=("$(rate FP32)")
  bf+=("$(rate BF16)")
  ft+=("$(rate FP16T)")
  ratios+=("$(awk -v b=${bf[-1]} -v f=${fp[-1]} 'BEGIN {printf "%.3f", b/f}')")
  table_ratios+=("$(awk -v b=${ft[-1]} -v f=${fp[-1]} 'BEGIN {printf "%.3f", b/f}')")
  echo "[bench] run $run: fp32 ${fp[-1]} samples/s, bf16 ${bf[-1]} samples/s (ratio ${ratios[-1]}), fp16 tables ${ft[-1]} samples/s (ratio ${table_ratios[-1]})"
done
RATIO=$(printf '%s\n' "${ratios[@]}" | median | awk '{printf "%.2f", $1}')
TABLE_RATIO=$(printf '%s\n' "${table_ratios[@]}" | median | awk '{printf "%.2f", $1}')
echo "deepfm: fp32 $(printf '%s\n' "${fp[@]}" | median) samples/s, bf16 $(printf '%s\n' "${bf[@]}" | median) samples/s, fp16 tables $(printf '%s\n' "${ft[@]}" | median) samples/s (medians of $RUNS), median per-run ratios bf16 $RATIO, fp16 tables $TABLE_RATIO"
for precision in FP32 BF16 FP16T; do
  echo "[bench] $precision step phases (ms per step): $(grep 'step time breakdown' $OUT/rate_$precision.log | tail -n 1 | sed 's/.*(ms per step): //')"
  echo "[bench] $precision tables: $(grep -m1 -o 'embedding tables[^;]*MiB[^;]*' $OUT/rate_$precision.log || echo 'not logged')"
done

# Quality: one epoch each, eval AUC on the same eval rows, several seeds, as means.
fp_aucs=(); bf_aucs=(); ft_aucs=()
for seed in $SEEDS; do
  for precision in FP32 BF16 FP16T; do
    rm -rf $OUT/model_$precision
    TORCH_MANUAL_SEED=$seed build/tzrec train_eval --pipeline_config_path=$CONFIG --model_dir=$OUT/model_$precision \
      --edit_config_json="{$TRAIN, $EVAL, $(variant $precision)}" >$OUT/epoch_$precision.log 2>&1
    auc=$(tail -n 1 $OUT/model_$precision/train_eval_result_v2.txt | sed -n 's/.*"auc": \([0-9.e-]*\).*/\1/p')
    case $precision in FP32) fp_aucs+=("$auc") ;; BF16) bf_aucs+=("$auc") ;; FP16T) ft_aucs+=("$auc") ;; esac
  done
  echo "[bench] seed $seed: eval AUC after one epoch: fp32 ${fp_aucs[-1]}, bf16 ${bf_aucs[-1]}, fp16 tables ${ft_aucs[-1]}"
done
fp_mean=$(printf '%s\n' "${fp_aucs[@]}" | mean)
bf_mean=$(printf '%s\n' "${bf_aucs[@]}" | mean)
ft_mean=$(printf '%s\n' "${ft_aucs[@]}" | mean)
DIFF=$(awk -v a=$bf_mean -v b=$fp_mean 'BEGIN {printf "%+.4f", a-b}')
TABLE_DIFF=$(awk -v a=$ft_mean -v b=$fp_mean 'BEGIN {printf "%+.4f", a-b}')
echo "deepfm: mean eval AUC over seeds ($SEEDS): fp32 $fp_mean, bf16 $bf_mean ($DIFF), fp16 tables $ft_mean ($TABLE_DIFF)"
echo "deepfm bf16 ratio=$RATIO auc_diff=$DIFF fp16_tables ratio=$TABLE_RATIO auc_diff=$TABLE_DIFF"
