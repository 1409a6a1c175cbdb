"""GLUE's catalog entries against a local file server: each packaged entry, pointed at 127.0.0.1, refuses
bytes that are not the pinned archive (nothing left behind), and unpacks GLUE's layout when the bytes are
the pinned ones; every file a GLUE data preset reads (train, dev, test) comes from an entry."""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import pytest

import bert_exp.datasets

from bert_exp.datasets.catalog import load_catalog
from bert_exp.datasets.download import DownloadError, fetch
from helpers import compose_config

from test_download import catalog_dir, leftovers, server, write_catalog  # noqa: F401  (fixtures: the local server)

GLUE = ["glue_cola", "glue_mnli", "glue_qqp", "glue_qnli", "glue_stsb", "glue_mrpc", "glue_rte", "glue_wnli", "glue_ax"]
ORIGIN = "https://dl.fbaipublicfiles.com/"


def served_bytes(source, download) -> bytes:
    """A stand-in for the release: an archive with every member the entry expects, or a file's bytes."""
    if not download.unpack:
        return f"stand-in for {download.path}\n".encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for member, destination in download.unpack.items():
            for rel in source.files:
                if rel.startswith(destination):
                    archive.writestr(member + rel[len(destination):], f"rows of {rel}\n")
    return buffer.getvalue()


def pointed_at(server, name: str, sha256s: dict[str, str] | None = None) -> str:
    """The packaged entry's text with its URLs on the local server (and, given, other archive sha256s)."""
    text = (Path(bert_exp.datasets.__file__).parent / "catalog" / f"{name}.yaml").read_text()
    if sha256s:
        for old, new in sha256s.items():
            text = text.replace(old, new)
    return text.replace(ORIGIN, f"{server.url}/")


@pytest.mark.parametrize("name", GLUE)
def test_glue_entry_checks_the_pinned_sha256(name, server, catalog_dir, tmp_path):
    packaged = load_catalog()[name]
    for download in packaged.downloads:
        assert download.url.startswith(ORIGIN) and download.sha256, f"{name}: every GLUE download is pinned"
        server.files["/" + download.url[len(ORIGIN):]] = served_bytes(packaged, download)
    write_catalog(catalog_dir, name, pointed_at(server, name))
    target = tmp_path / "data"
    with pytest.raises(DownloadError, match="does not match"):
        fetch(load_catalog()[name], target, progress=False)
    assert not leftovers(target / "glue") and not leftovers(target / ".downloads")

    # the same bytes, pinned (archive and per-file pins alike): GLUE's layout under the data directory
    pins = {d.sha256: hashlib.sha256(server.files["/" + d.url[len(ORIGIN):]]).hexdigest() for d in packaged.downloads}
    write_catalog(catalog_dir, name, pointed_at(server, name, pins))
    source = load_catalog()[name]
    fetch(source, target, progress=False)
    assert sorted(str(p.relative_to(target)) for p in leftovers(target / "glue")) == sorted(source.files)


@pytest.mark.parametrize("experiment", ["cola_minilm", "sst2_minilm", "glue_mnli_minilm", "glue_qqp_minilm",
                                        "glue_qnli_minilm", "glue_stsb_minilm", "glue_mrpc_minilm", "glue_rte_minilm",
                                        "glue_wnli_minilm"])
def test_every_file_a_glue_preset_reads_is_in_the_catalog(experiment):
    data = compose_config([f"+experiment={experiment}", "paths.data_dir=/d"]).data
    val = [p for paths in data.val_files.values() for p in ([paths] if isinstance(paths, str) else paths)]
    files = [data.train_file, *val, *(data.get("test_files") or {}).values()]
    if data.get("hold_out") and data.hold_out.get("ids_file"):
        files.append(data.hold_out.ids_file)
    catalog = load_catalog()
    for path in files:
        assert any(source.provides(path) == "/d" for source in catalog.values()), path
