"""The same mistake, the same answer, whatever the cache holds: the inputs and the command line checked
before any work, one section per item of the issue's second walk through the faults that they answer (a
reproduction each, ending in one line, exit code 2, nothing left behind, or in a run that works)."""

import json
import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bert_exp.data import LoaderSettings, PretrainingDataModule, TokenizerSpec
from bert_exp.data.corpus import datamodule as corpus_datamodule
from bert_exp.data.corpus.files import CorpusError
from bert_exp.errors import CheckpointError
from bert_exp.resources import minilm_dir
from helpers import REPO, compose_config, run_cli

MINILM_VOCAB = str(minilm_dir() / "vocab.txt")


def speeches(data_dir: Path) -> list[str]:
    return [p.read_text(encoding="utf-8") for p in sorted((data_dir / "corpus" / "inaugural").glob("19[0-4]*.txt"))]


def write_table(path: Path, columns: dict[str, list]) -> Path:
    """A Parquet, Arrow (IPC stream, as ``datasets`` writes) or JSON Lines file, by ``path``'s suffix."""
    table = pa.table({name: pa.array(values, pa.string()) for name, values in columns.items()})
    if path.suffix == ".parquet":
        pq.write_table(table, path)
    elif path.suffix == ".arrow":
        with pa.ipc.new_stream(str(path), table.schema) as writer:
            writer.write_table(table)
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in table.to_pylist()), encoding="utf-8")
    return path


def corpus(files, cache: Path, vocab_file: str | None = None) -> PretrainingDataModule:
    return PretrainingDataModule(files=files, tokenizer=TokenizerSpec(vocab_file=vocab_file, vocab_size=500),
                                 cache_dir=str(cache), loader=LoaderSettings(batch_size=8))


@pytest.fixture
def no_preparation(monkeypatch):
    """The preparation must not start: a check before the work finds the mistake."""
    def refuse(*args, **kwargs):
        raise AssertionError("the preparation started")

    monkeypatch.setattr(corpus_datamodule, "prepare", refuse)


# -- item 12: a table file without the named column -----------------------------------------------------------


@pytest.mark.parametrize("name, problem", [
    ("speeches.parquet", r": no column 'text' \(columns: body\)"),
    ("speeches.arrow", r": no column 'text' \(columns: body\)"),
    ("speeches.jsonl", r":1: no key 'text' \(keys: body\)"),
])
def test_a_table_without_its_column_stops_before_any_work(data_dir, tmp_path, no_preparation, name, problem):
    """With a vocabulary at hand (here data.tokenizer.vocab_file) the preparation's workers used to meet the
    missing column: the run had started. Now the inputs are checked first, with or without one."""
    table = write_table(tmp_path / name, {"body": speeches(data_dir)[:3]})
    pattern = rf"^{re.escape(str(table))}{problem}; name the text column: data.files=\[\{{path: ..., text_column: NAME\}}\]$"
    with pytest.raises(CorpusError, match=pattern):
        corpus([str(table)], tmp_path / "cache", vocab_file=MINILM_VOCAB).prepare_data()
    with pytest.raises(CorpusError, match=pattern):
        corpus([str(table)], tmp_path / "cache").check_corpus()
    assert not (tmp_path / "cache" / "tokenizers").exists()
    corpus([{"path": str(table), "text_column": "body"}], tmp_path / "cache").check_corpus()  # named: it reads


