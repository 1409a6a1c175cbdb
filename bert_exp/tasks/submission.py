"""Test-set predictions in GLUE's submission form: one ``<name>.tsv`` per test set of ``data.test_files``
(header ``index<TAB>prediction``, each row's id from the test file, the label spelt as the data's files
spell it: ``entailment``, ``not_entailment``, ``0``/``1``, a similarity score) and a zip of them, the
form gluebenchmark.com takes (the files at the zip's root)."""

from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path

from ..errors import UserError
from ..records import temp_directory

ZIP_NAME = "submission.zip"


def label_names(label_map: dict[str, int] | None) -> dict[int, str]:
    """Class index -> the label as the files spell it (the index itself without a map)."""
    return {index: name for name, index in (label_map or {}).items()}


def prediction_text(value: float, names: dict[int, str], regression: bool) -> str:
    if regression:
        return f"{value:.3f}"
    return names.get(int(value), str(int(value)))


def check_destination(out_dir: Path) -> None:
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise UserError(f"{out_dir}: exists and is not an empty directory; test predictions go to a new one")


def write_submission(trainer, module, datamodule, out_dir: Path, ckpt_path: str | None = None) -> list[Path]:
    """Predicts every test set (with the weights of ``ckpt_path`` when given) and writes the files, then
    the zip; all or nothing: they are written in a temporary directory renamed into place at the end."""
    out_dir = Path(out_dir)
    check_destination(out_dir)
    names = list(datamodule.test_files)
    read = {name: datamodule.test_loader(name) for name in names}  # every file checked before predicting
    outputs = trainer.predict(module, dataloaders=[loader for _, loader in read.values()], ckpt_path=ckpt_path)
    if len(names) == 1:
        outputs = [outputs]
    labels, regression = label_names(datamodule.label_map), datamodule.num_labels == 1
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(temp_directory(out_dir.parent, f".{out_dir.name}.partial-"))
    try:
        for name, (examples, _), batches in zip(names, read.values(), outputs):
            values = [float(v) for batch in batches for v in batch.tolist()]
            if len(values) != len(examples):
                raise RuntimeError(f"{name}: {len(values)} predictions for {len(examples)} rows")
            lines = ["index\tprediction"] + [f"{e.index}\t{prediction_text(v, labels, regression)}"
                                             for e, v in zip(examples, values)]
            (staging / f"{name}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        with zipfile.ZipFile(staging / ZIP_NAME, "w", zipfile.ZIP_DEFLATED) as archive:
            for name in names:
                archive.write(staging / f"{name}.tsv", f"{name}.tsv")
        if out_dir.exists():
            out_dir.rmdir()  # empty (checked above)
        staging.rename(out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return [out_dir / f"{name}.tsv" for name in names]


def zip_submissions(files: list[Path], target: Path) -> Path:
    """One zip of several runs' files (every GLUE task), each at the zip's root; a name twice is refused."""
    seen = {}
    for path in files:
        if path.name in seen:
            raise UserError(f"{path.name}: predicted by two runs ({seen[path.name]} and {path.parent})")
        seen[path.name] = path.parent
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in files:
                archive.write(path, path.name)
        partial.replace(target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return target

