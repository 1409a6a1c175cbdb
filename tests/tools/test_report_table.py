"""``python -m bert_exp.report --table``: a results table rebuilt from the run directories' run.json."""

import json

from bert_exp.tools.report import main


def write_run(directory, overrides, step, loss, tokens_per_sec=None):
    directory.mkdir(parents=True)
    info = {"overrides": ["+experiment=pretrain_tiny", *overrides, f"hydra.run.dir={directory}"],
            "global_step": step, "monitor": "val/mlm_loss", "metrics": {"val/mlm_loss": loss, "val/mlm_acc": 0.2},
            "host": {"precision": {"chosen": "32-true"}}}
    if tokens_per_sec is not None:
        info["throughput"] = {"tokens_per_sec": tokens_per_sec}
    (directory / "run.json").write_text(json.dumps(info))
    return directory


def test_a_row_a_run_labelled_by_what_it_changed(tmp_path, capsys):
    a = write_run(tmp_path / "a", ["trainer.budget=210s"], 1137, 6.2981, 23265.97)
    b = write_run(tmp_path / "b", ["trainer.budget=210s", "optim.optimizer.lr=2e-3"], 2249, 6.17)
    out = tmp_path / "table.md"
    assert main(["--table", str(a), str(b), "--output", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| run | overrides | global_step | throughput.tokens_per_sec | val/mlm_loss |"
    assert lines[2] == "| a |  | 1,137 | 23,266 | 6.298 |"
    assert lines[3] == "| b | `optim.optimizer.lr=2e-3` | 2,249 | - | 6.17 |"  # a run without a value: "-"
    assert out.read_text().splitlines() == lines

    assert main(["--table", str(a), "--columns", "val/mlm_acc,host.precision.chosen,data_report.tokens"]) == 0
    assert capsys.readouterr().out.splitlines()[2] == "| a |  | 0.2 | 32-true | - |"


def test_a_directory_without_a_readable_run_json_is_one_line(tmp_path, capsys):
    good = write_run(tmp_path / "good", [], 10, 7.0)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["--table", str(good), str(empty)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {empty}: no run.json (a table reads finished or running runs)"
    (empty / "run.json").write_text("{not json")
    assert main(["--table", str(good), str(empty)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {empty / 'run.json'}: not valid JSON")


def test_several_directories_without_table_are_refused(tmp_path):
    import pytest

    a, b = write_run(tmp_path / "a", [], 1, 7.0), write_run(tmp_path / "b", [], 1, 7.0)
    with pytest.raises(SystemExit):
        main([str(a), str(b)])
