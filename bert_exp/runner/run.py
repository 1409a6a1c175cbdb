"""The one place that reads the whole config: builds data, model, task module and trainer, fits, and
writes ``run.json``. Callable from tests with a composed config (no command line needed)."""

from __future__ import annotations

import dataclasses
import logging
import os
import platform
import re
import resource
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

from .callbacks import (CompileModel, Diverged, DivergenceCheck, EarlyStop, GracefulStop, LastCheckpoint, MaskFill,
                        UnpaddedBatches, unpad_note,
                        TokenThroughput)
from .checkpoint_io import AtomicCheckpointIO
from .batch_ramp import attach_batch_ramp, ramp_from_config
from .budget import Budget, BudgetClock, parse_budget
from .val_check import clamp_val_check_interval
from .validation import RUNNER_TRAINER_KEYS, validate_config
from .config_tree import save_config, show_config
from .cpu_allocator import configure_cpu_allocator
from ..data.tokenizer import tokenizer_json, vocab_list
from ..records import write_json
from ..tools.info import package_versions
from .run_dir import (
    JobDirectory,
    RunLock,
    clean_partial_files,
    hydra_overrides,
    is_multirun,
    last_step,
    lock_is_live,
    original_run_info,
    prepare_ddp_children,
    read_lock,
    resume_command,
    sweep_job_environment,
    weights_sha256,
)
from .handoff import clear_handoff, share_data_state
from .ranks import is_global_rank_zero
from ..errors import UserError
from ..model import num_parameters, parameter_counts
from ..tasks.base import Vocabulary
from ..tasks.checkpoints import lightning_checkpoint_path, load_checkpoint
from .placement import accelerator_kind, check_combination, cpu_kind, derive_placement, resolve_precision

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


def fetch_inputs(datamodule) -> None:
    """Fetches missing catalog data sets (data.download), or stops naming each missing file and the command
    that fetches it. One process per node (or per job, as Lightning's ``prepare_data_per_node`` says)
    downloads; the others wait for the files."""
    from ..datasets.download import require_inputs

    local = int(os.environ.get("LOCAL_RANK", "0"))
    rank = local if datamodule.prepare_data_per_node else int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
    require_inputs(datamodule.required_inputs(), datamodule.download, wait=rank != 0)


def build_task_module(cfg: DictConfig, datamodule, vocab: list[str], init=None):
    """The task's LightningModule; with ``init`` (a loaded checkpoint) its weights start from it."""
    special = datamodule.special_ids
    model_config = instantiate(cfg.model, vocab_size=datamodule.vocab_size, pad_token_id=special.pad)
    make_module = instantiate(cfg.task.module, _partial_=True)
    module = make_module(
        model_config=model_config,
        optim=instantiate(cfg.optim),  # OptimSettings: the optimizer and scheduler factories, no_decay
        vocabulary=Vocabulary(vocab, datamodule.lowercase, tokenizer_json(datamodule.tokenizer)),
        **(datamodule.module_arguments() if hasattr(datamodule, "module_arguments") else {}),  # tagging: labels
    )
    if init is not None:
        module.initialise_from(init)
    if hasattr(module, "use_evaluator"):  # question answering: the validation questions and their scoring
        module.use_evaluator(datamodule.evaluator)
    return module


