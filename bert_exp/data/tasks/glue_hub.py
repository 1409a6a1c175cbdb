"""GLUE, or any classification data set, through ``datasets`` (``data.hub=nyu-mll/glue``; another id with
``data.hub_config``'s config name, text columns and splits), as ``run_glue.py``'s ``--dataset_name nyu-mll/glue
--dataset_config_name mrpc`` reads it: each split the task needs (``data.hub_config.splits``: a set name ->
``SPLIT`` or ``CONFIG:SPLIT``, MNLI's AX being the ``ax`` config) is streamed once per commit of the dataset
into a TSV under ``$BERT_EXP_CACHE/inputs/datasets/`` (header: the text columns, ``label``, ``idx``), which
the TSV reader then reads like GLUE's own files. A revision (``data.hub=nyu-mll/glue@REV``) is resolved to a
commit first; offline, the newest staged copy is used, and said so. Class labels are written as the
dataset names them when ``data.label_map`` maps names (MNLI's, RTE's, QNLI's), else as their numbers."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

from ..hashing import config_key
from ..hub_datasets import HubDatasetError, HubSplit, hub_commit, local_version, lock, open_streaming
from ..loading import DataFileError

log = logging.getLogger("bert_exp.data")

FIELD_SAFE = str.maketrans({"\t": " ", "\n": " ", "\r": " "})  # a TSV field holds no tab nor line break


def parse_hub(spec: str) -> tuple[str, str | None]:
    """``OWNER/NAME[@REVISION]`` (or a local folder) -> (dataset, revision)."""
    dataset, _, revision = str(spec).partition("@")
    return dataset, revision or None


def _config_and_split(config: str, value: str) -> tuple[str, str]:
    name, sep, split = value.partition(":")
    return (name, split) if sep else (config, value)


def _rows(source: HubSplit, commit: str | None, columns: list[str], label_names: bool, test: bool = False):
    """(header, rows) of one split: its text columns, its label (names or numbers; none in a test split:
    their labels are -1, except MRPC's, whose test split carries the MSRP file's public labels, dropped as
    transformers' run_glue drops them) and its idx (GLUE's, else the row's position)."""
    dataset = open_streaming(source, commit, "data.hub")
    present = dataset.column_names or []
    missing = [c for c in columns if c not in present]
    if missing:
        raise DataFileError(f"data.hub: {source}: no column {', '.join(map(repr, missing))} (it has "
                            f"{', '.join(present)}): set data.hub_config.text_columns")
    feature = (dataset.features or {}).get("label")
    first = next(iter(dataset.take(1)), None)
    labelled = not test and "label" in present and first is not None and first["label"] != -1
    header = [*columns, *(["label"] if labelled else []), "idx"]

    indexed = "idx" in present  # GLUE's row ids; another data set's rows are numbered in order

    def rows():
        for position, row in enumerate(dataset):
            label = []
            if labelled:
                value = row["label"]
                label = [feature.int2str(value) if label_names and hasattr(feature, "int2str") else value]
            yield [*(str(row[c]).translate(FIELD_SAFE) for c in columns), *label, row["idx"] if indexed else position]

    return header, rows()


def stage_glue(spec: str, hub_config: dict, root: Path, label_names: bool, test_sets=()) -> dict[str, Path]:
    """Set name -> the staged TSV of its split, staged once per commit (per change of a local folder); the
    sets named in ``test_sets`` without their labels."""
    dataset, revision = parse_hub(spec)
    name, columns = hub_config["name"], list(hub_config["text_columns"])
    splits = {set_name: _config_and_split(name, value) for set_name, value in hub_config["splits"].items()}
    probe = HubSplit(dataset, name, revision=revision)
    try:
        local = local_version(dataset)
        commit, unreachable = (None, "") if local is not None else hub_commit(probe, "data.hub")
    except HubDatasetError as err:
        raise DataFileError(str(err)) from None
    what = {"dataset": dataset, "revision": revision, "splits": splits, "columns": columns, "names": label_names,
            "unlabelled": sorted(set(test_sets) & set(splits))}
    prefix = dataset.strip("/").replace("/", "--").replace("~", "") + f"-{name}"
    if local is None and commit is None:
        staged = _newest(root, prefix, what)
        if staged is None:
            raise DataFileError(f"data.hub: {dataset} ({name}): the Hub cannot be reached ({unreachable}) and no copy "
                                f"is staged in {root}: run once with the Hub reachable")
        log.warning("data.hub: %s (%s): the Hub cannot be reached (%s): using the copy staged from commit %s",
                    dataset, name, unreachable, json.loads((staged / "staged.json").read_text()).get("commit"))
        return {s: staged / f"{s}.tsv" for s in splits}
    target = root / f"{prefix}-{config_key(what, local if commit is None else commit)[:16]}"
    if not (target / "staged.json").is_file():
        with lock(target):
            if not (target / "staged.json").is_file():
                _write(target, dataset, splits, columns, label_names, commit, what)
    return {s: target / f"{s}.tsv" for s in splits}


def _write(target: Path, dataset: str, splits: dict, columns: list[str], label_names: bool, commit, what) -> None:
    building = target.with_name(f".{target.name}.{os.getpid()}.partial")
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    counts = {}
    try:
        for set_name, (config, split) in splits.items():
            source = HubSplit(dataset, config, split, what["revision"])
            try:
                header, rows = _rows(source, commit, columns, label_names, set_name in what["unlabelled"])
                with open(building / f"{set_name}.tsv", "w", encoding="utf-8", newline="") as f:
                    f.write("\t".join(header) + "\n")
                    counts[set_name] = 0
                    for row in rows:
                        f.write("\t".join(map(str, row)) + "\n")
                        counts[set_name] += 1
            except HubDatasetError as err:
                raise DataFileError(str(err)) from None
        (building / "staged.json").write_text(json.dumps({**what, "commit": commit, "rows": counts}, indent=1))
        shutil.rmtree(target, ignore_errors=True)
        os.replace(building, target)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    log.info("staged %s%s: %s", dataset, f" at commit {commit}" if commit else "",
             ", ".join(f"{k} {v:,} rows" for k, v in counts.items()))


def _newest(root: Path, prefix: str, what: dict) -> Path | None:
    copies = []
    for done in root.glob(f"{prefix}-*/staged.json"):
        record = json.loads(done.read_text())
        if {k: record.get(k) for k in what} == json.loads(json.dumps(what)):
            copies.append((done.stat().st_mtime_ns, done.parent))
    return max(copies)[1] if copies else None
