"""Fault injection: runs BERT-tiny pre-training (``python -m bert_exp``) into each fault and checks the
run ends as documented (README "Outputs" and "Resuming"). Prints one row per case:
case, expected, outcome, ok.

    python tests/faults/run_faults.py [--fast] [--jobs N] [--keep DIR]

Needs the shared corpus ($BERT_EXP_DATA). ``--fast`` (what tests/faults/test_faults.py runs) leaves
out the slower cases. Faults come from outside (signals sent to the process or its process group) or
from tests/faults/inject.py (a callback added with ``+callbacks.fault=...``)."""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STEPS = 10
BASE = [
    "+experiment=pretrain_tiny", "data.files=['${paths.data_dir}/corpus/inaugural/19[0-4]*.txt']",
    "data.tokenizer.vocab_size=2000", "global_batch_size=32", f"trainer.max_steps={STEPS}",
    "trainer.val_check_interval=4", "trainer.limit_val_batches=1", "+trainer.num_sanity_val_steps=0",
    "trainer.log_every_n_steps=1", "callbacks.last_checkpoint.every_n_train_steps=4", "logger=csv",
    "optim.scheduler.warmup_steps=5",
]
NOT_YET: list[tuple[str, str]] = []  # cases still to be written: (name, expected)


def environment() -> dict:
    path = os.pathsep.join(filter(None, [str(REPO), str(REPO / "tests" / "faults"), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}


def start(run_dir: Path, *extra: str, group: bool = False) -> subprocess.Popen:
    log = open(run_dir.with_suffix(".log"), "w")  # noqa: SIM115  (closed with the process)
    keys = {a.lstrip("+").split("=", 1)[0] for a in extra}
    base = [a for a in BASE if a.lstrip("+").split("=", 1)[0] not in keys]  # an extra value replaces the base's
    return subprocess.Popen([sys.executable, "-m", "bert_exp", *base, *extra, f"hydra.run.dir={run_dir}"],
                            cwd=REPO, env=environment(), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=group)


def finish(proc: subprocess.Popen, timeout: float = 400) -> int:
    return proc.wait(timeout=timeout)


def output(run_dir: Path) -> str:
    return run_dir.with_suffix(".log").read_text(errors="replace")


def losses(run_dir: Path) -> dict[int, str]:
    path = run_dir / "logs" / "metrics.csv"
    if not path.exists():
        return {}
    with open(path) as f:
        return {int(r["step"]): r["train/loss"] for r in csv.DictReader(f) if r.get("train/loss")}


def wait_for_step(proc: subprocess.Popen, run_dir: Path, step: int, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the run ended early (exit {proc.returncode}): {output(run_dir)[-1500:]}")
        if any(s >= step for s in losses(run_dir)):
            return
        time.sleep(0.1)
    raise TimeoutError(f"step {step} not reached")


def run_json(run_dir: Path) -> dict:
    """run.json, read as strict JSON (a bare NaN or Infinity fails)."""
    def refuse(name):
        raise ValueError(f"run.json holds a bare {name}")
    return json.loads((run_dir / "run.json").read_text(), parse_constant=refuse)


def checkpoint(run_dir: Path) -> dict:
    import torch

    partial = list((run_dir / "checkpoints").glob(".*partial"))
    assert not partial, f"half-written checkpoint left: {partial}"
    return torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)


def weights_finite(ckpt: dict) -> bool:
    import torch

    return all(torch.isfinite(v).all() for v in ckpt["state_dict"].values() if v.is_floating_point())


# -- the cases: each returns (outcome, ok) --------------------------------------------------------


def case_reference(root: Path):
    run_dir = root / "reference"
    code = finish(start(run_dir))
    info = run_json(run_dir)
    return f"exit {code}, {info['status']}, {len(losses(run_dir))} steps", code == 0 and info["status"] == "finished"


def case_nan(root: Path):
    run_dir = root / "nan"
    code = finish(start(run_dir, "+callbacks.fault={_target_:inject.NanAt,step:5}"))
    info = run_json(run_dir)
    ckpt = checkpoint(run_dir)
    ok = (code == 3 and info["status"] == "diverged" and info["diverged"]["step"] == 8
          and ckpt["global_step"] == 4 and weights_finite(ckpt) and "non_finite" in info)
    return (f"exit {code}, {info['status']} at step {info.get('diverged', {}).get('step')}, "
            f"last.ckpt step {ckpt['global_step']} finite={weights_finite(ckpt)}"), ok


def case_sigint(root: Path):
    run_dir = root / "sigint"
    proc = start(run_dir)
    wait_for_step(proc, run_dir, 3)
    proc.send_signal(signal.SIGINT)
    code = finish(proc)
    info, ckpt = run_json(run_dir), checkpoint(run_dir)
    hint = "ckpt_path=" in output(run_dir)
    ok = (code == 130 and info["status"] == "interrupted" and info["stopped_by"] == "SIGINT"
          and ckpt["global_step"] == info["global_step"] and hint)
    return f"exit {code}, {info['status']}, last.ckpt step {ckpt['global_step']}, resume command printed={hint}", ok


def case_sigint_twice(root: Path):
    run_dir = root / "sigint_twice"
    proc = start(run_dir)
    wait_for_step(proc, run_dir, 5)  # a periodic last.ckpt (step 4) exists
    proc.send_signal(signal.SIGINT)
    time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    code = finish(proc)
    info = run_json(run_dir)
    ckpt = checkpoint(run_dir)
    ok = code == 130 and info["status"] == "interrupted" and ckpt["global_step"] >= 4
    return f"exit {code}, {info['status']}, at once={info.get('stopped_at_once')}, last.ckpt step {ckpt['global_step']}", ok


def _resume(root: Path, name: str, source: Path, *extra: str):
    run_dir = root / name
    code = finish(start(run_dir, f"ckpt_path={source}", *extra))
    return run_dir, code


def case_sigterm_group(root: Path):
    run_dir = root / "sigterm_group"
    proc = start(run_dir, "data.loader.num_workers=1", group=True)
    wait_for_step(proc, run_dir, 3)
    os.killpg(proc.pid, signal.SIGTERM)  # the run, its DataLoader worker, everything in the group
    code = finish(proc)
    info, ckpt = run_json(run_dir), checkpoint(run_dir)
    stopped = f"exit {code}, {info['status']}, last.ckpt step {ckpt['global_step']}"
    # a resume part-way into an epoch needs the loader workers the stream was dealt out among
    resumed, code2 = _resume(root, "sigterm_group_resumed", run_dir, "data.loader.num_workers=1")
    ok = code == 128 + signal.SIGTERM and info["status"] == "interrupted" and ckpt["global_step"] == info["global_step"]
    ok = ok and code2 == 0 and run_json(resumed)["status"] == "finished"
    return f"{stopped}; resumed: exit {code2}", ok, {**losses(run_dir), **losses(resumed)}


def run_once(run_dir: Path, *args: str, base: list[str] = BASE) -> subprocess.CompletedProcess:
    """A run that is expected to stop early, its output captured (not in run_dir's log file)."""
    return subprocess.run([sys.executable, "-m", "bert_exp", *base, *args, f"hydra.run.dir={run_dir}"], cwd=REPO,
                          env=environment(), capture_output=True, text=True, timeout=400)


def case_two_runs(root: Path):
    run_dir = root / "two_runs"
    first = start(run_dir, "trainer.max_steps=100000")  # long enough to be alive when the second comes
    wait_for_step(first, run_dir, 2)
    second = run_once(run_dir, "seed=7")
    first.send_signal(signal.SIGTERM)
    code = finish(first)
    info = run_json(run_dir)
    overrides = (run_dir / ".hydra" / "overrides.yaml").read_text()
    refused = second.returncode == 2 and f"pid {first.pid}" in second.stderr
    intact = (code == 128 + signal.SIGTERM and info["status"] == "interrupted"
              and "seed=7" not in overrides + json.dumps(info["overrides"]))
    return (f"second: exit {second.returncode}, names the first's pid={f'pid {first.pid}' in second.stderr}; "
            f"first: exit {code}, {info['status']}, its files untouched={intact}"), refused and intact


def case_disk_full(root: Path):
    run_dir = root / "disk_full"
    code = finish(start(run_dir, "+callbacks.fault={_target_:inject.DiskFullAt,step:5}"))
    info, ckpt = run_json(run_dir), checkpoint(run_dir)
    partial = [p.name for p in run_dir.rglob("*.partial")]
    error = (info.get("error") or {}).get("message", "")
    ok = (code == 2 and info["status"] == "failed" and "no space left" in error and ckpt["global_step"] == 4
          and not partial and "Traceback" not in output(run_dir).split("error:")[-1])
    return f"exit {code}, {info['status']}, last.ckpt step {ckpt['global_step']} intact, partial files {partial}", ok


def case_not_text(root: Path):
    corpus = root / "not_text_corpus"
    corpus.mkdir(exist_ok=True)
    source = Path(os.environ["BERT_EXP_DATA"], "corpus", "inaugural")
    for name in sorted(p.name for p in source.glob("19[0-4]*.txt"))[:3]:
        (corpus / name).write_bytes((source / name).read_bytes())
    (corpus / "scan.txt").write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(4096))  # an image under a text name
    base = [a if not a.startswith("data.files=") else f"data.files=['{corpus}']" for a in BASE]
    done = run_once(root / "not_text", base=base)
    named = "scan.txt" in done.stderr
    ok = done.returncode == 2 and named and "Traceback" not in done.stderr
    return f"exit {done.returncode}, names the file={named}, one line={'Traceback' not in done.stderr}", ok


def case_sigkill(root: Path):
    run_dir = root / "sigkill"
    proc = start(run_dir)
    wait_for_step(proc, run_dir, 6)
    proc.send_signal(signal.SIGKILL)
    finish(proc)
    # a save every 4 steps: step 4's, or step 8's where the machine ran two steps and a save between the
    # poll that saw step 6 and the kill
    ckpt = checkpoint(run_dir)
    resumed, code = _resume(root, "sigkill_resumed", run_dir)
    ok = ckpt["global_step"] in (4, 8) and code == 0 and run_json(resumed)["status"] == "finished"
    return f"last.ckpt step {ckpt['global_step']}; resumed: exit {code}", ok, {**losses(run_dir), **losses(resumed)}


CASES = {  # name: (expected, function, in the fast form)
    "reference": ("exit 0, finished", case_reference, True),
    "nan at step 5": ("exit 3, diverged at step 8 (patience 3), last.ckpt step 4 kept, strict JSON", case_nan, True),
    "ctrl-c": ("exit 130, interrupted, last.ckpt at the stop, resume command printed", case_sigint, True),
    "ctrl-c twice": ("exit 130, interrupted at once, the earlier last.ckpt intact", case_sigint_twice, False),
    "sigterm to the group, 1 worker": ("exit 143, interrupted, last.ckpt whole; resume finishes", case_sigterm_group, True),
    "sigkill, resume": ("last.ckpt of the last save (step 4 or 8); resume finishes", case_sigkill, True),
    "two runs into one directory": ("the second refused naming the first's pid; the first's files intact",
                                    case_two_runs, True),
    "disk full while saving": ("exit 2, failed (no space left), last.ckpt step 4 intact, no partial file",
                               case_disk_full, True),
    "non-text corpus file": ("exit 2, one line naming the file", case_not_text, True),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fast", action="store_true", help="the quick cases only (what the test suite runs)")
    parser.add_argument("--jobs", type=int, default=3, help="runs at once")
    parser.add_argument("--keep", type=Path, help="run directories here (default: a temporary folder)")
    args = parser.parse_args(argv)
    if not Path(os.environ.get("BERT_EXP_DATA", ""), "corpus").is_dir():
        print("needs the shared data sets: set BERT_EXP_DATA", file=sys.stderr)
        return 2
    root = args.keep or Path(tempfile.mkdtemp(prefix="bert_exp_faults_"))
    root.mkdir(parents=True, exist_ok=True)
    chosen = {name: case for name, case in CASES.items() if case[2] or not args.fast}

    def attempt(name):
        try:
            return chosen[name][1](root)
        except Exception as err:  # noqa: BLE001  a case that breaks is a row that fails
            return f"error: {type(err).__name__}: {str(err)[:300]}", False

    started = time.time()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = dict(zip(chosen, pool.map(attempt, chosen)))
    # resumed runs repeat the uninterrupted one exactly (CPU, fp32: the logged losses, bitwise)
    rows = []
    reference = losses(root / "reference")
    for name, result in results.items():
        outcome, ok, *steps = result
        if steps and reference:
            same = steps[0] == reference
            outcome += f"; losses {'equal the reference bitwise' if same else 'DIFFER from the reference'}"
            ok = ok and same
        rows.append((name, chosen[name][0], outcome, "ok" if ok else "FAIL"))
    rows += [(name, expected, "not yet (another change adds it)", "-") for name, expected in NOT_YET]

    widths = [max(len(r[i]) for r in [("case", "expected", "outcome", "ok"), *rows]) for i in range(3)]
    for row in [("case", "expected", "outcome", "ok"), *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths)), row[3])
    print(f"\n{sum(r[3] == 'ok' for r in rows)}/{len(results)} cases ok in {time.time() - started:.0f} s; runs in {root}")
    return 0 if all(r[3] != "FAIL" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
