"""The resolved config as a tree (rich), printed when a run starts and saved in its directory."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.syntax import Syntax
from rich.text import Text
from rich.tree import Tree

# what decides the result first; the rest follows in the config's own order
ORDER = ("task", "model", "data", "optim", "trainer", "hardware", "callbacks", "logger", "paths")


def _yaml(text: str) -> Text:
    """Highlighted YAML that folds long values (paths) instead of cropping them."""
    highlighted = Syntax(text, "yaml", theme="ansi_dark", background_color="default").highlight(text)
    highlighted.overflow = "fold"
    highlighted.no_wrap = False
    highlighted.rstrip()
    return highlighted


def config_tree(cfg: DictConfig) -> Tree:
    tree = Tree("config", guide_style="dim")
    keys = [k for k in ORDER if k in cfg] + [k for k in cfg if k not in ORDER and k != "hydra"]
    scalars = {k: cfg[k] for k in keys if not OmegaConf.is_config(cfg[k])}
    for key in keys:
        if key in scalars:
            continue
        text = OmegaConf.to_yaml(cfg[key], resolve=True).rstrip() or "{}"
        tree.add(key, style="bold").add(_yaml(text))
    if scalars:
        text = OmegaConf.to_yaml(OmegaConf.create(scalars), resolve=True).rstrip()
        tree.add("(top level)", style="bold").add(_yaml(text))
    return tree


def show_config(cfg: DictConfig, save_to: Path | None = None) -> None:
    """Prints the tree; with ``save_to``, also writes it there as plain text."""
    tree = config_tree(cfg)
    Console(soft_wrap=True).print(tree)
    if save_to is not None:
        save_to.parent.mkdir(parents=True, exist_ok=True)
        with open(save_to, "w", encoding="utf-8") as out:
            Console(file=out, color_system=None, width=120, soft_wrap=True).print(tree)
