"""``trainer.batch_ramp`` from the config: checked before any work (:func:`ramp_from_config`), then
given to the task module (:func:`attach_batch_ramp`), which steps the optimizer itself
(:mod:`bert_exp.tasks.batch_ramp`)."""

from __future__ import annotations

from omegaconf import DictConfig

from ..tasks.batch_ramp import SHAPES, BatchRamp, RampedAccumulation
from .budget import BudgetError, parse_budget
from .placement import _strategy_name
from .validation import ConfigError

SETTINGS = ("start", "tokens", "share", "shape")


def ramp_from_config(cfg: DictConfig, placement) -> BatchRamp | None:
    """The ramp in microbatches of the run's placement, or None; every mistake is one ConfigError naming
    its key."""
    spec = cfg.trainer.get("batch_ramp")
    if not spec:
        return None
    key = "trainer.batch_ramp"
    unknown = sorted(set(spec) - set(SETTINGS))
    if unknown:
        raise ConfigError(f"{key}.{unknown[0]}: not a setting of the ramp ({', '.join(SETTINGS)})")
    if cfg.task.name != "pretraining":
        raise ConfigError(f"{key} ramps a pre-training batch; task {cfg.task.name} has none (set {key}=null)")
    if "deepspeed" in _strategy_name(cfg.trainer):
        raise ConfigError(f"{key}: DeepSpeed accumulates gradients itself; use ddp or fsdp with a ramp")
    microbatch = placement.world_size * placement.device_batch_size
    start = spec.get("start")
    if not isinstance(start, int) or isinstance(start, bool) or start <= 0 or start % microbatch:
        raise ConfigError(f"{key}.start={start!r}: the first steps' batch, in sequences: a positive multiple of "
                          f"the microbatch of {microbatch} (world size {placement.world_size} x device batch "
                          f"{placement.device_batch_size}; set device_batch_size to choose it)")
    if start > cfg.global_batch_size:
        raise ConfigError(f"{key}.start={start} is larger than global_batch_size={cfg.global_batch_size}, "
                          "the batch it ramps up to")
    if (spec.get("tokens") is None) == (spec.get("share") is None):
        raise ConfigError(f"{key}: give the ramp's length once, as tokens (2M, 50B) or as a share of the run")
    if cfg.trainer.get("budget") is None and int(cfg.trainer.get("max_steps") or -1) <= 0:
        raise ConfigError(f"{key}: a ramp needs the run's length (trainer.max_steps or trainer.budget): the "
                          "epochs' batches are microbatches, not steps")
    if spec.get("share") is not None:
        share = spec.share
        if not isinstance(share, (int, float)) or isinstance(share, bool) or share <= 0:
            raise ConfigError(f"{key}.share={share!r}: a positive share of the run (0.6: over its first 60 %)")
    else:
        try:
            tokens = parse_budget(spec.tokens)
        except BudgetError:
            tokens = None
        if tokens is None or tokens.kind != "tokens":
            raise ConfigError(f"{key}.tokens={spec.tokens!r}: expected a number of tokens (500k, 2M, 50B)")
    shape = spec.get("shape", "linear")
    if shape not in SHAPES:
        raise ConfigError(f"{key}.shape={shape!r}: expected one of {', '.join(SHAPES)}")
    return BatchRamp(start // microbatch, placement.accumulate_grad_batches, shape)


def attach_batch_ramp(cfg: DictConfig, placement, module) -> None:
    """Hands the module its ramp and the progress it follows: the budget's clock or the steps over
    ``max_steps`` (``share``), or the tokens of the microbatches trained (``tokens``: sequences of
    ``data.instances.max_seq_length``, padding included)."""
    ramp = ramp_from_config(cfg, placement)
    if ramp is None:
        return
    spec = cfg.trainer.batch_ramp
    if spec.get("share") is not None:
        share = float(spec.share)
        if module.budget_progress is not None:
            clock = module.budget_progress

            def progress(accumulation):
                return clock() / share
        else:
            steps = share * int(cfg.trainer.max_steps)

            def progress(accumulation):
                return accumulation.steps_done / steps
    else:
        per_microbatch = placement.world_size * placement.device_batch_size * int(cfg.data.instances.max_seq_length)
        tokens = parse_budget(spec.tokens).amount

        def progress(accumulation):
            return accumulation.microbatches_done * per_microbatch / tokens
    module.ramped_accumulation = RampedAccumulation(ramp, progress, cfg.trainer.get("gradient_clip_val"),
                                                    cfg.trainer.get("gradient_clip_algorithm"))
    module.automatic_optimization = False
