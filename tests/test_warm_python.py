"""The tests' warm interpreter (tests/warm_python.py) answers as a fresh ``python -m bert_exp`` does."""

import os
import subprocess

import pytest

from helpers import REPO, cli_environment, run_cli
import warm_python
from warm_python import WarmPython


@pytest.fixture(scope="module")
def warm():
    """A warm interpreter of these tests' own (the worker's may have been left for fresh interpreters, where
    earlier tests changed the worker's environment)."""
    interpreter = WarmPython(REPO)
    yield interpreter
    interpreter.process.stdin.close()
    interpreter.process.wait(timeout=60)


@pytest.mark.parametrize("args", [["+experiment=pretrain_tinyy"],  # refused: one line on stderr, exit 2
                                  ["+experiment=pretrain_tiny", "model=mini", "--cfg", "job"],  # a config on stdout
                                  ["+experiment=pretrain_tiny", "--help"]])
def test_a_forked_run_answers_as_a_fresh_one(args, warm, tmp_path):
    args = [*args, f"hydra.run.dir={tmp_path / 'run'}"]
    forked, fresh = warm.run(args, REPO, cli_environment(), 600), run_cli(args, fresh=True)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert forked.stdout or forked.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("args", [["--help"], ["no-such-run"]])  # its help; a run it cannot find, exit 2
def test_another_module_forked_answers_as_a_fresh_one(args, warm, tmp_path):
    forked = warm.run(args, tmp_path, cli_environment(), 600, module="bert_exp.score")
    fresh = run_cli(args, cwd=tmp_path, fresh=True, module="bert_exp.score")
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert forked.stdout or forked.stderr


def test_an_environment_the_imports_may_have_read_goes_to_a_fresh_interpreter():
    warm = object.__new__(WarmPython)  # its rule alone, no process
    warm.environment = {"PATH": "/usr/bin", "OMP_NUM_THREADS": "1", "BERT_EXP_CACHE": "/a"}
    warm.added = {"PYTORCH_NVML_BASED_CUDA_CHECK": "1"}  # what its imports set: a worker that imported them has it
    assert warm.fits({"PATH": "/usr/bin", "OMP_NUM_THREADS": "1", "BERT_EXP_CACHE": "/b", "WANDB_MODE": "offline"})
    assert not warm.fits({"PATH": "/usr/bin", "OMP_NUM_THREADS": "2", "BERT_EXP_CACHE": "/a"})
    assert not warm.fits({"PATH": "/usr/bin", "OMP_NUM_THREADS": "1", "HF_ENDPOINT": "http://127.0.0.1:1"})
    assert not warm.fits({"PATH": "/usr/bin"})  # a variable taken away counts too
    assert warm.fits({"PATH": "/usr/bin", "OMP_NUM_THREADS": "1", "PYTORCH_NVML_BASED_CUDA_CHECK": "1"})
    assert not warm.fits({"PATH": "/usr/bin", "OMP_NUM_THREADS": "1", "PYTORCH_NVML_BASED_CUDA_CHECK": "0"})


def test_a_run_past_its_timeout_is_killed_and_the_next_run_is_served(warm, data_dir, tmp_path):
    env = cli_environment({"BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(tmp_path / "cache")})
    with pytest.raises(subprocess.TimeoutExpired):
        warm.run(["+experiment=pretrain_tiny", f"hydra.run.dir={tmp_path / 'slow'}"], REPO, env, 2)
    assert not os.path.exists(f"/proc/{warm.last_pid}")  # killed and reaped
    done = warm.run(["+experiment=pretrain_tinyy", f"hydra.run.dir={tmp_path / 'next'}"], REPO, env, 600)
    assert done.returncode == 2 and "did you mean pretrain_tiny" in done.stderr


def test_the_warm_interpreter_ends_with_its_user(tmp_path):
    warm = WarmPython(REPO)
    assert warm.process.poll() is None
    warm.process.stdin.close()  # what happens when the test worker ends
    assert warm.process.wait(timeout=30) == 0


def test_a_worker_whose_environment_changed_gets_a_warm_interpreter_of_the_new_one(monkeypatch):
    run_cli(["+experiment=pretrain_tinyy"], env={"BERT_EXP_TEST_FRESH_PYTHON": ""})
    before = warm_python._warm
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "maybe")  # as in-process preparation sets it in the worker
    refused = run_cli(["+experiment=pretrain_tinyy"], env={"BERT_EXP_TEST_FRESH_PYTHON": ""})
    assert refused.returncode == 2
    assert warm_python._warm is not before and warm_python._warm.environment["TOKENIZERS_PARALLELISM"] == "maybe"
    assert before.process.poll() == 0  # the old one ended


def test_a_run_that_fits_neither_environment_leaves_the_warm_interpreter_as_it_is(monkeypatch):
    """A worker whose environment changed, and a run whose environment fits neither: the run goes to a fresh
    interpreter, and the warm one is kept for when the worker's environment is back (no restart for nothing)."""
    run_cli(["+experiment=pretrain_tinyy"], env={"BERT_EXP_TEST_FRESH_PYTHON": ""})
    before = warm_python._warm
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "maybe")
    refused = run_cli(["+experiment=pretrain_tinyy"], env={"BERT_EXP_TEST_FRESH_PYTHON": "",
                                                          "HF_ENDPOINT": "http://127.0.0.1:1"})
    assert refused.returncode == 2 and "did you mean pretrain_tiny" in refused.stderr
    assert warm_python._warm is before and before.process.poll() is None
