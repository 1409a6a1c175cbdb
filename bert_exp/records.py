"""Every JSON file we write is strict JSON (RFC 8259): no bare ``NaN`` or ``Infinity``, which ``jq``,
JavaScript and most JSON readers other than Python's reject.

A non-finite float becomes ``null``, and a document that is a mapping says why beside it: the
top-level key ``non_finite`` maps the dotted path of each such value to ``"nan"``, ``"inf"`` or
``"-inf"``, e.g. ``{"best_score": null, "metrics": {"val/mlm_loss": null},
"non_finite": {"best_score": "nan", "metrics.val/mlm_loss": "nan"}}``. (A list at the top level gets
the nulls without the map.)"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

NON_FINITE_KEY = "non_finite"


def _name(value: float) -> str:
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def finite(obj, notes: dict[str, str] | None = None, path: str = ""):
    """``obj`` with every non-finite float replaced by None, its path and kind added to ``notes``."""
    if isinstance(obj, float) and not math.isfinite(obj):
        if notes is not None:
            notes[path or "."] = _name(obj)
        return None
    if isinstance(obj, dict):
        return {k: finite(v, notes, f"{path}.{k}" if path else str(k)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v, notes, f"{path}[{i}]") for i, v in enumerate(obj)]
    return obj


def dumps(obj, **options) -> str:
    """``json.dumps`` that never writes NaN or Infinity (see the module's note); ``default=str`` unless given."""
    notes: dict[str, str] = {}
    clean = finite(obj, notes)
    if isinstance(clean, dict) and notes:
        clean[NON_FINITE_KEY] = notes
    options.setdefault("default", str)
    return json.dumps(clean, allow_nan=False, **options)


def write_json(path: str | Path, obj, **options) -> Path:
    """Writes ``obj`` as strict JSON to ``path``, atomically (a temporary file beside it, then a rename),
    ending in a newline. The temporary name is this writer's own, so two processes writing one file (a
    node's checksum memo shared by two runs) each rename a whole file: the last one wins."""
    path = Path(path)
    text = dumps(obj, **options) + "\n"
    fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(partial, 0o666 & ~_umask())  # as a plain open() would make it, not mkstemp's 0600
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    return path


def temp_directory(parent: str | Path, prefix: str) -> str:
    """A new directory in ``parent`` (``tempfile.mkdtemp``) with the mode a plain mkdir gives, 0777 less the
    umask, not mkdtemp's 0700: a prepared dataset or vocabulary built in it is renamed into a shared cache
    that other users and jobs under other uids read."""
    path = tempfile.mkdtemp(prefix=prefix, dir=parent)
    os.chmod(path, 0o777 & ~_umask())
    return path


def _umask() -> int:
    """The process's umask, read without changing it where Linux tells it (os.umask can only set it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# --- temporary files named by their writer's pid, so a later run can remove those of a killed one ---------

def owned_name(prefix: str) -> str:
    """``prefix`` + this process's pid and a dash: the name a writer gives what it removes when done."""
    return f"{prefix}{os.getpid()}-"


def remove_orphans(parent: str | Path, prefix: str) -> list[Path]:
    """Removes what a killed writer (SIGKILL, a power cut) left in ``parent`` under names made by
    :func:`owned_name` with ``prefix``: those whose pid is no running process. A live writer's are kept."""
    import shutil

    removed = []
    for path in Path(parent).glob(f"{prefix}*"):
        pid = path.name[len(prefix):].partition("-")[0]
        if not pid.isdigit() or pid_alive(int(pid)):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    return removed


def pid_alive(pid: int) -> bool:
    """Whether a process of that pid runs on this machine (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True
