import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def pytest_configure(config):
    """Under pytest-xdist (the default run: two workers) the cores are shared among the workers, each
    worker and the runs it starts using its share: two workers that each spun a thread per core would
    fight over the cores instead of filling them."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:
        import torch

        threads = max(1, len(os.sched_getaffinity(0)) // int(workers))
        os.environ["OMP_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)


def pytest_collection_modifyitems(items):
    """Files with slow tests first. The two workers take whole files in collection order (``--dist
    loadfile``): a minutes-long file taken last kept one worker busy while the other had nothing left;
    taken first, the many quick files fill the end on both."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # stable: each file's tests keep their order


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
@pytest.fixture
def s3_server(monkeypatch):
    """A local S3-compatible server (moto), on 127.0.0.1, with a bucket; the environment points boto3 at it
    (AWS_ENDPOINT_URL), as it would at any S3-compatible store."""
    moto_server = pytest.importorskip("moto.server")
    import boto3

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    for name, value in {"AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "test",
                        "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    import requests

    requests.post(f"http://{host}:{port}/moto-api/reset", timeout=10)  # moto's state is the process's: start empty
    boto3.session.Session().client("s3").create_bucket(Bucket="corpora")
    yield "s3://corpora/prepared"
    server.stop()


