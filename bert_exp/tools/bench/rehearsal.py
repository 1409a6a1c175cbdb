"""A rehearsal of pre-training at scale on one machine: a corpus of hundreds of millions of tokens, its
vocabulary from a sample, prepared with several worker processes and streamed into BERT-mini training,
with each stage's wall time, the peak resident memory of every process and the disk used.

    python -m bert_exp.tools.bench.rehearsal corpus --copies 3 --out /tmp/rehearsal
    python -m bert_exp.tools.bench.rehearsal run --corpus /tmp/rehearsal --copies 3 --steps 300

``corpus`` writes perturbed copies of every corpus in ``$BERT_EXP_DATA/corpus`` that is a corpus of
documents (Gutenberg's books, a file each; IMDB's reviews and the Wikipedia articles, a paragraph each) as
plain text: copy 0 is the text itself, copy k drops every 7th word of each line starting at word k, so no
two copies hold the same sentence. ``run`` launches ``python -m bert_exp +experiment=pretrain_tiny
model=mini`` on copies 0..N-1 in a fresh cache and watches it (the run's processes carry a marker in
their environment; /proc gives each one's peak RSS, VmHWM). ``vocabulary`` trains only the vocabulary
(``python -m bert_exp.data`` is not needed: a DataModule in this process), for its time and memory.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import resource
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

SOURCES = {"books": ("gutenberg/*.txt.xz", "file"), "paragraphs": ("imdb/part*.txt.xz", "blank_line"),
           "articles": ("wikipedia/part*.txt.xz", "blank_line")}


def perturb(line: str, copy: int) -> str:
    if copy == 0:
        return line
    words = line.split(" ")
    return " ".join(w for i, w in enumerate(words) if (i + copy) % 7 != 0)


def write_copy(source: str, target: str, copy: int) -> int:
    with lzma.open(source, "rt", encoding="utf-8", errors="surrogateescape") as f, \
            open(target, "w", encoding="utf-8", errors="surrogateescape") as out:
        for line in f:
            out.write(perturb(line.rstrip("\n"), copy) + "\n")
    return os.path.getsize(target)


def make_corpus(data: Path, out: Path, copies: int, workers: int) -> None:
    jobs = []
    for kind, (pattern, _) in SOURCES.items():
        for copy in range(copies):
            directory = out / kind / f"copy{copy}"
            directory.mkdir(parents=True, exist_ok=True)
            for source in sorted((data / "corpus").glob(pattern)):
                target = directory / source.name.removesuffix(".xz")
                if not target.exists():
                    jobs.append((str(source), str(target), copy))
    started = time.perf_counter()
    with ProcessPoolExecutor(workers) as pool:
        written = sum(pool.map(write_copy, *zip(*jobs))) if jobs else 0
    print(json.dumps({"files_written": len(jobs), "bytes": written, "seconds": round(time.perf_counter() - started, 1)}))


def files_override(corpus: Path, copies: int) -> str:
    entries = []
    for kind, (_, boundary) in SOURCES.items():
        for copy in range(copies):
            entries.append(f'{{path:"{corpus}/{kind}/copy{copy}/*.txt",doc_boundary:{boundary}}}')
    return "data.files=[" + ",".join(entries) + "]"


def process_peaks(mark: str, peaks: dict[int, dict]) -> None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if mark.encode() not in (entry / "environ").read_bytes():
                continue
            status = dict(line.split(":", 1) for line in (entry / "status").read_text().splitlines() if ":" in line)
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        hwm = int(status.get("VmHWM", "0 kB").split()[0]) * 1024
        record = peaks.setdefault(int(entry.name), {"cmdline": cmdline[:120], "ppid": int(status["PPid"]), "peak": 0})
        record["peak"] = max(record["peak"], hwm)


def role(pid: int, record: dict, main: int) -> str:
    if pid == main:
        return "training process"
    if "spawn_main" in record["cmdline"] or "multiprocessing" in record["cmdline"]:
        return "preparation workers" if "resource_tracker" not in record["cmdline"] else "multiprocessing tracker"
    return "other children (loader workers)"


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def run(corpus: Path, copies: int, steps: int, workers: int, out: Path, extra: list[str]) -> dict:
    cache, run_dir = out / "cache", out / "run"
    mark = f"bert_exp_rehearsal_{time.time_ns()}"
    env = {**os.environ, "BERT_EXP_CACHE": str(cache), "BERT_EXP_REHEARSAL": mark, "WANDB_MODE": "offline"}
    command = [sys.executable, "-m", "bert_exp", "+experiment=pretrain_tiny", "model=mini",
               "data.tokenizer.vocab_size=30522", f"data.prepare.num_workers={workers}", files_override(corpus, copies),
               f"trainer.max_steps={steps}", f"trainer.val_check_interval={steps}", "trainer.limit_val_batches=5",
               "logger=csv", f"hydra.run.dir={run_dir}", *extra]
    print(" ".join(command[1:]), flush=True)
    started = time.monotonic()
    marks: dict[str, float] = {}
    peaks: dict[int, dict] = {}
    process = subprocess.Popen(command, env=env)
    while process.poll() is None:
        process_peaks(mark, peaks)
        now = time.monotonic() - started
        if "vocabulary" not in marks and any(p for p in (cache / "tokenizers").glob("[!.]*")):
            marks["vocabulary"] = now
        if "preparation" not in marks and list((cache / "prepared").glob("[!.]*/meta.json")):
            marks["preparation"] = now
        time.sleep(0.5)
    marks["end"] = time.monotonic() - started
    info = json.loads((run_dir / "run.json").read_text())
    meta = json.loads(next((cache / "prepared").glob("[!.]*/meta.json")).read_text())
    roles: dict[str, int] = {}
    for pid, record in peaks.items():
        name = role(pid, record, process.pid)
        roles[name] = max(roles.get(name, 0), record["peak"])
    summary = {"exit": process.returncode, "seconds": marks, "status": info.get("status"),
               "global_step": info.get("global_step"), "tokens": meta["report"]["tokens"],
               "documents": meta["report"]["documents"], "instances": meta["splits"],
               "preparation_tokens_per_second": meta["report"]["tokens_per_second"],
               "training_tokens_per_second": info.get("throughput", {}),
               "peak_rss_bytes": roles, "processes": len(peaks),
               "disk_bytes": {"corpus": du(corpus), "prepared": du(cache / "prepared"),
                              "vocabulary": du(cache / "tokenizers")},
               "vocabulary_sample_bytes": info.get("data_report", {}).get("vocabulary_sample_bytes")}
    (out / "rehearsal.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    return summary


def vocabulary(files: list[str], cache: Path, sample: str | None) -> dict:
    from ...data import PretrainingDataModule, TokenizerSpec

    dm = PretrainingDataModule(files=files, tokenizer=TokenizerSpec(sample_bytes=sample), cache_dir=str(cache))
    from ...data.corpus import corpus_text_bytes

    started = time.perf_counter()
    dm.data_checksums  # noqa: B018 - the inputs hashed (the vocabulary's cache key), timed apart
    hashed = time.perf_counter()
    dm.load_tokenizer()
    seconds = time.perf_counter() - hashed
    result = {"files": len(dm.files), "text_bytes": corpus_text_bytes(dm.files),
              "sample_bytes": dm.vocabulary_sample_bytes, "hashing_seconds": round(hashed - started, 1),
              "seconds": round(seconds, 1),
              "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    print(json.dumps(result))
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bert_exp.tools.bench.rehearsal",
                                     description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    make = sub.add_parser("corpus", help="write the perturbed copies")
    make.add_argument("--out", type=Path, required=True)
    make.add_argument("--copies", type=int, default=3)
    make.add_argument("--workers", type=int, default=2)
    go = sub.add_parser("run", help="the whole command on copies 0..N-1, watched")
    go.add_argument("--corpus", type=Path, required=True)
    go.add_argument("--copies", type=int, default=3)
    go.add_argument("--steps", type=int, default=300)
    go.add_argument("--workers", type=int, default=2)
    go.add_argument("--out", type=Path, required=True)
    go.add_argument("overrides", nargs="*")
    vocab = sub.add_parser("vocabulary", help="train only the vocabulary, in a fresh cache")
    vocab.add_argument("files", nargs="+")
    vocab.add_argument("--cache", type=Path, required=True)
    vocab.add_argument("--sample-bytes", default="1GB")
    args = parser.parse_args(argv)
    data = Path(os.environ.get("BERT_EXP_DATA", "../shared/data"))
    if args.what == "corpus":
        make_corpus(data, args.out, args.copies, args.workers)
    elif args.what == "run":
        run(args.corpus, args.copies, args.steps, args.workers, args.out, args.overrides)
    else:
        vocabulary(args.files, args.cache, None if args.sample_bytes == "none" else args.sample_bytes)


if __name__ == "__main__":
    main()
