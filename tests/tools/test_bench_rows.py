"""``bench --rows``: real rows in a run's random batches, the four sides on the same work, and the report."""

import dataclasses

import pytest
import torch

from bert_exp.tools.bench import rows
from bert_exp.tools.bench.__main__ import main
from bert_exp.tools.bench.models import model_config
from bert_exp.tools.bench.steps import build_ours, build_reference, loss_ours, loss_reference, reference_inputs

GROUPING_ROWS = 256  # the rows transformers' grouping sees in these tests (16,384 in the bench)


@pytest.fixture
def stsb_rows(data_dir, monkeypatch):
    """Four random batches of 16 of STS-B's training rows, as a run of its preset draws them."""
    monkeypatch.setattr(rows, "GROUPING_ROWS", GROUPING_ROWS)
    return rows.draw_batches(rows.row_set_overrides("stsb"), batch_size=16, count=4, seed=0)


def test_the_drawn_batches_are_the_runs_padded_rows_and_grouping_pads_less(stsb_rows):
    batches, grouped = stsb_rows["batches"], stsb_rows["grouped"]
    assert stsb_rows["kind"] == "classification" and len(batches) == len(grouped) == 4
    for batch in batches:  # each padded to its own longest row, as the run's collator pads
        lengths = batch["attention_mask"].sum(1)
        assert batch["input_ids"].shape == (16, int(lengths.max()))
        padding = batch["input_ids"][batch["attention_mask"] == 0]
        assert (padding == stsb_rows["pad_token_id"]).all()
    assert len({tuple(b["labels"].tolist()) for b in batches}) == 4  # distinct rows, not one batch repeated
    # sentence pairs: about half of STS-B's tokens in random batches are padding, less once grouped
    assert 0.3 < rows.padding_share(batches) < 0.8
    assert rows.padding_share(grouped) < rows.padding_share(batches)
    for batch in grouped:  # transformers' grouping: rows of a megabatch sorted longest first
        lengths = batch["attention_mask"].sum(1).tolist()
        assert lengths == sorted(lengths, reverse=True) and batch["input_ids"].shape[1] == lengths[0]
        assert batch["labels"].dtype == batches[0]["labels"].dtype and batch["labels"].shape == (16,)


def test_every_side_computes_the_same_loss_on_the_rows(stsb_rows):
    """Ours unpadded, ours padded and transformers on one drawn batch: the same loss (no dropout), so
    the bench times the same work three ways."""
    config = dataclasses.replace(model_config("tiny"), vocab_size=stsb_rows["vocab_size"],
                                 pad_token_id=stsb_rows["pad_token_id"])
    torch.manual_seed(0)
    padded = build_ours("classification", config, stsb_rows["num_labels"]).eval()
    unpadded = build_ours("classification", dataclasses.replace(config, unpad=True), stsb_rows["num_labels"]).eval()
    unpadded.load_state_dict(padded.state_dict())
    reference = build_reference("classification", config, padded, stsb_rows["num_labels"]).eval()
    batch = stsb_rows["batches"][0]
    with torch.no_grad():
        expected = loss_ours("classification", padded, batch)
        torch.testing.assert_close(loss_ours("classification", unpadded, batch), expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(loss_reference("classification", reference,
                                                  reference_inputs("classification", batch)),
                                   expected, atol=1e-5, rtol=1e-5)


def test_rows_bench_report(data_dir, tmp_path, monkeypatch):
    """The command as documented, at BERT-tiny on two batches of eight STS-B rows (its peak-memory runs,
    a process each, left out here: the next test takes one side's in this process)."""
    monkeypatch.setattr(rows, "GROUPING_ROWS", GROUPING_ROWS)
    out = tmp_path / "rows.md"
    assert main(["--rows", "stsb", "--sizes", "tiny", "--precisions", "32-true", "--repeats", "1",
                 "--batch", "8", "--row-batches", "2", "--no-memory", "--output", str(out)]) == 0
    report = out.read_text()
    row = next(line for line in report.splitlines() if line.startswith("| stsb | tiny | 32-true |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    padding, grouped = (int(p.strip("()%")) for p in cells[3].split())
    assert 30 < padding < 80 and grouped < padding
    assert cells[4].endswith("of batches")  # how many batches `model.unpad=auto` would unpad
    assert all(float(c.replace(",", "")) > 0 for c in cells[5:9])  # real tokens per second, each side
    for ratio in cells[9:13]:
        assert float(ratio.split("x")[0].strip("*")) > 0  # how much faster: a timing, not asserted here
    assert cells[13] == "-, -, -, -"  # no memory runs asked for
    assert "random batches of 8" in report and f"first {GROUPING_ROWS:,} rows" in report


def test_a_sides_peak_memory_is_a_pass_over_the_saved_batches_in_a_process_of_its_own(stsb_rows, tmp_path):
    from bert_exp.tools.bench.hardware import run_isolated

    path = rows.save_drawn(stsb_rows, tmp_path, "stsb")
    spec = {"size": "tiny", "precision": "32-true", "device": "cpu", "batches_file": str(path), "steps": 1,
            "impl": "ours_unpadded"}
    assert run_isolated("bert_exp.tools.bench.memory", spec)["peak_bytes"] > 0  # the pass's activations


def test_too_few_batches_for_the_row_set_is_one_line(data_dir):
    with pytest.raises(SystemExit, match="fewer than --row-batches"):
        rows.draw_batches(rows.row_set_overrides("stsb"), batch_size=4096, count=8, seed=0)
