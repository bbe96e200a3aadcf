#!/usr/bin/env bash
# Training throughput of tzrec-cpp against a PyTorch eager reference of the same models
# (bench/reference/train_reference.py) on the same generated Criteo-like data, in one
# invocation: DeepFM and DLRM (bench/configs/*_criteo_bench.config), batch 4096, the same
# thread count, BLAS (the system libblas.so.3) and allocator (tcmalloc, preloaded for the
# reference). Prints samples/s of both (median of RUNS runs, interleaved so machine noise hits
# both alike), the ratio, the eval AUC of both after one epoch, the embedding / MLP
# micro-benchmarks, and as its last line: `deepfm ratio=<x> dlrm ratio=<y>`.
#
# Env: RUNS (3), STEPS timed steps (60), WARMUP (20), THREADS (all cores), TRAIN_ROWS (409600),
# SEEDS for the one-epoch AUC comparison ("2024 2025 2026"), BF16 (auto: on CPUs with
# AVX512-BF16 both models are compared a second time with BF16 GEMMs on both sides: ours with
# train_config.mixed_precision "BF16", the reference under torch.autocast(cpu, bfloat16), each
# side's own mixed precision; 0 skips it, 1 forces it). The last line then also carries
# `deepfm_bf16 ratio=<x> dlrm_bf16 ratio=<y>`.
# OPENBLAS_CORETYPE is set to the CPU's best OpenBLAS core for both sides
# (use_best_openblas_core); each side's GEMM GFLOP/s is printed.
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
OUT=bench/out
mkdir -p $OUT

scripts/install_deps.sh
if ! /usr/bin/python3 -c "import torch, numpy" 2>/dev/null; then
  echo "[bench] installing python3-torch for the reference implementation"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-torch python3-numpy >/dev/null
