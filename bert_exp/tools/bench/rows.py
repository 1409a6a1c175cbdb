"""``--rows``: training steps on a real data set's rows in the random batches a run draws, padded to each
batch's longest sequence as the run pads them, on four sides: ours on the real tokens alone
(``model.unpad=true``), ours padded, transformers padded, and transformers on the same rows in
length-grouped batches (its ``group_by_length``). Speed is real tokens per second: padding is work that
is not counted.

A row set is a preset's training data (``+experiment=NAME`` and its overrides), read by the preset's own
data module with the vocabulary of the checkpoint it starts from; the batches are drawn once and saved,
so every side, and the separate process that takes each side's peak memory, steps through the same ones.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from ...data import IGNORE_INDEX
from ...model.modeling import auto_unpads
from .models import model_config
from .steps import build_ours, build_reference, loss_ours, loss_reference, make_step, real_tokens, reference_inputs, to_device

GROUPING_ROWS = 16_384  # rows enough for transformers' grouping at its widest (50 batches a megabatch) at 32
SIDES = ("ours_unpadded", "ours_padded", "transformers", "transformers_grouped")
# the row sets the bench reads by default: a name, the preset and its overrides
ROW_SETS = {
    "stsb": ["+experiment=glue_stsb_minilm_local"],
    "mrpc": ["+experiment=glue_mrpc_minilm_local"],
    "rte": ["+experiment=glue_rte_minilm_local"],
    "cola": ["+experiment=cola_minilm"],
    "sst2": ["+experiment=sst2_minilm"],
    "squad": ["+experiment=squad_v2_minilm_local"],  # its windows of 256, stride 128
    # BERT's first phase on the shared corpus, tokenized with MiniLM's vocabulary (so the MLM head is
    # BERT's 30,522 wide): instances of 128 where one in ten is shorter (short_seq_prob)
    "pretraining": ["+experiment=pretrain_tiny", "data.instances.max_seq_length=128",
                    "task.init_from=${bert_exp.minilm_dir:}"],
}


def task_kind(batch: dict) -> str:
    """Which of the bench's model kinds a data module's batch trains."""
    if "masked_lm_positions" in batch:
        return "pretraining"
    if "start_positions" in batch:
        return "qa"
    if "labels" in batch and batch["labels"].dim() == 1:
        return "classification"
    raise SystemExit(f"error: --rows: a batch of {', '.join(batch)} is not one the bench trains "
                     "(classification, question answering or pre-training)")


def draw_batches(overrides: list[str], batch_size: int, count: int, seed: int) -> dict:
    """The first ``count`` training batches a run of the preset would draw (its data module, its
    collator, its shuffling under ``seed``); as many of transformers' length-grouped batches, taken at
    random from its grouping of the first GROUPING_ROWS rows; what the models need to be built for them."""
    import lightning as L
    from hydra.utils import instantiate

    from ...runner import resolvers  # noqa: F401  the resolvers the presets use
    from ...runner.overrides import _compose
    from ...runner.run import fetch_inputs, instantiate_reporting
    from ...tasks.checkpoints import load_checkpoint

    cfg = _compose(overrides)
    init = load_checkpoint(cfg.task.init_from) if cfg.task.get("init_from") else None
    datamodule = instantiate_reporting(cfg.data, loader=instantiate(cfg.data.loader, batch_size=batch_size))
    fetch_inputs(datamodule)
    if init is not None and init.vocab:
        datamodule.use_vocabulary(init.vocab, init.lowercase, init.tokenizer)
    datamodule.prepare_data()
    datamodule.setup("fit")
    L.seed_everything(seed, verbose=False)
    batches, rows = [], []
    for batch in datamodule.train_dataloader():
        batch = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}
        if len(batches) < count:
            batches.append(batch)
        rows += unbatched(reference_inputs(task_kind(batch), batch))
        if len(rows) >= max(GROUPING_ROWS, count * batch_size):
            break
    if len(batches) < count:
        raise SystemExit(f"error: --rows {' '.join(overrides)}: {len(batches)} batches of {batch_size}, "
                         f"fewer than --row-batches {count}")
    pad = datamodule.special_ids.pad
    grouped = length_grouped(rows, batch_size, pad, seed)
    chosen = torch.randperm(len(grouped), generator=torch.Generator().manual_seed(seed))[:count].tolist()
    return {"batches": batches, "grouped": [grouped[i] for i in chosen], "kind": task_kind(batches[0]),
            "vocab_size": datamodule.vocab_size, "pad_token_id": pad,
            "num_labels": getattr(datamodule, "num_labels", 2)}


def unbatched(batch: dict) -> list[dict]:
    """A batch in transformers' form (:func:`reference_inputs`) as its rows without their padding: a
    [batch, seq] tensor is per token, a [batch] one per row."""
    return [{k: v[i, :length] if v.dim() == 2 else v[i] for k, v in batch.items()}
            for i, length in enumerate(batch["attention_mask"].sum(1).tolist())]


def length_grouped(rows: list[dict], batch_size: int, pad_token_id: int, seed: int) -> list[dict]:
    """The rows batched as transformers' ``group_by_length`` batches them (its LengthGroupedSampler:
    megabatches of up to 50 batches sorted by length, in a random order), each padded to its longest."""
    from transformers.trainer_pt_utils import LengthGroupedSampler

    order = list(LengthGroupedSampler(batch_size, lengths=[len(r["input_ids"]) for r in rows],
                                      generator=torch.Generator().manual_seed(seed)))
    fill = {"input_ids": pad_token_id, "labels": IGNORE_INDEX}  # the attention mask and the segments pad with 0
    grouped = []
    for start in range(0, len(order) - batch_size + 1, batch_size):  # whole batches
        chosen = [rows[j] for j in order[start : start + batch_size]]
        grouped.append({k: torch.nn.utils.rnn.pad_sequence([r[k] for r in chosen], batch_first=True,
                                                           padding_value=fill.get(k, 0))
                        if chosen[0][k].dim() == 1 else torch.stack([r[k] for r in chosen]) for k in chosen[0]})
    return grouped


def make_row_steps(spec: dict, sides=SIDES) -> dict:
    """{side: step} over the batches saved in ``spec["batches_file"]``, each step a pass over all of them;
    every side starts from the same weights. A side not asked for is not built (the memory run takes
    one side alone)."""
    drawn = torch.load(spec["batches_file"])
    device = torch.device(spec["device"])
    kind, num_labels = drawn["kind"], drawn["num_labels"]
    config = dataclasses.replace(model_config(spec["size"]), vocab_size=drawn["vocab_size"],
                                 pad_token_id=drawn["pad_token_id"])
    torch.manual_seed(spec.get("seed", 0))
    padded = build_ours(kind, config, num_labels)
    models = {}
    for side in sides:
        if side == "ours_padded":
            models[side] = (padded, loss_ours)
        elif side == "ours_unpadded":
            unpadded = build_ours(kind, dataclasses.replace(config, unpad=True), num_labels)
            unpadded.load_state_dict(padded.state_dict())
            models[side] = (unpadded, loss_ours)
        else:
            models[side] = (build_reference(kind, config, padded, num_labels), loss_reference)
    ours = drawn["batches"]
    reference = [reference_inputs(kind, b) for b in ours]
    batches = {"ours_unpadded": ours, "ours_padded": ours, "transformers": reference}  # the same rows
    if "transformers_grouped" in sides:
        batches["transformers_grouped"] = drawn["grouped"]
    return {side: make_step(kind, *models[side], [to_device(b, device) for b in batches[side]], spec["precision"],
                            device, fused=True) for side in sides}


def save_drawn(drawn: dict, directory: Path, name: str) -> Path:
    path = directory / f"{name}.pt"
    torch.save(drawn, path)
    return path


def padding_share(batches: list[dict]) -> float:
    return 1 - sum(real_tokens(b) for b in batches) / sum(b["attention_mask"].numel() for b in batches)


def row_set_overrides(name: str) -> list[str]:
    """A row set's preset and overrides: one of ROW_SETS, or any experiment preset's own training rows."""
    return ROW_SETS.get(name, [f"+experiment={name}"])


def bench_rows(name: str, batches_file: Path, spec: dict, args, log) -> dict:
    """Times the four sides on one row set at one size and precision: a pass over the batches each,
    alternating, ``args.repeats`` rounds after one warm-up batch each; the ratios are medians of the
    rounds' ratios."""
    import statistics

    from .hardware import run_isolated, time_steps

    drawn = torch.load(batches_file)
    steps = make_row_steps({**spec, "batches_file": str(batches_file)})
    tokens = {side: sum(real_tokens(b) for b in drawn["grouped" if side == "transformers_grouped" else "batches"])
              for side in SIDES}
    device = torch.device(spec["device"])
    for side in SIDES:
        steps[side](limit=1)
    seconds = {side: [] for side in SIDES}
    for round_ in range(args.repeats):
        for side in SIDES:
            seconds[side].append(time_steps(steps[side], 1, device))
        log(f"  round {round_ + 1}: " + ", ".join(f"{side} {seconds[side][-1]:.2f} s" for side in SIDES))
    del steps
    result = {**spec, "rows": name, "kind": drawn["kind"], "batches": len(drawn["batches"]),
              "padding": padding_share(drawn["batches"]), "grouped_padding": padding_share(drawn["grouped"]),
              "auto_unpads": sum(auto_unpads(b["attention_mask"]) for b in drawn["batches"]) / len(drawn["batches"])}
    for side in SIDES:
        rates = [tokens[side] / t for t in seconds[side]]
        result[side] = {"tokens_per_s": statistics.median(rates), "rates": rates}
        if not args.no_memory:
            result[side]["peak_bytes"] = run_isolated("bert_exp.tools.bench.memory", {
                **spec, "impl": side, "batches_file": str(batches_file), "cpu_allocator": args.cpu_allocator,
                "steps": 1})["peak_bytes"]
    for side in ("ours_unpadded", "ours_padded", "transformers_grouped"):  # real tokens per second, round by round
        result[f"{side}_ratio"] = [a / b for a, b in zip(result[side]["rates"], result["transformers"]["rates"])]
    result["unpadded_over_padded"] = [a / b for a, b in zip(result["ours_unpadded"]["rates"],
                                                             result["ours_padded"]["rates"])]
    return result


