"""Data preparation, ours against transformers' usual MLM preprocessing, on the same text files.

Ours: :func:`bert_exp.data.corpus.preparation.prepare` with 1 and with 2 worker processes (each group of files:
tokenize every document, cut sentence pairs with NSP labels, write litdata's chunks). Transformers':
``run_mlm.py``'s recipe, ``datasets.load_dataset("text")`` then ``map`` with the fast tokenizer (batched,
``num_proc=2``) and ``map`` grouping the ids into 128-token blocks (MLM only). Both use the same
vocabulary and each runs in a fresh process; the peak RSS is the largest of that process's and its
descendants' (preparing, litdata's and ``datasets``' workers). The corpus is also taken at several sizes
(the files linked N times over) to show whether memory grows with it.
"""

from __future__ import annotations

import json
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from itertools import chain
from pathlib import Path

from .hardware import peak_rss_bytes, run_isolated
from ...records import dumps

DEFAULT_GLOBS = ("corpus/gutenberg-nltk/*.txt", "corpus/state_union/*.txt", "corpus/inaugural/*.txt",
                 "corpus/tinyshakespeare/input.txt")  # the default pre-training corpus (conf/data/corpus)
IMPLS = ("ours-1", "ours-2", "transformers")  # ours with 1 and 2 worker processes


def default_files() -> list[str]:
    from ...datasets.catalog import default_data_dir

    root = default_data_dir()
    return [str(root / pattern) for pattern in DEFAULT_GLOBS]


def default_vocab() -> str:
    from ...resources import minilm_dir

    return str(Path(minilm_dir()) / "vocab.txt")


def scaled_copies(files: list[Path], scale: int, directory: Path) -> list[str]:
    """The files ``scale`` times over, as symbolic links with distinct names (nothing is copied)."""
    links = []
    for copy in range(scale):
        for index, file in enumerate(files):
            link = directory / f"{copy}-{index}-{file.name}"
            link.symlink_to(file.resolve())
            links.append(str(link))
    return links


def prepare_ours(spec: dict) -> int:
    from ...data.corpus import InstanceSettings, Location, PrepareSettings, prepare
    from ...data.tokenizer import load_vocab_file

    tokenizer = load_vocab_file(spec["vocab"])
    options = PrepareSettings(num_workers=spec["workers"], group_bytes=spec["group_bytes"])
    meta = prepare(Location(spec["out"]), [Path(f) for f in spec["files"]], tokenizer.to_str(),
                   tokenizer.get_vocab_size(),
                   InstanceSettings(max_seq_length=spec["seq"], doc_boundary=spec.get("doc_boundary", "file")),
                   options, {})
    return meta["report"]["tokens"]


def prepare_transformers(spec: dict) -> int:
    import datasets
    from transformers import BertTokenizerFast

    datasets.disable_progress_bars()
    tokenizer = BertTokenizerFast(spec["vocab"], do_lower_case=True)
    # one corpus file is Latin-1: replace its odd bytes (ours falls back to Latin-1 for that file)
    raw = datasets.load_dataset("text", data_files=spec["files"], split="train", cache_dir=spec["out"],
                                encoding_errors="replace")
    tokenized = raw.map(lambda batch: tokenizer(batch["text"], return_special_tokens_mask=True),
                        batched=True, remove_columns=["text"], num_proc=2)
    block = spec["seq"]

    def group_texts(examples):  # run_mlm.py's
        concatenated = {k: list(chain(*examples[k])) for k in examples}
        total = (len(concatenated["input_ids"]) // block) * block
        return {k: [t[i : i + block] for i in range(0, total, block)] for k, t in concatenated.items()}

    grouped = tokenized.map(group_texts, batched=True, num_proc=2)
    return len(grouped) * block


def peak_rss_with_descendants() -> int:
    """The largest peak resident memory of this process and of the processes it (and they) waited for."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return max(peak_rss_bytes(), children)


def measure(spec: dict) -> dict:
    if spec["impl"].startswith("ours"):  # imports happen before the clock starts, for both
        from ...data import tokenizer  # noqa: F401
        from ...data.corpus import preparation  # noqa: F401
    else:
        import datasets  # noqa: F401
        import transformers  # noqa: F401
    start = time.perf_counter()
    tokens = (prepare_ours if spec["impl"].startswith("ours") else prepare_transformers)(spec)
    return {"seconds": time.perf_counter() - start, "tokens": tokens, "peak_rss": peak_rss_with_descendants()}


def run_data_bench(files: list[str] | None, scales: list[int], log: Callable[[str], None],
                   vocab: str | None = None, seq: int = 128, group_bytes: str = "8MB",
                   impls: tuple[str, ...] = IMPLS, doc_boundary: str = "file") -> list[dict]:
    from ...data.corpus import expand_inputs

    inputs = expand_inputs(files or default_files())
    vocab = vocab or default_vocab()
    results = []
    for scale in scales:
        with tempfile.TemporaryDirectory(prefix="bert_exp-bench-") as tmp:
            linked = scaled_copies(inputs, scale, Path(tmp))
            for impl in impls:
                log(f"data preparation x{scale}: {impl}")
                workers = int(impl.split("-")[1]) if impl.startswith("ours") else 2
                spec = {"impl": impl, "files": linked, "vocab": vocab, "seq": seq, "out": f"{tmp}/{impl}",
                        "workers": workers, "group_bytes": group_bytes, "doc_boundary": doc_boundary}
                results.append({"impl": impl, "scale": scale, **run_isolated("bert_exp.tools.bench.data_prep", spec)})
    return results


def data_table(results: list[dict]) -> str:
    lines = ["| corpus size | pipeline | tokens | seconds | tokens/s | peak RSS (largest process) |",
             "|---|---|---:|---:|---:|---:|"]
    names = {"ours-1": "ours, 1 worker (NSP pairs, litdata chunks)", "ours-2": "ours, 2 workers (NSP pairs, litdata chunks)",
             "transformers": "datasets map + group, num_proc=2 (MLM only)"}
    for r in results:
        lines.append(f"| x{r['scale']} | {names[r['impl']]} | {r['tokens']:,} | {r['seconds']:.1f} "
                     f"| {r['tokens'] / r['seconds']:,.0f} | {r['peak_rss'] / 2**20:,.0f} MiB |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(dumps(measure(json.loads(sys.argv[1]))))
