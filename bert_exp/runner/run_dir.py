"""A run's directory over its life: fresh, resumed in place (a re-run sweep job), or already finished.

``run.json`` is written when a run starts (status ``running``) and again when it ends, so even a
killed run leaves its config, overrides and W&B run id behind.
"""

from __future__ import annotations

import atexit
import csv
import functools
import hashlib
import json
import logging
import os
import shlex
import shutil
import socket
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from omegaconf import open_dict, read_write

from ..records import pid_alive
from .validation import ConfigError

log = logging.getLogger(__name__)


def hydra_overrides() -> list[str]:
    """The command-line overrides of this job (a sweep's job: its own values), [] without Hydra."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    return list(HydraConfig.get().overrides.task)


def is_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def read_run_info(run_dir: Path) -> dict | None:
    path = run_dir / "run.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return None


def original_run_info(ckpt_path: Path | None) -> dict | None:
    """run.json of the run a checkpoint came from (``RUN/checkpoints/x.ckpt``)."""
    if ckpt_path is None:
        return None
    return read_run_info(ckpt_path.parent.parent)


def check_fresh_run_dir(run_dir: Path) -> None:
    """Runs never overwrite each other's outputs."""
    for name in ("run.json", "checkpoints"):
        if (run_dir / name).exists():
            raise ConfigError(
                f"hydra.run.dir={run_dir} already holds a run ({name}); runs never overwrite each other. "
                f"Choose another directory; to continue that run, start a new one with ckpt_path={run_dir}"
            )


def weights_file(source: str | Path) -> Path | None:
    """The file a model was initialised from: a .ckpt, or a HuggingFace directory's weights (the index of
    a sharded one: :func:`weights_sha256` hashes its shards)."""
    from ..model.hf import SHARD_INDEX_NAME, WEIGHTS_NAME

    path = Path(source)
    if path.is_file():
        return path
    for name in (WEIGHTS_NAME, SHARD_INDEX_NAME, "pytorch_model.bin"):
        if (path / name).is_file():
            return path / name
    return None


def weights_sha256(source: str | Path) -> str | None:
    """The sha256 of the weights file; for sharded weights, of the shards' names and sha256s together."""
    from ..model.hf import SHARD_INDEX_NAME, shard_files

    path = weights_file(source)
    if path is None:
        return None
    if path.name == SHARD_INDEX_NAME:
        parts = [f"{shard.name} {_file_sha256(shard)}" for shard in shard_files(path.parent)]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()
    return _file_sha256(path)


