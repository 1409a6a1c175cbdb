"""The W&B logger as a run makes it: a run that logs to W&B prints no warning of ours to the console."""

import os
import subprocess
import sys

from wandb_records import offline_run

MAKE = """
import sys
from bert_exp.runner.loggers import wandb_logger
logger = wandb_logger(sys.argv[1], project="bert-seeds", tags=["tiny"])
logger.experiment.log({"x": 1})
logger.experiment.finish()
"""


def test_a_wandb_run_starts_without_warnings(tmp_path):
    # WANDB_SILENT unset, as a user's shell has it: wandb's own lines are printed (and checked here)
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SILENT"}
    done = subprocess.run([sys.executable, "-c", MAKE, str(tmp_path / "run")], env={**env, "WANDB_MODE": "offline"},
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    # Lightning passes anonymous=None, on which wandb warned on every run ("The anonymous setting has no effect")
    assert "WARNING" not in done.stderr, done.stderr
    record = offline_run(tmp_path / "run")
    assert record["project"] == "bert-seeds" and record["tags"] == ["tiny"]
