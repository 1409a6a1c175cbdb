#!/usr/bin/env bash
# hardware=tpu for real, on torch_xla's CPU device (PJRT_DEVICE=CPU): a side virtual environment with torch
# 2.9 and torch_xla 2.9 (the pair PyPI has), this checkout in it, then tests/xla/check_tpu.py: a tiny
# pre-training and a tiny CoLA fine-tuning through `python -m bert_exp ... hardware=tpu trainer.devices=1`,
# checkpoints written and resumed, and torch_xla's own counters of compilations and CPU fallbacks.
#
#   bash tests/xla/run.sh            (about 5 minutes and 6 GB for the environment the first time; then
#                                     about 6 minutes of runs on a 2-core CPU)
#
# Not in CI: the environment is 6 GB (PyPI's x86_64 torch 2.9 is the CUDA build, and `import torch` needs
# 12 of its CUDA libraries even on a CPU). docs/results/tpu_xla.md has the figures of a run.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${BERT_EXP_XLA_VENV:-$HOME/.cache/bert_exp/xla-venv}
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import torch_xla, bert_exp, litdata, boto3, lightning, torchmetrics" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  # torch_xla 2.9.0 names no torch in its metadata, and its library links torch 2.9's: install the pair
  # without dependencies, then what they import, then the CUDA libraries torch's own libraries link
  # (nvrtc, cusolver, nvtx and triton are loaded lazily or not at all on a CPU: left out)
  "$VENV/bin/pip" install -q --no-deps torch==2.9.1 torch-xla==2.9.0
  "$VENV/bin/pip" install -q filelock "typing-extensions>=4.10" "sympy>=1.13.3" "networkx>=2.5.1" jinja2 \
    "fsspec>=0.8.5" "absl-py>=1.0" numpy pyyaml requests
  "$VENV/bin/pip" install -q --no-deps nvidia-cuda-runtime-cu12==12.8.90 nvidia-cuda-cupti-cu12==12.8.90 \
    nvidia-cusparse-cu12==12.5.8.93 nvidia-nvjitlink-cu12==12.8.93 nvidia-cufft-cu12==11.3.3.83 \
    nvidia-cufile-cu12==1.13.1.3 nvidia-cusparselt-cu12==0.7.1 nvidia-nccl-cu12==2.27.5 \
    nvidia-curand-cu12==10.3.9.90 nvidia-cublas-cu12==12.8.4.1 nvidia-cudnn-cu12==9.10.2.21 \
    nvidia-nvshmem-cu12==3.3.20
  # this package's dependencies, resolved against the torch already there, each installed alone (a plain
  # install would bring the CUDA libraries left out above back through torch's metadata)
  "$VENV/bin/pip" install -q --dry-run --ignore-installed --report "$VENV/deps.json" -e . "lightning==2.6.6"
  "$VENV/bin/python" - "$VENV/deps.json" > "$VENV/deps.txt" <<'PY'
import json, sys
# torch and torch_xla are installed above, and the CUDA libraries left out; every other package stays,
# those whose names only start with "torch" (torchmetrics) included
skip_names = {"torch", "torch-xla", "torch_xla", "bert-exp", "bert_exp"}
skip_prefixes = ("nvidia-", "triton")
for item in json.load(open(sys.argv[1]))["install"]:
    meta = item["metadata"]
    name = meta["name"].lower()
    if name not in skip_names and not name.startswith(skip_prefixes):
        print(f"{meta['name']}=={meta['version']}")
PY
  "$VENV/bin/pip" install -q --no-deps -r "$VENV/deps.txt"
  "$VENV/bin/pip" install -q --no-deps -e .
fi
export PJRT_DEVICE=CPU BERT_EXP_DATA=${BERT_EXP_DATA:-../shared/data} WANDB_MODE=offline
exec "$VENV/bin/python" tests/xla/check_tpu.py "$@"
