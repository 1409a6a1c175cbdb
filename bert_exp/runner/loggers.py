"""Logger factories that need a decision at run time."""

from __future__ import annotations

import logging
import netrc
import os
import typing

from lightning.pytorch.loggers import WandbLogger

from .ranks import is_global_rank_zero


def wandb_credentials_found() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


WANDB_MODES = ("online", "offline", "disabled")


def wandb_logger(
    save_dir: str,
    project: str = "bert_exp",
    entity: str | None = None,
    group: str | None = None,
    job_type: str | None = None,
    name: str | None = None,
    tags: list[str] | None = None,
    notes: str | None = None,
    mode: typing.Literal["online", "offline", "disabled"] | None = None,
    log_model: bool = False,
    id: str | None = None,
) -> WandbLogger:
    """W&B logger; ``mode=None`` means WANDB_MODE when set, else online when credentials are found
    (``wandb login``) and offline otherwise (``wandb sync`` uploads it later).

    ``entity`` is the user or team that owns ``project`` (None: the login's default entity). ``id`` names
    the W&B run: a resumed run passes its original's, and W&B continues that run."""
    from .validation import ConfigError

    if mode is None:
        env = os.environ.get("WANDB_MODE")
        mode = ("offline" if env in ("offline", "dryrun") else env) if env else \
            "online" if wandb_credentials_found() else "offline"
    if mode not in WANDB_MODES:  # from WANDB_MODE (the config's value is checked before any work)
        raise ConfigError(f"WANDB_MODE={mode}: one of {', '.join(WANDB_MODES)}")
    os.makedirs(save_dir, exist_ok=True)
    logger = WandbLogger(save_dir=save_dir, project=project, entity=entity, group=group, job_type=job_type,
                         name=name or os.path.basename(os.path.normpath(save_dir)), tags=list(tags or []) or None,
                         notes=notes, offline=mode == "offline", mode=mode, log_model=log_model, id=id,
                         resume="allow")
    # Lightning passes anonymous=None to wandb.init (we never set it), and wandb (0.31 here) warns on
    # every run that the setting has no effect; left out, wandb.init sees it unset
    logger._wandb_init.pop("anonymous", None)
    return logger


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
