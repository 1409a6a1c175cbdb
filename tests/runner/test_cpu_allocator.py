"""cpu_allocator: with keep_freed a large freed block stays in the process for the next step (glibc);
with system the C library gives it back to the kernel. Each case runs in a process of its own, since
the settings hold for the whole process."""

import subprocess
import sys

import pytest

from bert_exp.runner import run as run_module
from bert_exp.runner.cpu_allocator import configure_cpu_allocator, glibc
from bert_exp.runner.placement import accelerator_kind
from bert_exp.runner.validation import ConfigError, validate_config
from helpers import compose_config

# RSS (MiB) after a 256 MiB block is written and freed, and whether the setting was applied
PROBE = """
import ctypes, resource, sys
from bert_exp.runner.cpu_allocator import configure_cpu_allocator
for choice in sys.argv[1:]:  # in turn, as the jobs of one multirun process
    applied = configure_cpu_allocator(choice)
def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20
before = rss_mib()
block = ctypes.create_string_buffer(256 * 2**20)  # written (zeroed) through: resident
del block
print(applied, round(rss_mib() - before))
"""


def probe(*choices: str) -> tuple[bool, float]:
    out = subprocess.run([sys.executable, "-c", PROBE, *choices], capture_output=True, text=True, timeout=120, check=True)
    applied, kept = out.stdout.split()
    return applied == "True", float(kept)


@pytest.mark.skipif(glibc() is None, reason="the setting is glibc's; elsewhere it leaves malloc as it is")
def test_keep_freed_keeps_a_freed_block_resident_and_system_returns_it():
    applied, kept = probe("keep_freed")
    assert applied and kept >= 200, kept
    applied, kept = probe("system")
    assert not applied and kept < 50, kept
    applied, kept = probe("keep_freed", "system")  # system after keep_freed puts glibc's defaults back
    assert not applied and kept < 50, kept


def test_a_choice_that_does_not_exist_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="cpu_allocator='jemalloc'"):
        configure_cpu_allocator("jemalloc")
    with pytest.raises(ConfigError, match="cpu_allocator='jemalloc': expected one of keep_freed, system"):
        validate_config(compose_config(["+experiment=pretrain_tiny", "cpu_allocator=jemalloc"], tmp_path))
    with pytest.raises(ConfigError, match="cpu_allocator=None"):
        validate_config(compose_config(["+experiment=pretrain_tiny", "cpu_allocator=null"], tmp_path))
    validate_config(compose_config(["+experiment=pretrain_tiny", "cpu_allocator=system"], tmp_path))


def test_a_cpu_run_applies_the_configured_choice_and_a_gpu_run_leaves_malloc_alone(tmp_path, monkeypatch):
    chosen = []
    monkeypatch.setattr(run_module, "configure_cpu_allocator", chosen.append)
    run_module.check_before_work(compose_config(["+experiment=pretrain_tiny"], tmp_path))
    run_module.check_before_work(compose_config(["+experiment=pretrain_tiny", "cpu_allocator=system"], tmp_path))
    assert chosen == ["keep_freed", "system"]
    # what the run asks before applying it: the CPU (also auto without CUDA), not a GPU or TPU
    assert accelerator_kind({"accelerator": "cpu"}) == "cpu" and accelerator_kind({"accelerator": "gpu"}) != "cpu"
    assert accelerator_kind({"accelerator": "tpu"}) != "cpu"
    assert accelerator_kind({"accelerator": "auto"}, cuda_devices=0) == "cpu"
    assert accelerator_kind({"accelerator": "auto"}, cuda_devices=1) == "cuda"