def test_a_worker_that_fails_leaves_no_semaphore_behind(data_dir, tmp_path):
    """The preparation's workers, stopped after one failed: litdata makes a semaphore in each as it is
    imported, which the resource tracker reported leaked ('resource_tracker: There appear to be 1 leaked
    semaphore objects') when the worker was stopped without its exit's clean-up."""
    table = write_table(tmp_path / "speeches.parquet", {"body": speeches(data_dir)})
    script = f"""
import sys
from pathlib import Path
from bert_exp.data import InstanceSettings
from bert_exp.data.corpus.preparation import PrepareSettings, prepare
from bert_exp.data.corpus.storage import Location
from bert_exp.data.tokenizer import load_vocab_file

if __name__ == "__main__":
    tokenizer = load_vocab_file({MINILM_VOCAB!r})
    try:
        prepare(Location({str(tmp_path / "prepared" / "key")!r}), [Path({str(table)!r})], tokenizer.to_str(),
                tokenizer.get_vocab_size(), InstanceSettings(), PrepareSettings(num_workers=1), {{}})
    except Exception as err:
        print(f"error: {{err}}", file=sys.stderr)
        sys.exit(2)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.strip() == f"error: {table}: no column 'text' (columns: body); name the text column: " \
                                  "data.files=[{path: ..., text_column: NAME}]", done.stderr[-3000:]
    assert list((tmp_path / "prepared").iterdir()) == []  # no build or scratch directory left


@pytest.mark.slow
@pytest.mark.parametrize("vocabulary", ["none cached", "one cached", "a vocab_file"])
def test_a_table_without_its_column_is_one_line_whatever_the_cache_holds(data_dir, tmp_path, monkeypatch, vocabulary):
    """The issue's reproduction through the CLI: with no vocabulary cached, with one cached for the file (trained
    on its column ``body``: the vocabulary's key did not hold the column), and with data.tokenizer.vocab_file.
    Each is one line, exit 2; no run directory; no 'leaked semaphore' lines; no vocabulary trained."""
    table = write_table(tmp_path / "speeches.parquet", {"body": speeches(data_dir)})
    cache = tmp_path / "cache"
    monkeypatch.setenv("BERT_EXP_CACHE", str(cache))
    args = ["+experiment=pretrain_tiny", f"data.files=['{table}']", "trainer.max_steps=2", "logger=csv"]
    if vocabulary == "a vocab_file":
        args.append(f"data.tokenizer.vocab_file={MINILM_VOCAB}")
    if vocabulary == "one cached":
        from hydra.utils import instantiate

        cfg = compose_config(["+experiment=pretrain_tiny", f"data.files=[{{path: '{table}', text_column: body}}]"])
        PretrainingDataModule(files=list(cfg.data.files), tokenizer=instantiate(cfg.data.tokenizer), cache_dir=str(cache),
                              instances=instantiate(cfg.data.instances)).tokenizer  # noqa: B018  (trains, caches)
    cached = sorted((cache / "tokenizers").glob("*")) if (cache / "tokenizers").exists() else []
    done = run_cli([*args, f"hydra.run.dir={tmp_path / 'run'}"], env={"BERT_EXP_DATA": str(data_dir)}, timeout=300)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == [f"error: {table}: no column 'text' (columns: body); name the text column: "
                     "data.files=[{path: ..., text_column: NAME}]"], done.stderr[-3000:]
    assert "leaked semaphore" not in done.stdout + done.stderr
    assert "result:" not in done.stdout and not (tmp_path / "run").exists()  # the run never started
    now = sorted((cache / "tokenizers").glob("*")) if (cache / "tokenizers").exists() else []
    assert now == cached


# -- item 13: an empty table --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["empty.parquet", "empty.arrow", "empty.jsonl"])
def test_an_empty_table_stops_before_the_vocabulary_saying_it_holds_0_rows(tmp_path, no_preparation, name):
    table = write_table(tmp_path / name, {"text": []})
    dm = corpus([str(table)], tmp_path / "cache")
    with pytest.raises(CorpusError, match=rf"^{re.escape(str(table))}: holds 0 rows; there is no text to pre-train on$"):
        dm.prepare_data()
    assert not (tmp_path / "cache" / "tokenizers").exists()  # no vocabulary trained on nothing, nor cached
    other = write_table(tmp_path / "other.parquet", {"text": []})
    with pytest.raises(CorpusError, match=r"holds 0 rows \(the other 1 input files are empty too\)"):
        corpus([str(table), str(other)], tmp_path / "cache").check_corpus()
    text = tmp_path / "text.txt"
    text.write_text("Some text.\n")
    corpus([str(table), str(text)], tmp_path / "cache").check_corpus()  # an empty shard beside text: fine


# -- item 14: the Hub unreachable ------------------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_hub_unreachable_with_an_empty_cache_is_one_line_at_once(tmp_path, monkeypatch, capfd):
    """huggingface_hub, finding nothing cached, retried the refused connection five times over 23 s,
    printing each try, before our line. Now one try."""
    from huggingface_hub import constants

    from bert_exp.model.hub import _fetch_once
    from bert_exp.tasks.checkpoints import load_checkpoint

    url = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    _fetch_once.cache_clear()
    with pytest.raises(CheckpointError, match=rf"^hf:acme/bert-tiny: not in the Hub cache \({tmp_path / 'hub'}\) "
                                              rf"and {url} cannot be reached \(.+\): check the network"):
        load_checkpoint("hf:acme/bert-tiny")
    assert "Retrying" not in capfd.readouterr().err


@pytest.mark.slow
def test_the_hub_unreachable_through_the_cli_names_no_directory_it_never_made(data_dir, tmp_path):
    env = {"BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "0",
           "HF_ENDPOINT": f"http://127.0.0.1:{closed_port()}", "HF_HOME": str(tmp_path / "hf_home")}
    done = run_cli(["+experiment=cola_tiny", "model=from_checkpoint", "task.init_from=hf:acme/bert-tiny",
                    "trainer.max_steps=2", "logger=csv", f"hydra.run.dir={tmp_path / 'run'}"], env=env, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: hf:acme/bert-tiny: not in the Hub cache"), done.stderr
    assert "Retrying" not in done.stdout + done.stderr
    assert "run: cola_tiny" in done.stdout  # the header's first lines, then no directory it would not make
    assert str(tmp_path / "run") not in done.stdout and not (tmp_path / "run").exists()


# -- item 15: a mistyped key without + ----------------------------------------------------------------------


def answer_without_plus(overrides: list[str]) -> str:
    """What the CLI answers when Hydra refuses an override of a key the config lacks."""
    from hydra.errors import ConfigCompositionException

    from bert_exp.runner.overrides import unknown_override_error

    with pytest.raises(ConfigCompositionException) as refused:
        compose_config(overrides)
    return str(unknown_override_error(overrides, refused.value))


@pytest.mark.parametrize("typed, answer", [
    ("logger.wandb.projct=x", "logger.wandb.projct: unknown key (not a parameter of bert_exp.runner.loggers."
                              "wandb_logger); did you mean logger.wandb.project?"),
    ("trainer.max_stepz=3", "trainer.max_stepz: unknown key (not a parameter of lightning.pytorch.Trainer); "
                            "did you mean trainer.max_steps?"),
    ("data.masking.max_predictions_per_sq=3", "data.masking.max_predictions_per_sq: unknown key (not a parameter "
                                              "of bert_exp.data.corpus.masking.MaskingSettings); did you mean "
                                              "data.masking.max_predictions_per_seq?"),
])
def test_a_mistyped_key_gets_the_same_line_with_or_without_plus(tmp_path, typed, answer):
    """With +, Hydra adds the key and the config check names it; without, Hydra refused it in its own words."""
    from bert_exp.runner.validation import ConfigError, validate_config

    with pytest.raises(ConfigError) as with_plus:
        validate_config(compose_config(["+experiment=pretrain_tiny", f"+{typed}"], run_dir=tmp_path / "run"))
    assert str(with_plus.value) == f"invalid config: {answer}"
    assert answer_without_plus(["+experiment=pretrain_tiny", typed]) == f"invalid config: {answer}"


def test_mistyped_keys_where_no_target_checks_them_are_named_too():
    """Keys of no ``_target_`` (the top level), a mistyped group name, and several mistakes at once; a sweep's."""
    assert answer_without_plus(["+experiment=pretrain_tiny", "seedd=3", "logger.wandbb.project=x",
                                "model.hiden_size=3"]) == (
        "invalid config:\n  seedd: unknown key; did you mean seed?\n"
        "  logger.wandbb: unknown key; did you mean logger.wandb?\n"
        "  model.hiden_size: unknown key (not a parameter of bert_exp.model.BertConfig); did you mean model.hidden_size?")


