#!/usr/bin/env bash
# DIN training throughput of tzrec-cpp against a PyTorch eager twin of the same model
# (bench/reference/din_reference.py) on the same generated Taobao-shaped data, in one
# invocation: multi_tower_din (bench/configs/multi_tower_din_taobao_bench.config: a DEEP tower
# over 16 features, DIN attention over a 50-step click sequence, final MLP), batch 4096, the
# same thread count, BLAS (the system libblas.so.3) and allocator (tcmalloc, preloaded for the
# reference). Prints samples/s of both (median of RUNS runs, interleaved so machine noise hits
# both alike), the ratio, where our step time goes (data wait vs step from LOG_LEVEL=DEBUG,
# and a perf profile by component when perf works), the reference's per-phase times, the mean
# eval AUC of both after one epoch over SEEDS (both sides from the same initial weights per
# seed), and as its last line:
# `din ratio=<x> ours_auc=<a> reference_auc=<b>`.
#
# Env: RUNS (3), STEPS timed steps (20), WARMUP (5), THREADS (all cores), TRAIN_ROWS (204800),
# EVAL_ROWS (40960), SEEDS for the one-epoch AUC comparison ("2024 2025 2026 2027 2028"),
# PROFILE (1: a perf profile of our steady state, if perf is there; 0: skip), TZREC_BIN (a
# tzrec binary to use, with libtzrec_fg_builtin_ops.so beside it; unset: build build/tzrec).
# OPENBLAS_CORETYPE is set to the CPU's best OpenBLAS core for both sides
# (use_best_openblas_core; bench/train_throughput.sh prints both sides' GEMM GFLOP/s).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
use_best_openblas_core
RUNS=${RUNS:-3}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-5}
THREADS=${THREADS:-$(nproc)}
TRAIN_ROWS=${TRAIN_ROWS:-204800}
EVAL_ROWS=${EVAL_ROWS:-40960}
SEEDS=${SEEDS:-"2024 2025 2026 2027 2028"}
PROFILE=${PROFILE:-1}
BATCH=4096
CONFIG=bench/configs/multi_tower_din_taobao_bench.config
OUT=bench/out
DATA=$OUT/din_data  # the config's train/eval paths point here
mkdir -p $OUT

scripts/install_deps.sh
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
if ! /usr/bin/python3 -c "import torch, numpy" 2>/dev/null; then
  echo "[bench] installing python3-torch for the reference implementation"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-torch python3-numpy >/dev/null
fi
# GNU time (peak RSS of the one-epoch runs) is not on every fresh machine.
if [ ! -x /usr/bin/time ]; then
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq time >/dev/null
fi
if [ -n "${TZREC_BIN:-}" ]; then
  TZREC=$TZREC_BIN
else
  scripts/build.sh tzrec >/dev/null
  TZREC=build/tzrec
fi
echo "[bench] tzrec binary: $TZREC; threads: $THREADS; batch: $BATCH"
TCMALLOC=$(ls /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 2>/dev/null || true)

# Data (regenerated when the row counts, the config or the binary (its gen_data) change).
stamp="$TRAIN_ROWS $EVAL_ROWS $(cat $CONFIG $TZREC | md5sum | cut -c1-32)"
if [ ! -f $DATA/oracle.json ] || [ "$(cat $DATA/stamp 2>/dev/null)" != "$stamp" ]; then
  rm -rf $DATA
  $TZREC gen_data --pipeline_config_path=$CONFIG --output_dir=$DATA --train_rows=$TRAIN_ROWS \
    --eval_rows=$EVAL_ROWS --num_files=2 --max_sequence_steps=50 >$OUT/din_gen_data.log 2>&1
  echo "$stamp" > $DATA/stamp
fi
TRAIN="$DATA/train/*.csv"
EVAL="$DATA/eval/*.csv"
export OMP_NUM_THREADS=$THREADS

median() { sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
mean() { awk '{s+=$1; n++} END {if (n) printf "%.4f", s/n; else print "nan"}'; }

# Ours: steady-state it/s from the log lines after warm-up, times the batch size. LOG_LEVEL=DEBUG
# adds the trainer's "data" (waiting for the next batch) / "step" ms per log window.
OURS_STEPS=$((WARMUP + STEPS + 1))
ours_train() {  # ours_train LOG: one short training run (no evaluation) logging to LOG
  rm -rf $OUT/din
  LOG_LEVEL=DEBUG $TZREC train_eval --pipeline_config_path=$CONFIG \
    --edit_config_json="{\"eval_input_path\": \"\", \"train_config.num_epochs\": 0,
      \"train_config.num_steps\": $OURS_STEPS,
      \"train_config.log_step_count_steps\": $WARMUP}" >$1 2>&1
}
ours_rate() {
  local log=$OUT/ours_din_run$1.log
  ours_train $log
  steady_samples_per_s $log $WARMUP $BATCH
  echo
}

reference_rate() {
  LD_PRELOAD=$TCMALLOC /usr/bin/python3 bench/reference/din_reference.py --config $CONFIG \
    --train "$TRAIN" --batch_size $BATCH --threads $THREADS \
    --warmup_steps $WARMUP --steps $STEPS >$OUT/reference_din_run$1.log 2>&1
  sed -n 's/^reference_samples_per_sec=//p' $OUT/reference_din_run$1.log
}

ours=(); ref=(); ratios=()
for run in $(seq 1 $RUNS); do
  ours+=("$(ours_rate $run)")
  ref+=("$(reference_rate $run)")
  if [ -z "${ref[-1]}" ] || [ "${ours[-1]}" = 0 ]; then
    echo "[bench] run $run failed; see $OUT/ours_din_run$run.log and $OUT/reference_din_run$run.log" >&2
    exit 1
  fi
  ratios+=("$(awk -v o=${ours[-1]} -v r=${ref[-1]} 'BEGIN {printf "%.3f", o/r}')")
  echo "[bench] din run $run: ours ${ours[-1]} samples/s, reference ${ref[-1]} samples/s, ratio ${ratios[-1]}"
done
o=$(printf '%s\n' "${ours[@]}" | median)
r=$(printf '%s\n' "${ref[@]}" | median)
# The machine's speed drifts between runs; the ratio of back-to-back runs is steadier than the
# ratio of separate medians, so it is the headline.
RATIO=$(printf '%s\n' "${ratios[@]}" | median | awk '{printf "%.2f", $1}')
echo "din: ours ${o} samples/s, reference ${r} samples/s (medians of $RUNS), median per-run ratio ${RATIO}"

# Where the step time goes. Ours: the trainer's data/step split over the timed windows of all
# runs (a window's ms are per step; the first window after start-up is skipped).
for run in $(seq 1 $RUNS); do cat $OUT/ours_din_run$run.log; done | awk -v w=$WARMUP '
  /Training Epoch [0-9]*: [0-9]*it/ { match($0, /: [0-9]+it/); it = substr($0, RSTART + 2, RLENGTH - 4) + 0 }
  /step time breakdown/ && it > w {
    for (i = 1; i <= NF; i++) { if ($i == "data") { d += $(i + 1) + 0 } if ($i == "step") { s += $(i + 1) + 0 } }
    n++ }
  END { if (n) printf "din: ours per step (timed windows): %.1f ms, of which waiting for data %.1f ms" \
          " and forward + backward + updates %.1f ms\n", (d + s) / n, d / n, s / n }'
echo "din: reference per step (run $RUNS):"
grep -E "^  phase|^reference_ms_per_step" $OUT/reference_din_run$RUNS.log | sed 's/^ */  /'

# A perf profile of our steady state (cheap: one more short run), by component. Only where
# perf is installed and allowed to sample (perf_event_paranoid, containers).
if [ "$PROFILE" = 1 ]; then
  if ! command -v perf >/dev/null 2>&1; then
    echo "din: perf profile skipped (perf is not installed: apt-get install linux-perf)"
  else
    log=$OUT/ours_din_profile.log
    rm -f $log  # a previous invocation's log would end the waits below at once
    ours_train $log &
    train_pid=$!
    # Sample from the end of the warm-up window until the last step's log line.
    until grep -q "Training Epoch [0-9]*: ${WARMUP}it" $log 2>/dev/null || ! kill -0 $train_pid 2>/dev/null; do
      sleep 0.2
    done
    pid=$(pgrep -P $train_pid -f "train_eval" | head -1 || true)
    [ -z "$pid" ] && pid=$train_pid
    perf record -F 499 -o $OUT/din_perf.data -p $pid >$OUT/din_perf_record.log 2>&1 &
    perf_pid=$!
    last=$(( (OURS_STEPS - 1) / WARMUP * WARMUP ))
    until grep -q "Training Epoch [0-9]*: ${last}it" $log 2>/dev/null || ! kill -0 $train_pid 2>/dev/null; do
      sleep 0.2
    done
    kill -INT $perf_pid 2>/dev/null || true
    wait $perf_pid 2>/dev/null || true
    wait $train_pid || true
    if perf report -i $OUT/din_perf.data --no-children --sort dso,sym --stdio 2>/dev/null \
        | grep -E '^ +[0-9.]+%' > $OUT/din_perf.txt && [ -s $OUT/din_perf.txt ]; then
      echo "din: perf profile of our timed steps (share of sampled CPU time, by component):"
      awk '{
        pct = $1 + 0; dso = $2; sym = ""; for (i = 4; i <= NF; i++) sym = sym " " $i
        if (dso ~ /JIT/) c = "MLP GEMMs (oneDNN JIT sgemm: attention MLP, towers, final)"
        else if (dso ~ /openblas/) c = "other matmuls (OpenBLAS: bmm, Linear(1), ...)"
        else if (dso ~ /libgomp/) c = "OpenMP runtime (barriers, spinning)"
        else if (dso ~ /kernel/) c = "kernel (page faults, scheduling, I/O)"
        else if (dso ~ /libtorch/) c = "ATen ops (softmax, cat, elementwise, copies)"
        else if (dso ~ /tcmalloc|libc\.so/) c = "malloc, memcpy, memset"
        else if (dso ~ /tzrec/ && sym ~ /Csv|Parse|Reader|Dataset|Batch|Feature|Utf|Split/) c = "data parsing (tzrec)"
        else if (dso ~ /tzrec/ && sym ~ /Relu|Bias/) c = "bias + ReLU and its backward (tzrec)"
        else if (dso ~ /tzrec/ && sym ~ /Pooled|Backward|Update|Embedding|Lookup|Dedup|Bag|Sequence/) c = "embedding lookup + backward + Adagrad (tzrec)"
        else if (dso ~ /tzrec/) c = "other tzrec code"
        else c = "other (" dso ")"
        share[c] += pct }
        END { for (c in share) printf "  %5.1f%%  %s\n", share[c], c }' $OUT/din_perf.txt | sort -rn
      echo "  (top symbols: $OUT/din_perf.txt)"
    else
      echo "din: perf profile skipped (perf record failed: $(tail -n 1 $OUT/din_perf_record.log))"
    fi
  fi
