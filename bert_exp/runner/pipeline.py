"""Pipelines (``+experiment=pipeline_tiny``): stages run one after another, each a ``python -m bert_exp``
of its own in ``RUN_DIR/<stage>``, a later one starting from an earlier one's checkpoint.

A stage is a process of its own, so each can launch its own DDP processes, frees its memory, and
finishes its W&B run. All stages share the pipeline's ``experiment_name``: one W&B group, a job type
per task. The pipeline's own command-line overrides (``hardware=...``, ``seed=...``) go to every stage,
except those of the pipeline's own variables (``ablation_budget``), which reach the stages through the
overrides that use them.
Every stage's config is composed and checked before the first one starts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from omegaconf import DictConfig, ListConfig

from .validation import ConfigError, validate_config
from ..records import write_json
from .children import INTERRUPTED, run_child
from .run_dir import finished_job, hydra_overrides, read_run_info


def spliced(overrides) -> list[str]:
    """A stage's overrides, an element that is itself a list (``"${budget_overrides}"``, a list the
    pipeline's preset shares among its stages) spliced in where it stands: Hydra cannot join lists."""
    return [str(item) for element in overrides or []
            for item in (element if isinstance(element, (list, ListConfig)) else [element])]


def stage_overrides(cfg: DictConfig, name: str, run_dir: Path, shared: list[str]) -> list[str]:
    stage = cfg.pipeline[name]
    overrides = [f"+experiment={stage.experiment}", *shared, *spliced(stage.get("overrides")),
                 f"experiment_name={cfg.experiment_name}", "resume_in_place=true"]
    if stage.get("init_from"):
        if stage.init_from not in cfg.pipeline or list(cfg.pipeline).index(stage.init_from) >= list(cfg.pipeline).index(name):
            raise ConfigError(f"pipeline.{name}.init_from={stage.init_from}: not an earlier stage")
        overrides.append(f"task.init_from={run_dir / stage.init_from}")
    return overrides


def shared_overrides() -> list[str]:
    """The pipeline command's own overrides, minus those that choose the pipeline itself."""
    return [o for o in hydra_overrides()
            if not o.lstrip("+~").startswith(("experiment=", "pipeline.", "experiment_name=", "hydra.",
                                               "resume_in_place="))]


def evaluate_command(cfg: DictConfig, name: str, run_dir: Path, shared: list[str]) -> list[str]:
    """An ``evaluate`` stage: the downstream suite (python -m bert_exp.evaluate) over earlier stages'
    models (by stage name, ``scratch:NAME`` for the same shape untrained) or any other source."""
    stage = cfg.pipeline[name].evaluate
    earlier = list(cfg.pipeline)[: list(cfg.pipeline).index(name)]
    sources = []
    for source in stage.sources:
        label, _, spec = str(source).rpartition("=")
        scratch = spec.startswith("scratch:")
        target = spec.removeprefix("scratch:")
        if target in earlier:
            target = str(run_dir / target)
            label = label or (f"scratch-{spec.removeprefix('scratch:')}" if scratch else spec)
        elif target in cfg.pipeline:
            raise ConfigError(f"pipeline.{name}.evaluate.sources: {target} is not an earlier stage")
        sources.append(f"{label + '=' if label else ''}{'scratch:' if scratch else ''}{target}")
    command = ["-m", "bert_exp.evaluate", *sources, "--seeds", str(stage.get("seeds", 3)),
               "--out", str(run_dir / name)]
    if stage.get("tasks"):
        command += ["--tasks", *stage.tasks]
    # the pipeline's own overrides reach every fine-tuning job, except the seed: the suite sets its own
    for override in [*(o for o in shared if o.lstrip("+~").partition("=")[0] != "seed"), *spliced(stage.get("overrides"))]:
        command += ["--override", override]
    return command


def check_suite_overrides(cfg: DictConfig, name: str, command: list[str]) -> None:
    """Every suite job's config composes with the stage's overrides (one that a task lacks, such as
    ``task.module.pooling`` for squad, stops the pipeline now, not after its pre-training)."""
    from hydra import compose

    from ..tools.evaluate import DEFAULT_TASKS

    extra = [command[i + 1] for i, arg in enumerate(command) if arg == "--override"]
    for task in cfg.pipeline[name].evaluate.get("tasks") or DEFAULT_TASKS:
        try:
            compose("config", overrides=[f"+experiment=suite_{task}", *extra])
        except Exception as err:  # Hydra's composition errors name the override
            raise ConfigError(f"pipeline.{name}: the suite's {task} jobs: {err}") from None


