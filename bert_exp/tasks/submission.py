"""Test-set predictions in GLUE's submission form: one ``<name>.tsv`` per test set of ``data.test_files``
(header ``index<TAB>prediction``, each row's id from the test file, the label spelt as the data's files
spell it: ``entailment``, ``not_entailment``, ``0``/``1``, a similarity score) and a zip of them, the
form gluebenchmark.com takes (the files at the zip's root).

A destination is claimed before any prediction is made (:class:`Destination`): new or empty, writable,
with room, and written by one process at a time; the files are written beside it and renamed into place
at the end, so a stopped or failed writer leaves nothing half-written, and what a killed one left is
removed by the next."""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from ..records import owned_name, remove_orphans, temp_directory
from .classification import row_predictions

ZIP_NAME = "submission.zip"
MIN_FREE_BYTES = 1 << 20


@dataclass(frozen=True)
class GlueTestSet:
    rows: int  # the rows of GLUE's test file (HuggingFace's glue dataset infos)
    labels: tuple[str, ...] | None  # the predictions as the server reads them; None: a score from 0 to 5


_NLI3, _NLI2, _BINARY = ("entailment", "neutral", "contradiction"), ("entailment", "not_entailment"), ("0", "1")
GLUE_TEST_SETS = {  # submission name -> GLUE's test set (the server needs all eleven files)
    "CoLA": GlueTestSet(1_063, _BINARY), "SST-2": GlueTestSet(1_821, _BINARY), "MRPC": GlueTestSet(1_725, _BINARY),
    "STS-B": GlueTestSet(1_379, None), "QQP": GlueTestSet(390_965, _BINARY), "MNLI-m": GlueTestSet(9_796, _NLI3),
    "MNLI-mm": GlueTestSet(9_847, _NLI3), "QNLI": GlueTestSet(5_463, _NLI2), "RTE": GlueTestSet(3_000, _NLI2),
    "WNLI": GlueTestSet(146, _BINARY), "AX": GlueTestSet(1_104, _NLI3),
}


def label_names(label_map: dict[str, int] | None) -> dict[int, str]:
    """Class index -> the label as the files spell it (the index itself without a map)."""
    return {index: name for name, index in (label_map or {}).items()}


def prediction_text(value: float, names: dict[int, str], regression: bool) -> str:
    if regression:
        return f"{value:.3f}"
    return names.get(int(value), str(int(value)))


def predictions_file(ids: list[str], predictions: list[str]) -> str:
    return "\n".join(["index\tprediction", *(f"{i}\t{p}" for i, p in zip(ids, predictions))]) + "\n"


def constant_file(name: str, prediction: str | None = None) -> str:
    """GLUE's test file ``name`` answered with one prediction for every row (its ids are 0 to rows - 1): a
    placeholder for a task not run (its first label, STS-B's mid-scale 2.5), or WNLI's majority class."""
    test_set = GLUE_TEST_SETS[name]
    value = prediction or ("2.500" if test_set.labels is None else test_set.labels[0])
    return predictions_file([str(i) for i in range(test_set.rows)], [value] * test_set.rows)


def check_glue_rows(name: str, path, rows: int) -> None:
    """A test set under one of GLUE's submission names has the rows of GLUE's file (the server refuses a
    file without every one of them)."""
    test_set = GLUE_TEST_SETS.get(name)
    if test_set is not None and rows != test_set.rows:
        raise UserError(f"{path}: {rows:,} rows, GLUE's {name} test set has {test_set.rows:,}: not GLUE's test file "
                        "(the server needs a prediction for every row)")


def check_destination(out_dir: Path) -> None:
    target = out_dir.resolve() if out_dir.is_symlink() else out_dir
    if out_dir.is_symlink() and not target.exists():
        raise UserError(f"{out_dir}: a link to {target}, which does not exist")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UserError(f"{out_dir}: exists and is not an empty directory; test predictions go to a new one")


def _why(err: OSError) -> str:
    return "the disk is full" if err.errno in (errno.ENOSPC, errno.EDQUOT) else (err.strerror or str(err))