def test_a_mistyped_key_without_plus_through_the_cli_is_one_line_exit_2(tmp_path):
    """Hydra's seven lines and exit code 1 before; the README promises one line, exit code 2, for every mistake."""
    done = run_cli(["+experiment=pretrain_tiny", "logger.wandb.projct=x", f"hydra.run.dir={tmp_path / 'run'}"],
                   timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip() == ("error: invalid config: logger.wandb.projct: unknown key (not a parameter of "
                                   "bert_exp.runner.loggers.wandb_logger); did you mean logger.wandb.project?")
    assert not (tmp_path / "run").exists()


# -- item 16: the quick debug run on a small corpus ------------------------------------------------------------


def test_an_interval_longer_than_an_epoch_validates_at_each_epoch_end(tmp_path, caplog):
    """Lightning refuses val_check_interval=N above an epoch's batches; the runner's trainer validates at the
    end of each epoch instead, and warns once."""
    import lightning as L
    import torch

    from bert_exp.runner.val_check import clamp_val_check_interval

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)
            self.validated_at = []

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def validation_step(self, batch, batch_idx):
            return None

        def on_validation_epoch_end(self):
            if not self.trainer.sanity_checking:
                self.validated_at.append(self.trainer.global_step)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(10, 2)), batch_size=2)  # 5 batches
    module = Tiny()
    trainer = L.Trainer(max_steps=12, val_check_interval=200, check_val_every_n_epoch=1, limit_val_batches=1,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=str(tmp_path))
    clamp_val_check_interval(trainer)
    with caplog.at_level("WARNING", logger="bert_exp.runner.val_check"):
        trainer.fit(module, train_dataloaders=loader, val_dataloaders=loader)
    assert module.validated_at == [5, 10]
    warnings = [r.getMessage() for r in caplog.records if r.name == "bert_exp.runner.val_check"]
    assert warnings == ["trainer.val_check_interval=200 is more than an epoch's 5 training batches: validating at "
                        "the end of each epoch instead (set it to at most 5, or trainer.check_val_every_n_epoch=null "
                        "to count batches across epochs)"]