def run(cfg: DictConfig) -> float | None:
    """Trains as configured; returns the task's monitored metric (for sweepers). Three flows: a job
    already finished is skipped; an interrupted one resumes from its last checkpoint; else a fresh run.

    A run that fails once its directory is open says so in ``run.json`` (status ``failed``, the error and
    the step) and leaves the traceback in its log; one refused before any work leaves no directory."""
    with sweep_job_environment():
        placement = check_before_work(cfg)
        job = open_job(cfg, placement)
        lock = RunLock.held.get(Path(job.run_dir).absolute()) if job.run_dir is not None else None
        record = None
        try:
            if job.finished is not None:
                print(f"skipping a finished job: {cfg.paths.run_dir}")
                return job.finished.get("metrics", {}).get(cfg.task.monitor)
            init = load_checkpoint(cfg.task.init_from) if cfg.task.get("init_from") else None
            L.seed_everything(cfg.seed, workers=True)
            datamodule = build_data(cfg, placement, init)
            vocab = vocab_list(datamodule.tokenizer)
            module = build_task_module(cfg, datamodule, vocab, init)
            budget = make_budget(cfg, module)
            attach_batch_ramp(cfg, placement, module)  # after the budget: a ramp may follow its clock
            trainer, loggers, throughput = build_trainer(cfg, placement, budget)
            record = RunRecord.start(cfg, job, trainer, datamodule, module, init, loggers, placement)
            return fit(cfg, trainer, module, datamodule, job.ckpt_path, record, throughput, loggers)
        except UserError as exc:
            # a mistake found before any training (a missing file, a bad row): no run to keep
            if record is None and lock is not None and lock.discard_if_empty():
                raise
            RunRecord.failure(cfg, job, record, exc)
            raise
        except Exception as exc:
            RunRecord.failure(cfg, job, record, exc)
            raise
        finally:
            if lock is not None:
                lock.release()


def check_before_work(cfg: DictConfig):
    """Every check that needs no data: keys, types, ranges, combinations; then where the run executes."""
    if logging.getLogger().handlers:  # under Hydra: Python warnings go to the logs (the console filters them)
        logging.captureWarnings(True)
    os.environ.setdefault("WANDB_SILENT", "true")  # W&B's own summary would fill the screen; run.json has it
    chosen = resolve_precision(cfg)  # precision=auto: what this device runs fastest, and why
    validate_config(cfg)
    check_combination(cfg)
    placement = dataclasses.replace(derive_placement(cfg), precision_note=chosen)
    ramp_from_config(cfg, placement)
    if accelerator_kind(cfg.trainer) == "cpu":  # a GPU run's large tensors live on the device
        configure_cpu_allocator(cfg.cpu_allocator)
    _log_through_hydra()
    _silence_false_alarms()
    return placement


def open_job(cfg: DictConfig, placement) -> JobDirectory:
    """The run directory: fresh, resumed in place (a re-run sweep job or pipeline stage), or finished;
    the checkpoint to resume from and the W&B run id to continue."""
    run_dir = Path(cfg.paths.run_dir)
    overrides = hydra_overrides()
    ckpt_path = lightning_checkpoint_path(cfg.ckpt_path) if cfg.ckpt_path else None
    # DDP's other processes re-run this command in this directory (Lightning's launcher, torchrun, SLURM,
    # or by hand on each node with NODE_RANK set)
    first_process = is_global_rank_zero()
    job = JobDirectory.inspect(run_dir, overrides, is_multirun() or cfg.resume_in_place) if first_process else JobDirectory()
    if first_process:  # taken already when Hydra's callback (runner/guard.py) ran first
        RunLock.acquire(run_dir)
        clean_partial_files(run_dir)  # a run resumed in place after a kill
        clear_handoff(run_dir)
        if ckpt_path is not None and ckpt_path.parent.name == "checkpoints":  # the run resumed from
            source = ckpt_path.parent.parent
            if not lock_is_live(read_lock(source)):
                clean_partial_files(source)
    job.run_dir, job.overrides = run_dir, overrides
    if job.finished is not None:
        return job
    job.ckpt_path = ckpt_path or job.resume_from
    # a resumed run continues its W&B run; a sweep job resumed in place keeps its own
    earlier = job.previous or original_run_info(job.ckpt_path) or {}
    wandb_id = earlier.get("wandb_id") if job.ckpt_path else None
    # (a W&B sweep agent names the run it started the job for)
    job.wandb_id = wandb_id or (job.previous or {}).get("wandb_id") or os.environ.get("WANDB_RUN_ID") or new_run_id()
    if "wandb" in cfg.logger:
        with open_dict(cfg):
            cfg.logger.wandb.id = job.wandb_id
    if first_process:
        show_config(cfg, notes=[placement.precision_note, unpad_note(cfg.model.get("unpad"))])
        prepare_ddp_children(run_dir, job.ckpt_path, placement.world_size)
    return job


