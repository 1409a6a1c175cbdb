"""A classification data set of one's own, through the CLI: SST-2's rows written as a quoted CSV, as JSON
Lines and as Parquet, labels spelt True/False, fine-tune all-MiniLM-L6-v2 with data=text_classification
(run_glue's column names) and are scored again by python -m bert_exp.score (the formats row by row:
tests/data/test_tables.py)."""

import csv
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bert_exp.data.tasks.glue import read_examples
from helpers import run_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def env(data_dir, cache_dir):
    return {"BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(cache_dir)}


def write(path, rows):
    texts, labels = [t for t, _ in rows], [bool(label) for _, label in rows]
    if path.suffix == ".csv":
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f, quoting=csv.QUOTE_ALL)
            writer.writerow(["sentence", "label"])
            writer.writerows(zip(texts, map(str, labels)))
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps({"sentence": t, "label": label}) + "\n" for t, label in zip(texts, labels)))
    else:
        pq.write_table(pa.table({"sentence": texts, "label": labels}), path)
    return path


def test_own_rows_with_true_false_labels_fine_tune_and_score(env, data_dir, tmp_path):
    """Training from the CSV; GLUE's dev rows as JSON Lines (monitored) and as Parquet, two validation sets
    (each file's format is its suffix's)."""
    sst2 = data_dir / "glue" / "SST-2"
    rows = [(e.texts[0], e.label) for e in read_examples(sst2 / "train.tsv", ["sentence"], "label", 2, header=True)]
    dev_rows = [(e.texts[0], e.label) for e in read_examples(sst2 / "dev.tsv", ["sentence"], "label", 2, header=True)]
    train = write(tmp_path / "train.csv", rows[:64])
    dev, again = write(tmp_path / "dev.jsonl", dev_rows[:32]), write(tmp_path / "dev.parquet", dev_rows[:32])
    assert "," in "".join(t for t, _ in rows[:64])  # quoted fields are read as fields
    run_dir = tmp_path / "run"
    done = run_cli(["+experiment=cola_minilm", "data=text_classification", f"data.train_file={train}",
                    f"data.val_files.dev={dev}", f"+data.val_files.parquet={again}", "+data.label_map={False:0,True:1}",
                    "trainer.max_steps=2", "trainer.val_check_interval=2", "trainer.check_val_every_n_epoch=null",
                    "global_batch_size=16", "+trainer.num_sanity_val_steps=0", "precision=auto", "logger=csv",
                    "callbacks.last_checkpoint.keep_after_finish=false", f"hydra.run.dir={run_dir}"], env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "finished" and record["global_step"] == 2
    metrics = record["metrics"]
    assert metrics["val/dev/acc"] == metrics["val/parquet/acc"] and 0.0 <= metrics["val/dev/acc"] <= 1.0
    assert -1.0 <= metrics["val/mcc"] <= 1.0
    scored = run_cli([str(run_dir)], env=env, module="bert_exp.score")
    assert scored.returncode == 0, scored.stderr[-3000:]
    assert f"val/mcc = {metrics['val/mcc']:.4f}" in scored.stdout


@pytest.mark.parametrize("overrides, message", [
    ([], "error: data.train_file: give a file (or a datasets id for every set: data.hub=OWNER/NAME)"),
    (["data.train_file=x.csv", "data.val_files.dev=y.csv", "data.windows={aggregate:vote}"],
     "error: data.windows.aggregate='vote': expected mean, max, first"),
])
def test_a_data_setting_the_module_refuses_is_one_line_before_any_run(env, tmp_path, overrides, message):
    done = run_cli(["+experiment=cola_minilm", "data=text_classification", *overrides,
                    f"hydra.run.dir={tmp_path / 'run'}"], env=env)
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1] == message, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and not (tmp_path / "run").exists()
