#!/usr/bin/env bash
# Installs what is missing, builds, generates demo data with a planted signal, trains DeepFM
# on it (examples/deepfm_mock.config), evaluates, and prints the final AUC next to the oracle's.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh tzrec

CONFIG=examples/deepfm_mock.config
MODEL_DIR=experiments/deepfm_mock
DATA_DIR=data/deepfm_mock

build/tzrec gen_data --pipeline_config_path=$CONFIG --output_dir=$DATA_DIR \
  --train_rows=1000000 --eval_rows=50000 --num_files=4
rm -rf "$MODEL_DIR"
build/tzrec train_eval --pipeline_config_path=$CONFIG --model_dir=$MODEL_DIR
build/tzrec eval --pipeline_config_path=$MODEL_DIR/pipeline.config

oracle=$(sed -n 's/.*"oracle_auc": \([0-9.e-]*\).*/\1/p' $DATA_DIR/oracle.json)
auc=$(tail -n 1 $MODEL_DIR/eval_result.txt | sed -n 's/.*"auc": \([0-9.e-]*\).*/\1/p')
echo
echo "model_dir: $MODEL_DIR ($(ls $MODEL_DIR | tr '\n' ' '))"
echo "final eval AUC: $auc   oracle AUC: $oracle   target: >= $(awk -v o="$oracle" 'BEGIN{printf "%.4f", 0.97*(o-0.5)+0.5}')"
