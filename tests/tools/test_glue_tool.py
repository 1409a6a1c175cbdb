"""GLUE's table: the paper's column order and average (its Table 1 rows reproduce their own 79.6 and
82.1), GLUE's score, the best run per task on dev, and the jobs the tool runs."""

import pytest

from bert_exp.errors import UserError
from bert_exp.tools.glue import (PAPER_ROWS, TASKS, best_per_task, glue_score, glue_table, job_overrides,
                                 main, paper_average)


def test_paper_average_reproduces_table_1():
    """Devlin et al. 2019, Table 1: BERT-base 79.6, BERT-large 82.1 (MNLI's m and mm counted apart)."""
    assert round(paper_average(PAPER_ROWS["BERT-base (paper, test)"]), 1) == 79.6
    assert round(paper_average(PAPER_ROWS["BERT-large (paper, test)"]), 1) == 82.1


def run(task, monitor, run_dir="r", **metrics):
    return {"task": task, "monitor": monitor, "run_dir": run_dir, "status": "finished",
            "metrics": {k.replace("__", "/").replace("_m_", "dev_mismatched/"): v for k, v in metrics.items()}}


def full_set(scale=1.0):
    return [
        run("mnli", "val/acc", val__acc=0.84 * scale, val__dev_mismatched__acc=0.83 * scale),
        run("qqp", "val/f1", val__f1=0.71 * scale, val__acc=0.89 * scale),
        run("qnli", "val/acc", val__acc=0.90 * scale),
        run("sst2", "val/acc", val__acc=0.93 * scale),
        run("cola", "val/mcc", val__mcc=0.52 * scale),
        run("stsb", "val/spearman", val__spearman=0.85 * scale, val__pearson=0.87 * scale),
        run("mrpc", "val/f1", val__f1=0.89 * scale, val__acc=0.85 * scale),
        run("rte", "val/acc", val__acc=0.66 * scale),
        run("wnli", "val/acc", val__acc=0.56 * scale),
    ]


def test_glue_score_counts_each_task_once_two_metrics_averaged():
    scores = {"mnli": 83.5, "qqp": 80.0, "qnli": 90.0, "sst2": 93.0, "cola": 52.0, "stsb": 86.0, "mrpc": 87.0,
              "rte": 66.0, "wnli": 56.0}
    assert glue_score(scores) == pytest.approx(sum(scores.values()) / 9)
    assert glue_score({k: v for k, v in scores.items() if k != "wnli"}) is None  # GLUE's score needs all nine


def test_table_in_paper_order_with_both_averages():
    table = glue_table(best_per_task(full_set()))
    lines = table.splitlines()
    assert lines[0] == ("| system | MNLI-(m/mm) | QQP | QNLI | SST-2 | CoLA | STS-B | MRPC | RTE | Average | WNLI "
                        "| GLUE score |")
    assert lines[2].startswith("| BERT-base (paper, test) | 84.6/83.4 | 71.2 | 90.5 | 93.5 | 52.1 | 85.8 | 88.9 | "
                               "66.4 | 79.6 | - | - |")
    ours = lines[4].split(" | ")
    average = (84 + 83 + 71 + 90 + 93 + 52 + 85 + 89 + 66) / 9
    score = (83.5 + 80 + 90 + 93 + 52 + 86 + 87 + 66 + 56) / 9
    assert ours[0] == "| ours (dev)" and ours[1] == "84.0/83.0" and ours[9] == f"{average:.1f}"
    assert ours[10] == "56.0" and ours[11] == f"{score:.1f} |"


def test_missing_tasks_leave_the_averages_empty():
    row = glue_table(best_per_task(full_set()[:3])).splitlines()[-1]
    assert row.endswith("| - | - | - |") and "| 90.0 |" in row


def test_best_run_per_task_on_its_monitored_dev_metric():
    runs = [run("rte", "val/acc", "a", val__acc=0.60), run("rte", "val/acc", "b", val__acc=0.70),
            run("rte", "val/acc", "c", val__acc=0.65)]
    assert best_per_task(runs)["rte"]["run_dir"] == "b"
    with pytest.raises(UserError, match="task 'squad' is not a GLUE task"):
        best_per_task([run("squad", "val/f1", val__f1=0.5)])
    with pytest.raises(UserError, match="x: no val/acc in run.json"):
        best_per_task([run("rte", "val/acc", "x")])


def test_jobs_use_each_task_preset_with_the_source_shape():
    by_name = {t.name: t for t in TASKS}
    overrides = job_overrides(by_name["cola"], ["task.init_from=/m"], 3e-5, 7, ["hardware=gpu"])
    assert overrides == ["+experiment=cola_minilm", "model=from_checkpoint", "task.init_from=/m",
                         "optim.optimizer.lr=3e-05", "seed=7", "resume_in_place=true", "logger=csv", "hardware=gpu"]