fi
# GNU time (peak RSS of the one-epoch runs) is not on every fresh machine.
if [ ! -x /usr/bin/time ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq time >/dev/null
fi
scripts/build.sh tzrec tzrec_micro_bench >/dev/null
TCMALLOC=$(ls /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 2>/dev/null || true)

if [ ! -f $OUT/data/oracle.json ] || [ "$(cat $OUT/data/rows 2>/dev/null)" != "$TRAIN_ROWS" ]; then
  rm -rf $OUT/data
  build/tzrec gen_data --pipeline_config_path=bench/configs/deepfm_criteo_bench.config \
    --output_dir=$OUT/data --train_rows=$TRAIN_ROWS --eval_rows=40960 --num_files=4 >/dev/null 2>&1
  echo "$TRAIN_ROWS" > $OUT/data/rows
fi
TRAIN="$OUT/data/train/*.csv"
EVAL="$OUT/data/eval/*.csv"
export OMP_NUM_THREADS=$THREADS

median() { sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

BF16=${BF16:-auto}
if [ "$BF16" = auto ]; then
  if grep -qw avx512_bf16 /proc/cpuinfo; then BF16=1; else BF16=0; fi
fi
# A precision's config edit for us and flag for the reference; fp32 runs leave both alone.
ours_precision() { [ "$1" = bf16 ] && echo ', "train_config.mixed_precision": "BF16"' || true; }
reference_precision() { [ "$1" = bf16 ] && echo "--autocast bf16" || true; }
# Log names: fp32 keeps the names it always had.
suffix() { [ "$1" = bf16 ] && echo _bf16 || true; }

# Ours: steady-state it/s from the log lines after warm-up, times the batch size.
ours_rate() {
  local model=$1 precision=$2 log=$OUT/ours_$1$(suffix $2).log
  rm -rf $OUT/$model
  LOG_LEVEL=DEBUG build/tzrec train_eval --pipeline_config_path=bench/configs/${model}_criteo_bench.config \
    --eval_input_path="" --edit_config_json="{\"train_config.num_epochs\": 0,
      \"train_config.num_steps\": $((WARMUP + STEPS + 1)),
      \"train_config.log_step_count_steps\": $WARMUP $(ours_precision $precision)}" >$log 2>&1
  # Rates logged after the warm-up window, weighted by the steps they cover.
  steady_samples_per_s $log $WARMUP 4096
  echo
}

reference_rate() {
  local log=$OUT/reference_$1$(suffix $2).log
  LD_PRELOAD=$TCMALLOC /usr/bin/python3 bench/reference/train_reference.py --model $1 \
    --train "$TRAIN" --eval "$EVAL" --batch_size 4096 --threads $THREADS \
    --warmup_steps $WARMUP --steps $STEPS $(reference_precision $2) >$log 2>&1
  sed -n 's/^reference_samples_per_sec=//p' $log
}

# Both sides' BLAS, measured the same way (4096x512x256 matmul at THREADS threads).
echo "[bench] ours:      $(build/tzrec_micro_bench gemm 2>/dev/null | tail -n 1)"
LD_PRELOAD=$TCMALLOC /usr/bin/python3 bench/reference/train_reference.py --model deepfm --train "$TRAIN" \
  --threads $THREADS --steps 0 2>/dev/null | sed -n 's/.*blas_core=\([A-Za-z0-9-]*\) gemm_gflops=\([0-9]*\).*/[bench] reference: gemm torch.mm 4096x512x256 (OpenBLAS core \1): \2 GFLOP\/s/p' || true

declare -A RATIO REF_MEDIAN
# compare MODEL PRECISION: RUNS interleaved runs of both sides, the step breakdown, and the
# one-epoch eval AUC of both over SEEDS.
compare() {
  local model=$1 precision=$2 key=$1$(suffix $2) label
  label=$([ $precision = bf16 ] && echo "$model bf16" || echo $model)
  local ours=() ref=() ratios=() o r
  for run in $(seq 1 $RUNS); do
    ours+=("$(ours_rate $model $precision)")
    ref+=("$(reference_rate $model $precision)")
    ratios+=("$(awk -v o=${ours[-1]} -v r=${ref[-1]} 'BEGIN {printf "%.3f", o/r}')")
    echo "[bench] $label run $run: ours ${ours[-1]} samples/s, reference ${ref[-1]} samples/s, ratio ${ratios[-1]}"
  done
  o=$(printf '%s\n' "${ours[@]}" | median)
  r=$(printf '%s\n' "${ref[@]}" | median)
  # The machine's speed drifts between runs; the ratio of back-to-back runs is steadier than
  # the ratio of separate medians, so it is the headline.
  RATIO[$key]=$(printf '%s\n' "${ratios[@]}" | median | awk '{printf "%.2f", $1}')
  REF_MEDIAN[$key]=$r
  echo "$label: ours ${o} samples/s, reference ${r} samples/s (medians of $RUNS), median per-run ratio ${RATIO[$key]}"
  if [ $precision = bf16 ]; then
    echo "[bench] $label: ours (BF16) against the fp32 reference's median ${REF_MEDIAN[$model]} samples/s:" \
      "$(awk -v o=$o -v r=${REF_MEDIAN[$model]} 'BEGIN {printf "%.2f", o/r}')x"
  fi
  # Where our step goes (the trainer's DEBUG breakdown of the last timed window), against the
  # dense MLP's GEMMs alone (micro_bench mlp: 429-512-256-128 forward + backward at batch 4096).
  echo "[bench] $label step phases (ms per step): $(grep 'step time breakdown' $OUT/ours_$key.log | tail -n 1 | sed 's/.*(ms per step): //')"
  # The same run's own GEMM time (FastLinear's, timed inside the step; mean of the last run's
  # timed windows) against its wall time per step; and the reference's step over our GEMMs:
  # the ratio we would reach if everything but those GEMMs took no time.
  local gemm_ms
  gemm_ms=$(awk -v w=$WARMUP '
    /Training Epoch [0-9]*: [0-9]*it/ { match($0, /: [0-9]+it/); it = substr($0, RSTART + 2, RLENGTH - 4) + 0 }
    /FastLinear GEMMs/ && it > w { match($0, /FastLinear GEMMs [0-9.]+/); g += substr($0, RSTART + 17, RLENGTH - 17) + 0; n++ }
    END { if (n) printf "%.2f", g / n; else print 0 }' $OUT/ours_$key.log)
  echo "[bench] $label wall time per step $(awk -v o=$o 'BEGIN {printf "%.1f", 4096000 / o}') ms, of which its" \
    "FastLinear GEMMs $gemm_ms ms (same run): $(awk -v o=$o -v g=$gemm_ms 'BEGIN {printf "%.2f", (g > 0 ? 4096000 / o / g : 0)}')x;" \
    "reference step $(awk -v r=$r 'BEGIN {printf "%.1f", 4096000 / r}') ms over our GEMMs:" \
    "$(awk -v r=$r -v g=$gemm_ms 'BEGIN {printf "%.2f", (g > 0 ? 4096000 / r / g : 0)}')x (the ratio with all else at zero)"
  if [ $model = deepfm ]; then
    local mlp_ms
    mlp_ms=$(build/tzrec_micro_bench $([ $precision = bf16 ] && echo mlp_bf16 || echo mlp) 2>/dev/null | sed -n 's/.* \([0-9.]*\) ms fwd+bwd.*/\1/p')
    echo "[bench] $label step $(awk -v o=$o 'BEGIN {printf "%.1f", 4096000 / o}') ms against its MLP GEMMs alone $mlp_ms ms (fwd+bwd):" \
      "$(awk -v o=$o -v m=$mlp_ms 'BEGIN {printf "%.2f", 4096000 / o / m}')x"
  fi

  # Quality: one epoch each, eval AUC on the same eval rows, for several seeds (one-epoch AUC
  # varies by ~0.01 across seeds, more than the tolerance we compare at), reported as means.
  local ours_aucs=() ref_aucs=() seed rss tables_mib code_kib ours_mean ref_mean epoch_edit=()
  if [ $precision = bf16 ]; then epoch_edit=(--edit_config_json='{"train_config.mixed_precision": "BF16"}'); fi
  for seed in $SEEDS; do
    rm -rf $OUT/$model
    TORCH_MANUAL_SEED=$seed /usr/bin/time -v build/tzrec train_eval \
      --pipeline_config_path=bench/configs/${model}_criteo_bench.config \
      "${epoch_edit[@]}" >$OUT/ours_${key}_epoch.log 2>&1
    rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' $OUT/ours_${key}_epoch.log)
    ours_aucs+=("$(tail -n 1 $OUT/$model/train_eval_result_v2.txt | sed -n 's/.*"auc": \([0-9.e-]*\).*/\1/p')")
    LD_PRELOAD=$TCMALLOC /usr/bin/python3 bench/reference/train_reference.py --model $model \
      --train "$TRAIN" --eval "$EVAL" --batch_size 4096 --threads $THREADS --steps 0 --epochs 1 \
      --seed $seed $(reference_precision $precision) >$OUT/reference_${key}_epoch.log 2>&1
    ref_aucs+=("$(sed -n 's/^reference_eval_auc=//p' $OUT/reference_${key}_epoch.log)")
    echo "[bench] $label seed $seed: eval AUC after one epoch: ours ${ours_aucs[-1]}, reference ${ref_aucs[-1]}"
  done
  tables_mib=$(sed -n 's/.*embedding tables: \([0-9]*\) MiB.*/\1/p' $OUT/ours_${key}_epoch.log | head -1)
  # Resident code of the binary and its libraries (LibTorch, oneDNN), measured by a run that
  # stops right after start-up; it is not data, so the ratio is also shown without it.
  # (the run fails by design: `|| true`, or pipefail would end the script here)
  code_kib=$( (/usr/bin/time -v build/tzrec train_eval --pipeline_config_path=/nonexistent || true) 2>&1 \
    | sed -n 's/.*Maximum resident set size (kbytes): //p')
  echo "$label: peak RSS of our one-epoch run: $((rss / 1024)) MiB; tables + optimizer state" \
    "+ slot maps ${tables_mib} MiB; ratio $(awk -v r=$rss -v t=$tables_mib 'BEGIN{printf "%.2f", r/1024/t}')," \
    "$(awk -v r=$rss -v c=$code_kib -v t=$tables_mib 'BEGIN{printf "%.2f", (r-c)/1024/t}') without" \
    "the $((code_kib / 1024)) MiB of resident library code"
  ours_mean=$(printf '%s\n' "${ours_aucs[@]}" | mean)
  ref_mean=$(printf '%s\n' "${ref_aucs[@]}" | mean)
  echo "$label: mean eval AUC over seeds ($SEEDS): ours $ours_mean, reference $ref_mean, difference $(awk -v a=$ours_mean -v b=$ref_mean 'BEGIN {printf "%+.4f", a-b}') (oracle $(sed -n 's/.*"oracle_auc": \([0-9.]*\).*/\1/p' $OUT/data/oracle.json))"
}
mean() { awk '{s+=$1; n++} END {printf "%.4f", s/n}'; }

for model in deepfm dlrm; do compare $model fp32; done
if [ "$BF16" = 1 ]; then
  for model in deepfm dlrm; do compare $model bf16; done
fi

echo "[bench] micro-benchmarks:"
build/tzrec_micro_bench 2>&1 | sed 's/^/  /'
if [ "$BF16" = 1 ]; then
  echo "deepfm ratio=${RATIO[deepfm]} dlrm ratio=${RATIO[dlrm]} deepfm_bf16 ratio=${RATIO[deepfm_bf16]} dlrm_bf16 ratio=${RATIO[dlrm_bf16]}"
else
  echo "deepfm ratio=${RATIO[deepfm]} dlrm ratio=${RATIO[dlrm]}"
fi
