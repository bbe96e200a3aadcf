#!/usr/bin/env bash
# Serving load test of `tzrec serve` with the Criteo DeepFM bench model (INT8 export), driven
# by bench/serve_load.cc over keep-alive connections on this machine (the load generator
# shares its cores with the server):
#   - rank requests, one user plus ITEMS items (feature generation included): saturation
#     (closed loop) in items/s, then p50/p99 latency at half that request rate (open loop),
#     and the same while the model is reloaded three times;
#   - single-row :predict requests from 16 connections with a 500 us batching window: req/s
#     and p99.
# Last line: `serve rank_p50_ms=... rank_p99_ms=... reload_p99_ms=... reload_failures=...
# saturation_items_per_sec=... single_rps=... single_p99_ms=...`.
#
# Env: ITEMS (100), SECONDS_PER_RUN (5), MODEL_THREADS (1), ROWS of bench data (40960).
# OPENBLAS_CORETYPE is set to the CPU's best OpenBLAS core (use_best_openblas_core).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
ITEMS=${ITEMS:-100}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
MODEL_THREADS=${MODEL_THREADS:-1}
ROWS=${ROWS:-40960}
OUT=bench/out/serve
mkdir -p $OUT
use_best_openblas_core

scripts/install_deps.sh
scripts/build.sh tzrec tzrec_serve_load >/dev/null
prepare_criteo_export $OUT $ROWS

# Request bodies from the first rows of the data: the user is row 0 without cat_0 (the item
# id) and the dense columns (per-item context); items are the first ITEMS rows' cat_0.
/usr/bin/python3 - "$OUT" "$ITEMS" <<'PY'
import csv, glob, json, sys
out, items = sys.argv[1], int(sys.argv[2])
rows = list(csv.DictReader(open(sorted(glob.glob(out + "/csv/train/*.csv"))[0])))[:items]
dense = [k for k in rows[0] if k.startswith("int_")]
user = {k: v for k, v in rows[0].items() if k.startswith("cat_") and k != "cat_0"}
rank = {"user_features": user, "item_id_column": "cat_0", "item_ids": [r["cat_0"] for r in rows],
        "context_features": {k: [r[k] for r in rows] for k in dense}}
json.dump(rank, open(out + "/rank.json", "w"))
single = {k: v for k, v in rows[0].items() if k != "label"}
json.dump({"instances": [single]}, open(out + "/single.json", "w"))
PY

start_server() {
  build/tzrec serve --model_path=$OUT/export_int8 --model_name=deepfm --port=0 \
    --model_threads=$MODEL_THREADS "$@" >$OUT/serve.log 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 100); do
    PORT=$(sed -n 's/.*serving .* on 127.0.0.1:\([0-9]*\).*/\1/p' $OUT/serve.log)
    [ -n "$PORT" ] && return
    sleep 0.1
  done
  echo "server did not start:"; cat $OUT/serve.log; exit 1
}
stop_server() { kill -TERM $SERVER_PID; wait $SERVER_PID || true; }
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }

start_server
saturated=$(build/tzrec_serve_load $PORT /v1/models/deepfm/rank $OUT/rank.json 2 $SECONDS_PER_RUN)
echo "[bench] rank, closed loop, 2 connections: $saturated"
rps=$(echo "$saturated" | field requests_per_sec)
half=$(awk -v r=$rps 'BEGIN {printf "%.1f", r / 2}')
paced=$(build/tzrec_serve_load $PORT /v1/models/deepfm/rank $OUT/rank.json 4 $((SECONDS_PER_RUN * 2)) $half)
echo "[bench] rank at $half requests/s (half of saturation), open loop: $paced"
# The same load while the model is reloaded three times (each loads the whole export beside
# the serving one and swaps it in).
build/tzrec_serve_load $PORT /v1/models/deepfm/rank $OUT/rank.json 4 $((SECONDS_PER_RUN * 2)) $half \
  >$OUT/reload_load.txt &
LOAD_PID=$!
for i in 1 2 3; do
  sleep $(awk -v s=$SECONDS_PER_RUN 'BEGIN {printf "%.1f", s * 0.5}')
  curl -s -XPOST -d '' localhost:$PORT/v2/repository/models/deepfm/load >/dev/null
done
wait $LOAD_PID
reload=$(cat $OUT/reload_load.txt)
echo "[bench] rank at $half requests/s during 3 reloads: $reload"
echo "[bench]   $(curl -s localhost:$PORT/metrics | grep -E '^tzrec_model_reloads_total')"
stop_server

start_server --max_queue_delay_us=500
single=$(build/tzrec_serve_load $PORT /v1/models/deepfm:predict $OUT/single.json 16 $SECONDS_PER_RUN)
echo "[bench] single-row :predict, 16 connections, 500 us batching window: $single"
curl -s localhost:$PORT/metrics | grep -E "^tzrec_inference_(rows|batches)_total" | sed 's/^/[bench]   /'
stop_server

items_per_sec=$(awk -v r=$rps -v n=$ITEMS 'BEGIN {printf "%.0f", r * n}')
echo "serve rank_p50_ms=$(echo "$paced" | field p50_ms) rank_p99_ms=$(echo "$paced" | field p99_ms)" \
  "reload_p99_ms=$(echo "$reload" | field p99_ms) reload_failures=$(echo "$reload" | sed -n 's/.*failures=\([0-9]*\).*/\1/p')" \
  "saturation_items_per_sec=$items_per_sec single_rps=$(echo "$single" | field requests_per_sec)" \
  "single_p99_ms=$(echo "$single" | field p99_ms)"
