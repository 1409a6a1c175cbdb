"""Downloads against a local HTTP server on 127.0.0.1 serving files built from the shared data (a CoLA
zip made on the fly, the SQuAD dev JSON); nothing here reaches beyond the loopback address."""

from __future__ import annotations

import hashlib
import io
import re
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bert_exp.data import GlueDataModule
from bert_exp.data.__main__ import main as data_cli
from bert_exp.datasets.catalog import CatalogError, load_catalog
from bert_exp.datasets.download import (
    DataMissingError,
    DownloadError,
    fetch,
    file_status,
    require_inputs,
    summarize,
)

COLA_FILES = ["raw/in_domain_train.tsv", "raw/in_domain_dev.tsv", "raw/out_of_domain_dev.tsv",
              "tokenized/in_domain_train.tsv", "tokenized/in_domain_dev.tsv", "tokenized/out_of_domain_dev.tsv"]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Server:
    """Serves ``files`` (path -> bytes) with HTTP Range support; ``cut[path] = n`` sends the full
    Content-Length but only n bytes, once, then drops the connection."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.cut: dict[str, int] = {}
        self.requests: list[tuple[str, str | None]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                server.requests.append((self.path, self.headers.get("Range")))
                data = server.files.get(self.path)
                if data is None:
                    self.send_error(404)
                    return
                start = 0
                match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
                if match:
                    start = int(match.group(1))
                    if start >= len(data):
                        self.send_error(416)
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                body = data[start:]
                if self.path in server.cut:
                    body = body[: server.cut.pop(self.path)]
                    self.close_connection = True
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    s = Server()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def cola_zip(data_dir: Path, change: str | None = None) -> bytes:
    """The cola_public_1.1.zip layout, from the shared copies of its files."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("cola_public/README", (data_dir / "cola/README.cola_public").read_bytes())
        for rel in COLA_FILES:
            data = (data_dir / "cola" / rel).read_bytes()
            zf.writestr(f"cola_public/{rel}", data + b"tampered\n" if rel == change else data)
    return buffer.getvalue()


def write_catalog(directory: Path, name: str, text: str) -> None:
    directory.mkdir(exist_ok=True)
    (directory / f"{name}.yaml").write_text(text)


