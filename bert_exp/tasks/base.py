"""What every task module shares: the optimizer/schedule set-up, weight initialisation from a
checkpoint, and the model description saved into every Lightning checkpoint."""

from __future__ import annotations

import logging
from pathlib import Path

import lightning as L
import torch

from ..errors import UserError
from ..model import BertConfig
from .optim import DEFAULT_NO_DECAY, OptimizerFactory, SchedulerFactory, parameter_groups

log = logging.getLogger(__name__)


class CheckpointNotFound(UserError, FileNotFoundError):
    pass


def resolve_checkpoint(path: str | Path) -> Path:
    """A ``.ckpt`` file, or a run directory (its ``checkpoints/last.ckpt``)."""
    path = Path(path).expanduser()
    if path.is_dir():
        candidate = path / "checkpoints" / "last.ckpt"
        if not candidate.is_file():
            raise CheckpointNotFound(f"{path} is a directory without checkpoints/last.ckpt")
        return candidate
    if not path.is_file():
        raise CheckpointNotFound(f"checkpoint {path} does not exist")
    return path


class BertTask(L.LightningModule):
    def __init__(
        self,
        optimizer: OptimizerFactory,
        scheduler: SchedulerFactory | None = None,
        no_decay: list[str] = list(DEFAULT_NO_DECAY),
        vocab: list[str] | None = None,
    ):
        super().__init__()
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.no_decay = tuple(no_decay)
        self.vocab = vocab
        self.config: BertConfig  # set by subclasses

    def configure_optimizers(self):
        weight_decay = getattr(self.optimizer_factory, "keywords", {}).get("weight_decay", 0.0)
        optimizer = self.optimizer_factory(parameter_groups(self, weight_decay, self.no_decay))
        if self.scheduler_factory is None:
            return optimizer
        scheduler = self.scheduler_factory(optimizer, total_steps=int(self.trainer.estimated_stepping_batches))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def log_lr(self) -> None:
        self.log("lr", self.optimizers().param_groups[0]["lr"], on_step=True, on_epoch=False)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # enough to rebuild and export the model from the .ckpt alone
        checkpoint["bert_config"] = self.config.to_dict()
        checkpoint["task"] = type(self).__name__
        if self.vocab is not None:
            checkpoint["vocab"] = self.vocab

    def load_weights_from(self, path: str | Path) -> None:
        """Initialises from another run's checkpoint (weights only; optimizer and step start fresh)."""
        ckpt = resolve_checkpoint(path)
        state = torch.load(ckpt, map_location="cpu", weights_only=False)["state_dict"]
        missing, unexpected = self.load_state_dict(state, strict=False)
        if unexpected:
            raise ValueError(f"{ckpt}: unexpected parameters {unexpected[:5]}")
        if missing:
            log.warning("initialised from %s; fresh (not in the checkpoint): %s", ckpt, missing)
        else:
            log.info("initialised all weights from %s", ckpt)
