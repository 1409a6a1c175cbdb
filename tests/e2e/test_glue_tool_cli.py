"""GLUE's commands as a user types them, on the rows at hand: python -m bert_exp.glue fine-tunes one
checkpoint on every task with rows here (SST-2, STS-B, MRPC, RTE, WNLI; the local presets where GLUE's
files are re-split) and prints the table; report --table --glue rebuilds it from
the runs; python -m bert_exp.score scores the chosen run again without training and writes GLUE's
SST-2 test predictions (the real unlabelled test file, 1,821 rows) zipped; a labelled test file stops
the submission with one line."""

import json
import zipfile

import pytest

from helpers import run_cli, tiny_hf_directory

pytestmark = pytest.mark.slow

SHORT = ["+data.limit_train_examples=64", "trainer.max_epochs=1", "data.max_seq_length=64",
         "callbacks.last_checkpoint.keep_after_finish=false"]


def module(name, *args, env):
    return run_cli(list(map(str, args)), env=env, module=name)


@pytest.fixture(scope="module")
def env(data_dir, cache_dir):
    import os

    return {**os.environ, "BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(cache_dir), "WANDB_MODE": "offline"}


def test_glue_table_score_and_submission(env, tmp_path):
    source, out = tiny_hf_directory(tmp_path / "tiny"), tmp_path / "glue"
    overrides = [a for o in SHORT for a in ("--override", o)]
    local = ["--experiment", "stsb=glue_stsb_minilm_local", "--experiment", "mrpc=glue_mrpc_minilm_local"]
    done = module("bert_exp.glue", source, "--tasks", "sst2", "stsb", "mrpc", "rte", "wnli", "--lrs", "1e-4", "--out",
                  out, *local, *overrides, env=env)  # every task with rows at hand (RTE's and WNLI's in GLUE's layout)
    assert done.returncode == 0, done.stderr[-3000:]
    row = next(line for line in done.stdout.splitlines() if line.startswith("| ours (dev)"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:4] == ["-", "-", "-"] and cells[5] == "-"  # MNLI, QQP, QNLI, CoLA: not at hand
    assert cells[9] == "-" and cells[11] == "-"  # the averages need every task
    chosen = json.loads((out / "glue.json").read_text())["chosen"]
    for task, column, metric in [("sst2", 4, "val/acc"), ("stsb", 6, "val/spearman"), ("mrpc", 7, "val/f1"),
                                 ("rte", 8, "val/acc"), ("wnli", 10, "val/acc")]:
        assert float(cells[column]) == pytest.approx(100 * chosen[task]["metrics"][metric], abs=0.05), task
    sst2_run, rte_run = chosen["sst2"]["run_dir"], chosen["rte"]["run_dir"]

    rebuilt = module("bert_exp.report", "--table", "--glue", out, env=env)
    assert rebuilt.returncode == 0, rebuilt.stderr[-2000:]
    assert row in rebuilt.stdout

    again = module("bert_exp.glue", source, "--tasks", "sst2", "rte", "--lrs", "1e-4", "--out", out, *overrides,
                   "--submission", env=env)  # the jobs are done: read, not run; RTE's test file here is labelled
    assert again.returncode == 2 and "glue: sst2 lr" not in again.stdout
    assert "RTE/test.tsv:1: a 'label' column in a test file" in again.stderr.strip().splitlines()[-1]
    assert not (out / "glue_submission.zip").exists()

    scored = module("bert_exp.score", sst2_run, "--submission", tmp_path / "sub", env=env)
    assert scored.returncode == 0, scored.stderr[-3000:]
    info = json.loads((tmp_path / "glue" / "sst2" / "lr0.0001-seed42" / "run.json").read_text())
    line = next(x for x in scored.stdout.splitlines() if x.strip().startswith("val/acc ="))
    assert float(line.split("=")[1].split("(")[0]) == pytest.approx(info["best_score"], abs=1e-4)
    lines = (tmp_path / "sub" / "SST-2.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 1822 and lines[1].startswith("0\t")
    assert {x.split("\t")[1] for x in lines[1:]} <= {"0", "1"}
    with zipfile.ZipFile(tmp_path / "sub" / "submission.zip") as archive:
        assert archive.namelist() == ["SST-2.tsv"]
    assert scored.stdout.strip().splitlines()[-1] == f"to submit: {tmp_path / 'sub' / 'submission.zip'}"

    refused = module("bert_exp.score", rte_run, "--submission", tmp_path / "sub", env=env)
    assert refused.returncode == 2 and "sub: exists and is not an empty directory" in refused.stderr
