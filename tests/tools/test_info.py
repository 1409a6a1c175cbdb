import json
from pathlib import Path

from bert_exp.tools.info import main as info_main


def test_info_reports_versions_devices_precisions_and_data(data_dir, tmp_path, monkeypatch, capsys):
    # a data directory whose state the test sets: CoLA there, SQuAD v2.0 not
    (tmp_path / "cola").symlink_to(data_dir / "cola")
    monkeypatch.setenv("BERT_EXP_DATA", str(tmp_path))
    assert info_main(["--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["versions"]["torch"] and info["versions"]["lightning"] and info["versions"]["bert_exp"]
    cpu = info["devices"][0]
    assert cpu["device"] == "cpu" and cpu["cores"] >= 1
    assert set(cpu["precisions"]) == {"32-true", "bf16-mixed", "16-mixed"}
    assert Path(info["paths"]["data_dir"]).resolve() == tmp_path.resolve()
    assert info["data_sets"]["cola"] == "present" and info["data_sets"]["squad_v2"] == "missing"

    assert info_main([]) == 0  # the human-readable form
    text = capsys.readouterr().out
    assert "Devices and precisions" in text and "bf16-mixed" in text and "cola            present" in text