@pytest.fixture
def catalog_dir(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "catalog"
    directory.mkdir()
    monkeypatch.setenv("BERT_EXP_CATALOG", str(directory))
    return directory


def cola_entry(url: str, archive_sha: str | None) -> str:
    packaged = load_catalog()["cola"]  # the real entry's file checksums, pointed at the local server
    files = "\n".join(f"  {rel}: {digest}" for rel, digest in packaged.files.items())
    return (f"description: CoLA from the local server\ndownloads:\n  - url: {url}\n"
            f"    sha256: {archive_sha or 'null'}\n    unpack:\n      cola_public/README: cola/README.cola_public\n"
            f"      cola_public/: cola/\nfiles:\n{files}\n")


def leftovers(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file()] if directory.exists() else []


@pytest.mark.data
def test_download_verifies_unpacks_and_lists(data_dir, server, catalog_dir, tmp_path, capsys):
    archive = cola_zip(data_dir)
    server.files["/cola_public_1.1.zip"] = archive
    write_catalog(catalog_dir, "cola", cola_entry(f"{server.url}/cola_public_1.1.zip", sha256(archive)))
    target = tmp_path / "data"

    assert data_cli(["--data-dir", str(target), "download", "cola", "--no-progress"]) == 0
    for rel in COLA_FILES:
        assert (target / "cola" / rel).read_bytes() == (data_dir / "cola" / rel).read_bytes()
    assert (target / "cola/README.cola_public").is_file()
    assert not leftovers(target / ".downloads")  # the archive is gone once unpacked and verified
    assert summarize(file_status(load_catalog()["cola"], target)) == "present"

    # present now: a second download fetches nothing
    assert fetch(load_catalog()["cola"], target) == "already present"
    assert len(server.requests) == 1

    # `list` tells present from corrupt, with the file named
    (target / "cola/raw/in_domain_dev.tsv").write_text("edited\n")
    capsys.readouterr()
    assert data_cli(["--data-dir", str(target), "list"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"cola\s+│ corrupt", out)
    assert re.search(r"cola: corrupt .*in_domain_dev.tsv", out)

    # and `download` repairs it
    assert fetch(load_catalog()["cola"], target, progress=False) == "downloaded"
    assert summarize(file_status(load_catalog()["cola"], target)) == "present"


@pytest.mark.data
def test_wrong_checksum_leaves_nothing_behind(data_dir, server, catalog_dir, tmp_path, capsys):
    squad = (data_dir / "squad/dev-v1.1.json").read_bytes()
    server.files["/dev-v1.1.json"] = squad
    write_catalog(catalog_dir, "squad_bad", f"""
downloads:
  - url: {server.url}/dev-v1.1.json
    sha256: {"ab" * 32}
    path: squad/dev-v1.1.json
files:
  squad/dev-v1.1.json: {"ab" * 32}
""")
    target = tmp_path / "data"
    assert data_cli(["--data-dir", str(target), "download", "squad_bad", "--no-progress"]) == 2
    assert re.search(r"error: .*dev-v1.1.json: SHA256 hash of downloaded file .* does not match", capsys.readouterr().err)
    assert not leftovers(target / "squad") and not leftovers(target / ".downloads")

    # an archive whose bytes are right but one member is not what the release holds
    archive = cola_zip(data_dir, change="raw/in_domain_dev.tsv")
    server.files["/cola_public_1.1.zip"] = archive
    write_catalog(catalog_dir, "cola", cola_entry(f"{server.url}/cola_public_1.1.zip", None))
    with pytest.raises(DownloadError, match=r"in_domain_dev.tsv has sha256"):
        fetch(load_catalog()["cola"], target, progress=False)
    assert not leftovers(target / "cola") and not leftovers(target / ".downloads")
    assert not [p for p in target.iterdir() if p.name.startswith(".unpack-")]


@pytest.mark.data
def test_cut_off_download_resumes(data_dir, server, catalog_dir, tmp_path):
    squad = (data_dir / "squad/dev-v1.1.json").read_bytes()
    server.files["/dev-v1.1.json"] = squad
    server.cut["/dev-v1.1.json"] = len(squad) // 2
    write_catalog(catalog_dir, "squad_dev", f"""
downloads:
  - url: {server.url}/dev-v1.1.json
    sha256: {sha256(squad)}
    path: squad/dev-v1.1.json
files:
  squad/dev-v1.1.json: {sha256(squad)}
""")
    target = tmp_path / "data"
    source = load_catalog()["squad_dev"]
    with pytest.raises(DownloadError, match="resume"):
        fetch(source, target, progress=False)
    partial = target / ".downloads/dev-v1.1.json.part"
    kept = partial.stat().st_size  # what arrived, less the block that was cut
    assert len(squad) // 4 < kept <= len(squad) // 2
    assert not (target / "squad/dev-v1.1.json").exists()

    assert fetch(source, target, progress=False) == "downloaded"
    assert (target / "squad/dev-v1.1.json").read_bytes() == squad
    assert server.requests[-1] == ("/dev-v1.1.json", f"bytes={kept}-")  # only the rest was asked for
    assert not partial.exists()


def test_corrupt_archive_is_a_clear_error(server, catalog_dir, tmp_path):
    broken = b"PK\x03\x04 this is not a whole zip archive" * 10
    server.files["/broken.zip"] = broken
    write_catalog(catalog_dir, "broken", f"""
downloads:
  - url: {server.url}/broken.zip
    sha256: {sha256(broken)}
    unpack: {{"data/": "broken/"}}
files:
  broken/a.txt: null
""")
    target = tmp_path / "data"
    with pytest.raises(DownloadError, match=r"broken.zip: not a readable zip archive"):
        fetch(load_catalog()["broken"], target, progress=False)
    assert not leftovers(target / "broken") and not leftovers(target / ".downloads")


def test_offline_datamodule_names_the_command(tmp_path):
    """Without downloads, the runner stops before any work, naming the file, where it is expected and
    the command that fetches it (the packaged catalog: nothing is downloaded); a DataModule alone only
    checks that its inputs are there."""
    from bert_exp.runner.run import fetch_inputs

    root = tmp_path / "nodata"
    dm = GlueDataModule(train_file=str(root / "cola/raw/in_domain_train.tsv"),
                        val_files={"dev": str(root / "cola/raw/in_domain_dev.tsv")},
                        text_columns=[3], label_column=1, num_columns=4, vocab_file=None, download=False)
    with pytest.raises(DataMissingError, match="missing input: .*in_domain_train.tsv"):
        dm.prepare_data()
    with pytest.raises(DataMissingError) as info:
        fetch_inputs(dm)
    message = str(info.value)
    assert f"missing input: {root}/cola/raw/in_domain_train.tsv" in message
    assert f"python -m bert_exp.data download cola --data-dir {root.resolve()}" in message
    assert "data.download=false" in message

    dm = GlueDataModule(train_file=str(tmp_path / "elsewhere.tsv"), val_files={}, text_columns=[0], label_column=1,
                        download=True)
    with pytest.raises(DataMissingError, match="no data set in the catalog provides it"):
        fetch_inputs(dm)


@pytest.mark.data
def test_datamodule_downloads_what_it_needs(data_dir, server, catalog_dir, tmp_path):
    archive = cola_zip(data_dir)
    server.files["/cola_public_1.1.zip"] = archive
    write_catalog(catalog_dir, "cola", cola_entry(f"{server.url}/cola_public_1.1.zip", sha256(archive)))
    root = tmp_path / "data"
    require_inputs([str(root / "cola/raw/in_domain_train.tsv"), str(root / "cola/raw/*_dev.tsv")])
    assert (root / "cola/raw/in_domain_train.tsv").read_bytes() == (data_dir / "cola/raw/in_domain_train.tsv").read_bytes()

    # a corpus glob finds its data set too; with the server gone the error says what to do offline
    server.files.clear()
    with pytest.raises(DownloadError, match="Without internet access, copy the files of 'tinyshakespeare'"):
        write_catalog(catalog_dir, "tinyshakespeare", f"""
downloads:
  - url: {server.url}/input.txt
    sha256: {"cd" * 32}
    path: corpus/tinyshakespeare/input.txt
files:
  corpus/tinyshakespeare/input.txt: {"cd" * 32}
""")
        require_inputs([str(root / "corpus/tinyshakespeare/*.txt")])


def test_catalog_errors_name_the_file(catalog_dir):
    write_catalog(catalog_dir, "typo", "downloads:\n  - url: http://127.0.0.1/x.zip\n    sha256: abc\n"
                                       "    path: x.txt\nfiles:\n  x.txt: null\n")
    with pytest.raises(CatalogError, match=r"typo.yaml: downloads\[0\].sha256: 'abc' is not a sha256"):
        load_catalog()
    write_catalog(catalog_dir, "typo", "downloads:\n  - url: http://127.0.0.1/x.zip\n    sha256: null\n"
                                       "    path: x.txt\nfiles:\n  x.txt: null\n")
    with pytest.raises(CatalogError, match="sha256 is null, so every file it provides needs a sha256"):
        load_catalog()


def test_packaged_catalog_covers_the_data_configs():
    """Every file the shipped data configs read is provided by a catalog entry, and each entry is
    checked by an archive or per-file sha256."""
    catalog = load_catalog()
    assert {"cola", "sst2", "squad_v1", "squad_v2", "wikitext2", "wikitext103"} <= set(catalog)
    needed = ["cola/raw/in_domain_train.tsv", "cola/raw/out_of_domain_dev.tsv", "glue/SST-2/dev.tsv",
              "squad/train-v1.1.json", "squad/dev-v2.0.json", "corpus/gutenberg-nltk/*.txt",
              "corpus/state_union/*.txt", "corpus/inaugural/*.txt", "corpus/tinyshakespeare/input.txt"]
    for rel in needed:
        assert any(s.provides("/d/" + rel) == "/d" for s in catalog.values()), rel
    for source in catalog.values():
        for download in source.downloads:
            assert download.sha256 or all(source.files[r] for r in source.files if download.provides(r))


def test_download_into_a_directory_that_cannot_be_written_is_one_line(tmp_path, monkeypatch, capsys):
    from bert_exp.datasets.__main__ import main as data_main

    a_file = tmp_path / "not-a-dir"
    a_file.write_text("x")
    assert data_main(["--data-dir", str(a_file), "download", "cola"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot write to the data directory {a_file}") and err.count("\n") == 1

    import tempfile

    def read_only(*args, **kwargs):  # tests run as root, which ignores permission bits
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", read_only)
    assert data_main(["--data-dir", str(tmp_path / "ro"), "download", "cola"]) == 2
    assert "Permission denied" in capsys.readouterr().err
