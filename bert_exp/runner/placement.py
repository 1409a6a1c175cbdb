"""Where a run executes: processes, per-device batch, accumulation, and the combinations that cannot work.

The config states the global batch (what the optimizer sees). The per-device batch and the gradient
accumulation follow from it and the hardware: with ``device_batch_size`` set (the most one device
holds), accumulation = global / (world size x device batch); without it, accumulation is
``trainer.accumulate_grad_batches`` and the device batch = global / (world size x accumulation).
Every check here runs before any data is read or any process is started.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from .validation import ConfigError

log = logging.getLogger(__name__)

PRECISIONS = ("32-true", "32", "64-true", "bf16-mixed", "bf16-true", "16-mixed", "16-true", "transformer-engine")


@dataclass(frozen=True)
class Placement:
    world_size: int
    device_batch_size: int
    accumulate_grad_batches: int
    precision_note: str | None = None  # what precision=auto chose and why (None: as configured)


def world_size(trainer_cfg: DictConfig, cuda_devices: int | None = None) -> int:
    devices = trainer_cfg.get("devices", 1)
    if isinstance(devices, (list, ListConfig)):
        count = len(devices)
    elif isinstance(devices, int) and devices > 0:
        count = devices
    elif str(devices) in ("auto", "-1") and trainer_cfg.get("accelerator") in ("gpu", "cuda"):
        count = max(torch.cuda.device_count() if cuda_devices is None else cuda_devices, 1)
    elif str(devices) in ("auto", "-1") and trainer_cfg.get("accelerator") == "tpu":
        count = 8  # one TPU host: v2-8, v3-8 (4 on a v4-8: Lightning's count where torch_xla is installed)
        if xla_installed():
            from .xla import xla_device_count

            count = xla_device_count()
    else:
        count = 1
    return count * int(trainer_cfg.get("num_nodes", 1))


def per_device_batch_size(global_batch_size: int, world: int, accumulate: int) -> int:
    """The global batch is what the config states; per-device batch = global / (world x accumulation)."""
    if global_batch_size % (world * accumulate):
        raise ConfigError(
            f"global_batch_size={global_batch_size} is not divisible by world size {world} x "
            f"trainer.accumulate_grad_batches={accumulate}"
        )
    return global_batch_size // (world * accumulate)


def accelerator_kind(trainer_cfg: DictConfig, cuda_devices: int | None = None) -> str:
    """What the trainer runs on: "cuda" (``gpu``/``cuda``, or ``auto`` with a CUDA device), "cpu"
    (``cpu``, or ``auto`` without one), else the accelerator as configured (``tpu`` ...)."""
    accelerator = str(trainer_cfg.get("accelerator", "auto"))
    if accelerator == "auto":
        cuda = torch.cuda.device_count() if cuda_devices is None else cuda_devices
        return "cuda" if cuda > 0 else "cpu"
    return "cuda" if accelerator in ("gpu", "cuda") else accelerator


def derive_placement(cfg: DictConfig, cuda_devices: int | None = None) -> Placement:
    world = world_size(cfg.trainer, cuda_devices)
    device_batch = cfg.get("device_batch_size")
    if device_batch:
        if cfg.global_batch_size % (world * device_batch):
            raise ConfigError(
                f"global_batch_size={cfg.global_batch_size} is not divisible by world size {world} x "
                f"device_batch_size={device_batch}"
            )
        accumulate = cfg.global_batch_size // (world * device_batch)
        return Placement(world, device_batch, accumulate)
    accumulate = int(cfg.trainer.get("accumulate_grad_batches", 1))
    return Placement(world, per_device_batch_size(cfg.global_batch_size, world, accumulate), accumulate)


def _strategy_name(trainer_cfg: DictConfig) -> str:
    strategy = trainer_cfg.get("strategy", "auto")
    if isinstance(strategy, DictConfig):
        return str(strategy.get("_target_", "")).rsplit(".", 1)[-1].lower()
    return str(strategy).lower()


def cuda_bf16_supported() -> bool:
    """Native bf16 on the first CUDA device (Ampere or later). torch's default also counts emulation, which
    pre-Ampere GPUs (V100, T4) offer at a fraction of fp16's speed: not counted here."""
    try:
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)
    except Exception:  # noqa: BLE001  no driver, or a torch without the argument
        return False


