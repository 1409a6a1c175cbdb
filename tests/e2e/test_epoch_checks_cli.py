"""Checks Lightning makes only once it knows an epoch's length: an interval between validations longer than an
epoch validates at each epoch's end instead, with one warning naming the key (it used to stop the run)."""

import json

import pytest

from helpers import run_cli

pytestmark = pytest.mark.slow


def test_val_check_interval_longer_than_an_epoch_validates_each_epoch(data_dir, cache_dir, tmp_path):
    env = {"BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(cache_dir)}
    result = run_cli(["+experiment=pretrain_tiny", "data.files=['${paths.data_dir}/corpus/inaugural/19[0-4]*.txt']",
                      "data.tokenizer.vocab_size=2000", "trainer.max_steps=2", "trainer.val_check_interval=100000",
                      f"hydra.run.dir={tmp_path / 'run'}"], env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    output = result.stdout + result.stderr
    assert "trainer.val_check_interval=100000 is more than an epoch's" in output and "check_val_every_n_epoch" in output
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "finished"
