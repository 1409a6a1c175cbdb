"""precision=auto: bf16-mixed where the GPU has native bf16, else 16-mixed with unfused AdamW so gradients
can still be clipped; on a CPU bf16-mixed only where bf16 products are native and fast (AMX, or AVX-512
BF16 measured fast enough), else fp32. Resolved before the config is checked, and said why."""

import json
import logging
import os
import subprocess
import sys

import pytest
import torch

from bert_exp.runner import placement
from bert_exp.runner.placement import check_combination, resolve_precision
from bert_exp.runner.validation import validate_config
from helpers import compose_config


def gpu_config(tmp_path, *overrides):
    return compose_config(["+experiment=cola_minilm", "hardware=gpu", *overrides], run_dir=tmp_path)


@pytest.mark.parametrize("bf16, precision, fused", [(True, "bf16-mixed", True), (False, "16-mixed", False)])
def test_auto_on_a_gpu_picks_what_it_supports_and_the_result_is_accepted(tmp_path, bf16, precision, fused):
    cfg = gpu_config(tmp_path)
    assert cfg.trainer.precision == "auto"
    line = resolve_precision(cfg, cuda_devices=1, bf16_supported=bf16)
    assert line.startswith(f"precision=auto -> {precision}: ")
    assert (cfg.precision, cfg.trainer.precision, cfg.optim.optimizer.fused) == (precision, precision, fused)
    assert ("fused=false" in line) == (not fused)
    validate_config(cfg)
    check_combination(cfg, cuda_devices=1)


def test_the_device_is_asked_for_native_bf16(tmp_path, monkeypatch):
    """torch counts emulated bf16 (pre-Ampere) as supported unless told not to: that would be slow."""
    asked = {}

    def is_bf16_supported(including_emulation=True):
        asked["emulation"] = including_emulation
        return including_emulation  # a T4: bf16 only emulated

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)
    cfg = gpu_config(tmp_path)
    resolve_precision(cfg, cuda_devices=1)
    assert asked == {"emulation": False} and cfg.trainer.precision == "16-mixed"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)  # an A100
    cfg = gpu_config(tmp_path)
    resolve_precision(cfg, cuda_devices=1)
    assert cfg.trainer.precision == "bf16-mixed" and cfg.optim.optimizer.fused


def test_16_mixed_keeps_a_fused_optimizer_when_nothing_is_clipped(tmp_path):
    cfg = gpu_config(tmp_path, "trainer.gradient_clip_val=0")
    resolve_precision(cfg, cuda_devices=1, bf16_supported=False)
    assert cfg.trainer.precision == "16-mixed" and cfg.optim.optimizer.fused
    check_combination(cfg, cuda_devices=1)


def test_auto_on_cpu_is_the_cpu_default_and_other_precisions_are_left_alone(tmp_path):
    cfg = compose_config(["+experiment=cola_minilm", "precision=auto"], run_dir=tmp_path)
    assert resolve_precision(cfg, cuda_devices=0, cpu=AVX2).startswith("precision=auto -> 32-true")
    assert cfg.trainer.precision == compose_config(["+experiment=cola_minilm"]).trainer.precision
    check_combination(cfg, cuda_devices=0)
    cfg = gpu_config(tmp_path, "precision=16-mixed", "optim.optimizer.fused=false")
    assert resolve_precision(cfg, cuda_devices=1, bf16_supported=True) is None
    assert cfg.trainer.precision == "16-mixed"
    cfg = compose_config(["+experiment=cola_minilm", "hardware=tpu", "precision=auto"], run_dir=tmp_path)
    resolve_precision(cfg, cuda_devices=0)
    assert cfg.trainer.precision == "bf16-true"
    check_combination(cfg, cuda_devices=0, xla=True)


