"""What every task module shares: the optimizer/schedule set-up, initialisation from a checkpoint, and
the model description saved into every Lightning checkpoint."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import lightning as L
import torch

from ..model import BertConfig
from ..model.hf import TIED_KEYS, Checkpoint, CheckpointError
from .checkpoints import checkpoint_metadata
from .optim import OptimSettings, parameter_groups

log = logging.getLogger(__name__)

def check_compatible(config: BertConfig, ckpt: Checkpoint) -> None:
    """Every architecture field must agree (BertConfig.mismatches); one line names each that does not."""
    mismatches = [f"model.{name}={getattr(config, name)!r} but the checkpoint has {getattr(ckpt.config, name)!r}"
                  for name in config.mismatches(ckpt.config)]
    if mismatches:
        raise CheckpointError(f"{ckpt.source} does not fit the configured model: " + "; ".join(mismatches)
                              + " (choose the model config, and the vocabulary, of the checkpoint)")


def gather_objects(items: list) -> list:
    """Every rank's items, concatenated (a no-op in a single process)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return items
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, items)
    return [item for part in gathered for item in part]


@dataclass
class Vocabulary:
    """The tokens the model's embedding rows stand for, in order, and whether its input was lower-cased:
    what a checkpoint carries so that its users tokenize as it was trained (None: not known). ``tokenizer``:
    the whole tokenizer.json where the tokens cannot rebuild it (a byte-level BPE), else None."""

    tokens: list[str] | None = field(default=None, repr=False)
    lowercase: bool = True
    tokenizer: str | None = field(default=None, repr=False)


ENCODER_MODES = ("finetune", "frozen")


