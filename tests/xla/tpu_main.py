"""``python -m bert_exp`` for torch_xla's CPU device, with the one stand-in that needs.

Lightning's XLA accelerator (``hardware=tpu``) counts TPU chips on the PCI bus
(``torch_xla._internal.tpu.num_available_devices``) and finds none on a CPU, so it refuses a device that
torch_xla itself runs (PJRT_DEVICE=CPU). Here that count is the number of CPU devices PJRT creates:
the smallest stand-in there is, and the only one. Nothing else of Lightning, torch_xla or bert_exp is
replaced; what this cannot show (8 cores spawned, libtpu, TPU numerics) is in docs/scaling-out.md.
"""

import os
import sys

os.environ.setdefault("PJRT_DEVICE", "CPU")

from torch_xla._internal import tpu  # noqa: E402

tpu.num_available_devices = lambda: int(os.environ.get("CPU_NUM_DEVICES", "1"))

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # xla_counters.py, for +callbacks

from bert_exp.__main__ import main  # noqa: E402

if __name__ == "__main__":
    main()
