"""The table reader every classification or regression data set goes through (bert_exp/data/tasks/tables.py):
TSV, CSV with quoted fields, JSON Lines and Parquet give the same examples; each bad row is named."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bert_exp.data.loading import DataFileError
from bert_exp.data.tasks.glue import GlueDataModule, read_examples
from bert_exp.data.tasks.tables import read_table

ROWS = [("A plain one.", True), ('She said "no, thanks", twice.', False), ("Two\nlines, one field.", True)]


def write_formats(directory, rows=ROWS):
    """The same rows as CSV (pandas' quoting), JSON Lines and Parquet, with True/False labels."""
    import csv

    paths = {"csv": directory / "rows.csv", "jsonl": directory / "rows.jsonl", "parquet": directory / "rows.parquet"}
    with open(paths["csv"], "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["sentence", "label"])
        writer.writerows([(text, str(label)) for text, label in rows])
    paths["jsonl"].write_text("".join(json.dumps({"sentence": t, "label": label}) + "\n" for t, label in rows))
    pq.write_table(pa.table({"sentence": [t for t, _ in rows], "label": [label for _, label in rows]}),
                   paths["parquet"])
    return paths


def test_csv_jsonl_and_parquet_give_the_same_examples(tmp_path):
    for kind, path in write_formats(tmp_path).items():
        examples = read_examples(path, None, "label", 2, header=True, label_map={"False": 0, "True": 1})
        assert [(e.texts, e.label) for e in examples] == [((t,), int(label)) for t, label in ROWS], kind


def test_csv_rows_are_numbered_by_the_line_they_start_on(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text('text,label\n"one\nfield",1\nsecond,0\n')
    table = read_table(path)
    assert table.columns == ["text", "label"]
    assert table.rows == [(f"{path}:2", ["one\nfield", "1"]), (f"{path}:4", ["second", "0"])]
    path.write_text('text,label\n"one\nfield",1\nsecond,0,extra\n')
    with pytest.raises(DataFileError, match=r"rows.csv:4: 3 comma-separated columns, the header \(line 1\) names 2"):
        read_examples(path, ["text"], "label", 2, header=True)


def test_run_glues_text_columns_are_the_default(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"idx": 0, "sentence1": "A.", "sentence2": "B.", "label": 1}) + "\n")
    assert read_examples(path, None, "label", 2)[0].texts == ("A.", "B.")
    path.write_text(json.dumps({"question": "A?", "label": 1}) + "\n")
    with pytest.raises(DataFileError, match=r"pairs.jsonl: name data.text_columns \(no sentence1/sentence2, sentence "
                                            r"or text column among 'question', 'label'\)"):
        read_examples(path, None, "label", 2)


@pytest.mark.parametrize("name, content, message", [
    ("bad.jsonl", '{"text": "A.", "label": 1}\n{"text": "B.", "label": \n', r"bad.jsonl:2: not valid JSON"),
    ("bad.jsonl", '{"text": "A.", "label": 1}\n["B.", 0]\n', r"bad.jsonl:2: a JSON Lines row is an object, found list"),
    ("bad.jsonl", '{"text": "A.", "label": 1}\n{"text": "B."}\n', r"bad.jsonl:2: no 'label' label"),
    ("bad.jsonl", '{"text": "A.", "label": 1}\n{"text": 7, "label": 0}\n', r"bad.jsonl:2: 'text' is 7, not text"),
    ("bad.jsonl", '{"text": "A.", "label": 1}\n{"text": "B.", "label": 2}\n', r"bad.jsonl:2: label '2' is not an integer"),
    ("bad.csv", 'text,label\n"A.,1\n', r"bad.csv:\d+: not CSV \("),
])
def test_each_bad_row_is_named(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(DataFileError, match=message):
        read_examples(path, ["text"], "label", 2, header=True)


def test_parquet_rows_are_named_by_their_number(tmp_path):
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"text": ["A.", None], "label": [0, 1]}), path)
    with pytest.raises(DataFileError, match=r"rows.parquet: row 2: 'text' is None, not text"):
        read_examples(path, ["text"], "label", 2)
    (tmp_path / "not.parquet").write_text("text,label\n")
    with pytest.raises(DataFileError, match=r"not.parquet: not a Parquet file pyarrow reads"):
        read_examples(tmp_path / "not.parquet", ["text"], "label", 2)


def test_a_format_named_in_the_config_overrides_the_suffix(tmp_path):
    path = tmp_path / "rows.txt"
    path.write_text('text,label\n"A, b.",1\n')
    assert read_examples(path, ["text"], "label", 2, header=True, format="csv")[0].texts == ("A, b.",)
    with pytest.raises(DataFileError, match=r"data.format='xls': expected one of tsv, csv, jsonl, parquet"):
        GlueDataModule(str(path), {"dev": str(path)}, ["text"], "label", format="xls")


def test_a_hold_out_id_list_may_be_a_csv(tmp_path):
    train = tmp_path / "train.csv"
    train.write_text("id,text,label\n7,A.,1\n8,B.,0\n9,C.,1\n")
    ids = tmp_path / "dev_ids.csv"
    ids.write_text("8\n")
    dm = GlueDataModule(str(train), {"dev": str(train)}, ["text"], "label", header=True,
                        hold_out={"name": "dev", "ids_file": str(ids), "id_columns": ["id"]})
    kept, held = dm.train_and_held_out()
    assert [e.texts for e in held] == [("B.",)] and len(kept) == 2


def test_other_suffixes_and_old_mac_line_ends_read_as_glues_tsv(tmp_path):
    """A suffix of no table format is TSV (SentEval's .txt, a .dat); a lone carriage return ends a line."""
    path = tmp_path / "rows.dat"
    path.write_bytes(b"text\tlabel\rA.\t1\rB.\t0\r")
    assert [(e.texts, e.label) for e in read_examples(path, ["text"], "label", 2, header=True)] == [(("A.",), 1), (("B.",), 0)]


def test_json_lines_columns_are_every_key_and_ids_must_be_present(tmp_path):
    from bert_exp.data.tasks.glue import header_row

    path = tmp_path / "rows.jsonl"
    path.write_text('{"idx": 0, "text": "A."}\n{"idx": 1, "text": "B.", "label": 1}\n{"text": "C."}\n')
    assert header_row(path) == ["idx", "text", "label"]  # a first row without a label does not hide it
    with pytest.raises(DataFileError, match=r"rows.jsonl:3: no 'idx'"):
        read_examples(path, ["text"], None, 2, index_columns=["idx"])
