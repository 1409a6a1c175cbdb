"""The global random states a checkpoint carries come back as they were, also after a round trip that
turns tuples into lists (torch_xla's xm.save does: found by tests/xla/run.sh, whose resume failed with
"state vector must be a tuple")."""

import random

import numpy as np
import torch

from bert_exp.runner.callbacks import _random_states, _restore_random_states


def draws():
    return torch.rand(3).tolist(), np.random.rand(3).tolist(), [random.random() for _ in range(3)]


def as_lists(value):
    if isinstance(value, dict):
        return {k: as_lists(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [as_lists(v) for v in value]
    return value


def test_states_restore_exactly_also_with_lists_for_tuples():
    torch.manual_seed(1), np.random.seed(1), random.seed(1)
    states = _random_states()
    expected = draws()
    for saved in (states, as_lists(states)):
        draws()  # move every generator on
        _restore_random_states(saved)
        assert draws() == expected
