"""Reads the records of an offline W&B run (``run-ID.wandb``): what ``wandb sync`` would upload.

The file is a LevelDB-style log: a 7-byte header, then 32 KiB blocks of records, each a 7-byte header
(crc32, length, type) and a piece of a serialized ``wandb_internal_pb2.Record``."""

import struct
from pathlib import Path

from wandb.proto import wandb_internal_pb2

BLOCK, HEADER = 32768, 7
FULL, LAST = 1, 4


def wandb_records(path: Path):
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", path
    pos, pending = HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # block trailer
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        if kind == 0 and length == 0:
            break
        pending += data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def offline_run(run_dir: Path) -> dict:
    """The one offline W&B run under ``run_dir/wandb``: its id, run record, config, history keys,
    summary and saved files."""
    (path,) = Path(run_dir, "wandb").glob("offline-run-*/run-*.wandb")
    out = {"id": path.stem.removeprefix("run-"), "history_keys": set(), "summary": {}, "files": set(), "config": {}}
    for record in wandb_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out.update(group=record.run.run_group, job_type=record.run.job_type, project=record.run.project,
                       entity=record.run.entity, tags=list(record.run.tags), notes=record.run.notes)
            out["config"].update({u.key: u.value_json for u in record.run.config.update})
        elif kind == "config":
            out["config"].update({u.key: u.value_json for u in record.config.update})
        elif kind == "history":
            out["history_keys"].update(item.nested_key[0] if item.nested_key else item.key for item in record.history.item)
        elif kind == "summary":
            out["summary"].update({(u.nested_key[0] if u.nested_key else u.key): u.value_json for u in record.summary.update})
        elif kind == "files":
            out["files"].update(f.path for f in record.files.files)
    return out