class BertTask(L.LightningModule):
    # the head written into checkpoints (bert_exp.model.hf.HEADS): a stable name, not the class name
    head: str | None = None
    # parameter-name prefixes of the task's own head: the only weights that may start fresh
    head_prefixes: tuple[str, ...] = ()
    # a training budget's clock (runner/budget.py): the fraction spent, which the schedule follows
    budget_progress = None
    # trainer.batch_ramp (tasks/batch_ramp.py): the module steps the optimizer itself; None: Lightning does
    ramped_accumulation = None
    last_validated_step = -1

    def closing_lines(self, metrics: dict) -> list[str]:
        """What a finished run prints of this task after its ``result:`` line (the runner knows no task's
        metrics); ``metrics`` are the run's final ones, as in run.json."""
        return []

    def __init__(self, optim: OptimSettings, vocabulary: Vocabulary | None = None):
        """``optim``: the optimizer, schedule and weight-decay exemptions (the ``optim`` config group);
        ``vocabulary``: saved into every checkpoint (the runner hands over the data's)."""
        super().__init__()
        self.optim = optim
        self.vocabulary = vocabulary if vocabulary is not None else Vocabulary()
        self.config: BertConfig  # set by subclasses

    def use_encoder(self, mode: str) -> None:
        """``finetune`` trains everything; ``frozen`` (the feature-based approach) trains only the task's
        head: the encoder gets no gradient, its activations are not kept for a backward pass, and its
        dropout is off (a fixed feature extractor). Either way, parameters the head never reads
        (``model.unreached_prefixes()``) are frozen too."""
        if mode not in ENCODER_MODES:
            raise ValueError(f"task.module.encoder: {mode!r} is not one of {ENCODER_MODES}")
        self.encoder_mode = mode
        if mode == "frozen":
            self.model.bert.requires_grad_(False)
        self.freeze_parameters(self.model.unreached_prefixes())

    def freeze_parameters(self, prefixes: tuple[str, ...]) -> None:
        """No gradient for the model's parameters under these name prefixes: the ones no loss reaches, so
        that DDP (which waits for a gradient of every trainable parameter) does not stop at the second
        step. The optimizer never changed them anyway."""
        for name, param in self.model.named_parameters():
            if prefixes and name.startswith(prefixes):
                param.requires_grad_(False)

    def train(self, mode: bool = True):
        super().train(mode)
        if getattr(self, "encoder_mode", "finetune") == "frozen":
            self.model.bert.eval()  # a frozen encoder is a fixed feature extractor: no dropout
        return self

    @property
    def vocab(self) -> list[str] | None:
        return self.vocabulary.tokens

    @property
    def lowercase(self) -> bool:
        return self.vocabulary.lowercase

    def configure_optimizers(self):
        make_optimizer, make_scheduler = self.optim.optimizer, self.optim.scheduler
        weight_decay = getattr(make_optimizer, "keywords", {}).get("weight_decay", 0.0)
        optimizer = make_optimizer(parameter_groups(self, weight_decay, self.optim.no_decay))
        if make_scheduler is None:
            return optimizer
        if self.budget_progress is not None:  # a training budget: the schedule runs on its clock
            scheduler = make_scheduler(optimizer, total_steps=1, progress=self.budget_progress)
        else:
            scheduler = make_scheduler(optimizer, total_steps=int(self.trainer.estimated_stepping_batches))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        """Lets fused AdamW clip under bf16-mixed. Lightning refuses any optimizer that unscales gradients
        itself under mixed precision, which is needed only when a loss scaler is active (16-mixed); with
        bf16 or fp32 the gradients are unscaled and clipping them directly is exact."""
        scaler = getattr(self.trainer.precision_plugin, "scaler", None)
        if (gradient_clip_val and scaler is None and getattr(optimizer, "_step_supports_amp_scaling", False)
                and gradient_clip_algorithm in (None, "norm")):
            torch.nn.utils.clip_grad_norm_(self.parameters(), gradient_clip_val)
            return
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def on_before_optimizer_step(self, optimizer) -> None:
        if self.ramped_accumulation is not None:  # Lightning clips only what it steps itself
            self.ramped_accumulation.clip(self, optimizer)

    def on_validation_end(self) -> None:
        if not self.trainer.sanity_checking:
            self.last_validated_step = self.global_step

    def log_lr(self) -> None:
        self.log("lr", self.optimizers().param_groups[0]["lr"], on_step=True, on_epoch=False)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint.update(checkpoint_metadata(self))
        if self.ramped_accumulation is not None:
            checkpoint["batch_ramp"] = self.ramped_accumulation.state_dict()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if self.ramped_accumulation is not None and "batch_ramp" in checkpoint:
            self.ramped_accumulation.load_state_dict(checkpoint["batch_ramp"])

    def initialise_from(self, ckpt: Checkpoint) -> None:
        """Loads the checkpoint's weights (optimizer and step start fresh). Weights of this task's head
        that the checkpoint lacks start fresh and are reported; anything else missing, or any shape
        that differs, is an error."""
        check_compatible(self.config, ckpt)
        if ckpt.config.causal and not self.config.causal:
            # a left-to-right model keeps its mask: it never learned to read the future
            log.info("%s is a causal (left-to-right) model: the task keeps its causal attention mask", ckpt.source)
            self.config.causal = True
            for module in self.model.modules():
                if hasattr(module, "causal"):
                    module.causal = True
        pooling, trained_on = getattr(self.model, "pooling", None), ckpt.extra.get("pooling", "cls")
        if pooling and ckpt.head == "classification" and trained_on != pooling:
            log.warning("%s was fine-tuned with task.module.pooling=%s; this run reads %s: its classifier "
                        "carries over but was trained on other features", ckpt.source, trained_on, pooling)
        own = self.model.state_dict()
        state = {k: v for k, v in ckpt.state_dict.items() if k in own}
        for key, value in state.items():
            if value.shape != own[key].shape:
                raise CheckpointError(f"{ckpt.source}: {key} has shape {tuple(value.shape)}, "
                                      f"the model expects {tuple(own[key].shape)}")
        missing, _ = self.model.load_state_dict(state, strict=False)
        missing = [k for k in missing if k not in TIED_KEYS]
        fresh_ok = self.head_prefixes + ("bert.pooler.",)
        not_allowed = [k for k in missing if not k.startswith(fresh_ok)]
        if not_allowed:
            raise CheckpointError(f"{ckpt.source} lacks encoder weights: {not_allowed[:5]}")
        unused = sorted(set(ckpt.state_dict) - set(own) - set(TIED_KEYS))
        log.info("initialised from %s (%d tensors)", ckpt.source, len(state))
        if missing:
            log.warning("not in the checkpoint, initialised fresh: %s", ", ".join(missing))
        if unused:
            log.info("in the checkpoint but not used by this task: %s", ", ".join(unused))
        self.fresh_parameters = missing
