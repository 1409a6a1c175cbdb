"""A sweep report with a damaged job: that job is named and skipped, the others drawn."""

import json

import pytest

from bert_exp.errors import UserError
from bert_exp.tools.report import main, report


def job(directory, seed, damage=None):
    (directory / "logs").mkdir(parents=True)
    (directory / "run.json").write_text(json.dumps({
        "status": "finished", "overrides": [f"seed={seed}"], "monitor": "val/mcc", "metrics": {"val/mcc": 0.1 * seed}}))
    (directory / "logs" / "metrics.csv").write_text("epoch,step,val/mcc\n0,5,0.1\n0,10,0.2\n")
    if damage == "run.json":
        (directory / "run.json").write_text('{"status": "fini')
    if damage == "metrics.csv":
        (directory / "logs" / "metrics.csv").write_text("epoch,step,val/mcc\n0,five,\x00\n")


def test_a_damaged_job_is_skipped_and_named(tmp_path, capsys):
    job(tmp_path / "0", 1)
    job(tmp_path / "1", 2, damage="metrics.csv")
    job(tmp_path / "2", 3)
    assert main([str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "skipping" in err and str(tmp_path / "1" / "logs" / "metrics.csv") in err
    assert (tmp_path / "report" / "val_curves.png").is_file()


def test_a_single_run_with_a_damaged_metrics_file_is_one_error(tmp_path):
    job(tmp_path / "run", 1, damage="metrics.csv")
    with pytest.raises(UserError, match=r"metrics.csv, line 2"):
        report(tmp_path / "run")
    job(tmp_path / "run2", 1, damage="run.json")
    with pytest.raises(UserError, match=r"run.json: not valid JSON"):
        report(tmp_path / "run2")
