"""Logger factories that need a decision at run time."""

from __future__ import annotations

import logging
import netrc
import os

from lightning.pytorch.loggers import WandbLogger

from .ranks import is_global_rank_zero


def wandb_credentials_found() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def wandb_logger(
    save_dir: str,
    project: str = "bert_exp",
    group: str | None = None,
    job_type: str | None = None,
    name: str | None = None,
    offline: bool | None = None,
    log_model: bool = False,
    id: str | None = None,
) -> WandbLogger:
    """W&B logger; ``offline=None`` means online when credentials are found (or WANDB_MODE says so).

    ``id`` names the W&B run: a resumed run passes its original's, and W&B continues that run."""
    if offline is None:
        mode = os.environ.get("WANDB_MODE")
        offline = mode in ("offline", "dryrun") if mode else not wandb_credentials_found()
    os.makedirs(save_dir, exist_ok=True)
    return WandbLogger(save_dir=save_dir, project=project, group=group, job_type=job_type,
                       name=name or os.path.basename(os.path.normpath(save_dir)), offline=offline,
                       log_model=log_model, id=id, resume="allow")


class RankZeroFileHandler(logging.FileHandler):
    """Hydra's job log file, written by global rank 0 only.

    Under DDP every process re-runs the command in the run directory; without this each would add a
    log of its own (``train_ddp_process_1.log``, ...). Other ranks never open the file."""

    def __init__(self, filename, mode: str = "a", encoding: str | None = None, delay: bool = False,
                 errors: str | None = None):
        self.enabled = is_global_rank_zero()
        super().__init__(filename, mode, encoding, delay=delay or not self.enabled, errors=errors)

    def emit(self, record: logging.LogRecord) -> None:
        if self.enabled:
            super().emit(record)


class ConsoleFilter(logging.Filter):
    """The console shows bert_exp's own messages and anything at ERROR or above; the rest (Lightning's
    notices, third-party warnings) goes to the job's log file only."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name.startswith(("bert_exp", "__main__")) or record.levelno >= logging.ERROR
