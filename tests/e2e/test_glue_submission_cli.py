"""A GLUE submission and the scoring path as a user meets them, on real rows: ``glue --submission`` writes the
chosen run's predictions (never a stale task's) in a zip that holds GLUE's eleven files as the server reads
them (names, header, ids, label strings, row counts; placeholders for the tasks not run, WNLI's majority
class); ``score`` takes its overrides anywhere on the line and applies or refuses each in one line, scores
its own checkpoint, says when a run is unfinished, names a bad test file before validating, claims its
destination before any work, and stops on SIGTERM and Ctrl-C leaving nothing; what a SIGKILL left is
removed by the next run; a glue job outlives no killed glue process. Each was wrong before (issue 63)."""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from helpers import REPO, cli_environment, run_cli, tiny_hf_directory

pytestmark = pytest.mark.slow

def overrides(rows=64, epochs=1):
    """The glue tool's --override flags of a short job: ``rows`` training rows, sequences of 64."""
    short = [f"+data.limit_train_examples={rows}", f"trainer.max_epochs={epochs}", "data.max_seq_length=64",
             "callbacks.last_checkpoint.keep_after_finish=false"]
    return [a for o in short for a in ("--override", o)]

# GLUE's test files as the server reads them, stated here on their own (jiant's GLUE_NAME_MAP file names;
# the rows of HuggingFace's glue dataset infos; the label spellings of GLUE's own files)
GLUE_FILES = {
    "CoLA": (1063, {"0", "1"}), "SST-2": (1821, {"0", "1"}), "MRPC": (1725, {"0", "1"}), "STS-B": (1379, None),
    "QQP": (390965, {"0", "1"}), "MNLI-m": (9796, {"entailment", "neutral", "contradiction"}),
    "MNLI-mm": (9847, {"entailment", "neutral", "contradiction"}), "QNLI": (5463, {"entailment", "not_entailment"}),
    "RTE": (3000, {"entailment", "not_entailment"}), "WNLI": (146, {"0", "1"}),
    "AX": (1104, {"entailment", "neutral", "contradiction"}),
}


def module(name, *args, env, timeout=600):
    return run_cli(list(map(str, args)), env=env, module=name, timeout=timeout)