@dataclass(frozen=True)
class CpuKind:
    """What decides bf16 on a CPU: AMX tiles (bf16 products about 3x fp32's), AVX-512 BF16 without them
    (bf16 dot products: faster than fp32 on some CPUs, slower on others), or neither (bf16 emulated)."""

    model: str
    amx: bool
    avx512_bf16: bool
    held_to: str | None = None  # ATen's kernels held below the CPU's own (ATEN_CPU_CAPABILITY), e.g. "AVX2"

    @property
    def describe(self) -> str:
        native = "AMX" if self.amx else "AVX-512 BF16 without AMX" if self.avx512_bf16 else "no native bf16"
        held = f", ATen held to {self.held_to}" if self.held_to else ""
        return f"{self.model} ({native}{held})"


def cpu_kind() -> CpuKind:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass

    def probe(name: str) -> bool:
        try:
            return bool(getattr(torch.cpu, name)())
        except Exception:  # noqa: BLE001  a torch without the probe, or not an x86 CPU
            return False

    amx, avx512_bf16 = probe("_is_amx_tile_supported"), probe("_is_avx512_bf16_supported")
    # ATEN_CPU_CAPABILITY=avx2 holds ATen's kernels under what the CPU offers: bf16 then runs emulated, as on
    # a CPU without AVX-512, whatever the CPU reports
    capability = getattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")()  # torch < 2.1: not held
    if (amx or avx512_bf16) and not capability.startswith("AVX512"):
        return CpuKind(model, False, False, held_to=capability)
    return CpuKind(model, amx, avx512_bf16)


# bf16 autocast pays for its casts around the products: worth it where they run at least this much faster
BF16_MIN_SPEEDUP = 1.5
# the product timed: 1,024 tokens through BERT-base's feed-forward input (768 -> 3,072)
SPEEDUP_PROBE_SHAPE = (1024, 768, 3072)


def cpu_bf16_speedup(cache_dir: str | os.PathLike | None = None) -> float:
    """How much faster a BERT-sized bf16 matrix product runs than fp32 on this CPU (median of 5 each),
    measured once per CPU model and torch version and kept in ``cache_dir/cpu_bf16.json``, so every run
    on a machine makes the same choice."""
    kind = cpu_kind()
    key = f"{kind.model} | torch {torch.__version__}"
    path = Path(cache_dir) / "cpu_bf16.json" if cache_dir else None
    known = {}
    if path is not None and path.is_file():
        try:
            known = json.loads(path.read_text())
        except ValueError:
            known = {}
        if key in known:
            return float(known[key])
    seconds = {}
    rows, inner, cols = SPEEDUP_PROBE_SHAPE
    for dtype in (torch.float32, torch.bfloat16):
        a, b = torch.randn(rows, inner).to(dtype), torch.randn(inner, cols).to(dtype)
        runs = []
        for _ in range(6):
            start = time.perf_counter()
            a @ b
            runs.append(time.perf_counter() - start)
        seconds[dtype] = statistics.median(runs[1:])
    speedup = seconds[torch.float32] / seconds[torch.bfloat16]
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        known[key] = round(speedup, 3)
        partial = path.with_name(f".{path.name}.{os.getpid()}")  # whole or absent for a concurrent reader
        partial.write_text(json.dumps(known, indent=1))
        os.replace(partial, path)
    return speedup


def cpu_precision(kind: CpuKind, speedup: Callable[[], float]) -> tuple[str, str]:
    """(precision, why) for a CPU run with ``precision=auto``."""
    if kind.amx:
        return "bf16-mixed", f"{kind.describe}: bf16 matrix products about 3x fp32's"
    if kind.avx512_bf16:
        ratio = speedup()
        if ratio >= BF16_MIN_SPEEDUP:
            return "bf16-mixed", f"{kind.describe}: bf16 matrix products measured {ratio:.1f}x fp32's here"
        return "32-true", f"{kind.describe}: bf16 matrix products measured {ratio:.1f}x fp32's here, too little for autocast"
    return "32-true", f"{kind.describe}: bf16 would be emulated, slower than fp32"


