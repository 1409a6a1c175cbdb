"""Data preparation, ours against transformers' usual MLM preprocessing, on the same text files.

Ours: ``build_corpus_cache`` (tokenize every document, cut sentence pairs with NSP labels, write the
memory-mapped cache). Transformers': ``run_mlm.py``'s recipe, ``datasets.load_dataset("text")`` then
``map`` with the fast tokenizer (batched) and ``map`` grouping the ids into 128-token blocks (MLM only).
Both use the same vocabulary and each runs in a fresh process, so its peak RSS is its own; the corpus
is also taken at several sizes (the files linked N times over) to show whether memory grows with it.
"""

from __future__ import annotations

import json
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
IMPLS = ("ours", "transformers")


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
    from ...data.corpus import InstanceSettings, build_corpus_cache
    from ...data.tokenizer import load_vocab_file

    out = Path(spec["out"])
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = load_vocab_file(spec["vocab"])
    build_corpus_cache([Path(f) for f in spec["files"]], tokenizer, out,
                       InstanceSettings(max_seq_length=spec["seq"]), {})
    return json.loads((out / "meta.json").read_text())["tokens"]


def prepare_transformers(spec: dict) -> int:
    import datasets
    from transformers import BertTokenizerFast

    datasets.disable_progress_bars()
    tokenizer = BertTokenizerFast(spec["vocab"], do_lower_case=True)
    # one corpus file is Latin-1: replace its odd bytes (ours falls back to Latin-1 for that file)
    raw = datasets.load_dataset("text", data_files=spec["files"], split="train", cache_dir=spec["out"],
                                encoding_errors="replace")
    tokenized = raw.map(lambda batch: tokenizer(batch["text"], return_special_tokens_mask=True),
                        batched=True, remove_columns=["text"])
    block = spec["seq"]

    def group_texts(examples):  # run_mlm.py's
        concatenated = {k: list(chain(*examples[k])) for k in examples}
        total = (len(concatenated["input_ids"]) // block) * block
        return {k: [t[i : i + block] for i in range(0, total, block)] for k, t in concatenated.items()}

    grouped = tokenized.map(group_texts, batched=True)
    return len(grouped) * block


def measure(spec: dict) -> dict:
    if spec["impl"] == "ours":  # imports happen before the clock starts, for both
        from ...data import corpus, tokenizer  # noqa: F401
    else:
        import datasets  # noqa: F401
        import transformers  # noqa: F401
    start = time.perf_counter()
    tokens = (prepare_ours if spec["impl"] == "ours" else prepare_transformers)(spec)
    return {"seconds": time.perf_counter() - start, "tokens": tokens, "peak_rss": peak_rss_bytes()}


def run_data_bench(files: list[str] | None, scales: list[int], log: Callable[[str], None],
                   vocab: str | None = None, seq: int = 128) -> list[dict]:
    from ...data.text import expand_inputs

    inputs = expand_inputs(files or default_files())
    vocab = vocab or default_vocab()
    results = []
    for scale in scales:
        with tempfile.TemporaryDirectory(prefix="bert_exp-bench-") as tmp:
            linked = scaled_copies(inputs, scale, Path(tmp))
            for impl in IMPLS:
                log(f"data preparation x{scale}: {impl}")
                spec = {"impl": impl, "files": linked, "vocab": vocab, "seq": seq, "out": f"{tmp}/{impl}"}
                results.append({"impl": impl, "scale": scale, **run_isolated("bert_exp.tools.bench.data_prep", spec)})
    return results


def data_table(results: list[dict]) -> str:
    lines = ["| corpus size | pipeline | tokens | seconds | tokens/s | peak RSS |", "|---|---|---:|---:|---:|---:|"]
    names = {"ours": "ours (NSP pairs, cache)", "transformers": "datasets map + group (MLM only)"}
    for r in results:
        lines.append(f"| x{r['scale']} | {names[r['impl']]} | {r['tokens']:,} | {r['seconds']:.1f} "
                     f"| {r['tokens'] / r['seconds']:,.0f} | {r['peak_rss'] / 2**20:,.0f} MiB |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(dumps(measure(json.loads(sys.argv[1]))))