def check_stages(cfg: DictConfig, run_dir: Path, shared: list[str]) -> dict[str, list[str]]:
    """Each stage's overrides, after composing and validating its config (a typo stops the pipeline
    before any stage runs)."""
    from hydra import compose

    from .placement import check_combination, resolve_precision

    # the pipeline's own variables (pipeline_ablation_objectives' ablation_budget) reach the stages through
    # the overrides they feed; a stage's config has no such key and would refuse them
    own = set(cfg) - set(compose("config"))
    shared = [o for o in shared if o.lstrip("+~").partition("=")[0].partition(".")[0] not in own]
    stages = {}
    for name in cfg.pipeline:
        if "evaluate" in cfg.pipeline[name]:
            stages[name] = evaluate_command(cfg, name, run_dir, shared)
            check_suite_overrides(cfg, name, stages[name])
            continue
        overrides = stage_overrides(cfg, name, run_dir, shared)
        try:
            stage_cfg = compose("config", overrides=[*overrides, f"paths.run_dir={run_dir / name}"])
        except Exception as err:  # Hydra's composition errors name the override
            raise ConfigError(f"pipeline.{name}: {err}") from None
        try:
            resolve_precision(stage_cfg)
            validate_config(stage_cfg)
            check_combination(stage_cfg)
        except ConfigError as err:
            raise ConfigError(f"pipeline.{name}: {err}") from None
        stages[name] = overrides
    return stages


def stage_end(name: str, code: int) -> str:
    if code in INTERRUPTED:
        return f"pipeline: stage {name} was stopped (exit code {code}), its work saved"
    return f"error: pipeline stage {name} failed (exit code {code})"


def run_pipeline(cfg: DictConfig) -> float | None:
    run_dir = Path(cfg.paths.run_dir)
    stages = check_stages(cfg, run_dir, shared_overrides())
    results = {}
    for name, overrides in stages.items():
        stage_dir = run_dir / name
        if overrides[:2] == ["-m", "bert_exp.evaluate"]:  # finished jobs inside it are skipped by the tool
            print(f"pipeline: {name}: python {' '.join(overrides)}", flush=True)
            code = run_child([sys.executable, *overrides])
            if code != 0:
                print(f"{stage_end(name, code)}; re-run with hydra.run.dir={run_dir} to continue", file=sys.stderr)
                sys.exit(code)
            results[name] = {"run_dir": str(stage_dir), "status": "finished", "monitor": "suite average",
                             "value": {row["source"]: row["average"] for row in
                                       json.loads((stage_dir / "suite.json").read_text())["rows"]}}
            continue
        if finished_job(stage_dir, overrides):  # a stage run with other settings is refused, not skipped
            print(f"pipeline: {name} finished earlier, skipped ({stage_dir})")
        else:
            print(f"pipeline: {name}: python -m bert_exp {' '.join(overrides)}", flush=True)
            code = run_child([sys.executable, "-m", "bert_exp", *overrides, f"hydra.run.dir={stage_dir}"])
            if code != 0:
                print(f"{stage_end(name, code)}; see {stage_dir}. Re-run with "
                      f"hydra.run.dir={run_dir}: finished stages are skipped, an interrupted one continues "
                      "from its last.ckpt", file=sys.stderr)
                sys.exit(code)
        info = read_run_info(stage_dir) or {}
        results[name] = {"run_dir": str(stage_dir), "status": info.get("status"), "monitor": info.get("monitor"),
                         "value": (info.get("metrics") or {}).get(info.get("monitor"))}
    write_json(run_dir / "pipeline.json", results, indent=2)
    for name, result in results.items():
        print(f"pipeline: {name:10s} {result['monitor']} = {result['value']}")
    last = results[list(results)[-1]]["value"]
    return next(iter(last.values()), None) if isinstance(last, dict) else last
