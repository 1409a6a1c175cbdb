"""The downstream suite: sources (a checkpoint and scratch in its shape) fine-tuned per task and seed into
one table; re-running skips finished jobs."""

import csv
import json

import pytest

from bert_exp.tools.evaluate import EvaluateError, main, markdown_table, parse_source, summarize
from helpers import is_png, tiny_hf_directory


def test_sources_and_the_table(tmp_path):
    source = parse_source(f"mine={tiny_hf_directory(tmp_path / 'hf')}", tmp_path / "out")
    assert source.label == "mine" and source.overrides == [f"task.init_from={tmp_path / 'hf'}"]
    scratch = parse_source(f"scratch:{tmp_path / 'hf'}", tmp_path / "out")
    assert scratch.label == "scratch-hf" and "task.init_from=null" in scratch.overrides
    assert f"model.source={tmp_path / 'hf'}" in scratch.overrides
    assert f"data.vocab_file={tmp_path / 'hf' / 'vocab.txt'}" in scratch.overrides
    with pytest.raises(EvaluateError, match="does not exist"):
        parse_source(str(tmp_path / "nothing"), tmp_path / "out")

    rows = summarize({"a": {"sst2": [80.0, 82.0], "cola": [10.0, 20.0]}, "b": {"sst2": [70.0]}}, ["sst2", "cola"])
    assert rows[0]["sst2"]["mean"] == 81.0 and rows[0]["sst2"]["std"] == pytest.approx(2 ** 0.5)
    assert rows[0]["average"] == pytest.approx((81.0 + 15.0) / 2) and rows[1]["average"] == 70.0
    table = markdown_table(rows, ["sst2", "cola"])
    assert "| a | 81.0 ± 1.4 (n=2) | 15.0 ± 7.1 (n=2) | 48.0 |" in table and "| b | 70.0 ± 0.0 (n=1) | - | 70.0 |" in table


