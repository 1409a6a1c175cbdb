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
    ending in a newline."""
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(dumps(obj, **options) + "\n")
    os.replace(partial, path)
    return path