def test_dry_run_lists_rates_and_restarts_on_small_tasks_only(tmp_path, capsys):
    from helpers import tiny_hf_directory

    source = tiny_hf_directory(tmp_path / "tiny")
    assert main([str(source), "--tasks", "qnli", "rte", "--lrs", "5e-5", "2e-5", "--restarts", "2",
                 "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    jobs = [line.split(":")[1].strip() for line in capsys.readouterr().out.splitlines() if line.startswith("glue:")]
    assert jobs == ["qnli lr 5e-05 seed 42", "qnli lr 2e-05 seed 42", "rte lr 5e-05 seed 42", "rte lr 5e-05 seed 43",
                    "rte lr 2e-05 seed 42", "rte lr 2e-05 seed 43"]


@pytest.mark.parametrize("args, message", [
    (["--restarts", "0"], "--restarts must be at least 1"),
    (["--lrs", "2e-5", "2e-5"], "name each value once"),
    (["--override", "seed=3"], "the tool sets each job's seed and rate"),
    (["--tasks", "mnlii"], "--tasks mnlii: no such GLUE task; did you mean mnli?"),
    (["--experiment", "rte"], "--experiment rte: expected TASK=PRESET"),
    (["--experiment", "rte=glue_rte_minilm_locl"], "no preset 'glue_rte_minilm_locl' in conf/experiment or "
                                                   "$BERT_EXP_CONFIG_PATH's experiment/; did you mean glue_rte_minilm_local?"),
    (["--experiment", "rtee=glue_rte_minilm_local"], "--experiment rtee=glue_rte_minilm_local: rtee: no such GLUE task; did you mean rte?"),
    (["--tasks", "rte", "--experiment", "rte=glue_stsb_minilm_local"],
     "--experiment rte=glue_stsb_minilm_local: that preset fine-tunes stsb, not rte"),
    (["--tasks", "stsb", "--experiment", "stsb=glue_stsb_minilm_local", "--submission"],
     "--submission: stsb's preset glue_stsb_minilm_local names no test files"),
    (["--tasks", "sst2", "--placeholders"], "--placeholders fills a submission's missing files: give --submission"),
    (["--tasks", "sst2", "--wnli-majority"], "--wnli-majority answers WNLI: keep wnli in --tasks"),
])
def test_bad_arguments_are_one_line(tmp_path, capsys, args, message):
    assert main([str(tmp_path), *args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


def test_table_reads_each_run_at_its_best_checkpoint(tmp_path):
    """The numbers of the checkpoint that is scored again and predicts the test sets (the best on dev),
    read from the run's CSV log, not those of its last validation."""
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "metrics.csv").write_text(
        "epoch,step,train/loss,val/f1,val/acc\n0,9,0.7,,\n0,10,,0.80,0.70\n1,20,,0.75,0.74\n")
    info = {"task": "mrpc", "monitor": "val/f1", "run_dir": str(tmp_path), "status": "finished", "best_score": 0.80,
            "metrics": {"val/f1": 0.75, "val/acc": 0.74}}
    chosen = best_per_task([info])["mrpc"]
    assert chosen["best_step"] == 10 and chosen["metrics"]["val/acc"] == 0.70
    assert glue_table({"mrpc": chosen}).splitlines()[-1].split(" | ")[7] == "80.0"


@pytest.mark.parametrize("kept_step", [10, 20])
def test_a_tie_on_dev_is_read_at_the_checkpoint_kept(tmp_path, kept_step):
    """Two validations with the best F1: the table and glue.json give the metrics of the one whose
    checkpoint was kept (ModelCheckpoint keeps the first; read from the checkpoint's own step)."""
    import torch

    (tmp_path / "logs").mkdir()
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "logs" / "metrics.csv").write_text(
        "epoch,step,train/loss,val/f1,val/acc\n0,10,,0.80,0.70\n1,20,,0.80,0.74\n2,30,,0.60,0.66\n")
    torch.save({"global_step": kept_step}, tmp_path / "checkpoints" / f"best-step{kept_step}.ckpt")
    info = {"task": "mrpc", "monitor": "val/f1", "run_dir": str(tmp_path), "status": "finished", "best_score": 0.80,
            "best_checkpoint": f"/elsewhere/checkpoints/best-step{kept_step}.ckpt",
            "metrics": {"val/f1": 0.60, "val/acc": 0.66}}
    chosen = best_per_task([info])["mrpc"]
    assert chosen["best_step"] == kept_step
    assert chosen["metrics"]["val/acc"] == {10: 0.70, 20: 0.74}[kept_step]


def test_a_preset_of_ones_own_is_a_glue_tool_choice(tmp_path, capsys, monkeypatch):
    """--experiment TASK=PRESET finds a project's presets on $BERT_EXP_CONFIG_PATH (its jobs read the same)."""
    from helpers import tiny_hf_directory

    conf = tmp_path / "myconf" / "experiment"
    conf.mkdir(parents=True)
    (conf / "my_rte.yaml").write_text("# @package _global_\n# RTE my way\ndefaults:\n"
                                      "  - /experiment/glue_rte_minilm_local\n\nexperiment_name: my_rte\n")
    monkeypatch.setenv("BERT_EXP_CONFIG_PATH", str(tmp_path / "myconf"))
    source = tiny_hf_directory(tmp_path / "tiny")
    assert main([str(source), "--tasks", "rte", "--lrs", "2e-5", "--experiment", "rte=my_rte",
                 "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    assert "+experiment=my_rte" in capsys.readouterr().out
