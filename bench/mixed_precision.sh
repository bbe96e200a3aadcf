#!/usr/bin/env bash
# Mixed precision: DeepFM (bench/configs/deepfm_criteo_bench.config, batch 4096) trained with
# train_config.mixed_precision "BF16", with FP16 embedding tables and with BF16 ones (every id
# feature's data_type "FP16" / "BF16", fp32 compute), against the same config in fp32, in one
# invocation on the same generated Criteo-like data, threads and allocator. Prints the
# samples/s of each (runs interleaved so machine noise hits all alike; median of the per-run
# ratios), each side's step-phase breakdown and table memory, the eval AUC of each after one
# epoch for several seeds, and as its last line:
# `deepfm bf16 ratio=<x> auc_diff=<bf16 - fp32 mean AUC> fp16_tables ratio=<y> auc_diff=<z>
#  bf16_tables ratio=<u> auc_diff=<v>`.
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

# The config edits of a variant: FP32, BF16 (mixed precision), FP16T / BF16T (FP16 / BF16
# tables, fp32 compute).
VARIANTS="FP32 BF16 FP16T BF16T"
declare -A LABEL=([FP32]="fp32" [BF16]="bf16" [FP16T]="fp16 tables" [BF16T]="bf16 tables")
variant() {
  case $1 in
    FP32) echo '"train_config.mixed_precision": ""' ;;
    BF16) echo '"train_config.mixed_precision": "BF16"' ;;
    FP16T) echo '"train_config.mixed_precision": "", "feature_configs[id_feature.num_buckets>0].id_feature.data_type": "FP16"' ;;
    BF16T) echo '"train_config.mixed_precision": "", "feature_configs[id_feature.num_buckets>0].id_feature.data_type": "BF16"' ;;
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

# Per variant: the rates of the runs and their ratios to the same run's fp32 rate (lists).
declare -A RATES RATIOS
for run in $(seq 1 $RUNS); do
  line="[bench] run $run:"
  for precision in $VARIANTS; do
    r=$(rate $precision)
    RATES[$precision]+="$r "
    [ $precision = FP32 ] && fp=$r
    ratio=$(awk -v b=$r -v f=$fp 'BEGIN {printf "%.3f", b/f}')
    RATIOS[$precision]+="$ratio "
    line+=" ${LABEL[$precision]} $r samples/s"
    [ $precision != FP32 ] && line+=" (ratio $ratio)"
    [ $precision != BF16T ] && line+=","
  done
  echo "$line"
done
declare -A RATIO
summary="deepfm:"
for precision in $VARIANTS; do
  RATIO[$precision]=$(printf '%s\n' ${RATIOS[$precision]} | median | awk '{printf "%.2f", $1}')
  summary+=" ${LABEL[$precision]} $(printf '%s\n' ${RATES[$precision]} | median) samples/s"
  [ $precision != FP32 ] && summary+=" (median ratio ${RATIO[$precision]})"
  [ $precision != BF16T ] && summary+=","
done
echo "$summary (medians of $RUNS runs)"
for precision in $VARIANTS; do
  echo "[bench] $precision step phases (ms per step): $(grep 'step time breakdown' $OUT/rate_$precision.log | tail -n 1 | sed 's/.*(ms per step): //')"
  echo "[bench] $precision tables: $(grep -m1 -o 'embedding tables[^;]*MiB[^;]*' $OUT/rate_$precision.log || echo 'not logged')"
done

# Quality: one epoch each, eval AUC on the same eval rows, several seeds, as means.
declare -A AUCS
for seed in $SEEDS; do
  line="[bench] seed $seed: eval AUC after one epoch:"
  for precision in $VARIANTS; do
    rm -rf $OUT/model_$precision
    TORCH_MANUAL_SEED=$seed build/tzrec train_eval --pipeline_config_path=$CONFIG --model_dir=$OUT/model_$precision \
      --edit_config_json="{$TRAIN, $EVAL, $(variant $precision)}" >$OUT/epoch_$precision.log 2>&1
    auc=$(tail -n 1 $OUT/model_$precision/train_eval_result_v2.txt | sed -n 's/.*"auc": \([0-9.e-]*\).*/\1/p')
    AUCS[$precision]+="$auc "
    line+=" ${LABEL[$precision]} $auc"
  done
  echo "$line"
done
declare -A MEAN DIFF
for precision in $VARIANTS; do MEAN[$precision]=$(printf '%s\n' ${AUCS[$precision]} | mean); done
for precision in $VARIANTS; do
  DIFF[$precision]=$(awk -v a=${MEAN[$precision]} -v b=${MEAN[FP32]} 'BEGIN {printf "%+.4f", a-b}')
done
echo "deepfm: mean eval AUC over seeds ($SEEDS): fp32 ${MEAN[FP32]}, bf16 ${MEAN[BF16]} (${DIFF[BF16]}), fp16 tables ${MEAN[FP16T]} (${DIFF[FP16T]}), bf16 tables ${MEAN[BF16T]} (${DIFF[BF16T]})"
echo "deepfm bf16 ratio=${RATIO[BF16]} auc_diff=${DIFF[BF16]} fp16_tables ratio=${RATIO[FP16T]} auc_diff=${DIFF[FP16T]} bf16_tables ratio=${RATIO[BF16T]} auc_diff=${DIFF[BF16T]}"