fi

# Quality: one epoch each, eval AUC on the same eval rows, for several seeds, reported as means.
# One-epoch AUC varies by about 0.01 between initialisations, more than any difference between
# the implementations, so each seed's initial weights are shared: ours draws them (a one-step
# run at learning rate 0 writes them unchanged as model.ckpt-0), then both train one epoch
# from them (ours with fine_tune_checkpoint, the reference with --init_checkpoint), each with
# fresh optimizer state.
ours_aucs=(); ref_aucs=()
for seed in $SEEDS; do
  init=$OUT/din_init_$seed
  rm -rf $init $OUT/din
  TORCH_MANUAL_SEED=$seed $TZREC train_eval --pipeline_config_path=$CONFIG \
    --edit_config_json="{\"model_dir\": \"$init\", \"eval_input_path\": \"\",
      \"train_config.num_epochs\": 0, \"train_config.num_steps\": 1,
      \"train_config.sparse_optimizer.adagrad_optimizer.lr\": 0,
      \"train_config.dense_optimizer.adam_optimizer.lr\": 0}" >$OUT/ours_din_init.log 2>&1 ||
    { echo "[bench] initial weights run failed: $OUT/ours_din_init.log" >&2; exit 1; }
  /usr/bin/time -v $TZREC train_eval --pipeline_config_path=$CONFIG \
    --edit_config_json="{\"train_config.fine_tune_checkpoint\": \"$init/model.ckpt-0\"}" \
    >$OUT/ours_din_epoch.log 2>&1 || { echo "[bench] our epoch run failed: $OUT/ours_din_epoch.log" >&2; exit 1; }
  ours_rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' $OUT/ours_din_epoch.log)
  ours_aucs+=("$(tail -n 1 $OUT/din/train_eval_result_v2.txt | sed -n 's/.*"auc": \([0-9.e-]*\).*/\1/p' |
    awk '{printf "%.6f", $1}')")
  LD_PRELOAD=$TCMALLOC /usr/bin/time -v /usr/bin/python3 bench/reference/din_reference.py \
    --config $CONFIG --train "$TRAIN" --eval "$EVAL" --batch_size $BATCH --threads $THREADS \
    --steps 0 --epochs 1 --init_checkpoint $init/model.ckpt-0 >$OUT/reference_din_epoch.log 2>&1 ||
    { echo "[bench] reference epoch run failed: $OUT/reference_din_epoch.log" >&2; exit 1; }
  ref_rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' $OUT/reference_din_epoch.log)
  ref_aucs+=("$(sed -n 's/^reference_eval_auc=//p' $OUT/reference_din_epoch.log)")
  echo "[bench] din seed $seed: eval AUC after one epoch from the same initial weights: ours" \
    "${ours_aucs[-1]}, reference ${ref_aucs[-1]} (peak RSS ours $((ours_rss / 1024)) MiB," \
    "reference $((ref_rss / 1024)) MiB with all batches pre-parsed)"
done
ours_mean=$(printf '%s\n' "${ours_aucs[@]}" | mean)
ref_mean=$(printf '%s\n' "${ref_aucs[@]}" | mean)
oracle=$(sed -n 's/.*"oracle_auc": \([0-9.]*\).*/\1/p' $DATA/oracle.json | awk '{printf "%.4f", $1}')
oracle_blind=$(sed -n 's/.*"oracle_auc_without_sequence": \([0-9.]*\).*/\1/p' $DATA/oracle.json |
  awk '{printf "%.4f", $1}')
echo "din: mean eval AUC over seeds ($SEEDS): ours $ours_mean, reference $ref_mean, difference" \
  "$(awk -v a=$ours_mean -v b=$ref_mean 'BEGIN {printf "%+.4f", a-b}') (oracle $oracle," \
  "oracle without the sequence signal $oracle_blind)"
echo "din ratio=${RATIO} ours_auc=${ours_mean} reference_auc=${ref_mean}"
