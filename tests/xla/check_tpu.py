"""hardware=tpu on torch_xla's CPU device, through the command line: a tiny pre-training (30 steps,
validating every 10) resumed from its checkpoint, then a tiny CoLA fine-tuning from it (20 steps). Each
must end with finite losses and its checkpoints; and, from torch_xla's counters, the number of compiled
graphs must stop growing once the first steps and validations have compiled theirs (one graph a step:
no recompilation per batch, what makes or breaks TPU speed), with no op falling back to the CPU in the
training step. Prints the figures; exits 1 on a failed check. Run it with tests/xla/run.sh."""

import csv
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
COUNTERS = "+callbacks.xla_counters._target_=xla_counters.XlaCounters"
CORPUS = "data.files=[${paths.data_dir}/corpus/inaugural/19*.txt]"


def run(args: list[str], run_dir: Path, env: dict) -> float:
    started = time.time()
    done = subprocess.run([sys.executable, str(HERE / "tpu_main.py"), *args, "hardware=tpu", "trainer.devices=1",
                           "logger=csv", COUNTERS, f"hydra.run.dir={run_dir}"], cwd=REPO, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-5000:], sep="\n")
        raise SystemExit(f"the run in {run_dir} failed")
    return time.time() - started


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "xla_counters.jsonl").read_text().splitlines()]


def losses(run_dir: Path) -> list[float]:
    with open(run_dir / "logs" / "metrics.csv") as f:
        return [float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")]


def check(condition: bool, what: str, failures: list[str]) -> None:
    print(("ok    " if condition else "FAIL  ") + what)
    if not condition:
        failures.append(what)


def compiles_between(rows: list[dict], first: int, last: int) -> int:
    """Graphs compiled by the training batches of steps first..last: what each such batch added since the
    record before it (a validation's own graphs are counted at its end, not here)."""
    return sum(row["compiles"] - before["compiles"] for before, row in zip(rows, rows[1:])
               if row["event"] == "train_batch" and first <= row["step"] <= last)


def main() -> int:
    failures: list[str] = []
    tmp = Path(tempfile.mkdtemp(prefix="bert_exp-xla-"))
    env = {**os.environ, "BERT_EXP_CACHE": str(tmp / "cache"), "PJRT_DEVICE": "CPU"}
    pretrain, resumed, cola = tmp / "pretrain", tmp / "resumed", tmp / "cola"
    seconds = run(["+experiment=pretrain_tiny", CORPUS, "data.tokenizer.vocab_size=2000", "trainer.max_steps=30",
                   "trainer.val_check_interval=10", "trainer.limit_val_batches=4", "trainer.log_every_n_steps=1",
                   "callbacks.last_checkpoint.every_n_train_steps=10"], pretrain, env)
    info = json.loads((pretrain / "run.json").read_text())
    rows = records(pretrain)
    first = [r["compiles"] for r in rows if r["event"] == "train_batch"][:6]
    print(f"pre-training, 30 steps: {seconds:.0f} s; graphs compiled after steps 1-6: {first}, in all "
          f"{rows[-1]['compiles']} ({rows[-1]['compile_seconds']} s compiling)")
    check(info["status"] == "finished" and info["global_step"] == 30, "pre-training finished at step 30", failures)
    check(all(math.isfinite(v) for v in losses(pretrain)) and len(losses(pretrain)) == 30,
          "30 finite training losses", failures)
    check(math.isfinite(info["metrics"]["val/mlm_loss"]), f"finite validation loss ({info['metrics']['val/mlm_loss']:.3f})",
          failures)
    check((pretrain / "checkpoints" / "last.ckpt").is_file(), "last.ckpt written", failures)
    late = compiles_between(rows, 22, 30)
    check(late == 0, f"no graph compiled by the training steps 22-30 (one graph a step; {late} new)", failures)
    fallbacks = {k: v for k, v in rows[-1]["aten"].items() if k != "aten::_local_scalar_dense"}
    check(not fallbacks, f"no op fell back to the CPU ({fallbacks or 'none'})", failures)
    seconds = run(["+experiment=pretrain_tiny", CORPUS, "data.tokenizer.vocab_size=2000", "trainer.max_steps=34",
                   "trainer.val_check_interval=10", "trainer.limit_val_batches=4", "trainer.log_every_n_steps=1",
                   f"ckpt_path={pretrain}"], resumed, env)
    again = json.loads((resumed / "run.json").read_text())
    check(again["status"] == "finished" and again["global_step"] == 34 and again["resumed_from"].endswith("last.ckpt"),
          f"resumed from last.ckpt at step 30 and finished at 34 ({seconds:.0f} s)", failures)
    # a checkpoint every 10 steps, as in the pre-training: the first save compiles a graph of its own (once;
    # saved only at the last step, it was the one graph the steps 13-20 added)
    seconds = run(["+experiment=cola_tiny", f"task.init_from={pretrain}", "trainer.max_steps=20",
                   "trainer.val_check_interval=10", "trainer.check_val_every_n_epoch=null", "trainer.limit_val_batches=4",
                   "trainer.log_every_n_steps=1", "callbacks.last_checkpoint.every_n_train_steps=10"], cola, env)
    tuned = json.loads((cola / "run.json").read_text())
    rows = records(cola)
    print(f"CoLA fine-tuning, 20 steps: {seconds:.0f} s; graphs compiled in all {rows[-1]['compiles']}")
    check(tuned["status"] == "finished" and all(math.isfinite(v) for v in losses(cola)), "CoLA: finite losses", failures)
    check("val/mcc" in tuned["metrics"], f"CoLA: validated (MCC {tuned['metrics'].get('val/mcc')})", failures)
    late = compiles_between(rows, 13, 20)
    check(late == 0, f"CoLA: no graph compiled by the training steps 13-20 ({late} new)", failures)
    print(f"runs in {tmp}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
