"""Callbacks of our own (everything else comes from Lightning)."""

from __future__ import annotations

import collections

import logging
import math
import os
import random
import signal
import threading
import time
from contextlib import contextmanager

import lightning as L
import numpy as np
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import EarlyStopping, TQDMProgressBar
from lightning.pytorch.utilities.exceptions import SIGTERMException

log = logging.getLogger(__name__)


class TokenThroughput(L.Callback):
    """Logs ``train/tokens_per_sec``: real (non-padding) tokens per second of training wall time,
    data loading included and validation excluded, summed over all processes.

    Tokens are summed on the device and read only when the rate is logged (every ``log_every_n_steps``),
    so the training loop never waits for the device in between; the window's clock stops after that
    read, which waits for the steps queued on the device."""

    def __init__(self, log_every_n_steps: int = 10):
        self.log_every_n_steps = log_every_n_steps
        self.counted_tokens = 0  # read from the device
        self.total_seconds = 0.0
        self._window_tokens = None  # a device tensor until read
        self._window_seconds = 0.0
        self._world_size = 1
        self._last = None

    @property
    def total_tokens(self) -> int:
        unread = int(self._window_tokens) * self._world_size if self._window_tokens is not None else 0
        return self.counted_tokens + unread

    @property
    def tokens_per_sec(self) -> float | None:
        return self.total_tokens / self.total_seconds if self.total_seconds else None

    def _restart_clock(self, *args) -> None:
        self._last = time.perf_counter()

    on_train_epoch_start = _restart_clock
    on_validation_end = _restart_clock

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._last is None:
            self._last = time.perf_counter()
            return
        tokens = batch["attention_mask"].sum()
        self._window_tokens = tokens if self._window_tokens is None else self._window_tokens + tokens
        self._world_size = trainer.world_size
        log_now = trainer.global_step % self.log_every_n_steps == 0
        window = int(self._window_tokens) * trainer.world_size if log_now else 0  # waits for the device
        now = time.perf_counter()
        seconds = now - self._last
        self._last = now
        self.total_seconds += seconds
        self._window_seconds += seconds
        if log_now and self._window_seconds > 0:
            self.counted_tokens += window
            self._window_tokens = None
            pl_module.log("train/tokens_per_sec", window / self._window_seconds, on_step=True)
            self._window_seconds = 0.0


class ProgressBar(TQDMProgressBar):
    """Lightning's progress bar, showing ``train/loss`` (and the other keys in ``show``) read from the
    device only when the bar refreshes. A value logged with ``prog_bar=True`` is instead converted to a
    number after every batch, which would make every step wait for the device."""

    def __init__(self, refresh_rate: int = 10, show: list[str] = ["train/loss"], **kwargs):
        super().__init__(refresh_rate=refresh_rate, **kwargs)
        self.show = list(show)

    def get_metrics(self, trainer, pl_module) -> dict:
        metrics = super().get_metrics(trainer, pl_module)
        for key in self.show:
            value = trainer.callback_metrics.get(key)
            if isinstance(value, torch.Tensor) and value.numel() == 1:
                metrics.setdefault(key, value.item())
        return metrics


class CompileModel(L.Callback):
    """Compiles the task's BERT with ``torch.compile`` when training starts (``hardware=gpu``'s default, or
    ``callbacks=compile``), and reports what compiling cost: steps that took over three times the
    median step (the first, and one per new shape) are the warm-up, their time beyond the median its cost
    (printed at the end and kept in run.json, ``compile``).

    ``nn.Module.compile`` works in place, so parameter names (and checkpoints) stay HuggingFace's.
    ``dynamic: false`` suits batches of a few fixed shapes (``data.loader.pad_to_multiple_of``, or
    ``pad_to_max_length`` as on TPU): each shape compiles once."""

    def __init__(self, mode: str | None = None, dynamic: bool | None = None, fullgraph: bool = False,
                 backend: str = "inductor"):
        self.options = {"mode": mode, "dynamic": dynamic, "fullgraph": fullgraph, "backend": backend}
        self.step_seconds: list[float] = []
        self._started = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        pl_module.model.compile(**self.options)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._started = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._started is not None:
            self.step_seconds.append(time.perf_counter() - self._started)

    def report(self) -> dict | None:
        if len(self.step_seconds) < 2:
            return None
        median = float(np.median(self.step_seconds))
        slow = [s for s in self.step_seconds if s > 3 * median]
        return {"first_step_seconds": round(self.step_seconds[0], 3), "median_step_seconds": round(median, 4),
                "compiling_steps": len(slow), "warm_up_seconds": round(sum(s - median for s in slow), 2)}

    def on_fit_end(self, trainer, pl_module) -> None:
        report = self.report()
        if report and trainer.is_global_zero:
            print(f"torch.compile: {report['warm_up_seconds']} s of warm-up in {report['compiling_steps']} step(s) "
                  f"(the first took {report['first_step_seconds']} s, the median step {report['median_step_seconds']} s)")


