"""A researcher's own presets and data configs, outside the package: found where Hydra finds configs
(``--config-dir``, ``hydra.searchpath``) and through ``$BERT_EXP_CONFIG_PATH``, listed by --help and
checked by the did-you-mean line like bert_exp's own (the installed wheel: tests/e2e/test_packaging.py)."""

import pytest

from bert_exp.runner.config_search import ENV, config_roots
from bert_exp.runner.help import help_text, unknown_choice
from bert_exp.runner.overrides import _overrides
from helpers import compose_config, run_cli, user_project

def ways(conf) -> dict[str, list[str]]:
    return {"--config-dir": ["--config-dir", str(conf)], "--config-dir=": [f"--config-dir={conf}"],
            "hydra.searchpath": [f"hydra.searchpath=[file://{conf}]"], "env": []}


@pytest.mark.parametrize("way", ["--config-dir", "--config-dir=", "hydra.searchpath", "env"])
def test_a_users_preset_is_listed_checked_and_composed(tmp_path, monkeypatch, way):
    conf = user_project(tmp_path)
    if way == "env":
        monkeypatch.setenv(ENV, str(conf))
    args = ways(conf)[way]
    assert config_roots(args)[-1] == conf.resolve()
    text = help_text(args)
    assert any(line.split() == ["my_cola", *"CoLA from MiniLM with a data config of my own".split()]
               for line in text.splitlines())
    data_row = next(line for line in text.splitlines() if line.strip().startswith("data "))
    assert "my_cola_data" in data_row.split(None, 1)[1].split(", ")
    assert unknown_choice([*args, "+experiment=my_cola", "data=my_cola_data"]) is None
    assert "did you mean my_cola?" in unknown_choice([*args, "+experiment=my_colaa"])
    assert "did you mean my_cola_data?" in unknown_choice([*args, "data=my_cola_dat"])
    assert _overrides([*args, "seed=3"])[-1] == "seed=3" and str(conf) not in _overrides([*args, "seed=3"])
    overrides = args if way == "hydra.searchpath" else []  # --config-dir is the CLI's; the env the plugin's
    if way.startswith("--config-dir"):
        monkeypatch.setenv(ENV, str(conf))
    cfg = compose_config([*overrides, "+experiment=my_cola"])
    assert (cfg.experiment_name, cfg.seed, cfg.data.max_seq_length) == ("my_cola", 7, 64)
    assert cfg.data._target_ == "bert_exp.data.GlueDataModule" and cfg.task.init_from


def test_without_its_directory_a_users_preset_is_unknown(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    user_project(tmp_path)
    assert "experiment=my_cola: no such option" in unknown_choice(["+experiment=my_cola"])
    assert "my_cola" not in help_text([])


def test_the_cli_reads_a_users_preset_and_its_overrides_are_each_one_line(tmp_path):
    conf = user_project(tmp_path)
    base = ["--config-dir", str(conf), "+experiment=my_cola"]
    shown = run_cli([*base, "--cfg", "job"])
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "experiment_name: my_cola" in shown.stdout and "seed: 7" in shown.stdout
    for override, message in [
        # a parameter the preset leaves unset: Hydra's "Could not override", answered with the + form
        ("data.label_map={False:0,True:1}", "error: invalid config: data.label_map: not set by this config; a "
                                            "parameter of bert_exp.data.GlueDataModule, added with a leading +: "
                                            "+data.label_map=VALUE"),
        # a value Hydra's grammar cannot read (quoted dict keys)
        ("+data.label_map={'False':0}", "error: +data.label_map={'False':0}: Hydra's override grammar cannot read it"),
    ]:
        done = run_cli([*base, override, "--cfg", "job"])
        assert done.returncode == 2 and done.stderr.startswith(message), done.stderr[-2000:]
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_a_commands_directories_reach_the_jobs_it_starts(tmp_path, monkeypatch):
    """A pipeline's stages and the glue tool's runs are processes of their own: they read the variable."""
    import os

    from bert_exp.runner.config_search import export_to_children

    conf = user_project(tmp_path)
    monkeypatch.setenv(ENV, "/path/to/theirs")
    export_to_children(["--config-dir", str(conf), "+experiment=my_cola"])
    assert os.environ[ENV].split(os.pathsep) == ["/path/to/theirs", str(conf.resolve())]
    export_to_children([f"hydra.searchpath=[file://{conf}]"])  # the same directory once
    assert os.environ[ENV].split(os.pathsep) == ["/path/to/theirs", str(conf.resolve())]
