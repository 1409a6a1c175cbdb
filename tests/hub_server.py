"""A local stand-in for the HuggingFace Hub's file endpoints, on 127.0.0.1 (the tests have no network).

It answers ``HEAD``/``GET /{repo_id}/resolve/{revision}/{filename}`` as the Hub does for ``hf_hub_download``
(``X-Repo-Commit``, ``ETag``, ``Content-Length``; a 404 with ``X-Error-Code`` ``RepoNotFound``,
``RevisionNotFound`` or ``EntryNotFound``), for repositories given as local directories, and records
each request's Authorization header. Point ``HF_ENDPOINT`` at :attr:`LocalHub.url`."""

from __future__ import annotations

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote


class LocalHub:
    def __init__(self, repos: dict[str, Path]):
        self.repos = repos
        self.commits = {name: hashlib.sha1(name.encode()).hexdigest() for name in repos}
        self.authorizations: list[str | None] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_HEAD(self):
                self.answer(body=False)

            def do_GET(self):
                self.answer(body=True)

            def answer(self, body: bool):
                hub.authorizations.append(self.headers.get("Authorization"))
                path = unquote(self.path.split("?")[0]).lstrip("/")
                repo_id, _, rest = path.partition("/resolve/")
                revision, _, filename = rest.partition("/")
                if repo_id not in hub.repos:
                    return self.missing("RepoNotFound")
                if revision not in ("main", hub.commits[repo_id]):
                    return self.missing("RevisionNotFound")
                file = hub.repos[repo_id] / filename
                if not file.is_file():
                    return self.missing("EntryNotFound")
                data = file.read_bytes()
                self.send_response(200)
                self.send_header("X-Repo-Commit", hub.commits[repo_id])
                self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

            def missing(self, code: str):
                self.send_response(404)
                self.send_header("X-Error-Code", code)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> LocalHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