def _random_states() -> dict:
    # numpy's key as a tensor: checkpoints stay loadable with torch.load(weights_only=True)
    kind, key, pos, has_gauss, gauss = np.random.get_state()
    states = {"torch": torch.get_rng_state(), "numpy": (kind, torch.from_numpy(key.astype(np.int64)), pos, has_gauss, gauss),
              "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state()
    return states


def _restore_random_states(states: dict) -> None:
    torch.set_rng_state(states["torch"])
    kind, key, pos, has_gauss, gauss = states["numpy"]
    np.random.set_state((kind, key.numpy().astype(np.uint32), pos, has_gauss, gauss))
    # Python's state is (version, a tuple of 625 ints, gauss); a checkpoint written through torch_xla
    # (xm.save) comes back with lists for tuples, which random.setstate refuses
    version, internal, gauss_next = states["python"]
    random.setstate((version, tuple(internal), gauss_next))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state(states["cuda"])


class RandomStates(L.Callback):
    """Puts every process's global random state (dropout draws from it) in each checkpoint, and
    restores it just before the first step of a resumed run, so the run continues as if never stopped.

    The training steps draw from a stream of their own: the state at the end of each training batch is
    kept and put back at the start of the next, so whatever runs in between (validation, a DataLoader
    iterator drawing its base seed from the global generator at each epoch or evaluation, checkpoint
    saving) does not shift it, and the state a checkpoint holds is the one the next step starts from,
    wherever it was saved (a periodic save before a validation, the SIGTERM save after it, an epoch end).
    Nothing else in the data path needs saving: samplers draw their order from a generator seeded by
    (seed, epoch) and masks from generators seeded per example (bert_exp/data), so both are a function
    of the data position, which the DataModule's state holds."""

    def __init__(self):
        self._to_restore: dict | None = None
        self._train_state: dict | None = None  # the training stream, as the next batch starts from it
        self._batches_started = 0
        self._snapshot_of = -1  # the batch whose end _train_state was taken at

    def _states_to_save(self) -> dict:
        # inside a batch's end hooks before ours ran (LastCheckpoint's periodic save), only the training
        # step has drawn since the batch started: the current state is the stream's
        if self._train_state is not None and self._snapshot_of == self._batches_started:
            return self._train_state
        return _random_states()

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        states = self._states_to_save()
        if dist.is_available() and dist.is_initialized() and trainer.world_size > 1:
            gathered = [None] * trainer.world_size  # every rank builds the checkpoint; rank 0 writes it
            dist.all_gather_object(gathered, states)
            checkpoint["random_states"] = gathered
        else:
            checkpoint["random_states"] = [states]

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        states = checkpoint.get("random_states")
        if states and len(states) == trainer.world_size:
            self._to_restore = states[trainer.global_rank]
        elif states:
            log.warning("the checkpoint holds random states for %d processes, not %d: they are not restored",
                        len(states), trainer.world_size)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._batches_started += 1
        states, self._to_restore = self._to_restore or self._train_state, None
        if states is not None:
            _restore_random_states(states)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._train_state = _random_states()
        self._snapshot_of = self._batches_started


def mid_step(trainer) -> bool:
    """Whether the batch just trained on left its optimizer step unfinished (an accumulation, Lightning's
    or a batch ramp's): a checkpoint, a stop or a step count waits for the step's end."""
    ramp = getattr(trainer.lightning_module, "ramped_accumulation", None)
    if ramp is not None:
        return ramp.mid_step
    return trainer.fit_loop.epoch_loop._should_accumulate()


def weights_finite(module) -> bool:
    """Whether every parameter of ``module`` is finite (one device synchronisation)."""
    flags = [torch.isfinite(p.detach()).all() for p in module.parameters()]
    return bool(torch.stack(flags).all()) if flags else True


class LastCheckpoint(L.Callback):
    """Keeps ``last.ckpt`` current: every ``every_n_train_steps`` optimizer steps, after the final step
    (``max_steps``, the last epoch, a spent budget or early stopping), and on SIGTERM or Ctrl-C (a
    preempted or cancelled job) after the step in flight. A killed run loses at most N steps; a resumed
    one continues from here (``ckpt_path=RUN_DIR``).

    Lightning turns SIGTERM into an exception at the end of the current batch, on every rank (GracefulStop
    makes Ctrl-C do the same and waits for the end of an accumulation); the checkpoint is written before
    the run stops. Files are replaced atomically (AtomicCheckpointIO). Weights that are not finite (a run
    diverging) are never saved: the last good ``last.ckpt`` stays."""

    def __init__(self, dirpath: str, every_n_train_steps: int = 500, keep_after_finish: bool = True):
        """``keep_after_finish=false``: a run that finishes deletes its last.ckpt (the full training state,
        three times the weights' size with AdamW's moments) and keeps only the best checkpoint, which
        ``task.init_from=RUN`` then uses; an interrupted or diverged run keeps it to resume from."""
        self.dirpath, self.every_n_train_steps = dirpath, every_n_train_steps
        self.keep_after_finish = keep_after_finish
        self._saved_step = -1

    @property
    def path(self) -> str:
        return os.path.join(self.dirpath, "last.ckpt")

    @property
    def saved_step(self) -> int | None:
        """The optimizer step of the last.ckpt this run wrote (None: it wrote none)."""
        return self._saved_step if self._saved_step >= 0 else None

    def _save(self, trainer) -> None:
        if trainer.global_step == self._saved_step or trainer.sanity_checking:
            return
        if not weights_finite(trainer.lightning_module):
            log.warning("not saving %s at step %d: the weights are not finite (the previous one stays)",
                        self.path, trainer.global_step)
            return
        trainer.save_checkpoint(self.path, weights_only=False)  # the full training state
        self._saved_step = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if mid_step(trainer):
            return  # mid-accumulation: the optimizer has not stepped
        step = trainer.global_step
        if (self.every_n_train_steps and step % self.every_n_train_steps == 0) or step == trainer.max_steps:
            self._save(trainer)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if trainer.max_epochs is not None and trainer.max_epochs > 0 and trainer.current_epoch + 1 >= trainer.max_epochs:
            self._save(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        # however training ended (a spent budget, early stopping): last.ckpt is the final step, the model
        # a later phase or task.init_from=RUN starts from, not the last multiple of every_n_train_steps
        self._save(trainer)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if isinstance(exception, SIGTERMException) and trainer.state.fn == "fit":
            self._save(trainer)
            if trainer.is_global_zero:  # once, not once per process
                log.warning("stopped by a signal: saved %s at step %d", self.path, trainer.global_step)


class EarlyStop(EarlyStopping):
    """Lightning's early stopping on the monitored metric (``callbacks=early_stopping``), remembering why
    and at which step it stopped, for run.json and the closing lines."""

    stopped = None  # {"step", "reason"} once it has stopped the run

    def _evaluate_stopping_criteria(self, current: torch.Tensor):
        should_stop, reason = super()._evaluate_stopping_criteria(current)
        if should_stop and self.stopped is None:
            self.stopped = {"reason": (reason or "").strip()}
        return should_stop, reason

    def on_validation_end(self, trainer, pl_module) -> None:
        super().on_validation_end(trainer, pl_module)
        if self.stopped is not None and "step" not in self.stopped:
            self.stopped["step"] = trainer.global_step


class Diverged(RuntimeError):
    """The loss or the gradient norm stayed non-finite for ``patience`` optimizer steps."""

    def __init__(self, step: int, first_step: int, reason: str):
        super().__init__(f"diverged: {reason} from step {first_step}; stopped at step {step}")
        self.step, self.first_step, self.reason = step, first_step, reason


class DivergenceCheck(L.Callback):
    """Stops a run (raises Diverged) once the training loss or the global gradient norm has been NaN or
    infinite for ``patience`` optimizer steps in a row (``trainer.detect_nonfinite``).

    The gradient norm is checked only without a loss scaler: under ``16-mixed`` precision an infinite
    gradient makes the scaler skip the step and lower its scale, which is its normal work. The verdict is
    kept on the device (steps in a row, where the streak began, the step it reached ``patience``) and read
    every ``check_every`` optimizer steps (the trainer's ``log_every_n_steps`` by default) and when
    training ends, so the loop never waits for the device in between; the error names the step the
    streak reached ``patience``, though the run stops at the next read."""

    def __init__(self, patience: int = 3, check_every: int | None = None):
        if patience < 1:
            raise ValueError(f"patience={patience}: must be at least 1")
        self.patience = patience
        self.check_every = check_every
        self._grad_flag: torch.Tensor | None = None
        self._loss_flag: torch.Tensor | None = None
        self._state: torch.Tensor | None = None  # [in a row, streak start, loss bad, grad bad, tripped at, start, loss, grad]

    def on_train_start(self, trainer, pl_module) -> None:
        if self.check_every is None:
            self.check_every = max(int(trainer.log_every_n_steps or 1), 1)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if getattr(trainer.precision_plugin, "scaler", None) is not None:
            return
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        if grads:
            self._grad_flag = ~torch.isfinite(torch.nn.utils.get_total_norm(grads))

    def _update(self, step: int, device) -> None:
        """One optimizer step's verdict, on the device."""
        no = torch.zeros((), dtype=torch.bool, device=device)
        loss_bad = self._loss_flag.to(device) if self._loss_flag is not None else no
        grad_bad = self._grad_flag.to(device) if self._grad_flag is not None else no
        self._loss_flag = self._grad_flag = None
        if self._state is None:
            self._state = torch.tensor([0, -1, 0, 0, -1, -1, 0, 0], dtype=torch.long, device=device)
        state = self._state
        bad = (loss_bad | grad_bad).long()
        run = (state[0] + 1) * bad
        start = torch.where(run == 1, step, state[1])
        loss = (state[2] | loss_bad.long()) * bad
        grad = (state[3] | grad_bad.long()) * bad
        trips = ((run >= self.patience) & (state[4] < 0)).long()
        tripped = torch.where(trips.bool(), torch.stack([torch.full_like(run, step), start, loss, grad]), state[4:])
        self._state = torch.cat([torch.stack([run, start, loss, grad]), tripped])

    def _verdict(self) -> None:
        if self._state is None:
            return
        _, _, _, _, step, first, loss, grad = self._state.tolist()  # waits for the device
        if step >= 0:
            reasons = [r for r, bad in (("the gradient norm", grad), ("the training loss", loss)) if bad]
            raise Diverged(step, first, " and ".join(sorted(reasons)) + " not finite")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor):
            flag = ~torch.isfinite(loss.detach())
            self._loss_flag = flag if self._loss_flag is None else self._loss_flag | flag
        if mid_step(trainer):
            return  # one verdict per optimizer step
        self._update(trainer.global_step, pl_module.device)
        if trainer.global_step % self.check_every == 0 or trainer.global_step == trainer.max_steps:
            self._verdict()

    def on_train_end(self, trainer, pl_module) -> None:
        self._verdict()


class GracefulStop(L.Callback):
    """SIGTERM and Ctrl-C (SIGINT) stop a run at the end of an optimizer step, never inside a gradient
    accumulation: LastCheckpoint then saves last.ckpt, and the run ends ``interrupted`` (exit code
    128 + the signal's number: 143, 130). A second Ctrl-C stops at once, without saving (the previous
    last.ckpt stays).

    Lightning's SIGTERM handler (its notifier replaced by ``_forward_to_children``: it forwards the signal
    to DDP children and nothing more) runs first and sets ``trainer.received_sigterm``, which Lightning
    checks after every batch. During a fit the flag is held back to the end of the next batch that
    completes an optimizer step; there last.ckpt is saved and the flag set. Under DDP the ranks agree on
    that batch (one boolean reduced per step). Ctrl-C takes the same path. The handlers are installed for the
    duration of ``handling_signals`` (the runner's fit)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.signal: int | None = None  # the first stop signal received
        self.stopped_at_once = False
        self._trainer = None
        self._pending = False
        self._forwarded = False

    @contextmanager
    def handling_signals(self, trainer):
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        self._trainer, self._pending, self._forwarded = trainer, False, False
        previous = {s: signal.getsignal(s) for s in self.SIGNALS}
        for s in self.SIGNALS:
            signal.signal(s, self._on_signal)
        # Lightning (2.6 here) composes its own SIGTERM handler with ours when the fit starts; it
        # forwards the signal to the DDP children, then calls dist.broadcast inside the handler. A
        # collective at whatever point the signal lands pairs with another rank's gradient all-reduce
        # and both wait until the process group's timeout (Lightning-AI/pytorch-lightning#20825). The ranks here agree on the stop
        # at a batch end (_agreed), so Lightning's handler is replaced by one that only forwards.
        connector = trainer._signal_connector
        connector._sigterm_notifier_fn = self._forward_to_children
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler if handler is not None else signal.SIG_DFL)
            vars(connector).pop("_sigterm_notifier_fn", None)
            self._trainer = None

    def _forward_to_children(self, signum, frame) -> None:
        """Lightning's SIGTERM notifier without its collective: the processes this one launched (DDP
        ranks on this machine) get the signal once; the flag Lightning checks is set (GracefulStop's own
        handler, called next, holds it back to the step's end)."""
        trainer = self._trainer
        if trainer is None:
            return
        connector = trainer._signal_connector
        if not connector.received_sigterm and not self._forwarded:
            self._forwarded = True
            launcher = trainer.strategy.launcher
            if launcher is not None:
                launcher.kill(signum)
        connector.received_sigterm = True

    def _on_signal(self, signum, frame) -> None:
        if signum == signal.SIGINT and self.signal is not None:
            self.stopped_at_once = True
            os.write(2, b"\nsecond Ctrl-C: stopping at once, without saving\n")
            raise KeyboardInterrupt
        if self.signal is None:
            self.signal = signum
            if signum == signal.SIGINT:
                os.write(2, b"\nCtrl-C: stopping after the step in flight and saving last.ckpt "
                            b"(Ctrl-C again stops at once, without saving)\n")
        trainer = self._trainer
        if trainer is None:
            return
        if trainer.state.fn == "fit":  # stopped (and saved) at the next step or epoch end: see the hooks
            trainer._signal_connector.received_sigterm, self._pending = False, True
        else:
            trainer._signal_connector.received_sigterm = True

    def _stop_now(self, trainer) -> None:
        # saved here, in on_train_batch_end, not when Lightning's SIGTERMException arrives: at an epoch's
        # last batch Lightning resumes a checkpoint written here into the next epoch, one written after
        # the batch into an epoch one batch long (and the sampler's epoch out of step)
        self._pending = False
        for callback in trainer.callbacks:
            if isinstance(callback, LastCheckpoint):
                callback._save(trainer)
        trainer._signal_connector.received_sigterm = True  # Lightning stops after this batch or epoch

    def _agreed(self, trainer, hold: bool) -> bool:
        """Whether to stop now, the same on every rank (a rank may have had the signal a batch later)."""
        decision = self._pending and not hold
        if trainer.world_size > 1:
            decision = trainer.strategy.reduce_boolean_decision(decision, all=False)
        return decision

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        hold = mid_step(trainer)
        if not hold and self._agreed(trainer, hold):
            self._stop_now(trainer)


class MaskFill(L.Callback):
    """When a masked-LM pre-training ends, the model fills one [MASK] in each of a few held-out validation
    instances, shown beside the word that was there: what it learned, in words. A whole word of segment A
    near its middle is masked (a word of one piece, three or more letters); the prediction is the model's
    top three. Then figures for the same held-out text (15 % of the pieces of up to ``accuracy_instances``
    instances, each replaced by [MASK], seeded): the share of masked pieces whose top guess is right, and
    whose right piece is among the top 10, beside what always guessing the held-out text's most frequent
    piece (its 10 most frequent) gets: the model's use of context, against frequency alone. Printed by the first
    process and kept in run.json (``mask_fill``, ``masked_accuracy``)."""

    def __init__(self, num_examples: int = 5, context: int = 10, accuracy_instances: int = 128):
        self.num_examples, self.context, self.accuracy_instances = num_examples, context, accuracy_instances
        self.examples: list[dict] = []
        self.accuracy: dict | None = None
        self.probability_ratio: float | None = None

    def on_fit_end(self, trainer, pl_module) -> None:
        datamodule = trainer.datamodule
        if (not trainer.is_global_zero or getattr(pl_module, "objective", None) not in ("mlm_nsp", "mlm", "mlm_sop")
                or "val" not in getattr(datamodule, "datasets", {})):
            return
        dataset, tokenizer = datamodule.datasets["val"], datamodule.tokenizer
        mask_id = tokenizer.token_to_id("[MASK]")
        stride = max(len(dataset) // self.num_examples, 1)
        was_training = pl_module.training
        pl_module.eval()
        try:
            for index in range(0, min(len(dataset), stride * self.num_examples), stride):
                example = self._fill(pl_module, tokenizer, dataset[index], mask_id)
                if example is not None:
                    self.examples.append(example)
            self.accuracy = self._accuracy(pl_module, tokenizer, dataset, mask_id)
        finally:
            pl_module.train(was_training)
        if self.examples:
            print("the model fills [MASK] in held-out text (its top 3, then the word that was there):")
            for e in self.examples:
                print(f"  {e['text']}\n      -> {', '.join(e['predicted'])}   (was: {e['truth']})")
        if self.accuracy:
            a = self.accuracy
            print(f"held-out masked pieces ({a['masked']:,}): the top guess right {a['accuracy']:.1%}, the right piece in "
                  f"the top 10 {a['top10']:.1%}; always guessing the most frequent piece ({a['most_frequent']!r}) "
                  f"{a['baseline']:.1%}, the 10 most frequent {a['baseline_top10']:.1%}")
        loss = trainer.callback_metrics.get("val/mlm_loss")
        entropy = (getattr(datamodule, "data_report", None) or {}).get("unigram_entropy")
        if loss is not None and entropy:
            # exp(-loss) is the geometric mean of the probability given to the right piece; exp(-entropy) that of
            # a model knowing only how often each piece occurs
            self.probability_ratio = math.exp(entropy - float(loss))
            print(f"on average the right piece gets {self.probability_ratio:.2f}x the probability that knowing only "
                  f"how often each piece occurs gives it (val/mlm_loss {float(loss):.3f} against the corpus's "
                  f"unigram entropy {entropy:.3f})")

    def _accuracy(self, module, tokenizer, dataset, mask_id: int) -> dict | None:
        special = {tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]")}
        generator = torch.Generator().manual_seed(0)
        truths, guesses = [], []
        stride = max(len(dataset) // self.accuracy_instances, 1)
        for index in range(0, min(len(dataset), stride * self.accuracy_instances), stride):
            sample = dataset[index]
            ids = torch.as_tensor([int(i) for i in sample["input_ids"]])
            candidates = torch.tensor([k for k, i in enumerate(ids.tolist()) if i not in special])
            if len(candidates) == 0:
                continue
            count = max(1, round(0.15 * len(candidates)))
            positions = candidates[torch.randperm(len(candidates), generator=generator)[:count]].sort().values
            masked = ids.clone()
            masked[positions] = mask_id
            device = module.device
            batch = {"input_ids": masked[None].to(device),
                     "token_type_ids": torch.as_tensor(sample["token_type_ids"], device=device)[None],
                     "attention_mask": torch.ones(1, len(ids), dtype=torch.long, device=device),
                     "masked_lm_positions": positions[None].to(device)}
            with torch.no_grad():
                logits, _ = module(batch)
            guesses += logits[0].float().topk(10).indices.tolist()
            truths += ids[positions].tolist()
        if not truths:
            return None
        frequent = [piece for piece, _ in collections.Counter(truths).most_common(10)]
        n = len(truths)
        return {"accuracy": sum(g[0] == t for g, t in zip(guesses, truths)) / n, "masked": n,
                "baseline": sum(t == frequent[0] for t in truths) / n,
                "top10": sum(t in g for g, t in zip(guesses, truths)) / n,
                "baseline_top10": sum(t in frequent for t in truths) / n,
                "most_frequent": tokenizer.id_to_token(frequent[0])}

    def _fill(self, module, tokenizer, sample: dict, mask_id: int) -> dict | None:
        ids = [int(i) for i in sample["input_ids"]]
        end_a = ids.index(tokenizer.token_to_id("[SEP]"))
        tokens = [tokenizer.id_to_token(i) for i in ids]
        words = [k for k in range(1, end_a) if tokens[k].isalpha() and len(tokens[k]) >= 3
                 and not (k + 1 < len(tokens) and tokens[k + 1].startswith("##"))]
        if not words:
            return None
        position = min(words, key=lambda k: abs(k - end_a // 2))
        masked = list(ids)
        masked[position] = mask_id
        device = module.device
        batch = {"input_ids": torch.tensor([masked], device=device),
                 "token_type_ids": torch.as_tensor(sample["token_type_ids"], device=device)[None],
                 "attention_mask": torch.ones(1, len(ids), dtype=torch.long, device=device),
                 "masked_lm_positions": torch.tensor([[position]], device=device)}
        with torch.no_grad():
            logits, _ = module(batch)
        predicted = [tokenizer.id_to_token(int(i)) for i in logits[0, 0].float().topk(3).indices]
        lo, hi = max(1, position - self.context), min(end_a, position + self.context + 1)
        shown = tokenizer.decode(masked[lo:position]) + " [MASK] " + tokenizer.decode(masked[position + 1 : hi])
        return {"text": ("... " if lo > 1 else "") + shown.strip() + (" ..." if hi < end_a else ""),
                "predicted": predicted, "truth": tokens[position]}


class UnpaddedBatches(L.Callback):
    """Under ``model.unpad``, counts the training batches the encoder runs on their real tokens alone and
    those it runs padded (its own choice, ``BertModel.unpads``, asked of each batch): kept in run.json
    (``unpad``), in the closing lines, and in checkpoints, so a resumed run counts on."""

    def __init__(self, setting):
        self.setting = setting
        self.unpadded = self.batches = 0
        self.encoder = None

    def on_train_start(self, trainer, pl_module) -> None:
        from ..model.modeling import BertModel

        self.encoder = next((m for m in pl_module.modules() if isinstance(m, BertModel)), None)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.encoder is not None:
            self.batches += 1
            self.unpadded += self.encoder.unpads(batch.get("attention_mask") if isinstance(batch, dict) else None)

    def report(self) -> dict:
        return {"setting": self.setting, "training_batches": self.batches, "unpadded": self.unpadded}

    @staticmethod
    def closing_line_of(report: dict) -> str:
        return (f"model.unpad={str(report['setting']).lower()}: {report['unpadded']:,} of "
                f"{report['training_batches']:,} training batches ran on their real tokens alone, the rest padded")

    def state_dict(self) -> dict:
        return {"unpadded": self.unpadded, "batches": self.batches}

    def load_state_dict(self, state_dict: dict) -> None:
        self.unpadded, self.batches = state_dict["unpadded"], state_dict["batches"]


def unpad_note(setting) -> str | None:
    """The first lines' word on ``model.unpad``: which path the batches take."""
    if setting is True:
        return "model.unpad=true: the encoder runs on each batch's real tokens alone (attention on grids of rows)"
    if setting == "auto":
        from ..model.config import UNPAD_AUTO_PADDING

        return (f"model.unpad=auto: a batch with at least {UNPAD_AUTO_PADDING:.0%} padding runs on its real tokens "
                "alone, the rest padded (run.json counts each)")
    return None
