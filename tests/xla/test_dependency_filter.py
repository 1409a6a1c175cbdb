"""tests/xla/run.sh installs torch and torch_xla by hand, then this package's other dependencies from
pip's resolution: its filter must drop torch, torch_xla and the CUDA libraries, and keep every other
package, those whose names start with "torch" (torchmetrics) included. The filter is run as the script
runs it, on a resolution report of the same shape."""

import json
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).with_name("run.sh")


def test_the_dependency_filter_keeps_torchmetrics_and_drops_torch(tmp_path):
    source = re.search(r"<<'PY'\n(.*?)\nPY\n", SCRIPT.read_text(), re.S).group(1)
    names = ["torch", "torch_xla", "torchmetrics", "lightning", "nvidia-cublas-cu12", "triton", "bert_exp",
             "litdata", "torch-fidelity"]
    report = tmp_path / "deps.json"
    report.write_text(json.dumps({"install": [{"metadata": {"name": n, "version": "1.0"}} for n in names]}))
    kept = subprocess.run([sys.executable, "-c", source, str(report)], capture_output=True, text=True, check=True)
    assert kept.stdout.split() == ["torchmetrics==1.0", "lightning==1.0", "litdata==1.0", "torch-fidelity==1.0"]
