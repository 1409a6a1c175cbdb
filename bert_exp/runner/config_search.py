"""Where configs are found: bert_exp's own tree, then the user's, in Hydra's ways (``--config-dir DIR``,
``hydra.searchpath=[file://DIR]``) and ``$BERT_EXP_CONFIG_PATH`` (directories, ``:``-separated: set once
for a project, read by every command and by the jobs it starts, and kept out of the package, so an
installed bert_exp and a checkout read a project's presets alike). Each user directory is laid out as
``conf/`` is (``experiment/NAME.yaml``, ``data/NAME.yaml``, ...). Hydra composes from all of them
(hydra_plugins/bert_exp_searchpath adds the variable's); --help and the did-you-mean check list their
options from :func:`config_roots`, so a preset of one's own is a preset like any other."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from ..resources import resource_dir

ENV = "BERT_EXP_CONFIG_PATH"


def environment_roots() -> list[Path]:
    return [Path(p).expanduser().resolve() for p in os.environ.get(ENV, "").split(os.pathsep) if p]


def _hydra_path(entry: str) -> Path | None:
    """A search path entry as a directory: ``file://DIR`` or ``DIR``; ``pkg://a.b`` as that package's
    folder; None for anything else (Hydra reports what it cannot read)."""
    scheme, sep, rest = entry.partition("://")
    if not sep:
        return Path(entry).expanduser().resolve()
    if scheme == "file":
        return Path(rest).expanduser().resolve()
    if scheme == "pkg":
        module, _, sub = rest.partition("/")
        spec = importlib.util.find_spec(module.split(".")[0]) if module else None
        if spec is None or not spec.submodule_search_locations:
            return None
        base = Path(next(iter(spec.submodule_search_locations)))
        return base.joinpath(*module.split(".")[1:], *filter(None, sub.split("/")))
    return None


def command_line_roots(args: list[str]) -> list[Path]:
    """The directories the command line adds: ``--config-dir``/``-cd`` and ``hydra.searchpath=[...]``."""
    roots = []
    for i, arg in enumerate(args):
        if arg in ("--config-dir", "-cd") and i + 1 < len(args):
            roots.append(Path(args[i + 1]).expanduser().resolve())
        elif arg.startswith("--config-dir="):
            roots.append(Path(arg.split("=", 1)[1]).expanduser().resolve())
        elif arg.lstrip("+").startswith("hydra.searchpath="):
            from hydra.core.override_parser.overrides_parser import OverridesParser

            try:
                value = OverridesParser.create().parse_override(arg.lstrip("+")).value()
            except Exception:  # a malformed override: Hydra's own parse names it when it composes
                continue
            for entry in value if isinstance(value, list) else [value]:
                root = _hydra_path(str(entry))
                if root is not None:
                    roots.append(root)
    return roots


def config_roots(args: list[str] = ()) -> list[Path]:
    """bert_exp's config tree first, then every user directory that exists, each once."""
    roots = [resource_dir("conf"), *environment_roots(), *command_line_roots(list(args))]
    unique = []
    for root in roots:
        if root.is_dir() and root not in unique:
            unique.append(root)
    return unique


def group_options(group: str, args: list[str] = ()) -> dict[str, Path]:
    """Each option of a config group (``experiment``, ``data``, ...) and the file it is read from: the first
    root that has it, as Hydra chooses."""
    options: dict[str, Path] = {}
    for root in config_roots(args):
        for path in sorted((root / group).glob("*.yaml")):
            options.setdefault(path.stem, path)
    return options


def groups(args: list[str] = ()) -> list[str]:
    """The config groups of every root."""
    return sorted({p.name for root in config_roots(args) for p in root.iterdir() if p.is_dir()})


def export_to_children(args: list[str]) -> None:
    """The command line's directories put in ``$BERT_EXP_CONFIG_PATH``, so that the jobs this command
    starts (a pipeline's stages, the glue tool's runs, a sweep's) find the same presets."""
    added = [str(p) for p in command_line_roots(args) if p.is_dir()]
    if added:
        present = [p for p in os.environ.get(ENV, "").split(os.pathsep) if p]
        os.environ[ENV] = os.pathsep.join(dict.fromkeys(present + added))
