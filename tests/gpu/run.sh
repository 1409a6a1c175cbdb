#!/usr/bin/env bash
# The checks that need a CUDA GPU, as one script: the GPU tests (SDPA's fused kernel, the presets), the
# benchmark against transformers in the same process (BERT-base and -large, pre-training and
# fine-tuning, bf16, compiled as hardware=gpu runs are), and the main job with hardware=gpu.
#
#   OUT=outputs/gpu_checks BERT_EXP_DATA=/path/to/data bash tests/gpu/run.sh
#
# About 8 minutes on one H100/H200. Each step has its own time limit, so one that fails or hangs leaves
# the others' results. docs/results/gpu.md has the figures of a run.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-outputs/gpu_checks}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 WANDB_MODE=disabled BERT_EXP_CACHE=${BERT_EXP_CACHE:-/tmp/bert_exp_gpu_cache}

{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  $PY -c "import torch, lightning, transformers; print('torch', torch.__version__, '| lightning', lightning.__version__, '| transformers', transformers.__version__)"
  nproc; } 2>&1 | tee "$OUT/device.txt"

step() {  # step NAME LIMIT_S COMMAND...: the command's output in $OUT/NAME.log, its time and status in summary.txt
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name: rc=$rc in $((SECONDS - start)) s" | tee -a "$OUT/summary.txt"
}

step pytest 150 $PY -m pytest -q -p no:cacheprovider tests/runner/test_gpu_defaults.py
# pre-training at BERT's phase-1 shape (sequences of 128), a batch that fills the GPU
step bench_pretraining 300 $PY -m bert_exp.bench --device cuda --tasks pretraining --sizes base,large \
  --precisions bf16-mixed --batch 128 --seq 128 --steps 10 --repeats 3 --compile --no-memory \
  --output "$OUT/bench_pretraining.md"
# fine-tuning at SQuAD's shape (384), BERT's fine-tuning batch of 32
step bench_finetuning 200 $PY -m bert_exp.bench --device cuda --tasks classification,qa --sizes base \
  --precisions bf16-mixed --batch 32 --seq 384 --steps 10 --repeats 3 --compile --no-memory \
  --output "$OUT/bench_finetuning.md"
step pretrain_tiny 180 $PY -m bert_exp +experiment=pretrain_tiny hardware=gpu logger=csv \
  hydra.run.dir=/tmp/pretrain_tiny_gpu
cp /tmp/pretrain_tiny_gpu/run.json "$OUT/pretrain_tiny_run.json" 2>/dev/null
# as shipped before compilation was the default: the eager step, for the ratio compile buys
step bench_eager 120 $PY -m bert_exp.bench --device cuda --tasks pretraining --sizes base \
  --precisions bf16-mixed --batch 128 --seq 128 --steps 10 --repeats 3 --no-memory \
  --output "$OUT/bench_eager.md"
cat "$OUT/summary.txt"
