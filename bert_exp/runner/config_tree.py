"""The resolved config as a tree (rich), saved in the run directory when it starts; the console gets a
few lines of what runs and where (the whole tree: ``--cfg job``, or the saved ``config_tree.txt``)."""

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


def _get(cfg: DictConfig, key: str, default=None):
    return OmegaConf.select(cfg, key, default=default, throw_on_missing=False)


def summary_lines(cfg: DictConfig) -> list[str]:
    """What runs, on what and for how long: one screen's head, not the whole config."""
    model = _get(cfg, "model")
    if _get(cfg, "model.source") is not None or str(_get(cfg, "model._target_", "")).endswith("model_config_of"):
        shape = f"the shape of {_get(cfg, 'model.source')}"
    else:
        shape = (f"L{_get(cfg, 'model.num_hidden_layers', 12)}/H{_get(cfg, 'model.hidden_size', 768)}"
                 if model is not None else "?")
        if model is not None:
            from ..model.config import non_bert_values

            options = non_bert_values(OmegaConf.to_container(model, resolve=True))
            shape += "".join(f", {k}={v}" for k, v in options.items())
    init = _get(cfg, "task.init_from")
    budget = _get(cfg, "trainer.budget")
    steps = _get(cfg, "trainer.max_steps", -1)
    epochs = _get(cfg, "trainer.max_epochs")
    length = (f"budget {budget}" if budget else f"{steps} steps" if steps and steps > 0
              else f"{epochs} epochs" if epochs else "until stopped")
    data_files = _get(cfg, "data.train_file") or _get(cfg, "data.files")
    data = data_files if isinstance(data_files, str) else f"{len(data_files)} inputs" if data_files else "?"
    batch = f"batch {_get(cfg, 'global_batch_size')}"
    ramp = _get(cfg, "trainer.batch_ramp")
    if ramp:
        over = f"{ramp.get('share'):.0%} of the run" if ramp.get("share") is not None else f"{ramp.get('tokens')} tokens"
        batch = f"batch {ramp.get('start')} ramped to {_get(cfg, 'global_batch_size')} over {over} ({ramp.get('shape', 'linear')})"
    return [
        f"run: {_get(cfg, 'experiment_name')} ({_get(cfg, 'task.name')}), model {shape}"
        + (f" from {init}" if init else ", fresh weights"),
        f"data: {data}; {batch}, {length}; "
        f"{_get(cfg, 'trainer.accelerator', 'auto')} x{_get(cfg, 'trainer.devices', 1)}, {_get(cfg, 'trainer.precision')}",
    ]


def show_config(cfg: DictConfig, notes: list[str | None] | None = None) -> None:
    """Prints a few lines of what runs (and ``notes``: what the run chose for this machine)."""
    print("\n".join(summary_lines(cfg) + [n for n in notes or [] if n]), flush=True)


def save_config(cfg: DictConfig, run_dir: Path) -> None:
    """Once the run has started (its directory is kept from then on, a run refused before leaves none): the
    whole tree saved there, and the run directory named."""
    path = run_dir / "config_tree.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as out:
        Console(file=out, color_system=None, width=120, soft_wrap=True).print(config_tree(cfg))
    print(f"writes: {run_dir}\nconfig: {path} (the resolved config; python -m bert_exp ... --cfg job prints it)",
          flush=True)
