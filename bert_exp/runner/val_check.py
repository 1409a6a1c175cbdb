"""``trainer.val_check_interval=N`` (validate every N training batches) where an epoch has fewer than N
batches: a preset's interval on a small corpus (pretrain_tiny's 200 on a corpus of a few files), or the
quick debug run's overrides on one. Lightning refuses it once it knows the epoch's length; here the run
validates at the end of each epoch instead, and says so once."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def clamp_val_check_interval(trainer) -> None:
    """Makes ``trainer`` validate at each epoch's end where ``val_check_interval`` is an int larger than the
    epoch's training batches (counted per epoch, as ``check_val_every_n_epoch`` set has it), with a warning."""
    loop = trainer.fit_loop
    setup_data = loop.setup_data  # where Lightning counts the batches, then checks the interval against them
    warned = False

    def clamped() -> None:
        nonlocal warned
        interval, every_n_epochs = trainer.val_check_interval, trainer.check_val_every_n_epoch
        if not isinstance(interval, int) or isinstance(interval, bool) or every_n_epochs is None:
            setup_data()
            return
        trainer.check_val_every_n_epoch = None  # Lightning's refusal skipped: the interval is fitted below
        try:
            setup_data()
        finally:
            trainer.check_val_every_n_epoch = every_n_epochs
        batches = loop.max_batches
        if 0 < batches < interval and trainer.limit_val_batches > 0:
            trainer.val_check_batch = batches  # the epoch's last batch
            if not warned:
                warned = True
                log.warning("trainer.val_check_interval=%d is more than an epoch's %d training batches: validating "
                            "at the end of each epoch instead (set it to at most %d, or "
                            "trainer.check_val_every_n_epoch=null to count batches across epochs)",
                            interval, batches, batches)

    loop.setup_data = clamped
