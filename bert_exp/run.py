"""The one place that reads the whole config: builds data, model, task module and trainer, fits, and
writes ``run.json``. Callable from tests with a composed config (no command line needed)."""

from __future__ import annotations

import json
import logging
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
import warnings
from datetime import datetime, timezone
from pathlib import Path

import lightning as L
import torch
from hydra.utils import instantiate
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.warnings import PossibleUserWarning
from omegaconf import DictConfig, OmegaConf, open_dict

from .callbacks import TokenThroughput
from .checkpoint_io import AtomicCheckpointIO
from .config import validate_config
from .config_tree import show_config
from .data.tokenizer import vocab_list
from .info import package_versions
from .jobs import (
    JobDirectory,
    hydra_overrides,
    is_multirun,
    original_run_info,
    prepare_ddp_children,
    sweep_job_environment,
)
from .logs import is_global_rank_zero
from .model import num_parameters
from .model.checkpoint import lightning_checkpoint_path, load_checkpoint
from .placement import check_combination, derive_placement

log = logging.getLogger(__name__)


def _log_through_hydra() -> None:
    """Lightning gives its loggers a console handler of their own when imported before logging is
    configured; under Hydra that prints every line twice. Let them propagate to Hydra's handlers."""
    if logging.getLogger().handlers:
        for name in ("lightning", "lightning.pytorch", "lightning.fabric", "torchmetrics"):
            logging.getLogger(name).handlers.clear()
            logging.getLogger(name).propagate = True


def _silence_false_alarms() -> None:
    """Two Lightning warnings that do not apply here: our DataModules resume mid-epoch themselves (the
    position is in the checkpoint: bert_exp/data/sampling.py), and values logged at the end of an
    evaluation come from torchmetrics' compute(), which has already synced them across processes."""
    for message in ("You're resuming from a checkpoint that ended before the epoch ended",
                    "It is recommended to use `self.log"):
        warnings.filterwarnings("ignore", message=re.escape(message), category=PossibleUserWarning)


