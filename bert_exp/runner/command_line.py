"""The command line's overrides as the sweep preview and the override check read them: ``--cfg`` and
Hydra's other flags taken out, and a sweep's overrides expanded into each job's."""

from __future__ import annotations

import itertools


# Hydra's flags that take the next argument as their value (--cfg and --info take one only of their words)
_VALUED = ("--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd", "--experimental-rerun")
_WORDS = {"--cfg": ("job", "hydra", "all"), "-c": ("job", "hydra", "all"),
          "--info": ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")}
_WORDS["-i"] = _WORDS["--info"]


def _strip_cfg(args: list[str]) -> tuple[list[str], str | None]:
    out, package, skip = [], None, False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg in _WORDS:
            skip = i + 1 < len(args) and args[i + 1] in _WORDS[arg]
            continue
        if arg in _VALUED:
            skip = True
            continue
        if arg in ("--package", "-p"):
            package, skip = (args[i + 1] if i + 1 < len(args) else None), True
            continue
        if arg.startswith("--cfg=") or arg.startswith("--"):
            continue
        out.append(arg)
    return out, package


def expand(overrides: list[str]) -> list[list[str]]:
    """Each job's overrides: the cartesian product of the sweep overrides (``key=a,b``, ``range(...)``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    choices = []
    for override in OverridesParser.create().parse_overrides(overrides):
        if override.is_sweep_override():
            key = override.get_key_element()
            choices.append([f"{key}={value}" for value in override.sweep_string_iterator()])
        else:
            choices.append([override.input_line])
    return [list(job) for job in itertools.product(*choices)]
