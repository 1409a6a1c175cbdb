"""The bench's products-alone split: the recorded products are the step's, and they replay."""

import pytest
import torch

from bert_exp.tools.bench.__main__ import main
from bert_exp.tools.bench.hardware import count_flops
from bert_exp.tools.bench.products import TensorSpec, products_alone_seconds, record_products, time_products
from bert_exp.tools.bench.steps import build_ours, loss_ours, make_step, random_batch
from bert_exp.model import BertConfig

TINY = BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=256,
                  vocab_size=2000)  # the bench's random ids start at 1000


def _step(precision: str):
    torch.manual_seed(0)
    model = build_ours("pretraining", TINY)
    return make_step("pretraining", model, loss_ours, random_batch(TINY, 4, 32, 5), precision,
                     torch.device("cpu"))


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_recorded_products_are_the_flop_counters(precision):
    """Every product the FLOP counter counts is recorded, with its count: the totals agree exactly, and
    the layer's repeated products collapse into one call each."""
    step = _step(precision)
    products = record_products(step)
    assert products.flops == count_flops(step) > 0
    dtypes = {spec.dtype for call in products.calls for spec in call.args if isinstance(spec, TensorSpec)}
    assert (torch.bfloat16 in dtypes) == (precision == "bf16-mixed")
    assert max(products.calls.values()) >= TINY.num_hidden_layers  # the same product in each layer


def test_operands_keep_their_layout():
    base = torch.randn(8, 16)
    for tensor in (base, base.t(), torch.randn(16).expand(8, 16), base[:, ::2]):
        spec = TensorSpec(tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype, "cpu")
        made = spec.materialise()
        assert made.shape == tensor.shape and made.stride() == tensor.stride()
        assert torch.isfinite(made).all() and made.std() > 0.1


def test_replay_times_every_distinct_product():
    products = record_products(_step("32-true"))
    rows = time_products(products, torch.device("cpu"), repeats=2)
    assert len(rows) == len(products.calls)
    assert sum(r["flops"] * r["count"] for r in rows) == products.flops
    assert all(r["seconds"] > 0 for r in rows) and products_alone_seconds(rows) > 0
    assert all(r["call"].split()[0] in {"mm", "addmm", "bmm", "baddbmm"} for r in rows)


def test_a_call_names_its_transposed_operands():
    products = record_products(_step("32-true"))
    names = [call.describe() for call in products.calls]
    weight_gradient = f"mm [{TINY.hidden_size},128]t x [128,{TINY.intermediate_size}] float32"  # 4 x 32 tokens
    assert weight_gradient in names, names


def test_products_of_a_compiled_step_are_refused():
    with pytest.raises(SystemExit, match="--products"):
        main(["--sizes", "tiny", "--products", "--compile"])
