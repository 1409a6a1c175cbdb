"""Corpora where users keep them: Parquet / JSON Lines / Arrow files with a text column, a ``datasets``
corpus (streamed, staged as Parquet shards), and s3:// objects. Each goes through the same preparation:
the inaugural addresses as text files, as Parquet rows and as a streamed dataset are the same prepared
data (the same vocabulary, chunks and identity)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bert_exp.data import InstanceSettings, LoaderSettings, PretrainingDataModule, TokenizerSpec
from bert_exp.data.corpus.files import CorpusError
from bert_exp.data.corpus.preparation import PrepareSettings
from bert_exp.data.corpus.sources import DatasetSource, stage_dataset
from bert_exp.data.corpus.text import iter_file_documents, iter_input_lines, read_text
from hub_server import LocalHub


def addresses(data_dir) -> list[tuple[str, str]]:
    files = sorted((data_dir / "corpus" / "inaugural").glob("*.txt"))
    return [(p.stem, read_text(p)[0]) for p in files]  # as the reader decodes them (a few are Latin-1)


def module(files, cache) -> PretrainingDataModule:
    # one group (group_bytes above the corpus): a table file is one group, as one text file is
    return PretrainingDataModule(files=files, tokenizer=TokenizerSpec(vocab_size=2000), cache_dir=str(cache),
                                 loader=LoaderSettings(batch_size=8), instances=InstanceSettings(val_fraction=0.1),
                                 prepare=PrepareSettings(group_bytes="64MB"))


def test_table_files_give_one_document_a_row(tmp_path):
    rows = ["First paragraph. Two sentences.\n\nSecond paragraph.", None, "  ", "Another row.\r\nSame doc."]
    pq.write_table(pa.table({"id": [1, 2, 3, 4], "body": rows}), tmp_path / "t.parquet")
    with open(tmp_path / "t.jsonl", "w") as f:
        for i, text in enumerate(rows):
            f.write(json.dumps({"id": i, "body": text}) + "\n")
    with pa.OSFile(str(tmp_path / "t.arrow"), "wb") as sink, pa.ipc.new_stream(sink, pa.schema([("body", pa.string())])) as w:
        w.write_table(pa.table({"body": rows}))  # the IPC stream format that datasets writes
    expected = [rows[0], "Another row.\nSame doc."]
    for name in ("t.parquet", "t.jsonl", "t.arrow"):
        assert list(iter_file_documents(tmp_path / name, doc_boundary="blank_line", column="body")) == expected, name
        assert list(iter_input_lines(tmp_path / name, column="body")) == [
            "First paragraph. Two sentences.", "", "Second paragraph.", "", "Another row.", "Same doc.", ""]
    with pytest.raises(CorpusError, match=r"t\.parquet: no column 'text' \(columns: id, body\); name the text column"):
        list(iter_file_documents(tmp_path / "t.parquet"))
    with pytest.raises(CorpusError, match=r"t\.jsonl:1: no key 'text'"):
        list(iter_file_documents(tmp_path / "t.jsonl"))
    (tmp_path / "bad.jsonl").write_text('{"text": "fine"}\n{"text": oops}\n')
    with pytest.raises(CorpusError, match=r"bad\.jsonl:2: not a JSON object"):
        list(iter_file_documents(tmp_path / "bad.jsonl"))


def test_text_parquet_jsonl_and_a_streamed_dataset_prepare_the_same_data(data_dir, tmp_path):
    """The addresses as text files (a document each), as one Parquet file and as a JSON Lines file (a row
    each, the text in a column named as the user's), and as a ``datasets`` corpus streamed from a folder of
    two Parquet shards: one vocabulary, the same chunks, one identity."""
    docs = addresses(data_dir)
    names, texts = [n for n, _ in docs], [t for _, t in docs]
    pq.write_table(pa.table({"title": names, "content": texts}), tmp_path / "addresses.parquet")
    with open(tmp_path / "addresses.jsonl", "w") as f:
        for name, text in docs:
            f.write(json.dumps({"title": name, "content": text}) + "\n")
    folder = tmp_path / "hub_like"
    folder.mkdir()
    half = len(docs) // 2
    pq.write_table(pa.table({"text": texts[:half]}), folder / "train-00000-of-00002.parquet")
    pq.write_table(pa.table({"text": texts[half:]}), folder / "train-00001-of-00002.parquet")

    text = module([str(data_dir / "corpus" / "inaugural" / "*.txt")], tmp_path / "c1")
    parquet = module([{"path": str(tmp_path / "addresses.parquet"), "text_column": "content"}], tmp_path / "c2")
    jsonl = module([{"path": str(tmp_path / "addresses.jsonl"), "text_column": "content"}], tmp_path / "c3")
    streamed = module([{"dataset": str(folder), "split": "train"}], tmp_path / "c4")
    for dm in (text, parquet, jsonl, streamed):
        dm.setup("fit")
    assert parquet.vocabulary_sha256 == text.vocabulary_sha256 == jsonl.vocabulary_sha256 == streamed.vocabulary_sha256
    for other in (parquet, jsonl, streamed):
        assert other.meta["identity"] == text.meta["identity"]
        assert other.meta["splits"]["train"]["instances"] == text.meta["splits"]["train"]["instances"] > 100
    # the key holds the files' sha256 and the column, not their paths; the staged shards are Parquet files of the text
    assert parquet.prepared_key["inputs"] == [{"sha256": parquet.file_sha256[0], "text_column": "content"}]
    assert "text_columns" not in parquet.prepared_key["instances"] and "text_column" not in str(text.prepared_key)
    staged = streamed.files
    assert [p.name for p in staged] == ["shard-00000.parquet", "shard-00001.parquet"]
    assert pq.read_table(staged[0]).column_names == ["text"] and staged[0].is_relative_to(tmp_path / "c4" / "inputs")


def test_a_dataset_is_staged_once_and_again_when_its_files_change(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    pq.write_table(pa.table({"text": ["One. Two.", "Three."], "n": [1, 2]}), folder / "train.parquet")
    first = stage_dataset(DatasetSource(str(folder)), tmp_path / "staged")
    assert pq.read_table(first[0]).column("text").to_pylist() == ["One. Two.", "Three."]
    mtime = first[0].stat().st_mtime_ns
    assert stage_dataset(DatasetSource(str(folder)), tmp_path / "staged") == first
    assert first[0].stat().st_mtime_ns == mtime  # found staged, not streamed again
    pq.write_table(pa.table({"text": ["Changed."], "n": [1]}), folder / "train.parquet")
    again = stage_dataset(DatasetSource(str(folder)), tmp_path / "staged")
    assert again != first and pq.read_table(again[0]).column("text").to_pylist() == ["Changed."]
    with pytest.raises(CorpusError, match=r"datasets:.*\[train\]: no column 'body' \(columns: text, n\)"):
        stage_dataset(DatasetSource(str(folder), text_column="body"), tmp_path / "staged")
    with pytest.raises(CorpusError, match=r"datasets:.*\[nope\]: cannot be opened with datasets.load_dataset"):
        stage_dataset(DatasetSource(str(folder), split="nope"), tmp_path / "staged")
    assert not list((tmp_path / "staged").glob(".*partial"))  # nothing half-written left


# Each call stages a list of (source, root) in a fresh interpreter, as a run does: the Hub's address and
# offline mode are read from the environment when huggingface_hub and datasets are imported.
STAGE = """
import json, sys
from pathlib import Path
from bert_exp.data.corpus.files import CorpusError
from bert_exp.data.corpus.sources import DatasetSource, stage_dataset
results = []
for source, root in json.loads(sys.argv[1]):
    try:
        results.append([str(p) for p in stage_dataset(DatasetSource(**source), Path(root))])
    except CorpusError as err:
        results.append(str(err))
print(json.dumps(results))
"""


def stage(items, env) -> tuple[list, str]:
    done = subprocess.run([sys.executable, "-c", STAGE, json.dumps(items)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


def shard_rows(paths) -> list[str]:
    return [t for p in paths for t in pq.read_table(p).column("text").to_pylist()]


def test_a_hub_dataset_is_staged_per_commit_and_read_offline_from_its_staged_copy(data_dir, tmp_path):
    """``{dataset: OWNER/NAME}`` on the Hub (a local server that answers as the Hub does for datasets): the
    revision is resolved to a commit, the rows streamed from that commit; staged once per commit, anew
    after a push; offline or with the Hub gone, the newest staged copy, said so; a missing dataset, a
    missing revision, a gated dataset, a local folder that does not exist, and offline with nothing staged
    are one line each."""
    texts = [t for _, t in addresses(data_dir)]
    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    pq.write_table(pa.table({"content": texts[:30]}), repo / "data" / "train-00000-of-00002.parquet")
    pq.write_table(pa.table({"content": texts[30:]}), repo / "data" / "train-00001-of-00002.parquet")
    source = {"dataset": "acme/addresses", "text_column": "content"}
    root = str(tmp_path / "staged")
    with LocalHub({}, datasets={"acme/addresses": repo}, gated={"acme/gated"}) as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "0",
               "HF_DATASETS_OFFLINE": "0"}
        first_commit = hub.dataset_commit("acme/addresses")
        (first, again, nothing, no_revision, gated, typo), _ = stage(
            [[source, root], [source, root], [{**source, "dataset": "acme/nothing"}, root],
             [{**source, "revision": "v9"}, root], [{**source, "dataset": "acme/gated"}, root],
             [{**source, "dataset": str(tmp_path / "no-such-folder")}, root]], env)
        assert shard_rows(first) == texts and again == first  # the second found it staged
        record = json.loads((Path(first[0]).parent / "staged.json").read_text())
        assert record["commit"] == first_commit and record["rows"] == len(texts)
        streamed = [r for r in hub.requests if r.startswith("GET /datasets/acme/addresses/resolve/")]
        assert streamed and all(f"/resolve/{first_commit}/" in r for r in streamed)  # from the commit, not main
        assert nothing == f"data.files: datasets:acme/nothing[train]: no such dataset on {hub.url} (or it is " \
                          "private: log in with `hf auth login` or set HF_TOKEN); a local folder must exist"
        assert no_revision.endswith("the dataset has no revision 'v9' (a branch, tag or commit)")
        assert gated == ("data.files: datasets:acme/gated[train]: the Hub refuses access (a gated or private "
                         "dataset): accept its terms on its page and log in with `hf auth login` or set HF_TOKEN")
        assert typo.endswith("no-such-folder[train]: no such local folder, and not a Hub dataset id (OWNER/NAME)")

        # a push to main: a new commit, staged anew beside the first
        pq.write_table(pa.table({"content": texts[30:40]}), repo / "data" / "train-00001-of-00002.parquet")
        (pushed,), _ = stage([[source, root]], env)
        assert pushed != first and shard_rows(pushed) == texts[:40]
        assert json.loads((Path(pushed[0]).parent / "staged.json").read_text())["commit"] == hub.dataset_commit(
            "acme/addresses") != first_commit

    # the Hub is gone, then offline mode: the newest staged copy, with a warning; nothing staged: one line
    (gone,), stderr = stage([[source, root]], env)
    assert gone == pushed and "the Hub cannot be reached" in stderr and "using the copy staged from commit" in stderr
    offline_env = {**{k: v for k, v in env.items() if k != "HF_DATASETS_OFFLINE"}, "HF_HUB_OFFLINE": "1"}
    (offline, fresh), stderr = stage([[source, root], [source, str(tmp_path / "empty")]], offline_env)
    assert offline == pushed and "offline mode is set" in stderr
    assert fresh == (f"data.files: datasets:acme/addresses[train]: the Hub cannot be reached (offline mode is set) "
                     f"and no copy is staged in {tmp_path / 'empty'}: run once with the Hub reachable")


def test_s3_inputs_are_staged_once_per_version(s3_server, data_dir, tmp_path):
    import boto3

    client = boto3.session.Session().client("s3")
    files = sorted((data_dir / "corpus" / "inaugural").glob("19*.txt"))
    for path in files:
        client.upload_file(str(path), "corpora", f"texts/inaugural/{path.name}")
    client.put_object(Bucket="corpora", Key="texts/inaugural/README.md", Body=b"not corpus text")
    local = module([str(data_dir / "corpus" / "inaugural" / "19*.txt")], tmp_path / "local")
    remote = module(["s3://corpora/texts/inaugural/"], tmp_path / "remote")
    assert [p.name for p in remote.files] == [p.name for p in files]  # README.md is not corpus text
    local.setup("fit")
    remote.setup("fit")
    assert remote.meta["identity"] == local.meta["identity"]
    globbed = module(["s3://corpora/texts/inaugural/190*.txt"], tmp_path / "remote")
    assert [p.name for p in globbed.files] == [p.name for p in files if p.name.startswith("190")]
    staged = remote.files[0]
    mtime = staged.stat().st_mtime_ns
    assert module(["s3://corpora/texts/inaugural/"], tmp_path / "remote").files[0].stat().st_mtime_ns == mtime
    client.put_object(Bucket="corpora", Key=f"texts/inaugural/{staged.name}", Body=b"A new version. Of it.")
    assert module(["s3://corpora/texts/inaugural/"], tmp_path / "remote").files[0].read_bytes() == b"A new version. Of it."
    for url, message in [("s3://corpora/texts/missing.txt", "'s3://corpora/texts/missing.txt' does not exist"),
                         ("s3://corpora/nothing/*.txt", "matches no objects"),
                         ("s3://no-bucket/x.txt", "no bucket named 'no-bucket'")]:
        with pytest.raises(CorpusError, match=message):
            module([url], tmp_path / "remote").files  # noqa: B018
    assert not list(Path(tmp_path / "remote").rglob("*.partial"))


@pytest.mark.slow
def test_a_pretraining_run_reads_all_four_from_the_command_line(s3_server, data_dir, cache_dir, tmp_path):
    """What a user types: one data.files list naming a Parquet file by its column, a datasets corpus in a
    local folder, a dataset on the Hub by its id, and an s3:// prefix."""
    import boto3

    from helpers import run_cli

    docs = addresses(data_dir)
    pq.write_table(pa.table({"content": [t for _, t in docs[:20]]}), tmp_path / "early.parquet")
    (tmp_path / "hub_like").mkdir()
    with open(tmp_path / "hub_like" / "train.jsonl", "w") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for _, t in docs[20:30])
    (tmp_path / "repo").mkdir()
    pq.write_table(pa.table({"text": [t for _, t in docs[30:40]]}), tmp_path / "repo" / "train.parquet")
    client = boto3.session.Session().client("s3")
    for i, (_, text) in enumerate(docs[40:]):
        client.put_object(Bucket="corpora", Key=f"late/{i:02d}.txt", Body=text.encode())
    files = (f"data.files=[{{path: {tmp_path / 'early.parquet'}, text_column: content}}, "
             f"{{dataset: {tmp_path / 'hub_like'}, split: train}}, {{dataset: acme/middle}}, s3://corpora/late/]")
    with LocalHub({}, datasets={"acme/middle": tmp_path / "repo"}) as hub:
        result = run_cli(["+experiment=pretrain_tiny", files, "data.tokenizer.vocab_size=2000", "trainer.max_steps=4",
                          "trainer.val_check_interval=4", "trainer.limit_val_batches=1", "logger=csv",
                          f"hydra.run.dir={tmp_path / 'run'}"],
                         env={"BERT_EXP_CACHE": str(cache_dir), "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0",
                              "HF_HOME": str(tmp_path / "hf_home")})
    assert result.returncode == 0, result.stderr[-3000:]
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["status"] == "finished" and info["global_step"] == 4
    # the inputs hashed as the files read: the Parquet file, the two staged shards, the staged s3 objects
    read = sorted(info["data_checksums"])
    assert len(read) == 3 + len(docs[40:]) and str(tmp_path / "early.parquet") in read
    assert sum("/inputs/datasets/" in p for p in read) == 2 and sum("/inputs/s3/corpora/late/" in p for p in read) > 1
    assert sum("/inputs/datasets/acme--middle-" in p for p in read) == 1