def instantiate_reporting(node, **kwargs):
    """Hydra's instantiate, with a mistake the target names (a UserError raised in its __init__: a data
    setting, a file) re-raised as itself, one line, rather than inside Hydra's InstantiationException."""
    from hydra.errors import InstantiationException

    try:
        return instantiate(node, **kwargs)
    except InstantiationException as err:
        if isinstance(err.__cause__, UserError):
            raise err.__cause__ from None
        raise


def build_data(cfg: DictConfig, placement, init=None):
    """The DataModule, its inputs present (fetched when the catalog has them), tokenizing with the
    vocabulary the starting weights were trained with; in a run of several processes, with the
    vocabulary and input hashes the first process worked out (:mod:`bert_exp.runner.handoff`)."""
    loader = instantiate(cfg.data.loader, batch_size=placement.device_batch_size)
    datamodule = instantiate_reporting(cfg.data, loader=loader)
    fetch_inputs(datamodule)
    if hasattr(datamodule, "check_storage"):  # an unusable bucket or directory before the vocabulary is trained
        datamodule.check_storage()
    if hasattr(datamodule, "check_corpus"):  # a table without its column, an empty corpus: before any work
        datamodule.check_corpus()
    if init is not None and init.vocab:
        datamodule.use_vocabulary(init.vocab, init.lowercase, init.tokenizer)
    elif placement.world_size > 1 and hasattr(datamodule, "shared_state"):
        share_data_state(datamodule, Path(cfg.paths.run_dir))
    return datamodule


def make_budget(cfg: DictConfig, module) -> Budget | None:
    """``trainer.budget``: a callback that stops the run when it is spent, and whose clock the module's
    learning-rate schedule follows."""
    if cfg.trainer.get("budget") is None:
        return None
    clock = BudgetClock(parse_budget(cfg.trainer.budget))
    module.budget_progress = clock.fraction
    log.info("budget: %s", clock.spec.describe())
    return Budget(clock)


def build_trainer(cfg: DictConfig, placement, budget: Budget | None = None):
    throughput = TokenThroughput()
    callbacks = [instantiate(c) for c in cfg.callbacks.values() if c] + [throughput, GracefulStop()]
    if budget is not None:  # first: a checkpoint saved after a step holds the clock with that step counted
        callbacks.insert(0, budget)
    patience = nonfinite_patience(cfg.trainer.get("detect_nonfinite", 3))
    if patience:
        callbacks.append(DivergenceCheck(patience))
    if cfg.model.get("unpad"):
        callbacks.append(UnpaddedBatches(cfg.model.unpad))
    loggers = [instantiate(c) for c in cfg.logger.values() if c]
    extra = {"accumulate_grad_batches": placement.accumulate_grad_batches}
    trainer_cfg = OmegaConf.to_container(cfg.trainer, resolve=True)
    if cfg.trainer.get("batch_ramp"):  # the module accumulates and clips (runner/batch_ramp.py)
        extra["accumulate_grad_batches"] = 1
        for key in ("gradient_clip_val", "gradient_clip_algorithm"):
            trainer_cfg.pop(key, None)
    for key in RUNNER_TRAINER_KEYS:  # ours, not Lightning's
        trainer_cfg.pop(key, None)
    if cfg.trainer.get("accelerator") == "tpu":  # what Lightning's XLA support lacks (bert_exp/runner/xla.py)
        from .xla import XlaSync, atomic_xla_checkpoint_io, bf16_weights_precision

        callbacks.insert(0, XlaSync())
        extra["plugins"] = [atomic_xla_checkpoint_io()]
        if trainer_cfg.get("precision") == "bf16-true":
            extra["plugins"].append(bf16_weights_precision())
            trainer_cfg.pop("precision")
    elif not cfg.trainer.get("plugins"):
        extra["plugins"] = [AtomicCheckpointIO()]
    trainer = instantiate(trainer_cfg, _partial_=True)(
        logger=loggers or False, callbacks=callbacks, default_root_dir=str(cfg.paths.run_dir), **extra
    )
    clamp_val_check_interval(trainer)
    return trainer, loggers, throughput


