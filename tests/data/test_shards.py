"""Prepared data (bert_exp.data.corpus.streaming): groups of files, litdata's chunks, and what goes wrong with them:
a missing or damaged chunk is one line naming it, a preparation killed half-way leaves nothing a later run
reads as complete (and the next run finishes it), and an object store (a local S3 server) serves as well
as a directory."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from bert_exp.data import InstanceSettings, LoaderSettings, PretrainingDataModule, TokenizerSpec
from bert_exp.data.corpus.integrity import check_chunks
from bert_exp.data.corpus.preparation import PrepareSettings, plan_groups
from bert_exp.data.corpus.storage import Location, PreparedDataError
from bert_exp.errors import UserError
from helpers import REPO, run_cli


def inaugural(data_dir, cache, **prepare):
    return PretrainingDataModule(files=[str(data_dir / "corpus" / "inaugural" / "*.txt")],
                                 tokenizer=TokenizerSpec(vocab_size=2000), cache_dir=str(cache),
                                 loader=LoaderSettings(batch_size=8), instances=InstanceSettings(val_fraction=0.1),
                                 prepare=PrepareSettings(**prepare))


def test_groups_are_whole_files_in_order_of_about_the_size(tmp_path):
    sizes = [30, 30, 30, 70, 10, 5]  # kB; a compressed file counts four times its size
    files = []
    for k, size in enumerate(sizes):
        files.append(tmp_path / f"f{k}.txt")
        files[-1].write_bytes(b"x" * size * 1024)
    groups = plan_groups(files, "64KB")
    assert [[Path(f).name for f in g] for g in groups] == [["f0.txt", "f1.txt", "f2.txt"], ["f3.txt", "f4.txt", "f5.txt"]]
    assert plan_groups(files, "1MB") == [[str(f) for f in files]]  # a small corpus is one group


def test_a_missing_or_damaged_chunk_is_one_line_naming_it(data_dir, tmp_path):
    dm = inaugural(data_dir, tmp_path / "cache")
    dm.prepare_data()
    location = dm.prepared_location
    train = Path(location.join("train"))
    chunks = sorted(train.glob("*.bin"))
    data = chunks[0].read_bytes()
    chunks[0].write_bytes(data[:-10])
    with pytest.raises(PreparedDataError, match=rf"{chunks[0]}: {len(data) - 10} bytes where the index says {len(data)}"):
        check_chunks(location)
    chunks[0].unlink()
    with pytest.raises(PreparedDataError, match=rf"{chunks[0]}: missing \(delete {location} to prepare"):
        inaugural(data_dir, tmp_path / "cache").setup("fit")
    (train / "index.json").write_text("{not json")
    with pytest.raises(UserError, match=rf"{train / 'index.json'}: not a litdata index"):
        check_chunks(location)
    # through the command line (the settings above, so the same prepared data): one line, exit code 2
    run_dir = tmp_path / "run"
    result = run_cli(["+experiment=pretrain_tiny", "data.files=[${paths.data_dir}/corpus/inaugural/*.txt]",
                      "data.tokenizer.vocab_size=2000", "data.instances.val_fraction=0.1",
                      "data.instances.max_seq_length=128", "trainer.max_steps=1",
                      "data.prepare.evaluation_sets=null", f"hydra.run.dir={run_dir}"],
                     env={"BERT_EXP_CACHE": str(tmp_path / "cache"), "BERT_EXP_DATA": str(data_dir)})
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert f"error: {train / 'index.json'}: not a litdata index" in result.stderr


PREPARE = """
import sys
from bert_exp.data import InstanceSettings, PretrainingDataModule, TokenizerSpec
from bert_exp.data.corpus.preparation import PrepareSettings
dm = PretrainingDataModule(files=sys.argv[2:], tokenizer=TokenizerSpec(vocab_size=3000), cache_dir=sys.argv[1],
                           instances=InstanceSettings(doc_boundary="blank_line"),
                           prepare=PrepareSettings(num_workers=1, group_bytes="4MB"))
dm.prepare_data()
print(dm.prepared_location)
"""


def marked_processes(mark: str) -> list[int]:
    """The live processes whose environment holds ``mark`` (whatever became of their parent)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mark.encode() in (entry / "environ").read_bytes():
                    status = (entry / "status").read_text()
                    if "\nState:\tZ" not in status:  # a zombie is gone, only not yet reaped
                        found.append(int(entry.name))
            except OSError:
                pass
    return found


