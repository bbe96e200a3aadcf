# Shared by the bench scripts (sourced, not run).

# steady_samples_per_s LOG WARMUP_STEPS SAMPLES_PER_STEP: mean of the it/s a trainer log reports
# after WARMUP_STEPS (the first log line is skipped too), times SAMPLES_PER_STEP; 0 if none.
steady_samples_per_s() {
  sed -n 's/.*Training Epoch [0-9]*: \([0-9]*\)it \[\([0-9.]*\)it\/s\].*/\1 \2/p' "$1" |
    awk -v w="$2" -v per="$3" 'NR>1 && $1>w {s+=$2; n++} END {if (n) printf "%.1f", s/n*per; else print 0}'
}