def _file_sha256(path: Path) -> str:
    stat = path.stat()
    return _sha256_of(path.resolve(), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _sha256_of(path: Path, size: int, mtime_ns: int) -> str:
    """Hashed once per file version: the suite checks one source for each of its jobs."""
    from ..data.hashing import file_sha256

    return file_sha256(path)


def check_same_job(run_dir: Path, previous: dict, overrides: list[str]) -> None:
    """A job directory run again must hold the same job: the same overrides, and the model it started
    from unchanged (a run directory retrained or a directory exported again under the same path would
    otherwise lend its old score to the new model)."""
    if previous.get("overrides") != overrides:
        raise ConfigError(
            f"{run_dir} holds another job (overrides {previous.get('overrides')}, not {overrides}); "
            "re-run with the same arguments, or choose a new directory"
        )
    source, recorded = previous.get("initialised_from"), previous.get("initialised_from_sha256")
    if source and recorded and Path(source).exists() and weights_sha256(source) != recorded:
        raise ConfigError(f"{run_dir} started from an earlier {source} (its weights have changed since); "
                          "choose a new directory for the new model")


def finished_job(run_dir: Path, overrides: list[str]) -> dict | None:
    """run.json of the same job finished earlier in ``run_dir`` (a pipeline stage or suite job the caller
    then skips), None while it is still to run or to continue. Another job's directory is refused."""
    previous = read_run_info(run_dir)
    if previous is None:
        return None
    check_same_job(run_dir, previous, overrides)
    return previous if previous.get("status") == "finished" else None


@dataclass
class JobDirectory:
    """What to do in the directory of a sweep job or pipeline stage that is run again."""

    finished: dict | None = None  # run.json of a finished job: skip it
    resume_from: Path | None = None  # last.ckpt of an interrupted job: continue it in place
    previous: dict | None = None
    # filled in by the runner when it opens the job
    run_dir: Path | None = None
    overrides: list[str] | None = None
    ckpt_path: Path | None = None  # what the run resumes from: ckpt_path= or resume_from
    wandb_id: str | None = None

    @classmethod
    def inspect(cls, run_dir: Path, overrides: list[str], in_place: bool) -> JobDirectory:
        """``in_place``: a sweep job or pipeline stage, whose directory a re-run reuses."""
        previous = read_run_info(run_dir)
        if not in_place or (previous is None and not (run_dir / "checkpoints").exists()):
            check_fresh_run_dir(run_dir)
            return cls()
        if previous is not None:
            check_same_job(run_dir, previous, overrides)
        if previous is not None and previous.get("status") == "finished":
            return cls(finished=previous, previous=previous)
        last = run_dir / "checkpoints" / "last.ckpt"
        return cls(resume_from=last if last.is_file() else None, previous=previous)


def prepare_ddp_children(run_dir: Path, ckpt_path: Path | None, world_size: int) -> None:
    """Makes Lightning's DDP launcher start this run's other processes as the same run.

    Lightning re-runs ``sys.argv`` with ``hydra.run.dir`` set to Hydra's run directory. In a sweep that
    command is the whole sweep and that directory not the job's: the command becomes the job's own
    overrides and the directory the job's. A run resumed in place passes its checkpoint on too."""
    from hydra.core.hydra_config import HydraConfig

    if world_size == 1:
        return
    if is_multirun():
        args = [a for a in HydraConfig.get().overrides.task if not a.startswith("ckpt_path=")]
        sys.argv = [sys.argv[0], *args]
        hydra_cfg = HydraConfig.get()
        with read_write(hydra_cfg), open_dict(hydra_cfg):
            hydra_cfg.run.dir = str(run_dir)
    if ckpt_path is not None and not any(a.startswith("ckpt_path=") for a in sys.argv[1:]):
        sys.argv.append(f"ckpt_path={ckpt_path}")


# what Lightning's DDP launcher sets in the launching process's environment (OMP_NUM_THREADS: with
# torch's thread count, shared out among a CPU machine's processes)
LAUNCH_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE", "OMP_NUM_THREADS")


@contextmanager
def sweep_job_environment():
    """A multirun runs its jobs one after another in one process. Lightning's DDP launcher leaves
    LOCAL_RANK & co. in that process's environment, the process group open and, on CPU, torch's thread
    count cut; the next job would take its processes for launched already and wait for them, or run on
    fewer threads. Each job gets the environment and thread count it started with, and no process group."""
    if not is_multirun():
        yield
        return
    import torch

    saved = {name: os.environ.get(name) for name in LAUNCH_VARIABLES}
    threads = torch.get_num_threads()
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        torch.set_num_threads(threads)
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


# --- who is writing a run directory -----------------------------------------------------------------

LOCK_NAME = ".lock"


def read_lock(run_dir: Path) -> dict | None:
    """The lock of the process writing ``run_dir`` ({"pid", "host"}), None without one."""
    try:
        lock = json.loads((Path(run_dir) / LOCK_NAME).read_text())
        return lock if isinstance(lock, dict) else {}
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # unreadable: its holder is unknown


def lock_is_live(lock: dict | None) -> bool:
    """Held by a running process. On another host nobody can tell: taken for live."""
    if lock is None:
        return False
    if lock.get("host") not in (None, socket.gethostname()):
        return True
    pid = lock.get("pid")
    return isinstance(pid, int) and pid_alive(pid)


def partial_files(run_dir: Path) -> list[Path]:
    """What a process killed while writing leaves behind: ``.run.json.partial``, ``.last.ckpt.partial``,
    and Lightning's temporary checkpoint files."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = [*run_dir.glob("*.partial"), *run_dir.glob(".*.partial")]
    for sub in ("checkpoints", "logs"):
        if (run_dir / sub).is_dir():
            found += [*(run_dir / sub).glob("*.partial"), *(run_dir / sub).glob(".*.partial"),
                      *(run_dir / sub).glob("*.tmp"), *(run_dir / sub).glob(".*.tmp")]
    return sorted(set(found))


def clean_partial_files(run_dir: Path) -> list[Path]:
    removed = []
    for path in partial_files(run_dir):
        try:
            path.unlink()
            removed.append(path)
        except OSError:
            pass
    if removed:
        log.info("removed %d partial file(s) of an interrupted write in %s", len(removed), run_dir)
    return removed


class RunLock:
    """``RUN/.lock`` ({"pid", "host"}): held by the process writing the run directory, from before Hydra
    writes its first file there until the process ends. A second run into a directory whose holder is
    alive is refused; the lock of a dead process (SIGKILL, a full disk, a power cut) is taken over, and
    its half-written files are removed."""

    held: dict[Path, RunLock] = {}  # this process's locks

    def __init__(self, run_dir: Path, created_dir: bool):
        self.run_dir, self.created_dir = run_dir, created_dir

    @classmethod
    def acquire(cls, run_dir: Path) -> RunLock:
        run_dir = Path(run_dir).absolute()
        if run_dir in cls.held:
            return cls.held[run_dir]
        created = not run_dir.exists()
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise ConfigError(f"hydra.run.dir={run_dir} is a file, not a directory") from None
        except OSError as err:
            raise ConfigError(f"cannot create the run directory hydra.run.dir={run_dir}: "
                              f"{err.strerror or err} (paths.output_dir / hydra.run.dir)") from None
        path = run_dir / LOCK_NAME
        content = json.dumps({"pid": os.getpid(), "host": socket.gethostname()})
        for _ in range(3):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = read_lock(run_dir)
                if lock_is_live(holder):
                    raise ConfigError(
                        f"hydra.run.dir={run_dir} is in use by a running process (pid {holder.get('pid')} on "
                        f"{holder.get('host')}, see {path}); choose another directory, or wait for it") from None
                # a dead holder: a killed run
                path.unlink(missing_ok=True)
                clean_partial_files(run_dir)
                continue
            except OSError as err:
                raise ConfigError(f"the run directory hydra.run.dir={run_dir} is not writable: "
                                  f"{err.strerror or err}") from None
            try:
                os.write(fd, content.encode())
            except OSError as err:
                os.close(fd)
                path.unlink(missing_ok=True)
                raise ConfigError(f"cannot write in the run directory hydra.run.dir={run_dir}: "
                                  f"{err.strerror or err}") from None
            os.close(fd)
            break
        else:
            raise ConfigError(f"hydra.run.dir={run_dir}: cannot take its lock {path}")
        lock = cls(run_dir, created)
        cls.held[run_dir] = lock
        if len(cls.held) == 1:
            atexit.register(RunLock.release_all)
        return lock

    def release(self) -> None:
        RunLock.held.pop(self.run_dir, None)
        holder = read_lock(self.run_dir)
        if holder and holder.get("pid") == os.getpid():
            (self.run_dir / LOCK_NAME).unlink(missing_ok=True)

    def discard_if_empty(self) -> bool:
        """Removes the run directory this lock created when nothing but Hydra's and the lock's files
        are in it (a run refused before any work leaves no directory behind)."""
        leftovers = {".hydra", LOCK_NAME, "bert_exp.log", "config_tree.txt"}
        if not self.created_dir or any(p.name not in leftovers for p in self.run_dir.iterdir()):
            return False
        self.release()
        shutil.rmtree(self.run_dir, ignore_errors=True)
        return True

    @classmethod
    def release_all(cls) -> None:
        for lock in list(cls.held.values()):
            lock.release()


def last_step(run_dir: Path) -> int | None:
    """The last step a run reached: the last row of ``logs/metrics.csv``, else its last checkpoint."""
    run_dir = Path(run_dir)
    step = None
    try:
        with open(run_dir / "logs" / "metrics.csv", newline="") as f:
            for row in csv.DictReader(f):
                try:
                    step = max(step or 0, int(row.get("step") or 0))
                except ValueError:
                    continue
    except (OSError, csv.Error, UnicodeDecodeError):
        pass
    if step is not None:
        return step
    last = run_dir / "checkpoints" / "last.ckpt"
    if last.is_file():
        try:
            import torch

            return int(torch.load(last, map_location="cpu", weights_only=False, mmap=True).get("global_step"))
        except Exception:  # noqa: BLE001  a damaged checkpoint: the step is unknown
            return None
    return None


def resume_command(overrides: list[str], run_dir: Path) -> str:
    """The command that continues a run from its last.ckpt (in a new run directory)."""
    kept = [o for o in overrides or [] if o.lstrip("+~").split("=", 1)[0] not in ("ckpt_path", "hydra.run.dir")]
    return shlex.join(["python", "-m", "bert_exp", *kept, f"ckpt_path={run_dir}"])


def run_state(run_dir: Path, info: dict | None = None) -> str:
    """The status to show for a run: run.json's, except that a run recorded as ``running`` whose process
    is gone (killed: SIGKILL, a full disk, a power cut) is "killed at step N"."""
    info = read_run_info(Path(run_dir)) if info is None else info
    status = (info or {}).get("status", "?")
    if status != "running" or lock_is_live(read_lock(run_dir)):
        return status
    step = last_step(run_dir)
    return f"killed at step {step}" if step is not None else "killed before its first step"
