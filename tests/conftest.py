import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The shared data sets ($BERT_EXP_DATA); tests that need them skip cleanly elsewhere."""
    value = os.environ.get("BERT_EXP_DATA")
    if not value or not Path(value, "corpus").is_dir():
        pytest.skip("needs the shared data sets: set BERT_EXP_DATA")
    return Path(value).resolve()


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One cache for the whole session, so a vocabulary or corpus cache is built once."""
    return tmp_path_factory.mktemp("bert_exp_cache")


@pytest.fixture(autouse=True)
def _offline_wandb(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