def one_line(done, text):
    """rc 2 and one line on stderr holding ``text`` (no traceback)."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and text in lines[0], done.stderr[-2000:]


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def env(data_dir, cache_dir):
    return cli_environment({"BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(cache_dir)})


@pytest.fixture(scope="module")
def first(env, tmp_path_factory):
    """SST-2 fine-tuned at 1e-6 by the glue tool, its submission written (a partial one, said so)."""
    root = tmp_path_factory.mktemp("glue_submission")
    tiny, out = tiny_hf_directory(root / "tiny"), root / "glue"
    done = module("bert_exp.glue", tiny, "--tasks", "sst2", "--lrs", "1e-6", "--out", out, *overrides(),
                  "--submission", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    with zipfile.ZipFile(out / "glue_submission.zip") as archive:
        assert archive.namelist() == ["SST-2.tsv"]
        early = archive.read("SST-2.tsv").decode()
    return {"root": root, "tiny": tiny, "out": out, "run": out / "sst2" / "lr1e-06-seed42", "early": early,
            "said": done.stdout}


def test_the_submission_is_the_chosen_runs_and_glues_form(env, first):
    """The same --out at another rate: the new run is chosen and the zip's SST-2 file is its predictions
    (it kept the first run's before); with --placeholders and --wnli-majority the zip holds GLUE's eleven
    files as the server reads them (STS-B's local preset has no test files: a placeholder)."""
    out = first["out"]
    assert "glue: a partial submission" in first["said"] and "takes only all of them" in first["said"]  # one task
    done = module("bert_exp.glue", first["tiny"], "--tasks", "sst2", "stsb", "wnli", "--lrs", "2e-3", "--out", out,
                  "--experiment", "stsb=glue_stsb_minilm_local",  # no test files: a placeholder stands in
                  *overrides(640), "--submission", "--placeholders",
                  "--wnli-majority", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "glue: wnli" not in done.stdout  # not fine-tuned
    chosen = json.loads((out / "glue.json").read_text())["chosen"]
    run = Path(chosen["sst2"]["run_dir"])
    assert run.name == "lr0.002-seed42"
    assert chosen["wnli"]["majority_class"] == "0" and chosen["wnli"]["dev_rows"] == 70  # 35 a class: the first
    scored = module("bert_exp.score", run, "--submission", first["root"] / "chosen", env=env)
    assert scored.returncode == 0, scored.stderr[-2000:]
    expected = (first["root"] / "chosen" / "SST-2.tsv").read_text()
    assert expected != first["early"]  # the two runs predict differently: the test can tell them apart
    with zipfile.ZipFile(out / "glue_submission.zip") as archive:
        assert sorted(archive.namelist()) == sorted(f"{name}.tsv" for name in GLUE_FILES)
        files = {name: archive.read(f"{name}.tsv").decode() for name in GLUE_FILES}
    assert files["SST-2"] == expected
    best = next((run / "checkpoints").glob("best-*.ckpt"))
    assert json.loads((out / "submission" / "sst2" / "made_from.json").read_text())["checkpoint_sha256"] == sha256(best)
    for name, (rows, labels) in GLUE_FILES.items():
        lines = files[name].splitlines()
        assert lines[0] == "index\tprediction" and len(lines) == rows + 1, name
        assert [line.split("\t")[0] for line in lines[1:]] == [str(i) for i in range(rows)], name
        values = {line.split("\t")[1] for line in lines[1:]}
        assert values <= labels if labels else all(0 <= float(v) <= 5 for v in values), name
    assert {line.split("\t")[1] for line in files["WNLI"].splitlines()[1:]} == {"0"}
    assert {line.split("\t")[1] for line in files["STS-B"].splitlines()[1:]} == {"2.500"}
    assert "stsb" in chosen and not (out / "submission" / "stsb").exists()
    assert "constant placeholders (not predictions) for CoLA, MRPC, STS-B, QQP" in done.stdout


def test_score_applies_refuses_and_reads_before_work(env, first, tmp_path):
    run = first["run"]
    # overrides after the options, applied; each bad one a line
    done = module("bert_exp.score", run, "--submission", tmp_path / "sub", "data.loader.eval_batch_size=64", env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "sub" / "SST-2.tsv").read_text() == first["early"]
    one_line(module("bert_exp.score", run, "foo", env=env), "foo: not an override (KEY=VALUE")
    one_line(module("bert_exp.score", run, "data.loader.eval_bach_size=3", env=env),
             "data.loader.eval_bach_size: unknown key; did you mean data.loader.eval_batch_size?")
    one_line(module("bert_exp.score", run, "data.pair_truncation=bogus", env=env),
             "data.pair_truncation='bogus': expected longest_first or google")
    moved = module("bert_exp.score", run, f"paths.data_dir={tmp_path / 'none'}", "data.download=false", env=env)
    assert moved.returncode == 2 and f"missing input: {tmp_path / 'none' / 'glue' / 'SST-2' / 'dev.tsv'}" in moved.stderr
    assert "Traceback" not in moved.stderr  # every data file moved with it (the old ones were scored)
    # a copy without its checkpoints scores nothing of the original's; a damaged run.json is named
    copy = tmp_path / "copy"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("checkpoints"))
    one_line(module("bert_exp.score", copy, env=env), f"{copy / 'checkpoints'}: no best-step")
    shutil.copytree(run / "checkpoints", copy / "checkpoints")
    record = json.loads((copy / "run.json").read_text())
    (copy / "run.json").write_text(json.dumps({**record, "status": "running"}))  # killed: no live lock
    done = module("bert_exp.score", copy, env=env)
    assert done.returncode == 0 and re.search(f"score: {copy} is killed at step \\d+, not finished: best-step2.ckpt "
                                              "is its best so far", done.stdout), done.stdout
    one_line(module("bert_exp.score", copy, "--submission", tmp_path / "s2", env=env),
             ", not finished: finish the run (the same command continues it) before predicting its test sets")
    (copy / ".lock").write_text(json.dumps({"pid": os.getpid(), "host": os.uname().nodename}))  # training still
    one_line(module("bert_exp.score", copy, env=env), f"{copy}: still running (pid {os.getpid()})")
    (copy / ".lock").unlink()
    (copy / "run.json").write_text("{ not json")
    one_line(module("bert_exp.score", copy, env=env), f"{copy / 'run.json'}: not valid JSON")
    # a bad test file is named before the dev sets are scored
    short = tmp_path / "short.tsv"
    short.write_text("index\tsentence\n0\tgood .\n1\tbad .\n")
    done = module("bert_exp.score", run, "--submission", tmp_path / "s3", f"data.test_files.SST-2={short}", env=env)
    one_line(done, "short.tsv: 2 rows, GLUE's SST-2 test set has 1,821")
    assert "score:" not in done.stdout and not (tmp_path / "s3").exists()
    twice = tmp_path / "twice.tsv"
    twice.write_text("index\tsentence\n0\tgood .\n0\tbad .\n")
    one_line(module("bert_exp.score", run, "--submission", tmp_path / "s4", f"data.test_files.SST-2={twice}", env=env),
             "twice.tsv: id '0' on rows 1 and 2")
    # the destination, claimed before any work
    (tmp_path / "file").write_text("x")
    done = module("bert_exp.score", run, "--submission", tmp_path / "file" / "sub", env=env)
    one_line(done, "file/sub: cannot create its directory")
    assert "score:" not in done.stdout
    (tmp_path / ".busy.lock").write_text(json.dumps({"pid": os.getpid(), "host": os.uname().nodename}))
    one_line(module("bert_exp.score", run, "--submission", tmp_path / "busy", env=env),
             f"busy: another process (pid {os.getpid()}")
    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    done = module("bert_exp.score", run, "--submission", tmp_path / "link", env=env)
    assert done.returncode == 0 and (tmp_path / "empty" / "SST-2.tsv").read_text() == first["early"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == [".busy.lock"]


def scoring(run, destination, tmp, big, dev):
    """``score --submission`` started fresh (its own process group), a test set of 20,000 rows predicted
    one at a time so that a signal lands while it predicts (a dev set of 20 rows); returns once it has
    printed its scores (its output in files: a pipe nobody reads would block it)."""
    environment = {**cli_environment(), "TMPDIR": str(tmp), "PYTHONUNBUFFERED": "1"}
    out, err = tmp.parent / "score.out", tmp.parent / "score.err"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "bert_exp.score", str(run), f"data.test_files={{big: '{big}'}}",
                                 f"data.val_files={{dev: '{dev}'}}", "data.loader.eval_batch_size=1",
                                 "--submission", str(destination)],
                                cwd=REPO, env=environment, stdout=stdout, stderr=stderr, start_new_session=True)
    proc.stderr_path = err
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        if any(line.startswith("score: ") for line in out.read_text().splitlines()):  # validated: predicting next
            time.sleep(1.0)
            return proc
        time.sleep(0.2)
    raise AssertionError(err.read_text()[-3000:])


def test_score_stops_on_signals_and_cleans_what_a_kill_left(first, data_dir, tmp_path):
    big = tmp_path / "big.tsv"
    big.write_text("index\tsentence\n" + "".join(f"{i}\ta fine film , then a dull one .\n" for i in range(20_000)))
    dev = tmp_path / "dev.tsv"
    dev.write_text("".join((data_dir / "glue" / "SST-2" / "dev.tsv").read_text().splitlines(keepends=True)[:21]))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = scoring(first["run"], tmp_path / "sub", tmp, big, dev)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    # what a SIGKILL leaves: the destination's lock and staging directory, the scratch directory
    assert (tmp_path / ".sub.lock").is_file() and len(list(tmp_path.glob(".sub.partial-*"))) == 1
    assert len(list(tmp.glob("bert_exp-score-*"))) == 1
    for stop, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        proc = scoring(first["run"], tmp_path / "sub", tmp, big, dev)
        os.kill(proc.pid, stop)
        assert proc.wait(timeout=120) == code, proc.stderr_path.read_text()[-3000:]
        stderr = proc.stderr_path.read_text()
        assert "nothing written" in stderr and "Traceback" not in stderr, stderr[-3000:]
        assert not (tmp_path / "sub").exists() and not list(tmp_path.glob(".sub*"))
        assert not list(tmp.glob("bert_exp-score-*"))  # the killed run's too


def test_a_killed_glue_process_leaves_no_job_running(env, first, tmp_path):
    """SIGKILL to the glue tool alone (it cannot pass it on): its job is stopped, saving its place, instead of
    training on as an orphan that holds its run's lock."""
    out = tmp_path / "glue"
    environment = {**env, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "bert_exp.glue", str(first["tiny"]), "--tasks", "sst2", "--lrs",
                             "3e-4", "--out", str(out), *overrides(20_000, epochs=3)], cwd=REPO, env=environment,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    job = out / "sst2" / "lr0.0003-seed42"
    try:
        deadline = time.monotonic() + 240
        while "to estimate number of stepping batches" not in (  # Lightning's line as the fit begins
                (job / "bert_exp.log").read_text() if (job / "bert_exp.log").is_file() else ""):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.5)
        time.sleep(2)
        pid = json.loads((job / ".lock").read_text())["pid"]
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 120
        while (Path("/proc") / str(pid)).exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not (Path("/proc") / str(pid)).exists(), "the job trains on without its parent"
        assert json.loads((job / "run.json").read_text())["status"] == "interrupted"
        assert not (job / ".lock").exists()
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_squad_v2_file_read_as_v1_is_refused_before_training(env, first, data_dir):
    half = data_dir / "squad" / "dev-v2.0-half.json"
    done = module("bert_exp", "+experiment=squad_v1_tiny_local", f"task.init_from={first['tiny']}",
                  "model=from_checkpoint", f"data.train_file={half}", "data.train_articles=[0,8]",
                  f"data.val_file={half}", "data.val_articles=[8,null]", f"hydra.run.dir={first['root'] / 'squad'}",
                  "logger=csv", env=env)
    one_line(done, "dev-v2.0-half.json: 1,641 of its 3,273 questions are unanswerable (is_impossible: SQuAD 2.0), "
                   "read with data.version_2=false: set data.version_2=true")


def test_mrpc_from_glues_own_files_with_their_byte_order_mark(env, first, data_dir, tmp_path):
    """SentEval's msr_paraphrase_*.txt begin with a UTF-8 byte-order mark: MRPC trains from them (it stopped
    with "no 'Quality' column: an unlabelled file")."""
    rows = (data_dir / "glue" / "MRPC" / "train.tsv").read_text(encoding="utf-8").splitlines()[:80]
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    (tmp_path / "msr_paraphrase_train.txt").write_bytes(b"\xef\xbb\xbf" + (header + "\n".join(rows) + "\n").encode())
    (tmp_path / "dev_ids.tsv").write_text("".join("\t".join(r.split("\t")[1:3]) + "\n" for r in rows[-16:]))
    done = module("bert_exp", "+experiment=glue_mrpc_minilm", f"task.init_from={first['tiny']}", "model=from_checkpoint",
                  f"data.train_file={tmp_path / 'msr_paraphrase_train.txt'}",
                  f"data.hold_out.ids_file={tmp_path / 'dev_ids.tsv'}", "~data.test_files", "trainer.max_steps=2",
                  "data.max_seq_length=64", f"hydra.run.dir={tmp_path / 'run'}", "logger=csv", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "finished"
