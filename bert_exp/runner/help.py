"""``python -m bert_exp --help``: the config groups, their options and the experiment presets, read
from the config tree itself so the list never goes stale. Hydra's own help stays at --hydra-help."""

from __future__ import annotations

from pathlib import Path

import yaml

from ..resources import resource_dir

USAGE = """usage: python -m bert_exp [+experiment=NAME] [GROUP=OPTION ...] [KEY=VALUE ...]
       python -m bert_exp -m [+sweeps=NAME] [KEY=V1,V2 ...]     (a Hydra multirun sweep)

Pre-train BERT (masked LM + next-sentence prediction) and fine-tune it on GLUE, SQuAD and tagging, as
reproducible Hydra experiments run by PyTorch Lightning."""

MORE = """Other commands:
  python -m bert_exp +experiment=NAME --cfg job   print the resolved config and stop
  python -m bert_exp.data list                    data sets present, missing or corrupt
  python -m bert_exp.data download NAME...        fetch data sets (verified, resumable)
  python -m bert_exp.info [RUN]                   versions, devices and precisions, data sets (a run's state)
  python -m bert_exp.evaluate SOURCE... [--tasks] the downstream suite: each source fine-tuned per task, a table
  python -m bert_exp.glue SOURCE [--tasks]        GLUE as BERT's Table 1: every task, lr chosen on dev, the table
  python -m bert_exp.score RUN [--submission DIR] a fine-tuned run scored again; GLUE test predictions
  python -m bert_exp.predict SOURCE [TEXT ...]    use a trained model; its head decides the task
  python -m bert_exp.tokenize SOURCE "text"       what the model is fed, as a table
  python -m bert_exp.attention SOURCE "text"      where the model's heads look
  python -m bert_exp.export RUN_OR_CKPT OUT       a HuggingFace BERT directory from a run
  python -m bert_exp.report DIR                   PNG curves and a Markdown summary (run, sweep, pipeline)
  python -m bert_exp.sweep wandb NAME [OVERRIDES] a ready-made sweep as a W&B sweep spec
  python -m bert_exp.bench                        our training steps against transformers', side by side
  python -m bert_exp --hydra-help                 Hydra's own flags

Keys on their own: precision=32-true|bf16-mixed|16-mixed, global_batch_size=N (device batch and
accumulation derived; device_batch_size=N caps the device batch), ckpt_path=RUN_DIR (resume), seed=N.
Runs write to outputs/<task>/<experiment>/<time>/ (run.json, config.yaml, checkpoints/, logs/).
Examples:
  python -m bert_exp +experiment=pretrain_tiny
  python -m bert_exp +experiment=cola_minilm optim.optimizer.lr=3e-5 seed=1 hardware=ddp_cpu
  python -m bert_exp +experiment=pipeline_tiny
  python -m bert_exp +experiment=cola_tiny task.init_from=outputs/pretraining/pretrain_tiny/<run>"""


def describe(path: Path) -> str:
    """The first comment line of a config file, without a trailing usage example (after two spaces)."""
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line.startswith("#"):
            if line:
                break
            continue
        text = line.lstrip("#").strip()
        if text and not text.startswith("@package"):
            return text.split(":  ", 1)[0].rstrip(":.").strip()
    return ""


def default_options(conf: Path) -> dict[str, str]:
    defaults = yaml.safe_load((conf / "config.yaml").read_text()).get("defaults", [])
    return {k: str(v) for item in defaults if isinstance(item, dict) for k, v in item.items()}


def _section(title: str, rows: list[tuple[str, str]]) -> list[str]:
    width = max((len(name) for name, _ in rows), default=0)
    return [title, *(f"  {name.ljust(width)}  {text}".rstrip() for name, text in rows), ""]


def _options(group: str, args: list[str]) -> dict[str, Path]:
    """A group's options wherever configs are found (config_search), ``sweeps`` with bert_exp's own."""
    from .config_search import group_options

    options = group_options(group, args)
    if group == "sweeps":
        sweeps = resource_dir("sweeps")
        own = {p.stem: p for p in sorted(sweeps.glob("*.yaml"))} if sweeps.is_dir() else {}
        options = {**own, **{k: v for k, v in options.items() if k not in own}}
    return options


def help_text(args: list[str] = ()) -> str:
    """The help, with the options of the user's config directories (``--config-dir``, ``hydra.searchpath``,
    ``$BERT_EXP_CONFIG_PATH``) beside bert_exp's own."""
    from .config_search import groups

    args = list(args)
    defaults = default_options(resource_dir("conf"))
    group_rows = []
    for group in groups(args):
        if group in ("experiment", "sweeps"):
            continue
        marked = [f"{o}*" if defaults.get(group) == o else o for o in sorted(_options(group, args))]
        group_rows.append((group, ", ".join(marked)))
    lines = [USAGE, ""]
    lines += _section("Experiment presets (+experiment=NAME):",
                      [(name, describe(path)) for name, path in sorted(_options("experiment", args).items())])
    lines += _section("Config groups (GROUP=OPTION; * the default):", group_rows)
    sweeps = _options("sweeps", args)
    if sweeps:
        lines += _section("Ready-made sweeps (-m +sweeps=NAME):",
                          [(name, describe(path)) for name, path in sorted(sweeps.items())])
    lines.append(MORE)
    return "\n".join(lines)


def unknown_choice(args: list[str]) -> str | None:
    """The first ``GROUP=OPTION`` among ``args`` whose option the group does not have (``+experiment=`` and
    ``+sweeps=`` included), as one line with the nearest names; Hydra would list every option instead.
    The options are those of every config directory the command reads (config_search)."""
    import difflib

    from .config_search import groups

    known = set(groups(args)) | {"sweeps"}
    for arg in args:
        key, _, value = arg.lstrip("+~").partition("=")
        if key not in known or not value or arg.startswith("~"):
            continue
        options = sorted(_options(key, args))
        # a multirun sweeps over several (a,b); a list ([csv,wandb]) chooses several at once
        for choice in value.strip("[]").split(","):
            choice = choice.strip()
            if choice and choice not in options:
                near = difflib.get_close_matches(choice, options, n=3, cutoff=0.6)
                hint = f"; did you mean {' or '.join(near)}?" if near else ""
                where = "-m +sweeps=NAME" if key == "sweeps" else f"{key}=NAME"
                return (f"{key}={choice}: no such option{hint} (python -m bert_exp --help lists every "
                        f"{'preset' if key == 'experiment' else 'option'} of {where})")
    return None
