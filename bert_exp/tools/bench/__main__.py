"""``python -m bert_exp.bench``: our training steps against transformers', side by side in one process.

For each task x size x precision both steps run on the same batch, alternating (ours for --steps steps,
then transformers' for as many) for --repeats rounds, so a slow patch of the machine hits both; the
ratio is the median of the rounds' ratios. ``--products`` adds each step's matrix products timed alone
(what the step would take if nothing else ran); ``--data`` adds the data-preparation benchmark.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

from .hardware import count_flops, matmul_peak, run_isolated, time_steps
from .models import make_steps
from .products import products_alone_seconds, record_products, time_products
from .rows import ROW_SETS, run_rows_bench
from .steps import TASKS
from ...runner.cpu_allocator import CHOICES as CPU_ALLOCATOR_CHOICES, configure_cpu_allocator

PRECISION_DTYPE = {"32-true": torch.float32, "bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}
IMPLS = ("ours", "transformers")
TOP_PRODUCTS = 8  # rows of the largest products listed under --products


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bert_exp.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", default="pretraining", help=f"comma-separated, of {', '.join(TASKS)}")
    p.add_argument("--sizes", default="mini,base", help="conf/model names, comma-separated")
    p.add_argument("--precisions", default="32-true,bf16-mixed", help="comma-separated")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--steps", type=int, default=2, help="steps per side per round")
    p.add_argument("--repeats", type=int, default=3, help="rounds of alternation")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1 ... (auto: cuda when present)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile our model (callbacks=compile in a run); transformers' stays eager")
    p.add_argument("--cpu-allocator", choices=CPU_ALLOCATOR_CHOICES, default="keep_freed",
                   help="as a run's cpu_allocator (default keep_freed, the runs' default); both sides share it")
    p.add_argument("--gradient-checkpointing", action="store_true",
                   help="both sides recompute each layer in backward (ours: model.gradient_checkpointing; "
                        "transformers: gradient_checkpointing_enable)")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory runs (a process each)")
    p.add_argument("--products", action="store_true",
                   help="also time each step's matrix products alone: the step split into products and the rest")
    p.add_argument("--data", nargs="*", metavar="FILE", default=None,
                   help="also time data preparation on these text files (default: the corpus config's)")
    p.add_argument("--data-scales", default="1,4", help="corpus sizes, as copies of the files, for --data")
    p.add_argument("--data-group-bytes", default="8MB",
                   help="text per group of files for --data (data.prepare.group_bytes; groups are what workers share)")
    p.add_argument("--data-doc-boundary", default="file", choices=("file", "blank_line"),
                   help="where a document ends in the --data files (data.instances.doc_boundary): a file each, "
                        "or a blank line (one review or article a paragraph block, as IMDB's and Wikipedia's parts)")
    p.add_argument("--rows", metavar="NAMES",
                   help="train on real data sets' rows in a run's random batches instead of full 128-token ones: "
                        f"comma-separated, of {', '.join(ROW_SETS)} or any experiment preset; ours unpadded and "
                        "padded against transformers padded and length-grouped (sizes as conf/model names, "
                        "e.g. minilm_l6,base)")
    p.add_argument("--row-batches", type=int, default=8, help="batches drawn from each row set for --rows")
    p.add_argument("--skip-models", action="store_true", help="only the data-preparation benchmark")
    p.add_argument("--output", help="also write the Markdown report here")
    return p.parse_args(argv)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def bench_pair(spec: dict, args, peaks: dict) -> dict:
    device = torch.device(spec["device"])
    pair = make_steps(spec)
    tokens = spec["batch"] * spec["seq"]
    # eager, and a first warm-up step; the recorded products carry the FLOP counter's count
    products = {impl: record_products(pair[impl]) for impl in IMPLS} if args.products else {}
    flops = {impl: products[impl].flops if products else count_flops(pair[impl]) for impl in IMPLS}
    if args.compile:
        pair["ours"].model.compile()
    for impl in IMPLS:
        for _ in range(2 if args.compile else 1):  # compilation happens here, outside the timings
            pair[impl]()
    seconds = {impl: [] for impl in IMPLS}
    for round_ in range(args.repeats):
        for impl in IMPLS:
            seconds[impl].append(time_steps(pair[impl], args.steps, device))
        log(f"  round {round_ + 1}: ours {seconds['ours'][-1]:.3f} s/step, "
            f"transformers {seconds['transformers'][-1]:.3f} s/step")
    del pair
    product_rows = {impl: time_products(products[impl], device) for impl in products}
    ratios = [r / o for o, r in zip(seconds["ours"], seconds["transformers"])]
    result = {**spec, "ratio": statistics.median(ratios), "ratios": ratios, "compiled": args.compile}
    peak = peaks[spec["precision"]]
    for impl in IMPLS:
        s = statistics.median(seconds[impl])
        result[impl] = {"seconds": s, "tokens_per_s": tokens / s, "flops": flops[impl],
                        "flop_per_s": flops[impl] / s, "peak_fraction": flops[impl] / s / peak}
        if impl in product_rows:
            result[impl]["products_seconds"] = products_alone_seconds(product_rows[impl])
            result[impl]["products"] = product_rows[impl]
        if not args.no_memory:
            result[impl]["peak_bytes"] = run_isolated("bert_exp.tools.bench.memory",
                                                       {**spec, "impl": impl, "compile": args.compile,
                                                        "cpu_allocator": args.cpu_allocator})["peak_bytes"]
    return result


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**30:.2f} GiB"


def model_table(results: list[dict], peaks: dict) -> str:
    lines = [
        ("| task | size | precision | ours tokens/s | transformers tokens/s | speed-up (median) "
         "| ours peak mem | transformers peak mem | ours TFLOP/s (of peak) | transformers TFLOP/s (of peak) |"),
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        o, t = r["ours"], r["transformers"]
        lines.append(
            f"| {r['task']} | {r['size']} | {r['precision']}{' compiled' if r['compiled'] else ''}"
            f"{' checkpointed' if r.get('gradient_checkpointing') else ''} | {o['tokens_per_s']:,.0f} | {t['tokens_per_s']:,.0f} "
            f"| **{r['ratio']:.2f}x** ({min(r['ratios']):.2f}-{max(r['ratios']):.2f}) "
            f"| {_gib(o.get('peak_bytes'))} | {_gib(t.get('peak_bytes'))} "
            f"| {o['flop_per_s'] / 1e12:.3f} ({o['peak_fraction']:.0%}) "
            f"| {t['flop_per_s'] / 1e12:.3f} ({t['peak_fraction']:.0%}) |")
    cross = cross_precision(results)
    if cross:
        lines += ["", "Ours in bf16-mixed against transformers in its default fp32 (ratio of the medians):", ""]
        lines += [f"- {task} {size}: **{ratio:.2f}x**" for (task, size), ratio in cross.items()]
    lines += ["", "Measured matmul peak: " + ", ".join(f"{p} {v / 1e12:.3f} TFLOP/s" for p, v in peaks.items())
              + ". FLOPs are counted by torch's FlopCounterMode on one step of each model (forward and "
              "backward matrix products; our sparse MLM head counts only the masked positions)."]
    return "\n".join(lines)


def products_table(results: list[dict], peaks: dict) -> str:
    """Each step against its products timed alone: the products' own rate, and the time left to the
    rest (casts, element-wise work, the optimizer)."""
    lines = ["Each step against its matrix products timed alone (`--products`: every distinct product of "
             "one step replayed on fresh operands of the same layout, median of 5, summed):", "",
             "| task | size | precision | side | step s | products alone s (of the step) | the rest s "
             "| products alone TFLOP/s (of peak) |",
             "|---|---|---|---|---:|---:|---:|---:|"]
    for r in results:
        for impl in IMPLS:
            side = r[impl]
            if "products_seconds" not in side:
                continue
            alone, step = side["products_seconds"], side["seconds"]
            rate = side["flops"] / alone if alone > 0 else float("nan")
            lines.append(f"| {r['task']} | {r['size']} | {r['precision']} | {impl} | {step:.3f} "
                         f"| {alone:.3f} ({alone / step:.0%}) | {step - alone:.3f} "
                         f"| {rate / 1e12:.3f} ({rate / peaks[r['precision']]:.0%}) |")
    for r in results:
        rows = r["ours"].get("products", [])[:TOP_PRODUCTS]
        if rows:
            lines += ["", f"Our {r['task']} {r['size']} {r['precision']} step's largest products (alone):", "",
                      "| product | per step | ms each | TFLOP/s (of peak) |", "|---|---:|---:|---:|"]
            lines += [f"| {row['call']} | {row['count']} | {row['seconds'] * 1e3:.2f} "
                      f"| {row['flops'] / row['seconds'] / 1e12:.3f} "
                      f"({row['flops'] / row['seconds'] / peaks[r['precision']]:.0%}) |" for row in rows]
    return "\n".join(lines)


def cross_precision(results: list[dict]) -> dict:
    by_key = {(r["task"], r["size"], r["precision"]): r for r in results}
    return {(task, size): by_key[(task, size, "bf16-mixed")]["ours"]["tokens_per_s"] / r["transformers"]["tokens_per_s"]
            for (task, size, precision), r in by_key.items()
            if precision == "32-true" and (task, size, "bf16-mixed") in by_key}


def machine_line(device: torch.device, cpu_allocator: str = "system") -> str:
    from ..info import cpu_flags, cpu_name

    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        amx = " with AMX" if "amx_bf16" in cpu_flags() else ""
        name = f"{cpu_name()}{amx}, {torch.get_num_threads()} threads"
    return f"Device: {name}; torch {torch.__version__}; cpu_allocator={cpu_allocator}."


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.products and args.compile:
        raise SystemExit("error: --products times the eager model's products; leave out --compile with it")
    applied = configure_cpu_allocator(args.cpu_allocator)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    sections = [machine_line(device, args.cpu_allocator if applied else "system")]
    precisions = args.precisions.split(",")
    unknown = [p for p in precisions if p not in PRECISION_DTYPE]
    if unknown:
        raise SystemExit(f"error: --precisions {','.join(unknown)}: expected some of {', '.join(PRECISION_DTYPE)}")
    if args.rows and not args.skip_models:
        sections.append(run_rows_bench(args, device, log))
    elif not args.skip_models:
        log("measuring the matmul peak ...")
        peaks = {p: matmul_peak(device, PRECISION_DTYPE[p]) for p in precisions}
        results = []
        for task in args.tasks.split(","):
            if task not in TASKS:
                raise SystemExit(f"error: --tasks {task}: expected some of {', '.join(TASKS)}")
            for size in args.sizes.split(","):
                for precision in precisions:
                    spec = {"task": task, "size": size, "precision": precision, "batch": args.batch,
                            "seq": args.seq, "device": str(device),
                            "gradient_checkpointing": args.gradient_checkpointing}
                    log(f"{task} {size} {precision} (batch {args.batch} x {args.seq})")
                    results.append(bench_pair(spec, args, peaks))
        sections.append(model_table(results, peaks))
        if args.products:
            sections.append(products_table(results, peaks))
    if args.data is not None:
        from .data_prep import data_table, run_data_bench

        scales = [int(s) for s in args.data_scales.split(",")]
        sections.append(data_table(run_data_bench(args.data, scales, log, group_bytes=args.data_group_bytes,
                                                   doc_boundary=args.data_doc_boundary)))
    report = "\n\n".join(sections) + "\n"
    print(report)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