def _ratio(values: list[float]) -> str:
    import statistics

    return f"**{statistics.median(values):.2f}x** ({min(values):.2f}-{max(values):.2f})"


def rows_table(results: list[dict]) -> str:
    def gib(side: dict) -> str:
        return f"{side['peak_bytes'] / 2**30:.2f}" if "peak_bytes" in side else "-"

    lines = [
        "| rows | size | precision | padding (grouped) | auto unpads | real tokens/s: ours unpadded | ours padded "
        "| transformers | transformers grouped | ours unpadded / transformers | ours padded / transformers "
        "| ours unpadded / ours padded | transformers grouped / transformers | peak GiB: unpadded, padded, "
        "transformers, grouped |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['rows']} | {r['size']} | {r['precision']} | {r['padding']:.0%} ({r['grouped_padding']:.0%}) "
            f"| {r['auto_unpads']:.0%} of batches | "
            + " | ".join(f"{r[side]['tokens_per_s']:,.0f}" for side in SIDES)
            + f" | {_ratio(r['ours_unpadded_ratio'])} | {_ratio(r['ours_padded_ratio'])} "
              f"| {_ratio(r['unpadded_over_padded'])} | {_ratio(r['transformers_grouped_ratio'])} | "
            + ", ".join(gib(r[side]) for side in SIDES) + " |")
    first = results[0] if results else {}
    lines += ["", f"Training steps (forward, backward, AdamW) over the first {first.get('batches', '-')} random "
              f"batches of {first.get('batch', '-')} a run of each preset draws, padded to each batch's longest; "
              "real tokens per second (padding is not counted), median of the rounds. transformers' models "
              "run their default attention; its grouped batches are as many, drawn at random from its "
              f"LengthGroupedSampler's batching of the first {GROUPING_ROWS:,} rows (the padding beside each "
              "is of the batches timed). "
              "Peak memory: one pass of each side alone in a fresh process, over its resident size."]
    return "\n".join(lines)


def run_rows_bench(args, device: torch.device, log) -> str:
    import tempfile

    results = []
    with tempfile.TemporaryDirectory(prefix="bert_exp_rows_") as tmp:
        for name in args.rows.split(","):
            log(f"drawing {args.row_batches} batches of {args.batch} from {name} ...")
            drawn = draw_batches(row_set_overrides(name), args.batch, args.row_batches, seed=0)
            path = save_drawn(drawn, Path(tmp), name)
            for size in args.sizes.split(","):
                for precision in args.precisions.split(","):
                    log(f"{name} {size} {precision} ({drawn['kind']}, padding {padding_share(drawn['batches']):.0%})")
                    spec = {"size": size, "precision": precision, "batch": args.batch, "device": str(device)}
                    results.append(bench_rows(name, path, spec, args, log))
    return rows_table(results)
