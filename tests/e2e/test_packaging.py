"""conf/ and sweeps/ travel inside the wheel: a non-editable install works from any directory."""

import subprocess
import sys
import venv
from pathlib import Path

import pytest

from helpers import REPO

pytestmark = pytest.mark.slow


def test_wheel_install_finds_conf_and_sweeps(tmp_path):
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
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}

    def run(*args):
        return subprocess.run([str(python), *args], cwd=elsewhere, capture_output=True, text=True, env=env, timeout=300)

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