def test_a_preparation_killed_half_way_leaves_nothing_and_the_next_finishes_it(data_dir, tmp_path):
    """SIGKILL to the launching process alone (as the OOM killer or a scheduler sends it): its worker
    processes end with it, and remove the half-built dataset and their scratch directories."""
    cache, tmp = tmp_path / "cache", tmp_path / "tmp"
    tmp.mkdir()
    files = [str(data_dir / "corpus" / "imdb" / "part00.txt.xz")]  # about 6 MB of text: two groups
    mark = f"bert_exp_test_{os.getpid()}_{time.time_ns()}"
    env = {**os.environ, "TMPDIR": str(tmp), "BERT_EXP_TEST_MARK": mark}
    started = subprocess.Popen([sys.executable, "-c", PREPARE, str(cache), *files], cwd=REPO, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline:  # until a group is written and the others under way
        if any(cache.glob("prepared/.*/groups/val-*.json")):
            break
        assert started.poll() is None, started.stderr.read()[-3000:]
        time.sleep(0.1)
    else:
        pytest.fail("the preparation never got half-way")
    assert len(marked_processes(mark)) >= 2  # the launcher and its worker(s)
    started.kill()
    started.wait()
    deadline = time.time() + 30
    while (marked_processes(mark) or list((cache / "prepared").iterdir())) and time.time() < deadline:
        time.sleep(0.2)
    assert marked_processes(mark) == []  # no worker left running
    prepared = cache / "prepared"
    assert list(prepared.iterdir()) == [] and list(tmp.iterdir()) == []  # no temporary directory left
    again = subprocess.run([sys.executable, "-c", PREPARE, str(cache), *files], cwd=REPO, capture_output=True,
                           text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    location = Path(again.stdout.strip().splitlines()[-1])
    meta = json.loads((location / "meta.json").read_text())
    assert meta["splits"]["train"]["instances"] > 10_000
    check_chunks(Location(str(location)))
    assert [p.name for p in prepared.iterdir()] == [location.name]


def test_prepared_data_in_an_object_store_is_streamed_like_a_directory(data_dir, tmp_path, s3_server):
    import boto3

    dm = inaugural(data_dir, tmp_path / "cache", dir=s3_server)
    assert dm.prepare_settings.shared(dm.prepared_root)  # the nodes share an object store, and its preparation
    dm.prepare_data()
    location = dm.prepared_location
    assert location.url.startswith("s3://corpora/prepared/")
    keys = [o["Key"] for o in boto3.session.Session().client("s3").list_objects_v2(Bucket="corpora")["Contents"]]
    assert any(k.endswith("train/index.json") for k in keys) and any(k.endswith("meta.json") for k in keys)
    assert not (tmp_path / "cache" / "prepared").exists()
    local = inaugural(data_dir, tmp_path / "local")  # the same data in a directory, for comparison
    local.setup("fit")
    dm.setup("fit")
    assert dm.meta["splits"] == local.meta["splits"]
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape[0] == 8 and torch.all(batch["input_ids"][:, 0] == dm.special_ids.cls)
    same = [next(iter(m.val_dataloader())) for m in (dm, local)]
    assert torch.equal(same[0]["input_ids"], same[1]["input_ids"])  # the same instances, the same masks
    # a damaged store is named as a directory is
    client = boto3.session.Session().client("s3")
    chunk = next(k for k in keys if k.endswith(".bin") and "/train/" in k)
    client.delete_object(Bucket="corpora", Key=chunk)
    with pytest.raises(PreparedDataError, match=rf"s3://corpora/{chunk}: missing"):
        check_chunks(location)
    assert np.all(np.isfinite(batch["masked_lm_labels"].numpy()))


def test_a_document_sharing_a_paragraph_with_an_evaluation_set_is_named(data_dir, tmp_path, caplog):
    """The data report counts the pre-training documents that hold a SQuAD context (the suite scores SQuAD
    on them), and a warning names one; a quoted phrase does not count, nor does the shared Wikipedia copy."""
    import lzma
    import logging

    squad = data_dir / "squad" / "dev-v1.1.json"
    context = json.loads(squad.read_text())["data"][40]["paragraphs"][3]["context"]
    with lzma.open(data_dir / "corpus" / "wikipedia" / "part03.txt.xz", "rt", encoding="utf-8") as f:
        articles = f.read(600_000).split("\n\n")[:-1]
    quoted = " ".join(context.split()[:12])  # one run of 12 words: a phrase, not a paragraph
    articles[5] += "\n" + context[: len(context) // 2]
    articles[9] += f' As a source put it, "{quoted}".'
    corpus = tmp_path / "articles.txt"
    corpus.write_text("\n\n".join(articles), encoding="utf-8")
    dm = PretrainingDataModule(files=[str(corpus)], tokenizer=TokenizerSpec(vocab_size=2000), cache_dir=str(tmp_path),
                               instances=InstanceSettings(doc_boundary="blank_line"),
                               prepare=PrepareSettings(evaluation_sets=[str(squad), str(tmp_path / "absent.json")]))
    with caplog.at_level(logging.WARNING, logger="bert_exp.data"):
        dm.prepare_data()
    shared = dm.data_report["evaluation_overlap"]
    assert shared["checked_against"] == [str(squad)] and shared["documents"] == 1
    assert shared["examples"][0].startswith(f"{corpus}: {' '.join(articles[5].split()[:8])}")
    assert any("share a paragraph with the evaluation sets" in r.getMessage() for r in caplog.records)