def test_the_suite_scores_every_task_by_default(tmp_path, capsys):
    hf = tiny_hf_directory(tmp_path / "hf")
    assert main([str(hf), "--seeds", "1", "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    jobs = [line.split()[2] for line in capsys.readouterr().out.splitlines() if line.startswith("evaluate: ")]
    assert jobs == ["sst2", "cola", "squad", "pos"]


def test_mistakes_that_would_mislabel_the_table_are_refused(tmp_path, capsys):
    """A task named twice would count its seeds twice; a seed override would give every job one seed
    (a spread of 0); a job directory holding another job would lend its score to this one."""
    hf = tiny_hf_directory(tmp_path / "hf")
    out = tmp_path / "out"
    assert main([str(hf), "--tasks", "cola", "cola", "--out", str(out), "--dry-run"]) == 2
    assert "--tasks names a task twice" in capsys.readouterr().err
    for override in ("seed=7", "++seed=7"):
        assert main([str(hf), "--override", override, "--out", str(out), "--dry-run"]) == 2
        assert f"--override {override}: the suite sets each job's seed" in capsys.readouterr().err
    job = out / "hf" / "cola" / "seed42"
    job.mkdir(parents=True)
    (job / "run.json").write_text(json.dumps({"status": "finished", "overrides": ["+experiment=suite_cola", "x=1"],
                                              "metrics": {"val/mcc": 0.5}}))
    assert main([str(hf), "--tasks", "cola", "--seeds", "1", "--out", str(out), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"{job} holds another job" in err and "another --out keeps both" in err


@pytest.mark.slow
def test_suite_runs_a_checkpoint_and_scratch_in_its_shape(data_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BERT_EXP_DATA", str(data_dir))
    hf = tiny_hf_directory(tmp_path / "hf")
    out = tmp_path / "suite"
    args = [f"tiny={hf}", f"scratch:{hf}", "--tasks", "cola", "--seeds", "1", "--out", str(out),
            "--override", "trainer.max_steps=4", "--override", "trainer.max_epochs=null",
            "--override", "precision=32-true", "--override", "trainer.val_check_interval=2",
            "--override", "trainer.check_val_every_n_epoch=null"]
    assert main(args) == 0
    infos = {label: json.loads((out / label / "cola" / "seed42" / "run.json").read_text())
             for label in ("tiny", "scratch-hf")}
    for info in infos.values():
        assert info["status"] == "finished" and info["global_step"] == 4 and info["config"]["seed"] == 42
    # the suite keeps the best checkpoint only (keep_after_finish=false), and a run directory still resolves
    job = out / "tiny" / "cola" / "seed42"
    assert not (job / "checkpoints" / "last.ckpt").exists() and list((job / "checkpoints").glob("best-*.ckpt"))
    from bert_exp.tasks.checkpoints import load_checkpoint
    assert load_checkpoint(job).head == "classification"
    # scratch has the checkpoint's shape exactly
    assert infos["tiny"]["num_parameters"] == infos["scratch-hf"]["num_parameters"] < 2_000_000
    assert json.loads((out / "tiny" / "cola" / "seed42" / "run.json").read_text())["initialised_from"] == str(hf)
    assert json.loads((out / "scratch-hf" / "cola" / "seed42" / "run.json").read_text())["initialised_from"] is None
    with open(out / "suite.csv") as f:
        assert [r["source"] for r in csv.DictReader(f)] == ["tiny", "scratch-hf"]
    assert "CoLA MCC" in (out / "suite.md").read_text() and is_png(out / "suite.png")
    capsys.readouterr()
    assert main(args) == 0  # everything finished: nothing runs again
    assert "evaluate: tiny cola seed" not in capsys.readouterr().out
    from bert_exp.data.hashing import file_sha256
    assert infos["tiny"]["initialised_from_sha256"] == file_sha256(hf / "model.safetensors")
    # the same command after the source's weights were written again: refused, not scored from the old ones
    from safetensors.torch import load_file, save_file
    save_file({k: v + 0.01 for k, v in load_file(hf / "model.safetensors").items()}, hf / "model.safetensors")
    assert main(args) == 2
    assert "weights have changed" in capsys.readouterr().err


@pytest.mark.parametrize("task", ["sst2", "cola", "squad", "pos", "squad_v2"])
def test_each_task_scores_a_set_its_recipe_validates_on(task, tmp_path):
    """The metric the table reads is one the task's recipe logs: POS on its test set (val/test/...), the
    others on their first validation set."""
    from bert_exp.tools.evaluate import TASKS
    from helpers import compose_config

    cfg = compose_config([f"+experiment=suite_{task}", f"task.init_from={tmp_path}"], run_dir=tmp_path)
    metric = TASKS[task][0]
    assert metric.startswith("val/")
    parts = metric.split("/")
    if len(parts) == 3:  # val/<set>/<metric>
        assert parts[1] in cfg.data.val_files and parts[1] == "test"
    else:
        assert metric == cfg.task.monitor
    if task == "squad_v2":  # 4 articles of the half scored as v2.0, 2 more tune the threshold, neither trained on
        assert cfg.data.version_2 and list(cfg.data.val_file.titles) == ["Imperialism", "Warsaw",
                                                                         "French_and_Indian_War", "Force"]
        assert list(cfg.data.threshold_file.titles) == ["Scottish_Parliament", "Islamism"]


@pytest.mark.parametrize("task", ["sst2", "cola"])
def test_the_suites_classifiers_read_the_mean_of_the_tokens(task, tmp_path):
    """MLM-only pre-training never trains [CLS] (every CoLA sentence got the same vector), so the suite
    scores every source's encoder through the mean of its tokens."""
    from helpers import compose_config

    cfg = compose_config([f"+experiment=suite_{task}", f"task.init_from={tmp_path}"], run_dir=tmp_path)
    assert cfg.task.module.pooling == "mean"
