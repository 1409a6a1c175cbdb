"""GLUE through ``datasets`` (``data.hub=nyu-mll/glue``) against a local stand-in for the Hub: RTE's rows at
hand as a parquet repository with GLUE's card; the splits staged once per commit as TSVs, labels by their
names through the preset's label map, the test split staged unlabelled with its ids (even where the Hub's
carries labels, as its MRPC does); offline, the staged copy."""

import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq

from bert_exp.data.tasks.glue import read_examples
from hub_server import LocalHub

CARD = """---
dataset_info:
- config_name: rte
  features:
  - name: sentence1
    dtype: string
  - name: sentence2
    dtype: string
  - name: label
    dtype:
      class_label:
        names:
          '0': entailment
          '1': not_entailment
  - name: idx
    dtype: int32
configs:
- config_name: rte
  data_files:
  - split: train
    path: rte/train-*
  - split: validation
    path: rte/validation-*
  - split: test
    path: rte/test-*
---
"""

STAGE = """
import json, sys
from bert_exp.data import GlueDataModule
from bert_exp.errors import UserError
for spec in json.loads(sys.argv[1]):
    try:
        module = GlueDataModule(**spec)
        module.setup()
        print("staged:", json.dumps({"train": module.train_file, "val": module.val_files, "test": module.test_files,
                                     "sizes": {k: len(v) for k, v in module.datasets.items()},
                                     "test_ids": [r.index for r in module.read_test("RTE")][:3] if module.test_files else []}))
    except UserError as err:
        print("staged:", json.dumps({"error": str(err)}))
"""


def rte_repository(data_dir, folder):
    rows = {name: read_examples(data_dir / "glue" / "RTE" / f"{name}.tsv", ["sentence1", "sentence2"], "label", 2,
                           header=True, label_map={"entailment": 0, "not_entailment": 1}) for name in ("train", "dev")}
    (folder / "rte").mkdir(parents=True)
    (folder / "README.md").write_text(CARD)
    for split, examples, labelled in [("train", rows["train"], True), ("validation", rows["dev"], True),
                                      ("test", rows["dev"][:20], True)]:  # labelled, as the Hub's MRPC test is
        pq.write_table(pa.table({"sentence1": [e.texts[0] for e in examples], "sentence2": [e.texts[1] for e in examples],
                                 "label": [e.label if labelled else -1 for e in examples],
                                 "idx": list(range(len(examples)))}), folder / "rte" / f"{split}-00000-of-00001.parquet")
    return rows


