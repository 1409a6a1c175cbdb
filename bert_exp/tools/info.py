"""``python -m bert_exp.info``: what this machine offers a run. Package versions, the devices and
the precisions each supports, where data, caches and outputs go, and which data sets are present."""

from __future__ import annotations

import argparse
import json
import os
import platform
from importlib import metadata
from pathlib import Path

from platformdirs import user_cache_dir

from ..records import dumps

PACKAGES = ("bert_exp", "torch", "lightning", "hydra-core", "omegaconf", "torchmetrics", "tokenizers",
            "wandb", "safetensors", "numpy", "pooch", "transformers")


def package_versions() -> dict[str, str | None]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def devices() -> list[dict]:
    """Each device with the Lightning precisions a run can use on it (hardware/precision configs)."""
    import importlib.util

    import torch

    flags = cpu_flags()
    fast_bf16 = sorted(flags & {"amx_bf16", "avx512_bf16"})
    out = [{
        "device": "cpu", "name": cpu_name(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
        "precisions": {
            "32-true": "yes",
            "bf16-mixed": f"yes, in hardware ({', '.join(fast_bf16)})" if fast_bf16 else "yes, emulated (slow)",
            # torch can autocast to fp16 on CPU, but it needs loss scaling and gains nothing over bf16
            "16-mixed": "not offered on CPU: use bf16-mixed",
        },
    }]
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            out.append({
                "device": f"cuda:{i}", "name": p.name, "capability": f"{p.major}.{p.minor}",
                "memory_gib": round(p.total_memory / 2**30, 1),
                "precisions": {"32-true": "yes (TF32 matmuls from capability 8.0)" if p.major >= 8 else "yes",
                               "bf16-mixed": "yes" if torch.cuda.is_bf16_supported() else "no",
                               "16-mixed": "yes"},
            })
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        out.append({"device": "mps", "name": "Apple GPU",
                    "precisions": {"32-true": "yes", "16-mixed": "yes", "bf16-mixed": "macOS 14 or later"}})
    if importlib.util.find_spec("torch_xla") is not None:
        out.append({"device": "xla", "name": "torch_xla installed (TPU when one is attached)",
                    "precisions": {"32-true": "yes", "bf16-mixed": "yes", "16-mixed": "no"}})
    return out


def collect() -> dict:
    from ..datasets.catalog import default_data_dir, load_catalog
    from ..datasets.download import file_status, summarize
    from ..runner.loggers import wandb_credentials_found

    data_dir = default_data_dir()
    return {
        "versions": package_versions(),
        "platform": platform.platform(),
        "devices": devices(),
        "paths": {
            "data_dir": str(data_dir),
            "cache_dir": os.environ.get("BERT_EXP_CACHE") or user_cache_dir("bert_exp", appauthor=False),
            "outputs": os.environ.get("BERT_EXP_OUTPUTS", "outputs"),
        },
        "wandb": "online (credentials found)" if wandb_credentials_found() else "offline (no credentials; wandb sync later)",
        "data_sets": {name: summarize(file_status(source, data_dir)) for name, source in sorted(load_catalog().items())},
    }


def render(info: dict) -> str:
    lines = ["bert_exp environment", "", "Packages:"]
    lines += [f"  {name:<14}{version or 'not installed'}" for name, version in info["versions"].items()]
    lines += ["", f"Platform: {info['platform']}", "", "Devices and precisions (hardware=..., trainer.precision=...):"]
    for device in info["devices"]:
        extra = ", ".join(f"{k} {v}" for k, v in device.items() if k not in ("device", "name", "precisions"))
        lines.append(f"  {device['device']}: {device['name']}" + (f" ({extra})" if extra else ""))
        lines += [f"    {precision:<11}{support}" for precision, support in device["precisions"].items()]
    lines += ["", "Paths:"] + [f"  {k:<10}{v}" for k, v in info["paths"].items()]
    lines += ["", f"W&B: {info['wandb']}", "",
              f"Data sets in {info['paths']['data_dir']} (python -m bert_exp.data list for files and sizes):"]
    lines += [f"  {name:<16}{state}" for name, state in info["data_sets"].items()]
    return "\n".join(lines)


def run_summary(run_dir: Path) -> dict:
    """What a run directory says about its run; a run whose process is gone while run.json still says
    ``running`` is "killed at step N"."""
    from ..runner.run_dir import lock_is_live, partial_files, read_lock, resume_command, run_state

    path = run_dir / "run.json"
    if not path.is_file():
        raise SystemExit(f"error: {run_dir}: not a run directory (no run.json)")
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        assert isinstance(info, dict)
    except (ValueError, UnicodeDecodeError, AssertionError):
        raise SystemExit(f"error: {path}: not valid JSON (damaged)") from None
    holder = read_lock(run_dir)
    status = run_state(run_dir, info)
    stopped = status.startswith("killed") or status in ("interrupted", "failed", "diverged")
    resume = (resume_command(info.get("overrides"), run_dir)
              if stopped and (run_dir / "checkpoints" / "last.ckpt").is_file() else None)
    return {"run_dir": str(run_dir), "status": status, "resume": resume, "experiment": info.get("experiment"),
            "task": info.get("task"), "global_step": info.get("global_step"), "error": info.get("error"),
            "writer": holder if lock_is_live(holder) else None,
            "partial_files": [str(p) for p in partial_files(run_dir)],
            "metrics": info.get("metrics") or {}}


def render_run(summary: dict) -> str:
    lines = [f"run {summary['run_dir']}", f"  status      {summary['status']}",
             f"  experiment  {summary['experiment']} ({summary['task']})"]
    if summary["global_step"] is not None:
        lines.append(f"  step        {summary['global_step']}")
    if summary["writer"]:
        lines.append(f"  written by  pid {summary['writer'].get('pid')} on {summary['writer'].get('host')}")
    if summary["error"]:
        lines.append(f"  error       {summary['error'].get('type')}: {summary['error'].get('message')}")
    if summary["partial_files"]:
        lines.append(f"  partial     {len(summary['partial_files'])} half-written file(s), removed when the run resumes")
    if summary.get("resume"):
        lines.append(f"  resume      {summary['resume']}")
    lines += [f"  {k:<22}{v}" for k, v in sorted(summary["metrics"].items())]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bert_exp.info", description=__doc__.split("\n")[0])
    parser.add_argument("run", nargs="?", type=Path, help="a run directory: its status (killed runs named so)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    if args.run is not None:
        summary = run_summary(args.run)
        print(dumps(summary, indent=2) if args.json else render_run(summary))
        return 0
    info = collect()
    print(dumps(info, indent=2) if args.json else render(info))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
