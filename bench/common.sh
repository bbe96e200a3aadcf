# Shared by the bench scripts (sourced, not run).

# steady_samples_per_s LOG WARMUP_STEPS SAMPLES_PER_STEP: mean of the it/s a trainer log reports
# after WARMUP_STEPS (the first log line is skipped too), times SAMPLES_PER_STEP; 0 if none.
steady_samples_per_s() {
  sed -n 's/.*Training Epoch [0-9]*: \([0-9]*\)it \[\([0-9.]*\)it\/s\].*/\1 \2/p' "$1" |
    awk -v w="$2" -v per="$3" 'NR>1 && $1>w {s+=$2; n++} END {if (n) printf "%.1f", s/n*per; else print 0}'
}

# prepare_criteo_export OUT ROWS: generated Criteo-like data (CSV in OUT/csv, Parquet in
# OUT/parquet, ROWS train rows each), a checkpoint of the DeepFM bench model after a short
# training run (weights do not matter for speed) and its FP32 and INT8 exports
# (OUT/export_fp32, OUT/export_int8); redone only when ROWS changes.
prepare_criteo_export() {
  local out=$1 rows=$2 config=bench/configs/deepfm_criteo_bench.config
  sed 's/dataset_type: CsvDataset/dataset_type: ParquetDataset/' $config > $out/parquet.config
  if [ "$(cat $out/rows 2>/dev/null)" = "$rows" ]; then return; fi
  rm -rf $out/csv $out/parquet $out/model $out/export_*
  build/tzrec gen_data --pipeline_config_path=$config --output_dir=$out/csv \
    --train_rows=$rows --eval_rows=4096 --num_files=2 >/dev/null 2>&1
  build/tzrec gen_data --pipeline_config_path=$out/parquet.config --output_dir=$out/parquet \
    --train_rows=$rows --eval_rows=4096 --num_files=2 >/dev/null 2>&1
  build/tzrec train_eval --pipeline_config_path=$config --model_dir=$out/model \
    --train_input_path="$out/csv/train/*.csv" --eval_input_path="$out/csv/eval/*.csv" \
    --edit_config_json='{"train_config.num_epochs": 0, "train_config.num_steps": 20}' >$out/train.log 2>&1
  QUANT_EMB=0 build/tzrec export --pipeline_config_path=$out/model/pipeline.config \
    --export_dir=$out/export_fp32 >$out/export.log 2>&1
  build/tzrec export --pipeline_config_path=$out/model/pipeline.config \
    --export_dir=$out/export_int8 >>$out/export.log 2>&1
  echo "$rows" > $out/rows
}

# use_best_openblas_core: exports OPENBLAS_CORETYPE as the kernel set this CPU runs fastest
# (the choice tzrec makes at start-up, src/tzrec/kernels/blas_core.cc: SkylakeX with AVX-512,
# Zen or Haswell with AVX2), so both sides of a comparison get it whatever the environment
# set; prints the CPU and the choice.
use_best_openblas_core() {
  local flags best="" had=${OPENBLAS_CORETYPE:-unset}
  flags=$(grep -m1 '^flags' /proc/cpuinfo)
  has() { grep -qw "$1" <<<"$flags"; }
  if has avx512f && has avx512bw && has avx512dq && has avx512vl && has avx512cd; then
    best=SkylakeX
  elif has avx2 && has fma; then
    if grep -q AuthenticAMD /proc/cpuinfo; then best=Zen; else best=Haswell; fi
  fi
  if [ -n "$best" ]; then export OPENBLAS_CORETYPE=$best; fi
  echo "[bench] CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //');" \
    "OpenBLAS core for both sides: ${best:-OpenBLAS default} (the environment had $had)"
}
