"""Test-only faults, added to a run as a callback (tests/faults on PYTHONPATH):

    python -m bert_exp ... '+callbacks.fault={_target_:inject.NanAt,step:3}'
    python -m bert_exp ... '+callbacks.fault={_target_:inject.SignalAt,step:5,signal:SIGTERM}'
    python -m bert_exp ... '+callbacks.fault={_target_:inject.DiskFullWriting,name:meta.json}'
"""

from __future__ import annotations

import errno
import io
import os
import signal as signals
import time

import lightning as L
import torch


class NanAt(L.Callback):
    """Before optimizer step ``step`` (counted from 0, as metrics.csv's train/loss steps are), fills
    one weight with NaN: the loss of that step and every later one is NaN."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            with torch.no_grad():
                next(pl_module.parameters()).fill_(float("nan"))


class SignalAt(L.Callback):
    """Sends ``signal`` to this process (``group: true``: to its process group) at the end of training
    micro-batch ``micro_batch`` (counted from 0 over the run, accumulation included), or of the batch
    that completes optimizer step ``step``; ``times`` sends it that many times in a row."""

    def __init__(self, step: int | None = None, micro_batch: int | None = None, signal: str = "SIGTERM",
                 times: int = 1, group: bool = False):
        if (step is None) == (micro_batch is None):
            raise ValueError("give step or micro_batch")
        self.step, self.micro_batch, self.times, self.group = step, micro_batch, times, group
        self.signal = getattr(signals, signal)
        self._seen = 0
        self._sent = False

    def _send(self) -> None:
        self._sent = True
        for _ in range(self.times):
            if self.group:
                os.killpg(os.getpgid(0), self.signal)
            else:
                os.kill(os.getpid(), self.signal)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        seen, self._seen = self._seen, self._seen + 1
        if self._sent:
            return
        if self.micro_batch is not None and seen == self.micro_batch:
            self._send()
        elif self.step is not None and trainer.global_step == self.step + 1 and not trainer.fit_loop._should_accumulate():
            self._send()


class CrashAt(L.Callback):
    """Raises at the start of optimizer step ``step``: a crash that saves nothing (like SIGKILL)."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            raise RuntimeError(f"injected crash at step {self.step}")


class DiskFullAt(L.Callback):
    """From optimizer step ``step`` on, every checkpoint write runs out of space part-way (a simulated
    ENOSPC: where a small tmpfs cannot be mounted, this is the full disk)."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step < self.step:
            return
        import errno

        from bert_exp.runner import checkpoint_io

        def full(obj, f, *args, **kwargs):
            f.write(b"\0" * 4096)  # some bytes land, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")

        checkpoint_io.torch.save = full


class SignalInBackwardAt(L.Callback):
    """The first process sends ``signal`` to itself in the middle of optimizer step ``step``, before its
    backward pass, after ``delay`` seconds: by then the other processes wait inside the backward's
    gradient all-reduce for it (a signal that lands while a collective is in flight)."""

    def __init__(self, step: int, signal: str = "SIGTERM", delay: float = 2.0):
        self.step, self.delay, self.signal = step, delay, getattr(signals, signal)
        self._sent = False

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        if trainer.global_rank == 0 and trainer.global_step == self.step and not self._sent:
            self._sent = True
            time.sleep(self.delay)
            os.kill(os.getpid(), self.signal)


class DamageChunks(L.Callback):
    """When training starts, after setup() checked the prepared chunks' sha256: every token id of every
    training chunk becomes 65535, each chunk's size unchanged (damage that only the loader workers' check
    of each item they read can see)."""

    def on_train_start(self, trainer, pl_module) -> None:
        from pathlib import Path

        import numpy as np

        for chunk in sorted(Path(trainer.datamodule.prepared_location.join("train")).glob("chunk-*.bin")):
            data = bytearray(chunk.read_bytes())
            count = int(np.frombuffer(data[:4], dtype=np.uint32)[0])  # litdata's chunk: items, offsets, items
            offsets = np.frombuffer(bytes(data[4:8 + 4 * count]), dtype=np.uint32)
            for start in offsets[:-1]:  # an item: its fields' sizes, then the token ids and the info
                size = int(np.frombuffer(bytes(data[start:start + 4]), dtype=np.uint32)[0])
                data[start + 8:start + 8 + size] = b"\xff" * size
            chunk.write_bytes(bytes(data))


class WorkerFault(L.Callback):
    """In the training loader's worker ``worker``, reading its item number ``item`` (counted from 0)
    raises an error that is not one of ours (``kind: raise``, a RuntimeError) or kills the worker
    (``kind: kill``, SIGKILL); the other workers go on reading. Patched before the workers are forked."""

    def __init__(self, kind: str = "raise", worker: int = 0, item: int = 0):
        if kind not in ("raise", "kill"):
            raise ValueError("kind: raise or kill")
        self.kind, self.worker, self.item = kind, worker, item

    def on_train_start(self, trainer, pl_module) -> None:
        from bert_exp.data.corpus import streaming

        original, fault = streaming.StreamedInstances.__getitem__, self
        seen = {"items": 0}

        def faulty(dataset, index):
            info = torch.utils.data.get_worker_info()
            if info is not None and info.id == fault.worker:
                seen["items"] += 1
                if seen["items"] > fault.item:
                    if fault.kind == "kill":
                        os.kill(os.getpid(), signals.SIGKILL)
                    raise RuntimeError(f"injected failure in loader worker {info.id}")
            return original(dataset, index)

        streaming.StreamedInstances.__getitem__ = faulty


class _FillingFile:
    """A file being written on a disk that fills: some bytes land, then ENOSPC."""

    def __init__(self, file):
        self._file = file

    def write(self, data):
        self._file.write(data[:16])
        self._file.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self._file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._file.close()


def fill_disk_for(*names: str):
    """From now on in this process, every file opened for writing whose path holds one of ``names`` (its
    temporary file beside it too) runs out of space part-way: a simulated ENOSPC (where a small tmpfs
    cannot be mounted, this is the full disk). Returns a function that undoes it."""
    real = io.open

    def opened(file, mode="r", *args, **kwargs):
        handle = real(file, mode, *args, **kwargs)
        path = os.readlink(f"/proc/self/fd/{file}") if isinstance(file, int) else os.fspath(file)
        if any(m in mode for m in "wax+") and any(name in str(path) for name in names):
            return _FillingFile(handle)
        return handle

    io.open = opened
    return lambda: setattr(io, "open", real)


class DiskFullWriting(L.Callback):
    """From when the run's callbacks are made (after the vocabulary, before the data is prepared), every
    file written whose path holds ``name`` (``meta.json``, ``index.json``) runs out of space part-way."""

    def __init__(self, name: str):
        fill_disk_for(name)