def stage(specs, env):
    """Each data module of ``specs`` set up in turn, in one new process (as runs on a machine are): what each
    staged or the error it gave, and the process's stderr."""
    import json

    done = subprocess.run([sys.executable, "-c", STAGE, json.dumps(specs)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads(line.removeprefix("staged: ")) for line in done.stdout.splitlines() if line.startswith("staged: ")]
    assert len(results) == len(specs), done.stdout[-3000:]
    return results, done.stderr


def test_glue_from_the_hub_staged_per_commit(data_dir, tmp_path):
    rows = rte_repository(data_dir, tmp_path / "repo")
    spec = {"train_file": "unused", "val_files": {"dev": "unused"}, "test_files": {"RTE": "unused"},
            "text_columns": ["sentence1", "sentence2"], "label_column": "label", "header": True,
            "label_map": {"entailment": 0, "not_entailment": 1}, "hub": "nyu-mll/glue",
            "hub_config": {"name": "rte", "text_columns": ["sentence1", "sentence2"],
                           "splits": {"train": "train", "dev": "validation", "RTE": "test"}},
            "cache_dir": str(tmp_path / "cache"), "vocab_file": str(__import__("bert_exp.resources").resources.minilm_dir() / "vocab.txt")}
    with LocalHub({}, datasets={"nyu-mll/glue": tmp_path / "repo"}) as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0",
               "HF_DATASETS_OFFLINE": "0"}
        (first,), _ = stage([spec], env)
        assert "error" not in first, first
        assert first["sizes"] == {"train": len(rows["train"]), "dev": len(rows["dev"])}
        assert first["test_ids"] == ["0", "1", "2"]
        staged = read_examples(first["train"], ["sentence1", "sentence2"], "label", 2, header=True,
                          label_map={"entailment": 0, "not_entailment": 1})
        assert [(e.texts, e.label) for e in staged] == [(e.texts, e.label) for e in rows["train"]]
        assert open(first["train"]).readline() == "sentence1\tsentence2\tlabel\tidx\n"  # labels as names
        assert open(first["test"]["RTE"]).readline() == "sentence1\tsentence2\tidx\n"  # the test split: its labels dropped
        commit = hub.dataset_commit("nyu-mll/glue")
        assert f"-{commit}" not in first["train"] and "nyu-mll--glue-rte-" in first["train"]
        streamed = [r for r in hub.requests if "/resolve/" in r]
        assert streamed and all(f"/resolve/{commit}/" in r for r in streamed)  # read from the commit resolved

        before = len(hub.requests)  # another process: the staged copy, and two mistakes
        (again, missing, typo), _ = stage([spec, {**spec, "val_files": {"dev": "x", "other": "y"}},
                                           {**spec, "hub": "nyu-mll/glu"}], env)
        assert again["train"] == first["train"]
        assert not [r for r in hub.requests[before:] if "/resolve/" in r]  # staged: nothing streamed again
        assert missing["error"] == ("data.hub=nyu-mll/glue: data.hub_config.splits names no split for other "
                                    "(leave a set out: ~data.val_files.other)")
        assert typo["error"].startswith("data.hub: datasets:nyu-mll/glu/rte[train]: no such dataset on")

    offline = {**env, "HF_HUB_OFFLINE": "1"}
    (staged_copy, nothing), stderr = stage([spec, {**spec, "cache_dir": str(tmp_path / "empty")}], offline)
    assert staged_copy["train"] == first["train"] and "using the copy staged from commit" in stderr
    assert nothing["error"].startswith("data.hub: nyu-mll/glue (rte): the Hub cannot be reached (offline mode is set)")


REVIEWS_CARD = """---
dataset_info:
  features:
  - name: text
    dtype: string
  - name: label
    dtype:
      class_label:
        names:
          '0': neg
          '1': pos
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train-*
  - split: test
    path: data/test-*
---
"""


def test_a_classification_data_set_of_ones_own_from_the_hub(data_dir, tmp_path):
    """Not GLUE: a data set with text and label columns and no idx (SST-2's rows as an owner's repository),
    staged the same way, its rows numbered, its labels by their names through a label map."""
    rows = read_examples(data_dir / "glue" / "SST-2" / "dev.tsv", ["sentence"], "label", 2, header=True)
    folder = tmp_path / "repo"
    (folder / "data").mkdir(parents=True)
    (folder / "README.md").write_text(REVIEWS_CARD)
    for split, part in [("train", rows[:40]), ("test", rows[40:60])]:
        pq.write_table(pa.table({"text": [e.texts[0] for e in part], "label": [e.label for e in part]}),
                       folder / "data" / f"{split}-00000-of-00001.parquet")
    spec = {"train_file": "unused", "val_files": {"dev": "unused"}, "text_columns": None, "label_column": "label",
            "label_map": {"neg": 0, "pos": 1}, "hub": "someone/reviews",
            "hub_config": {"name": "default", "text_columns": ["text"], "splits": {"train": "train", "dev": "test"}},
            "cache_dir": str(tmp_path / "cache"), "vocab_file": str(__import__("bert_exp.resources").resources.minilm_dir() / "vocab.txt")}
    with LocalHub({}, datasets={"someone/reviews": folder}) as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0",
               "HF_DATASETS_OFFLINE": "0"}
        (staged,), _ = stage([spec], env)
    assert "error" not in staged, staged
    assert staged["sizes"] == {"train": 40, "dev": 20}
    assert open(staged["train"]).readline() == "text\tlabel\tidx\n"
    examples = read_examples(staged["val"]["dev"], ["text"], "label", 2, header=True, label_map={"neg": 0, "pos": 1},
                             index_columns=["idx"])
    assert [(e.texts, e.label, e.index) for e in examples] == [(e.texts, e.label, str(i)) for i, e in enumerate(rows[40:60])]