def git_commit() -> dict | None:
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip() != ""
        return {"commit": commit, "dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return None


def _number(value):
    if isinstance(value, torch.Tensor):
        value = value.item()
    return float(value) if isinstance(value, (int, float)) else value


def build_task_module(cfg: DictConfig, datamodule, vocab: list[str], init=None):
    """The task's LightningModule; with ``init`` (a loaded checkpoint) its weights start from it."""
    special = datamodule.special_ids
    model_config = instantiate(cfg.model, vocab_size=datamodule.vocab_size, pad_token_id=special.pad)
    make_module = instantiate(cfg.task.module, _partial_=True)
    module = make_module(
        model_config=model_config,
        optimizer=instantiate(cfg.optim.optimizer),
        scheduler=instantiate(cfg.optim.scheduler),
        no_decay=list(cfg.optim.no_decay),
        vocab=vocab,
        lowercase=datamodule.lowercase,
    )
    if init is not None:
        module.initialise_from(init)
    return module


def run(cfg: DictConfig) -> float | None:
    """Trains as configured; returns the task's monitored metric (for sweepers)."""
    with sweep_job_environment():
        return _run(cfg)


def _run(cfg: DictConfig) -> float | None:
    validate_config(cfg)
    check_combination(cfg)
    placement = derive_placement(cfg)
    _log_through_hydra()
    _silence_false_alarms()
    run_dir = Path(cfg.paths.run_dir)
    overrides = hydra_overrides()
    ckpt_path = lightning_checkpoint_path(cfg.ckpt_path) if cfg.ckpt_path else None
    # DDP's other processes re-run this command in this directory (Lightning's launcher, torchrun, SLURM,
    # or by hand on each node with NODE_RANK set)
    first_process = is_global_rank_zero()
    job = JobDirectory.inspect(run_dir, overrides, is_multirun() or cfg.resume_in_place) if first_process else JobDirectory()
    if job.finished is not None:
        print(f"skipping a finished job: {run_dir}")
        return job.finished.get("metrics", {}).get(cfg.task.monitor)
    ckpt_path = ckpt_path or job.resume_from
    # a resumed run continues its W&B run; a sweep job resumed in place keeps its own
    earlier = job.previous or original_run_info(ckpt_path) or {}
    wandb_id = earlier.get("wandb_id") if ckpt_path else None
    # (a W&B sweep agent names the run it started the job for)
    wandb_id = wandb_id or (job.previous or {}).get("wandb_id") or os.environ.get("WANDB_RUN_ID") or new_run_id()
    if "wandb" in cfg.logger:
        with open_dict(cfg):
            cfg.logger.wandb.id = wandb_id
    if first_process:
        show_config(cfg, save_to=run_dir / "config_tree.txt")
        prepare_ddp_children(run_dir, ckpt_path, placement.world_size)
    init = load_checkpoint(cfg.task.init_from) if cfg.task.get("init_from") else None

    L.seed_everything(cfg.seed, workers=True)
    started = time.time()
    datamodule = instantiate(cfg.data, batch_size=placement.device_batch_size)
    datamodule.ensure_inputs()  # fetch missing data sets (data.download), or name the command that does
    if init is not None and init.vocab:  # tokenize with the vocabulary the weights were trained with
        datamodule.use_vocabulary(init.vocab, init.lowercase)
    vocab = vocab_list(datamodule.tokenizer)
    module = build_task_module(cfg, datamodule, vocab, init)
    throughput = TokenThroughput()
    callbacks = [instantiate(c) for c in cfg.callbacks.values() if c] + [throughput]
    loggers = [instantiate(c) for c in cfg.logger.values() if c]
    extra = {"accumulate_grad_batches": placement.accumulate_grad_batches}
    if cfg.trainer.get("accelerator") != "tpu" and not cfg.trainer.get("plugins"):
        extra["plugins"] = [AtomicCheckpointIO()]  # XLA brings its own
    trainer = instantiate(cfg.trainer, _partial_=True)(
        logger=loggers or False, callbacks=callbacks, default_root_dir=str(run_dir), **extra
    )
    resolved = OmegaConf.to_container(cfg, resolve=True)
    info = {
        "status": "running",
        "run_dir": str(run_dir),
        "task": cfg.task.name,
        "experiment": cfg.experiment_name,
        "overrides": overrides,
        "wandb_id": wandb_id,
        "started_at": datetime.fromtimestamp(started, timezone.utc).isoformat(),
        "git": git_commit(),
        "versions": package_versions(),
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(),
                 "accelerator": type(trainer.accelerator).__name__, "world_size": trainer.world_size,
                 "device_batch_size": placement.device_batch_size,
                 "accumulate_grad_batches": placement.accumulate_grad_batches},
        "data_checksums": datamodule.data_checksums,
        "num_parameters": num_parameters(module.model),
        "resumed_from": str(ckpt_path) if ckpt_path else None,
        "initialised_from": init.source if init is not None else None,
        "monitor": cfg.task.monitor,
        "config": resolved,
    }
    if trainer.is_global_zero:
        run_dir.mkdir(parents=True, exist_ok=True)
        datamodule.save_vocab(run_dir)
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        write_run_info(run_dir, info)
    for logger in loggers:
        logger.log_hyperparams(resolved)

    status = "failed"
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=str(ckpt_path) if ckpt_path else None)
        status = "interrupted" if trainer.interrupted else "finished"
        if status == "finished" and module.last_validated_step != trainer.global_step and trainer.limit_val_batches:
            # stopped between two validations: validate the final weights, so run.json reports them
            trainer.validate(module, datamodule=datamodule, verbose=False)
    except SIGTERMException:
        status = "interrupted"  # CheckpointOnSigterm saved last.ckpt
    finally:
        metrics = {k: _number(v) for k, v in sorted(trainer.callback_metrics.items())}
        if trainer.is_global_zero:
            checkpoint = trainer.checkpoint_callback
            info.update({
                "status": status,
                "wall_seconds": round(time.time() - started, 2),
                "global_step": trainer.global_step,
                "fresh_parameters": getattr(module, "fresh_parameters", None),
                "throughput": {"tokens_per_sec": throughput.tokens_per_sec, "train_tokens": throughput.total_tokens,
                               "train_seconds": round(throughput.total_seconds, 3)},
                "best_checkpoint": getattr(checkpoint, "best_model_path", None) or None,
                "best_score": _number(getattr(checkpoint, "best_model_score", None)),
                "metrics": metrics,
            })
            write_run_info(run_dir, info)
            finish_wandb(loggers, run_dir, info)
            print(f"run directory: {run_dir}")
    if status == "interrupted":
        sys.exit(128 + signal.SIGTERM)
    return metrics.get(cfg.task.monitor)


def write_run_info(run_dir: Path, info: dict) -> None:
    partial = run_dir / ".run.json.partial"
    partial.write_text(json.dumps(info, indent=2, default=str))
    partial.replace(run_dir / "run.json")


def new_run_id() -> str:
    return uuid.uuid4().hex[:8]


def finish_wandb(loggers, run_dir: Path, info: dict) -> None:
    """Logs run.json with the W&B run and finishes it, so each job of a sweep is a run of its own."""
    from lightning.pytorch.loggers import WandbLogger

    for logger in loggers:
        if isinstance(logger, WandbLogger) and logger._experiment is not None:
            experiment = logger.experiment
            experiment.summary.update({"status": info["status"], "global_step": info["global_step"],
                                       "run_dir": str(run_dir)})
            copy = shutil.copy(run_dir / "run.json", experiment.dir)  # the run's files folder, synced with it
            experiment.save(copy, base_path=experiment.dir, policy="now")
            experiment.finish()