SMALL_CORPUS = "data.files=['${paths.data_dir}/corpus/inaugural/19[0-4]*.txt']"


def documented_quick_run() -> list[str]:
    """The quick debug run for pre-training as docs/configuration.md gives it, as a user copies it."""
    text = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    section = text.split("## A quick debug run", 1)[1].split("\n## ", 1)[0]
    command = next(line for line in section.splitlines() if line.startswith("python -m bert_exp +experiment=pretrain_tiny"))
    return shlex.split(command)[3:]


@pytest.mark.slow
def test_the_documented_quick_debug_run_works_on_a_small_corpus(data_dir, cache_dir, tmp_path):
    """pretrain_tiny validates every 200 batches; the quick debug run on a corpus of a few files (19 batches an
    epoch here) stopped at Lightning's refusal, before the first step."""
    args = documented_quick_run()
    assert "trainer.max_steps=20" in args and "logger=csv" in args  # what the docs give
    env = {"BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(cache_dir)}
    done = run_cli([*args, SMALL_CORPUS, f"hydra.run.dir={tmp_path / 'run'}"], env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["status"] == "finished" and info["global_step"] == 20
    assert re.search(r"trainer.val_check_interval=200 is more than an epoch's \d+ training batches: validating at the "
                     r"end of each epoch instead", done.stdout + done.stderr)
