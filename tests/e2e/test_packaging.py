"""conf/ and sweeps/ travel inside the wheel: a non-editable install works from any directory, and a
researcher's project beside it keeps its own presets and data configs (tests/runner/test_config_search.py)."""

import json
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from helpers import REPO, user_project

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """bert_exp's wheel installed (not editable) into a virtual environment: (its python, the folder)."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheels), str(REPO)], check=True, capture_output=True, timeout=300)
    wheel = next(wheels.glob("bert_exp-*.whl"))
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    # the dependencies come from this environment (a venv's own base interpreter may lack them): one .pth
    # line adds its site-packages, whose own .pth files (the editable bert_exp) are not processed
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True).stdout.strip()
    here = subprocess.run([sys.executable, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "dependencies.pth").write_text(here + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
                   check=True, capture_output=True, timeout=300)
    return python, env_dir


def runner(python, elsewhere, env):
    def run(*args):
        return subprocess.run([str(python), *args], cwd=elsewhere, capture_output=True, text=True, env=env, timeout=300)
    return run


def test_wheel_install_finds_conf_and_sweeps(installed, tmp_path):
    python, env_dir = installed
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = runner(python, elsewhere, {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})

    where = run("-c", "import bert_exp.resources as c; print(c.__file__); print(c.resource_dir('conf')); "
                      "print(c.resource_dir('sweeps'))")
    assert where.returncode == 0, where.stderr
    module_file, conf, sweeps = where.stdout.split()
    assert module_file.startswith(str(env_dir)) and conf.startswith(str(env_dir)) and sweeps.startswith(str(env_dir))

    result = run("-m", "bert_exp", "+experiment=pretrain_tiny", "+sweeps=pretrain_lr_warmup", "--cfg", "all")
    assert result.returncode == 0, result.stderr
    assert "experiment_name: pretrain_tiny" in result.stdout
    assert "optim.optimizer.lr: 5.0e-4,1.0e-3,2.0e-3" in result.stdout

    # the data catalog travels too, and the helpers that read the tree work from the wheel
    listing = run("-m", "bert_exp.data", "--data-dir", str(tmp_path / "nodata"), "list")
    assert listing.returncode == 0, listing.stderr
    assert "cola" in listing.stdout and "wikitext103" in listing.stdout and "missing" in listing.stdout
    helped = run("-m", "bert_exp", "--help")
    assert helped.returncode == 0 and "pretrain_tiny" in helped.stdout


def test_a_project_of_ones_own_beside_the_installed_package(installed, tmp_path, data_dir):
    """Its preset (extending a shipped one, with a data config of its own) fine-tunes through --config-dir,
    composes through hydra.searchpath, and through the variable is listed and checked as bert_exp's own are."""
    python, _ = installed
    elsewhere = tmp_path / "project"
    elsewhere.mkdir()
    user_project(elsewhere)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "BERT_EXP_DATA": str(data_dir),
           "BERT_EXP_CACHE": str(tmp_path / "cache"), "WANDB_MODE": "offline"}
    run = runner(python, elsewhere, env)
    short = ["+experiment=my_cola", "trainer.max_steps=2", "trainer.limit_val_batches=1",
             "trainer.check_val_every_n_epoch=null", "trainer.val_check_interval=2", "+data.limit_train_examples=64",
             "precision=auto", "logger=csv", "callbacks.last_checkpoint.keep_after_finish=false"]
    for name, way in [("flag", ["--config-dir", "myconf"]), ("searchpath", ["hydra.searchpath=[file://myconf]"])]:
        trained = run("-m", "bert_exp", *way, *short, f"hydra.run.dir={name}")
        assert trained.returncode == 0, trained.stderr[-3000:]
        assert "result: finished, step 2" in trained.stdout
        record = json.loads((elsewhere / name / "run.json").read_text())
        assert record["experiment"] == "my_cola" and record["config"]["data"]["max_seq_length"] == 64
    env["BERT_EXP_CONFIG_PATH"] = str(elsewhere / "myconf")
    listed = run("-m", "bert_exp", "--help")
    assert any(line.split()[:1] == ["my_cola"] for line in listed.stdout.splitlines()), listed.stdout
    mistyped = run("-m", "bert_exp", "+experiment=my_colaa")
    assert mistyped.returncode == 2 and "did you mean my_cola?" in mistyped.stderr
