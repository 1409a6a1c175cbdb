"""The one place that reads the whole config: builds data, model, task module and trainer, fits, and
writes ``run.json``. Callable from tests with a composed config (no command line needed)."""

from __future__ import annotations

import json
import logging
import os
import platform
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

import lightning as L
import torch
from hydra.utils import instantiate
from lightning.fabric.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, ListConfig, OmegaConf

from .callbacks import TokenThroughput
from .config import ConfigError, validate_config
from .config_tree import show_config
from .data.tokenizer import vocab_list
from .info import package_versions
from .model import num_parameters
from .model.checkpoint import lightning_checkpoint_path, load_checkpoint

log = logging.getLogger(__name__)


def _log_through_hydra() -> None:
    """Lightning gives its loggers a console handler of their own when imported before logging is
    configured; under Hydra that prints every line twice. Let them propagate to Hydra's handlers."""
    if logging.getLogger().handlers:
        for name in ("lightning", "lightning.pytorch", "lightning.fabric", "torchmetrics"):
            logging.getLogger(name).handlers.clear()
            logging.getLogger(name).propagate = True


def world_size(trainer_cfg: DictConfig) -> int:
    devices = trainer_cfg.get("devices", 1)
    if isinstance(devices, (list, ListConfig)):
        count = len(devices)
    elif isinstance(devices, int) and devices > 0:
        count = devices
    elif str(devices) in ("auto", "-1") and trainer_cfg.get("accelerator") in ("gpu", "cuda"):
        count = max(torch.cuda.device_count(), 1)
    else:
        count = 1
    return count * int(trainer_cfg.get("num_nodes", 1))


def per_device_batch_size(global_batch_size: int, world: int, accumulate: int) -> int:
    """The global batch is what the config states; per-device batch = global / (world x accumulation)."""
    if global_batch_size % (world * accumulate):
        raise ConfigError(
            f"global_batch_size={global_batch_size} is not divisible by world size {world} x "
            f"trainer.accumulate_grad_batches={accumulate}"
        )
    return global_batch_size // (world * accumulate)


def check_fresh_run_dir(run_dir: Path) -> None:
    """Runs never overwrite each other's outputs."""
    for name in ("run.json", "checkpoints"):
        if (run_dir / name).exists():
            raise ConfigError(
                f"hydra.run.dir={run_dir} already holds a run ({name}); runs never overwrite each other. "
                f"Choose another directory; to continue that run, start a new one with ckpt_path={run_dir}"
            )


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
    validate_config(cfg)
    _log_through_hydra()
    run_dir = Path(cfg.paths.run_dir)
    check_fresh_run_dir(run_dir)
    if rank_zero_only.rank == 0:
        show_config(cfg, save_to=run_dir / "config_tree.txt")
    ckpt_path = lightning_checkpoint_path(cfg.ckpt_path) if cfg.ckpt_path else None
    init = load_checkpoint(cfg.task.init_from) if cfg.task.get("init_from") else None
    accumulate = int(cfg.trainer.get("accumulate_grad_batches", 1))
    batch_size = per_device_batch_size(cfg.global_batch_size, world_size(cfg.trainer), accumulate)

    L.seed_everything(cfg.seed, workers=True)
    started = time.time()
    datamodule = instantiate(cfg.data, batch_size=batch_size)
    datamodule.ensure_inputs()  # fetch missing data sets (data.download), or name the command that does
    if init is not None and init.vocab:  # tokenize with the vocabulary the weights were trained with
        datamodule.use_vocabulary(init.vocab, init.lowercase)
    vocab = vocab_list(datamodule.tokenizer)
    module = build_task_module(cfg, datamodule, vocab, init)
    throughput = TokenThroughput()
    callbacks = [instantiate(c) for c in cfg.callbacks.values() if c] + [throughput]
    loggers = [instantiate(c) for c in cfg.logger.values() if c]
    trainer = instantiate(cfg.trainer, _partial_=True)(
        logger=loggers or False, callbacks=callbacks, default_root_dir=str(run_dir)
    )
    resolved = OmegaConf.to_container(cfg, resolve=True)
    if trainer.is_global_zero:
        run_dir.mkdir(parents=True, exist_ok=True)
        datamodule.save_vocab(run_dir)
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    for logger in loggers:
        logger.log_hyperparams(resolved)

    status = "failed"
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=str(ckpt_path) if ckpt_path else None)
        status = "interrupted" if trainer.interrupted else "finished"
        if status == "finished" and module.last_validated_step != trainer.global_step and trainer.limit_val_batches:
            # stopped between two validations: validate the final weights, so run.json reports them
            trainer.validate(module, datamodule=datamodule, verbose=False)
    finally:
        metrics = {k: _number(v) for k, v in sorted(trainer.callback_metrics.items())}
        if trainer.is_global_zero:
            checkpoint = trainer.checkpoint_callback
            info = {
                "status": status,
                "run_dir": str(run_dir),
                "task": cfg.task.name,
                "experiment": cfg.experiment_name,
                "started_at": datetime.fromtimestamp(started, timezone.utc).isoformat(),
                "wall_seconds": round(time.time() - started, 2),
                "git": git_commit(),
                "versions": package_versions(),
                "host": {"machine": platform.machine(), "cpus": os.cpu_count(),
                         "accelerator": type(trainer.accelerator).__name__, "world_size": trainer.world_size},
                "data_checksums": datamodule.data_checksums,
                "num_parameters": num_parameters(module.model),
                "global_step": trainer.global_step,
                "resumed_from": str(ckpt_path) if ckpt_path else None,
                "initialised_from": init.source if init is not None else None,
                "fresh_parameters": getattr(module, "fresh_parameters", None),
                "throughput": {"tokens_per_sec": throughput.tokens_per_sec, "train_tokens": throughput.total_tokens,
                               "train_seconds": round(throughput.total_seconds, 3)},
                "monitor": cfg.task.monitor,
                "best_checkpoint": getattr(checkpoint, "best_model_path", None) or None,
                "best_score": _number(getattr(checkpoint, "best_model_score", None)),
                "metrics": metrics,
                "config": resolved,
            }
            (run_dir / "run.json").write_text(json.dumps(info, indent=2, default=str))
            print(f"run directory: {run_dir}")
    return metrics.get(cfg.task.monitor)
