"""The fast form of the fault-injection script (tests/faults/run_faults.py) passes: NaN at a step,
Ctrl-C, SIGTERM to the process group with a DataLoader worker, SIGKILL then resume."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).with_name("run_faults.py")


def test_fast_fault_injection(data_dir, cache_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("BERT_EXP_DATA", str(data_dir))
    monkeypatch.setenv("BERT_EXP_CACHE", str(cache_dir))
    done = subprocess.run([sys.executable, str(SCRIPT), "--fast", "--keep", str(tmp_path)], capture_output=True,
                          text=True, timeout=900)
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "FAIL" not in done.stdout