def test_the_runner_resolves_before_checking_and_says_why(tmp_path, monkeypatch):
    from bert_exp.runner.run import check_before_work

    monkeypatch.setattr(placement, "cuda_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    cfg = gpu_config(tmp_path)
    chosen = check_before_work(cfg)
    assert cfg.trainer.precision == "16-mixed" and cfg.optim.optimizer.fused is False
    assert chosen.precision_note.startswith("precision=auto -> 16-mixed")  # printed with the run's first lines


AMX = placement.CpuKind("Intel Xeon Platinum 8481C", amx=True, avx512_bf16=True)
AVX512_BF16 = placement.CpuKind("AMD EPYC 9B14", amx=False, avx512_bf16=True)
AVX2 = placement.CpuKind("AMD EPYC 7B13", amx=False, avx512_bf16=False)


@pytest.mark.parametrize("cpu, speedup, precision, reason", [
    (AMX, None, "bf16-mixed", "(AMX): bf16 matrix products about 3x"),
    (AVX512_BF16, 2.4, "bf16-mixed", "(AVX-512 BF16 without AMX): bf16 matrix products measured 2.4x fp32's here"),
    (AVX512_BF16, 0.5, "32-true", "measured 0.5x fp32's here, too little for autocast"),
    (AVX2, None, "32-true", "(no native bf16): bf16 would be emulated"),
])
def test_auto_on_cpu_uses_bf16_only_where_its_products_are_native_and_fast(tmp_path, cpu, speedup, precision, reason):
    """Without AMX a bf16 product may be emulated (AVX2) or merely native (AVX-512 BF16: faster than fp32 on
    some CPUs, slower on others): the measured ratio decides, and the line says which kind of CPU it is."""
    cfg = compose_config(["+experiment=cola_minilm", "precision=auto"], run_dir=tmp_path)
    line = resolve_precision(cfg, cuda_devices=0, cpu=cpu, bf16_speedup=speedup)
    assert line.startswith(f"precision=auto -> {precision}: {cpu.model}") and reason in line
    assert cfg.trainer.precision == precision


def test_the_bf16_speedup_is_measured_once_a_machine(tmp_path, monkeypatch):
    # a smaller product than a run times: emulated bf16 (AVX2) takes seconds over the BERT-sized one
    monkeypatch.setattr(placement, "SPEEDUP_PROBE_SHAPE", (128, 96, 384))
    first = placement.cpu_bf16_speedup(tmp_path)
    assert first > 0 and json.loads((tmp_path / "cpu_bf16.json").read_text())
    monkeypatch.setattr(placement.torch, "randn", lambda *a: pytest.fail("measured again"))
    assert placement.cpu_bf16_speedup(tmp_path) == round(first, 3)  # the same choice in every run here


def test_aten_held_below_avx512_means_bf16_emulated_whatever_the_cpu_reports(monkeypatch):
    """ATEN_CPU_CAPABILITY=avx2 on an AVX-512 BF16 or AMX CPU: torch's kernels run as on an AVX2 CPU, so
    precision=auto chooses fp32 without timing bf16 (emulated, several times slower), and says why."""
    monkeypatch.setattr(placement.torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    monkeypatch.setattr(placement.torch.cpu, "_is_avx512_bf16_supported", lambda: True, raising=False)
    monkeypatch.setattr(placement.torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    assert placement.cpu_kind().amx and placement.cpu_kind().held_to is None
    monkeypatch.setattr(placement.torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    held = placement.cpu_kind()
    assert not held.amx and not held.avx512_bf16 and held.describe.endswith("(no native bf16, ATen held to AVX2)")
    chosen, why = placement.cpu_precision(held, lambda: pytest.fail("timed bf16 on a held CPU"))
    assert chosen == "32-true" and "ATen held to AVX2" in why


def test_the_hold_as_a_user_sets_it(tmp_path):
    """The environment variable itself, in a fresh interpreter: the kind reports no native bf16 there."""
    code = "from bert_exp.runner.placement import cpu_kind; k = cpu_kind(); print(k.amx, k.avx512_bf16)"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "ATEN_CPU_CAPABILITY": "avx2"},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]
