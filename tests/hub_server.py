"""A local stand-in for the HuggingFace Hub, on 127.0.0.1 (the tests have no network).

Models: ``HEAD``/``GET /{repo_id}/resolve/{revision}/{filename}`` as the Hub answers ``hf_hub_download``
(``X-Repo-Commit``, ``ETag``, ``Content-Length``; a 404 with ``X-Error-Code`` ``RepoNotFound``,
``RevisionNotFound`` or ``EntryNotFound``). Datasets, as ``datasets.load_dataset`` and ``HfFileSystem``
read them: the repository's info (``/api/datasets/{id}[/revision/{rev}]``: its commit and files), its
tree (``/api/datasets/{id}/tree/{rev}[/{path}]``), ``paths-info``, and ``/datasets/{id}/resolve/...``
with byte ranges; a gated repository answers 403 ``GatedRepo``. Repositories are local directories; a repository's commit is a hash of its files
(names, sizes, times), so changing a file makes a new commit on ``main``. Each request's path and
Authorization header are recorded. Point ``HF_ENDPOINT`` at :attr:`LocalHub.url`."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


class LocalHub:
    def __init__(self, repos: dict[str, Path], datasets: dict[str, Path] | None = None, gated: set[str] = frozenset()):
        self.repos = dict(repos)
        self.datasets = dict(datasets or {})
        self.gated = set(gated)  # repositories that answer as gated ones do to a user without access
        self.authorizations: list[str | None] = []
        self.requests: list[str] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_HEAD(self):
                self.route(body=False)

            def do_GET(self):
                self.route(body=True)

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                form = parse_qs(self.rfile.read(length).decode()) if length else {}
                self.route(body=True, form=form)

            def route(self, body: bool, form: dict | None = None):
                hub.authorizations.append(self.headers.get("Authorization"))
                url = urlsplit(self.path)
                path = unquote(url.path).lstrip("/")
                hub.requests.append(f"{self.command} /{path}")
                if path.startswith("api/datasets/"):
                    return self.dataset_api(path[len("api/datasets/"):], parse_qs(url.query), form)
                if path.startswith("datasets/"):
                    return self.resolve(hub.datasets, path[len("datasets/"):], body)
                return self.resolve(hub.repos, path, body)

            # -- the file endpoint -------------------------------------------------------------------

            def resolve(self, repos: dict[str, Path], path: str, body: bool):
                repo_id, _, rest = path.partition("/resolve/")
                revision, _, filename = rest.partition("/")
                if repo_id not in repos:
                    return self.missing("RepoNotFound")
                commit = hub.commit_of(repos, repo_id)
                if revision not in ("main", commit):
                    return self.missing("RevisionNotFound")
                file = repos[repo_id] / filename
                if not file.is_file():
                    return self.missing("EntryNotFound")
                data = file.read_bytes()
                headers = {"X-Repo-Commit": commit, "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
                           "Accept-Ranges": "bytes"}
                status, chunk = 200, data
                ranged = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
                if ranged:
                    start = int(ranged[1])
                    end = min(int(ranged[2]) if ranged[2] else len(data) - 1, len(data) - 1)
                    status, chunk = 206, data[start:end + 1]
                    headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
                self.send(status, chunk if body else b"", headers, length=len(chunk))

            # -- the dataset API ---------------------------------------------------------------------

            def dataset_api(self, path: str, query: dict, form: dict | None):
                match = re.fullmatch(r"([^/]+/[^/]+|[^/]+)(?:/(revision|tree|paths-info)(?:/([^/]+)(?:/(.*))?)?)?",
                                     path)
                if match and match[1] in hub.gated:
                    return self.send(403, b"", {"X-Error-Code": "GatedRepo",
                                                "X-Error-Message": "Access to this dataset is restricted"})
                if not match or match[1] not in hub.datasets:
                    return self.missing("RepoNotFound")
                repo_id, action, revision, inner = match[1], match[2], match[3] or "main", match[4] or ""
                commit = hub.commit_of(hub.datasets, repo_id)
                if revision not in ("main", commit):
                    return self.missing("RevisionNotFound")
                root = hub.datasets[repo_id]
                if action in (None, "revision"):
                    siblings = [{"rfilename": p.relative_to(root).as_posix()} for p in _files(root)]
                    return self.json({"id": repo_id, "sha": commit, "private": False, "disabled": False,
                                      "gated": False, "siblings": siblings, "tags": [], "downloads": 0,
                                      "likes": 0, "lastModified": "2026-01-01T00:00:00.000Z"})
                if action == "tree":
                    folder = root / inner
                    if not folder.is_dir():
                        return self.missing("EntryNotFound")
                    recursive = query.get("recursive", ["false"])[0].lower() == "true"
                    found = sorted(folder.rglob("*") if recursive else folder.iterdir())
                    return self.json([self.entry(root, p) for p in found])
                # paths-info: the entries of the paths asked for (a missing path is left out)
                paths = (form or {}).get("paths", [])
                return self.json([self.entry(root, root / p) for p in paths if (root / p).exists()])

            @staticmethod
            def entry(root: Path, p: Path) -> dict:
                name = p.relative_to(root).as_posix()
                if p.is_dir():
                    return {"type": "directory", "path": name, "oid": hashlib.sha1(name.encode()).hexdigest()}
                data = p.read_bytes()
                return {"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}

            # -- answers -----------------------------------------------------------------------------

            def json(self, value):
                self.send(200, json.dumps(value).encode(), {"Content-Type": "application/json"})

            def missing(self, code: str):
                self.send(404, b"", {"X-Error-Code": code})

            def send(self, status: int, data: bytes, headers: dict, length: int | None = None):
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data) if length is None else length))
                self.end_headers()
                if data:
                    self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @staticmethod
    def commit_of(repos: dict[str, Path], repo_id: str) -> str:
        """The repository's commit: its name and its files (a changed file is a new commit)."""
        digest = hashlib.sha1(repo_id.encode())
        for p in _files(repos[repo_id]):
            stat = p.stat()
            digest.update(f"{p.relative_to(repos[repo_id])}:{stat.st_size}:{stat.st_mtime_ns}".encode())
        return digest.hexdigest()

    @property
    def commits(self) -> dict[str, str]:
        """Each model repository's commit now."""
        return {name: self.commit_of(self.repos, name) for name in self.repos}

    def dataset_commit(self, repo_id: str) -> str:
        return self.commit_of(self.datasets, repo_id)

    def __enter__(self) -> LocalHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