def resolve_precision(cfg: DictConfig, cuda_devices: int | None = None, bf16_supported: bool | None = None,
                      cpu: CpuKind | None = None, bf16_speedup: float | None = None) -> str | None:
    """Replaces ``precision: auto`` by what the device runs fastest, before the config is validated:
    bf16-mixed where CUDA supports bf16 natively; 16-mixed on older GPUs, with
    ``optim.optimizer.fused=false`` when gradients are clipped (a fused step unscales the gradients
    itself, so under a loss scaler they could not be clipped); on a CPU bf16-mixed with AMX, or with
    AVX-512 BF16 where its products measure at least :data:`BF16_MIN_SPEEDUP` x fp32's, else 32-true
    (:func:`cpu_precision`); bf16-true on a TPU. ``cpu`` and ``bf16_speedup``: as on this machine unless
    given. Returns a line saying what was chosen and why (None when the precision was not ``auto``)."""
    trainer = cfg.get("trainer")
    if trainer is None or OmegaConf.select(cfg, "trainer.precision", default=None) != "auto":
        return None
    accelerator = str(trainer.get("accelerator", "auto"))
    on_cuda = accelerator_kind(trainer, cuda_devices) == "cuda"
    if accelerator == "tpu":
        chosen, why = "bf16-true", "a TPU computes in bf16 (XLA takes no -mixed precision)"
    elif not on_cuda:
        cache = OmegaConf.select(cfg, "paths.cache_dir", default=None)
        chosen, why = cpu_precision(cpu or cpu_kind(),
                                    lambda: cpu_bf16_speedup(cache) if bf16_speedup is None else bf16_speedup)
    elif cuda_bf16_supported() if bf16_supported is None else bf16_supported:
        chosen, why = "bf16-mixed", "the GPU supports bf16 (no loss scaling needed)"
    else:
        chosen, why = "16-mixed", "the GPU has no native bf16: fp16 autocast with a loss scaler"
    with open_dict(cfg):
        if OmegaConf.is_interpolation(trainer, "precision") and cfg.get("precision") == "auto":
            cfg.precision = chosen
        else:
            trainer.precision = chosen
        optimizer = OmegaConf.select(cfg, "optim.optimizer", default=None)
        if (chosen == "16-mixed" and trainer.get("gradient_clip_val") and optimizer is not None
                and optimizer.get("fused")):
            optimizer.fused = False
            why += "; optim.optimizer.fused=false so the unscaled gradients can be clipped"
    return f"precision=auto -> {chosen}: {why}"


def xla_installed() -> bool:
    return importlib.util.find_spec("torch_xla") is not None


def check_combination(cfg: DictConfig, cuda_devices: int | None = None, xla: bool | None = None) -> None:
    """Raises ConfigError for a combination that cannot run, naming the keys to change (``cuda_devices``
    and ``xla``, whether torch_xla is installed: as on this machine unless given)."""
    trainer = cfg.trainer
    accelerator = str(trainer.get("accelerator", "auto"))
    precision = str(trainer.get("precision", "32-true"))
    strategy = _strategy_name(trainer)
    cuda = torch.cuda.device_count() if cuda_devices is None else cuda_devices
    problems = []
    if precision not in PRECISIONS:
        problems.append(f"precision={precision!r}: expected one of {', '.join(PRECISIONS)}")
    if accelerator == "cpu" and precision.startswith("16"):
        problems.append(f"precision={precision} needs a GPU (fp16 with loss scaling); on CPU use bf16-mixed or "
                        "32-true")
    if accelerator in ("gpu", "cuda") and cuda == 0:
        problems.append(f"trainer.accelerator={accelerator}: no CUDA device here; choose hardware=cpu or ddp_cpu")
    if accelerator == "tpu":
        if not (xla_installed() if xla is None else xla):
            problems.append("hardware=tpu needs torch_xla, which is not installed here (pip install torch_xla with "
                            "the torch it was built for; see docs/scaling-out.md)")
        if not OmegaConf.select(cfg, "data.loader.pad_to_max_length", default=False):
            problems.append("hardware=tpu needs static shapes: set data.loader.pad_to_max_length=true (XLA compiles "
                            "one graph per shape; masked positions are always max_predictions_per_seq)")
        if precision.endswith("-mixed"):
            problems.append(f"precision={precision}: XLA takes 32-true, bf16-true or 16-true")
        if cfg.optim.optimizer.get("fused"):
            problems.append("optim.optimizer.fused=true: fused AdamW has no XLA kernel; set it to false")
    if "fsdp" in strategy and accelerator not in ("gpu", "cuda"):
        problems.append(f"trainer.strategy={strategy} shards over CUDA devices; on CPU use hardware=ddp_cpu")
    if int(trainer.get("num_nodes", 1)) > 1 and not any(s in strategy for s in ("ddp", "fsdp", "deepspeed")):
        problems.append(f"trainer.num_nodes={trainer.num_nodes} needs a distributed strategy (hardware=ddp_multinode)")
    if (precision == "16-mixed" and cfg.optim.optimizer.get("fused") and trainer.get("gradient_clip_val")):
        problems.append("precision=16-mixed with optim.optimizer.fused=true cannot clip gradients "
                        "(trainer.gradient_clip_val): the fused step unscales them itself. Set "
                        "optim.optimizer.fused=false, or use bf16-mixed")
    if problems:
        raise ConfigError("impossible combination:\n  " + "\n  ".join(problems))
    derive_placement(cfg, cuda_devices)