class Destination:
    """The directory predictions go to, claimed for this process: checked (new or empty; a link to an
    empty directory writes there), a lock beside it (``.NAME.lock``: a second writer is refused while the
    first lives), a staging directory beside it (``.NAME.partial-PID-*``) and room on its disk. What a
    killed writer left there (its lock, its staging directory) is removed first. ``write`` fills the
    staging directory and renames it into place; leaving the ``with`` block without writing removes it."""

    def __init__(self, out_dir: Path):
        out_dir = Path(out_dir)
        self.shown = out_dir
        check_destination(out_dir)
        self.out_dir = out_dir.resolve() if out_dir.is_symlink() else out_dir.absolute()
        parent, name = self.out_dir.parent, self.out_dir.name
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UserError(f"{out_dir}: cannot create its directory {parent}: {_why(err)}") from None
        self.lock = parent / f".{name}.lock"
        self._take_lock()
        try:
            remove_orphans(parent, f".{name}.partial-")
            try:
                self.staging = Path(temp_directory(parent, owned_name(f".{name}.partial-")))
            except OSError as err:
                raise UserError(f"{out_dir}: cannot write in {parent}: {_why(err)}") from None
            free = shutil.disk_usage(parent).free
            if free < MIN_FREE_BYTES:
                raise UserError(f"{out_dir}: the disk is full ({free:,} bytes free); free some space or choose "
                                "another directory")
        except BaseException:
            self.abandon()
            raise

    def _take_lock(self) -> None:
        content = json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode()
        for _ in range(3):
            try:
                fd = os.open(self.lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                from ..runner.run_dir import lock_is_live

                try:
                    holder = json.loads(self.lock.read_text())
                except (OSError, ValueError):
                    holder = None
                if isinstance(holder, dict) and lock_is_live(holder):
                    raise UserError(f"{self.shown}: another process (pid {holder.get('pid')} on {holder.get('host')}) "
                                    f"is writing test predictions there; wait for it, or choose another directory"
                                    ) from None
                self.lock.unlink(missing_ok=True)  # a killed writer's
                continue
            except OSError as err:
                raise UserError(f"{self.shown}: cannot write in {self.lock.parent}: {_why(err)}") from None
            try:
                os.write(fd, content)
            finally:
                os.close(fd)
            return
        raise UserError(f"{self.shown}: cannot take its lock {self.lock}")

    def __enter__(self) -> Destination:
        return self

    def __exit__(self, *exc) -> None:
        self.abandon()

    def abandon(self) -> None:
        """Removes the staging directory (when not written into place) and the lock."""
        staging = getattr(self, "staging", None)
        if staging is not None and staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
        self.lock.unlink(missing_ok=True)

    def write(self, files: dict[str, str], records: dict[str, dict] | None = None) -> list[Path]:
        """``name.tsv`` for each text, the zip of them (and ``records`` as JSON files beside them, not in
        the zip), then the whole directory renamed into place."""
        try:
            for name, text in files.items():
                (self.staging / f"{name}.tsv").write_text(text, encoding="utf-8")
            for name, record in (records or {}).items():
                (self.staging / name).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
            with zipfile.ZipFile(self.staging / ZIP_NAME, "w", zipfile.ZIP_DEFLATED) as archive:
                for name in files:
                    archive.write(self.staging / f"{name}.tsv", f"{name}.tsv")
            check_destination(self.out_dir)  # still empty
            if self.out_dir.exists():
                self.out_dir.rmdir()
            self.staging.rename(self.out_dir)
        except OSError as err:
            raise UserError(f"{self.shown}: cannot write the test predictions: {_why(err)}") from None
        finally:
            self.abandon()
        return [self.shown / f"{name}.tsv" for name in files]


def read_test_sets(datamodule) -> dict[str, tuple[list, object]]:
    """Each test set's rows and loader, every file read and checked (ids, GLUE's row counts) before any
    prediction; one line naming the data's setting where it names no test files."""
    names = list(getattr(datamodule, "test_files", None) or {})
    if not names:
        raise UserError(f"its data ({type(datamodule).__name__}) names no test files (data.test_files) to predict")
    read = {name: datamodule.test_loader(name) for name in names}
    for name, (examples, _) in read.items():
        check_glue_rows(name, datamodule.test_files[name], len(examples))
    return read


def write_submission(trainer, module, datamodule, out_dir: Path | Destination, ckpt_path: str | None = None,
                     read: dict | None = None, records: dict[str, dict] | None = None) -> list[Path]:
    """Predicts every test set (with the weights of ``ckpt_path`` when given) and writes the files, then
    the zip; all or nothing. ``out_dir`` may be a destination claimed earlier, ``read`` the test sets read
    earlier (:func:`read_test_sets`), so that their mistakes show before other work."""
    with (out_dir if isinstance(out_dir, Destination) else Destination(out_dir)) as destination:
        read = read if read is not None else read_test_sets(datamodule)
        names = list(read)
        outputs = trainer.predict(module, dataloaders=[loader for _, loader in read.values()], ckpt_path=ckpt_path)
        if len(names) == 1:
            outputs = [outputs]
        labels, regression = label_names(datamodule.label_map), datamodule.num_labels == 1
        texts = {}
        for name, (examples, _), batches in zip(names, read.values(), outputs):
            values = row_predictions(batches, regression, getattr(getattr(datamodule, "windows", None), "aggregate", None))
            if len(values) != len(examples):
                raise RuntimeError(f"{name}: {len(values)} predictions for {len(examples)} rows")
            texts[name] = predictions_file([e.index for e in examples],
                                           [prediction_text(v, labels, regression) for v in values])
        return destination.write(texts, records)


def zip_submissions(files: list[Path], target: Path) -> Path:
    """One zip of several runs' files (every GLUE task), each at the zip's root; a name twice is refused.
    Written beside ``target`` under a name of this process's, then renamed; a killed writer's is removed."""
    seen = {}
    for path in files:
        if path.name in seen:
            raise UserError(f"{path.name}: predicted by two runs ({seen[path.name]} and {path.parent})")
        seen[path.name] = path.parent
    prefix = f".{target.name}.partial-"
    remove_orphans(target.parent, prefix)
    partial = target.with_name(owned_name(prefix) + "zip")
    try:
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in files:
                archive.write(path, path.name)
        partial.replace(target)
    except OSError as err:
        raise UserError(f"{target}: cannot write the zip: {_why(err)}") from None
    finally:
        partial.unlink(missing_ok=True)
    return target
