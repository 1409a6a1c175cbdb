"""Models named on the Hub (``task.init_from=hf:NAME[@REVISION]`` or a bare NAME), fetched with huggingface_hub
from a local server that answers as the Hub's file endpoints do (HF_ENDPOINT): a fine-tuning run from a name,
the same run offline from the warm cache, and one line for each way a name fails."""

import json
import shutil
from pathlib import Path

import pytest
from huggingface_hub import constants

from bert_exp.errors import CheckpointError
from bert_exp.model.hub import hub_name, local_source
from bert_exp.tasks.checkpoints import load_checkpoint
from helpers import run_cli, tiny_hf_directory
from hub_server import LocalHub


@pytest.fixture
def hub(tmp_path, monkeypatch):
    model = tiny_hf_directory(tmp_path / "model")
    weightless = tmp_path / "weightless"
    weightless.mkdir()
    shutil.copy(model / "config.json", weightless / "config.json")
    from bert_exp.model.hf import save_hf_directory

    sharded = save_hf_directory(load_checkpoint(model), tmp_path / "sharded", max_shard_bytes=200_000)
    with LocalHub({"acme/bert-tiny": model, "bert-tiny": model, "acme/weightless": weightless,
                   "acme/sharded": sharded}) as server:
        # in this process (the CLI runs read the same variables from their environment)
        monkeypatch.setattr(constants, "ENDPOINT", server.url)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            server.url + "/{repo_id}/resolve/{revision}/{filename}")
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf_home" / "hub"))
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        server.env = {"HF_ENDPOINT": server.url, "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "0"}
        yield server


def test_which_names_are_hub_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert hub_name("hf:bert-base-uncased") == ("bert-base-uncased", None)
    assert hub_name("hf:google/bert_uncased_L-2_H-128_A-2@v1.0") == ("google/bert_uncased_L-2_H-128_A-2", "v1.0")
    assert hub_name("bert-base-uncased") == ("bert-base-uncased", None)  # a bare name that is no local path
    (tmp_path / "bert-base-uncased").mkdir()
    assert hub_name("bert-base-uncased") is None  # ... a local directory of that name wins
    for local in ("/abs/run", "./run", "~/run", "outputs/pretraining/run", "run/last.ckpt", "model.safetensors"):
        assert hub_name(local) is None, local
    with pytest.raises(CheckpointError, match="not a Hub model name"):
        hub_name("hf:a/b/c")


def test_a_hub_name_loads_as_its_directory_does(hub, tmp_path):
    ckpt = load_checkpoint("hf:acme/bert-tiny")
    local = load_checkpoint(tmp_path / "model")
    assert ckpt.config == local.config and ckpt.vocab == local.vocab and ckpt.head == "pretraining"
    assert all((ckpt.state_dict[k] == v).all() for k, v in local.state_dict.items())
    assert ckpt.extra["hub"] == {"repo_id": "acme/bert-tiny", "revision": None,
                                 "commit": hub.commits["acme/bert-tiny"]}
    assert str(tmp_path / "hf_home" / "hub") in ckpt.source  # huggingface_hub's cache, not ours
    asked = len(hub.authorizations)
    from bert_exp.tasks.checkpoints import checkpoint_config
    assert checkpoint_config("hf:acme/bert-tiny") == ckpt.config  # the shape, then the weights: the Hub asked once
    assert len(hub.authorizations) == asked
    shards = load_checkpoint("hf:acme/sharded")  # transformers' sharded layout: the index and every file it names
    assert (ckpt.source != shards.source and len(list(Path(shards.source).glob("model-*.safetensors"))) > 1
            and all((shards.state_dict[k] == v).all() for k, v in local.state_dict.items() if k in shards.state_dict))
    path, record = local_source(f"hf:acme/bert-tiny@{hub.commits['acme/bert-tiny']}")
    assert path.name == hub.commits["acme/bert-tiny"] and record.revision == hub.commits["acme/bert-tiny"]


def test_each_failure_is_one_line(hub, monkeypatch):
    with pytest.raises(CheckpointError, match=r"^hf:acme/nothing: no such model on http://127\.0\.0\.1"):
        load_checkpoint("hf:acme/nothing")
    with pytest.raises(CheckpointError, match=r"^hf:acme/bert-tiny@v9: the model has no revision 'v9'"):
        load_checkpoint("hf:acme/bert-tiny@v9")
    with pytest.raises(CheckpointError, match=r"^hf:acme/weightless: the model has neither model.safetensors "
                                              "nor pytorch_model.bin nor model.safetensors.index.json"):
        load_checkpoint("hf:acme/weightless")
    with pytest.raises(CheckpointError, match=r"^outputs/run1: no such local directory or file, nor a Hub model: "
                                              r"hf:outputs/run1: no such model"):
        load_checkpoint("outputs/run1")  # a local path with a typo reads as a Hub name: the error says both
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # nothing cached yet
    with pytest.raises(CheckpointError, match=r"^hf:bert-tiny: not in the Hub cache .* HF_HUB_OFFLINE is set"):
        load_checkpoint("hf:bert-tiny")


@pytest.mark.slow
def test_fine_tuning_from_a_hub_name_online_then_offline(hub, data_dir, cache_dir, tmp_path):
    """What a user types: ``task.init_from=NAME``; the run records the commit; then the same with the
    network gone (HF_HUB_OFFLINE=1, the server stopped) from the warm cache."""
    env = {"BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(cache_dir), **hub.env, "HF_TOKEN": "hf_local"}
    short = ["+experiment=cola_tiny", "model=from_checkpoint", "trainer.max_steps=2", "trainer.max_epochs=null", "trainer.val_check_interval=2",
             "trainer.check_val_every_n_epoch=null", "logger=csv", "precision=32-true"]
    online = run_cli([*short, "task.init_from=hf:acme/bert-tiny", f"hydra.run.dir={tmp_path / 'online'}"], env=env)
    assert online.returncode == 0, online.stderr[-3000:]
    info = json.loads((tmp_path / "online" / "run.json").read_text())
    commit = hub.commits["acme/bert-tiny"]
    assert info["status"] == "finished" and info["global_step"] == 2
    assert info["initialised_from_hub"] == {"repo_id": "acme/bert-tiny", "revision": None, "commit": commit}
    assert info["initialised_from"].endswith(f"snapshots/{commit}")
    assert "Bearer hf_local" in hub.authorizations  # the user's token went with the requests
    hub.stop()
    offline = run_cli([*short, "task.init_from=acme/bert-tiny", f"hydra.run.dir={tmp_path / 'offline'}"],
                      env={**env, "HF_HUB_OFFLINE": "1"})
    assert offline.returncode == 0, offline.stderr[-3000:]
    assert json.loads((tmp_path / "offline" / "run.json").read_text())["initialised_from_hub"]["commit"] == commit
    missing = run_cli([*short, "task.init_from=hf:acme/other", f"hydra.run.dir={tmp_path / 'missing'}"],
                      env={**env, "HF_HUB_OFFLINE": "1"})
    assert missing.returncode != 0 and "error: hf:acme/other: not in the Hub cache" in missing.stderr
    assert not (tmp_path / "missing").exists()  # refused before any work: no run directory left