def nonfinite_patience(value) -> int:
    """``trainer.detect_nonfinite``: true = 3 steps, false/0 = off, N = N steps."""
    if value is True:
        return 3
    return int(value or 0)


class RunRecord:
    """``run.json``: written when the run starts (status ``running``) and again when it ends."""

    def __init__(self, run_dir: Path, info: dict, write: bool):
        self.run_dir, self.info, self.write = run_dir, info, write
        self.started = time.time()

    @classmethod
    def start(cls, cfg, job, trainer, datamodule, module, init, loggers, placement=None) -> RunRecord:
        resolved = OmegaConf.to_container(cfg, resolve=True)
        note = getattr(placement, "precision_note", None)
        info = {
            "status": "running",
            "run_dir": str(job.run_dir),
            "task": cfg.task.name,
            "experiment": cfg.experiment_name,
            "overrides": job.overrides,
            "wandb_id": job.wandb_id,
            "started_at": datetime.now(timezone.utc).isoformat(),
            "git": git_commit(),
            "versions": package_versions(),
            "host": {"machine": platform.machine(), "cpus": os.cpu_count(),
                     "accelerator": type(trainer.accelerator).__name__, "world_size": trainer.world_size,
                     "device_batch_size": datamodule.batch_size,
                     # a batch ramp's is its final one (the module accumulates; Lightning's is 1)
                     "accumulate_grad_batches": (placement.accumulate_grad_batches if placement is not None
                                                 else trainer.accumulate_grad_batches),
                     "cpu": cpu_kind().describe,
                     # precision=auto's choice and its reason; else the configured one
                     "precision": {"chosen": str(cfg.trainer.precision),
                                   "reason": note.split(": ", 1)[1] if note else "as configured"}},
            "data_checksums": datamodule.data_checksums if trainer.is_global_zero else None,  # hashed once
            "num_parameters": num_parameters(module.model),
            "parameters": parameter_counts(module.model),  # by part: embeddings, encoder, heads, trainable
            "resumed_from": str(job.ckpt_path) if job.ckpt_path else None,
            "initialised_from": init.source if init is not None else None,
            "initialised_from_hub": init.extra.get("hub") if init is not None else None,  # repo, revision, commit
            # what check_same_job compares when the job's directory is run again (rank 0 writes run.json)
            "initialised_from_sha256": (weights_sha256(init.source) if init is not None and trainer.is_global_zero
                                        else None),
            "monitor": cfg.task.monitor,
            "config": resolved,
        }
        record = cls(job.run_dir, info, trainer.is_global_zero)
        if record.write:
            save_config(cfg, Path(job.run_dir))
            datamodule.save_vocab(job.run_dir)
            (job.run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
            write_run_info(job.run_dir, info)
        for logger in loggers:
            logger.log_hyperparams(resolved)
        return record

    @classmethod
    def failure(cls, cfg, job, record: RunRecord | None, exc: BaseException) -> None:
        """Records a failed run: status ``failed``, the error and the step in run.json (a minimal one
        when the run failed before its record was started), the full traceback in the log file."""
        if not is_global_rank_zero() or job.run_dir is None:
            return
        _traceback_to_log_file(exc)
        if record is None:
            info = {"status": "running", "run_dir": str(job.run_dir), "task": cfg.task.get("name"),
                    "experiment": cfg.get("experiment_name"), "overrides": job.overrides,
                    "started_at": datetime.now(timezone.utc).isoformat(),
                    "resumed_from": str(job.ckpt_path) if job.ckpt_path else None}
            record = cls(Path(job.run_dir), info, True)
        record.fail(exc)

    def fail(self, exc: BaseException) -> None:
        if not self.write:
            return
        step = self.info.get("global_step")
        if step is None:
            step = last_step(self.run_dir) or 0
        self.info.update({"status": "failed", "global_step": step,
                          "error": {"type": type(exc).__name__, "message": str(exc), "step": step}})
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            write_run_info(self.run_dir, self.info)
        except OSError as err:  # a full disk: the log (or the console) has it
            log.error("could not record the failure in %s: %s", self.run_dir / "run.json", err)

    def finish(self, status: str, trainer, module, throughput, metrics: dict, loggers, **ending) -> None:
        """``ending``: how it ended (``diverged``, ``stopped_by``, ``last_checkpoint``), added to run.json."""
        if not self.write:
            return
        checkpoint = trainer.checkpoint_callback
        self.info.update({
            "status": status,
            "wall_seconds": round(time.time() - self.started, 2),
            "global_step": trainer.global_step,
            "fresh_parameters": getattr(module, "fresh_parameters", None),
            "throughput": {"tokens_per_sec": throughput.tokens_per_sec, "train_tokens": throughput.total_tokens,
                           "train_seconds": round(throughput.total_seconds, 3),
                           # the process's peak resident memory so far (Linux reports KiB)
                           "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024},
            "best_checkpoint": getattr(checkpoint, "best_model_path", None) or None,
            "best_score": _number(getattr(checkpoint, "best_model_score", None)),
            "metrics": metrics,
            **ending,
        })
        write_run_info(self.run_dir, self.info)
        finish_wandb(loggers, self.run_dir, self.info)
        monitor = self.info.get("monitor")
        value = (self.info.get("metrics") or {}).get(monitor)
        print(f"result: {status}, step {trainer.global_step}"
              + (f", {monitor} = {value:.4g}" if isinstance(value, float) else ""))
        for line in module.closing_lines(self.info.get("metrics") or {}):  # the task's own (SQuAD 2.0's breakdown)
            print(line)
        if ending.get("unpad"):
            print(UnpaddedBatches.closing_line_of(ending["unpad"]))
        print(f"run directory: {self.run_dir}")
        saved = ending.get("last_checkpoint")
        if ending.get("stopped_early"):
            early = ending["stopped_early"]
            print(f"stopped early at step {early.get('step', trainer.global_step)}: {early['reason']}")
        if status == "interrupted":
            if saved:
                print(f"interrupted; to resume from last.ckpt (step {saved['step']}): "
                      f"{resume_command(self.info.get('overrides'), self.run_dir)}")
            else:
                print("interrupted before this run saved a checkpoint", file=sys.stderr)
        elif status == "diverged":
            print(f"diverged at step {ending['diverged']['step']} ({ending['diverged']['reason']}); the last good "
                  + (f"checkpoint: {saved['path']} (step {saved['step']})" if saved else "checkpoint: none saved"),
                  file=sys.stderr)


# exit codes (besides 0, and 2 for a config or input mistake): 1 failed; 3 diverged; 128 + the signal's
# number when a signal stopped the run (130 Ctrl-C, 143 SIGTERM), its last.ckpt saved for a resume
EXIT_DIVERGED = 3


def _callback(trainer, kind):
    return next((c for c in trainer.callbacks if isinstance(c, kind)), None)


def fit(cfg, trainer, module, datamodule, ckpt_path, record: RunRecord, throughput, loggers) -> float | None:
    """Fits, then records how the run ended: ``finished``; ``interrupted`` by SIGTERM or Ctrl-C
    (last.ckpt saved after the step in flight; a second Ctrl-C stops at once); ``diverged`` (the loss
    went NaN or infinite: trainer.detect_nonfinite); ``failed`` (an error, re-raised)."""
    stop = _callback(trainer, GracefulStop) or GracefulStop()
    status, ending = "failed", {}
    try:
        with stop.handling_signals(trainer):
            try:
                trainer.fit(module, datamodule=datamodule, ckpt_path=str(ckpt_path) if ckpt_path else None)
                status = "finished"
                if module.last_validated_step != trainer.global_step and trainer.limit_val_batches:
                    # stopped between two validations: validate the final weights, so run.json reports them
                    trainer.validate(module, datamodule=datamodule, verbose=False)
            except SIGTERMException:
                status = "interrupted"  # LastCheckpoint saved last.ckpt
            except Diverged as err:
                status = "diverged"
                ending["diverged"] = {"step": err.step, "first_non_finite_step": err.first_step, "reason": err.reason}
                log.error("%s; the run stops (the last finite last.ckpt is kept)", err)
            except (KeyboardInterrupt, SystemExit):
                # Lightning turns a KeyboardInterrupt (a second Ctrl-C) into sys.exit(1)
                if stop.signal is None and not isinstance(sys.exc_info()[1], KeyboardInterrupt):
                    raise
                if status != "finished":
                    status = "interrupted"
                stop.stopped_at_once = True
    finally:
        if status == "interrupted":
            ending["stopped_by"] = signal.Signals(stop.signal or signal.SIGINT).name
            ending["stopped_at_once"] = stop.stopped_at_once
        last = _callback(trainer, LastCheckpoint)
        best = getattr(trainer.checkpoint_callback, "best_model_path", "") or ""
        if (status == "finished" and last is not None and not last.keep_after_finish and trainer.is_global_zero
                and os.path.isfile(last.path) and os.path.isfile(best)):
            os.remove(last.path)  # the best checkpoint is what stays (callbacks.last_checkpoint.keep_after_finish)
        elif last is not None and last.saved_step is not None:
            ending["last_checkpoint"] = {"path": last.path, "step": last.saved_step}
        metrics = {k: _number(v) for k, v in sorted(trainer.callback_metrics.items())}
        if getattr(datamodule, "data_report", None):  # what the prepared data holds and what it left out
            ending["data_report"] = datamodule.data_report
        filled = _callback(trainer, MaskFill)
        if filled is not None and filled.examples:
            ending["mask_fill"] = filled.examples
        if filled is not None and filled.accuracy:
            ending["masked_accuracy"] = filled.accuracy
        if filled is not None and filled.probability_ratio:
            ending["probability_over_unigram"] = round(filled.probability_ratio, 4)
        early = _callback(trainer, EarlyStop)
        if early is not None and early.stopped is not None:
            ending["stopped_early"] = early.stopped
        compiled = _callback(trainer, CompileModel)
        if compiled is not None and compiled.report():
            ending["compile"] = compiled.report()
        unpadded = _callback(trainer, UnpaddedBatches)
        if unpadded is not None:
            ending["unpad"] = unpadded.report()
        if module.ramped_accumulation is not None:  # the steps and microbatches the ramp ran
            ending["batch_ramp"] = module.ramped_accumulation.describe()
        record.finish(status, trainer, module, throughput, metrics, loggers, **ending)
    if status == "interrupted":
        sys.exit(128 + (stop.signal or signal.SIGINT))
    if status == "diverged":
        sys.exit(EXIT_DIVERGED)
    return metrics.get(cfg.task.monitor)


def write_run_info(run_dir: Path, info: dict) -> None:
    """run.json, strict JSON (a non-finite value is null, named under ``non_finite``), replaced atomically."""
    write_json(run_dir / "run.json", info, indent=2)


def _traceback_to_log_file(exc: BaseException) -> None:
    """The full traceback into the run's log file (Hydra's file handler), not onto the console."""
    handlers = [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
    if not handlers:
        return
    record = logging.LogRecord(__name__, logging.ERROR, __file__, 0, "the run failed: %s: %s",
                               (type(exc).__name__, exc), (type(exc), exc, exc.__traceback__))
    for handler in handlers:
        try:
            handler.handle(record)
        except Exception:  # noqa: BLE001
            pass


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
