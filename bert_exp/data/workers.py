"""The end of our DataLoader workers. They ignore SIGTERM and SIGINT (:func:`bert_exp.data.base.worker_init`),
and SIGTERM is how PyTorch and multiprocessing end a worker that is still there when its loader is dropped
or the process exits: a run that failed while a loader's workers were alive (an error raised in one worker,
another worker killed) kept them, and its exit then waited for them for ever (multiprocessing joins its
children). Each loader of ours hands the iterator that starts its workers to :func:`track`; at exit the
workers still there are stopped as PyTorch stops them, and any left after that are killed (they only read)."""

from __future__ import annotations

import atexit
import contextlib
import weakref

from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

_started: weakref.WeakSet = weakref.WeakSet()
_at_exit = False


def track(iterator):
    """``iterator`` (what a loader's ``_get_iterator`` returns), returned; its workers are ended at exit."""
    global _at_exit
    if isinstance(iterator, _MultiProcessingDataLoaderIter):
        _started.add(iterator)
        if not _at_exit:
            # registered once workers exist, so after multiprocessing's and PyTorch's own exit handlers:
            # atexit runs the last registered first, before multiprocessing joins the workers
            atexit.register(end_workers)
            _at_exit = True
    return iterator


def end_workers() -> None:
    """Every tracked loader's workers told to stop (PyTorch's shutdown, which also takes them off its
    check of dying workers), then those still alive killed."""
    for iterator in list(_started):
        with contextlib.suppress(Exception):  # PyTorch's internals differ between releases: kill them then
            iterator._shutdown_workers()
        for worker in getattr(iterator, "_workers", ()):
            if worker.is_alive():
                worker.kill()
                worker.join()
