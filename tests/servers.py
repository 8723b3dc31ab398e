"""Test helpers: a scriptable HTTP server on 127.0.0.1 and writers of files in official formats.

``FileServer`` is a threaded ``http.server`` on an ephemeral port of 127.0.0.1. Tests register what
each URL path does (serve bytes, redirect, cut the body short, answer an HTTP error) or mount a local
folder under a prefix, and point the real download code at it. Tests get a started one from the
``file_server`` fixture (tests/conftest.py), which stops it in its teardown.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import tarfile
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
#: read-only real data (absent on users' machines and maybe in CI): tests using it must skip without it;
#: ../shared/realdata beside the checkout unless CALIBREPRO_REALDATA_DIR names another folder
REALDATA = Path(os.environ.get("CALIBREPRO_REALDATA_DIR") or Path(__file__).resolve().parents[2] / "shared" / "realdata")
#: the real UCI files (wine, crime, the appliances energy series)
UCI = REALDATA / "uci"


def realdata_checksums() -> dict[str, str]:
    """File path (relative to REALDATA) -> sha256, from its SHA256SUMS."""
    lines = (REALDATA / "SHA256SUMS").read_text().splitlines()
    return dict(line.split()[::-1] for line in lines if line.strip())
#: environment variable naming a folder with the original model code, laid out like the repositories:
#: <dir>/chenyaofo/pytorch-cifar-models/hubconf.py, <dir>/huyvnphan/PyTorch_CIFAR10/cifar10_models/*.py
ORIGINAL_CODE_ENV = "CALIBREPRO_ORIGINAL_CODE_DIR"


@dataclass
class Route:
    kind: str  # "file", "redirect", "truncate", "status", "flaky", "stall", "unsized"
    data: bytes = b""
    target: str = ""
    code: int = 200
    cut: int = 0
    failures: int = 0  # "flaky": how many more requests are cut short before the file is served
    stall: float = 0.0  # "stall": seconds to wait, silent, after the first ``cut`` bytes


class FileServer:
    """A threaded HTTP server on 127.0.0.1 whose answers the test scripts, path by path."""

    def __init__(self):
        self.routes: dict[str, Route] = {}
        self.mounts: dict[str, Path] = {}
        self.requests: list[str] = []
        self.user_agents: list[str] = []
        self.stopping = threading.Event()  # wakes stalled responses when the server stops
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_GET(self):  # noqa: N802 - http.server's naming
                path = self.path.split("?", 1)[0]
                server.requests.append(path)
                server.user_agents.append(self.headers.get("User-Agent", ""))
                route = server._route(path)
                if route is not None and route.kind == "flaky":
                    if route.failures > 0:
                        route.failures -= 1
                        route = Route("truncate", data=route.data, cut=len(route.data) // 2)
                    else:
                        route = Route("file", data=route.data)
                if route is None:
                    self._send(404, b"not found")
                elif route.kind == "file":
                    self._send(200, route.data)
                elif route.kind == "redirect":
                    self.send_response(route.code)
                    self.send_header("Location", route.target)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif route.kind == "status":
                    self._send(route.code, b"error")
                elif route.kind == "truncate":
                    # announce the whole file, send only part of it, then drop the connection
                    self.send_response(200)
                    self.send_header("Content-Type", "application/octet-stream")
                    self.send_header("Content-Length", str(len(route.data)))
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(route.data[: route.cut])
                    self.wfile.flush()
                    self.close_connection = True
                elif route.kind == "stall":
                    # announce the whole file, send the first bytes, then say nothing (a hung server)
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(route.data)))
                    self.end_headers()
                    self.wfile.write(route.data[: route.cut])
                    self.wfile.flush()
                    server.stopping.wait(route.stall)
                    self.close_connection = True
                elif route.kind == "unsized":
                    # no Content-Length: the body ends when the connection closes, here after ``cut`` bytes
                    self.send_response(200)
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(route.data[: route.cut])
                    self.wfile.flush()
                    self.close_connection = True

            def _send(self, code: int, body: bytes):
                self.send_response(code)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    # ------------------------------------------------------------------------------------ setup
    def start(self) -> "FileServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    @property
    def base(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def url(self, path: str) -> str:
        return self.base + path

    def add_file(self, path: str, data: bytes) -> str:
        self.routes[path] = Route("file", data=data)
        return self.url(path)

    def add_redirect(self, path: str, target: str, code: int = 302) -> str:
        self.routes[path] = Route("redirect", target=target, code=code)
        return self.url(path)

    def add_truncated(self, path: str, data: bytes, cut: int) -> str:
        self.routes[path] = Route("truncate", data=data, cut=cut)
        return self.url(path)

    def add_flaky(self, path: str, data: bytes, failures: int) -> str:
        """Cut the first ``failures`` responses short, then serve ``data``."""
        self.routes[path] = Route("flaky", data=data, failures=failures)
        return self.url(path)

    def add_stalled(self, path: str, data: bytes, cut: int, stall: float = 60.0) -> str:
        """Announce ``data``, send its first ``cut`` bytes, then stay silent for ``stall`` seconds."""
        self.routes[path] = Route("stall", data=data, cut=cut, stall=stall)
        return self.url(path)

    def add_unsized(self, path: str, data: bytes, cut: int) -> str:
        """Send the first ``cut`` bytes of ``data`` without a Content-Length, then close the connection."""
        self.routes[path] = Route("unsized", data=data, cut=cut)
        return self.url(path)

    def add_status(self, path: str, code: int) -> str:
        self.routes[path] = Route("status", code=code)
        return self.url(path)

    def mount(self, prefix: str, folder: str | os.PathLike) -> str:
        """Serve the files under ``folder`` at ``prefix/<relative path>``."""
        self.mounts[prefix.rstrip("/")] = Path(folder)
        return self.url(prefix.rstrip("/"))

    def count(self, path: str) -> int:
        return sum(1 for requested in self.requests if requested == path)

    def _route(self, path: str) -> Route | None:
        if path in self.routes:
            return self.routes[path]
        for prefix, folder in self.mounts.items():
            if path.startswith(prefix + "/"):
                candidate = (folder / path[len(prefix) + 1:]).resolve()
                if folder.resolve() in candidate.parents and candidate.is_file():
                    return Route("file", data=candidate.read_bytes())
        return None


# ------------------------------------------------------------------------------ official formats


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def md5_hex(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def _cifar_batch(dataset: str, images: np.ndarray, labels) -> bytes:
    images = np.asarray(images, dtype=np.uint8)
    if dataset == "cifar10":
        batch = {b"batch_label": b"testing batch 1 of 1", b"labels": [int(v) for v in labels]}
    else:
        batch = {b"fine_labels": [int(v) for v in labels], b"coarse_labels": [0] * len(labels)}
    batch[b"data"] = images.transpose(0, 3, 1, 2).reshape(len(images), -1)
    batch[b"filenames"] = [f"img_{i}.png".encode() for i in range(len(images))]
    return pickle.dumps(batch, protocol=2)


def cifar_tarball_bytes(dataset: str, images: np.ndarray, labels, train=None) -> bytes:
    """A ``cifar-10-python.tar.gz`` / ``cifar-100-python.tar.gz`` holding the test batch (and, given
    ``train = (images, labels)``, the training batches: CIFAR-10's five take consecutive fifths).

    ``images`` is ``(N, 32, 32, 3)`` uint8; the batch is pickled as in the official files (protocol 2
    dict with bytes keys, ``data`` ``(N, 3072)`` uint8 in R, G, B planes, labels as a list).
    """
    from calibrepro.datasets import CIFAR

    spec = CIFAR[dataset]
    members = [(spec.member, _cifar_batch(dataset, images, labels))]
    if train is not None:
        parts = np.array_split(np.arange(len(train[1])), len(spec.train_members))
        members += [
            (name, _cifar_batch(dataset, train[0][rows], np.asarray(train[1])[rows]))
            for name, rows in zip(spec.train_members, parts)
        ]
    member = spec.member
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, payload in members:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            archive.addfile(info, io.BytesIO(payload))
        readme = tarfile.TarInfo(member.split("/")[0] + "/readme.html")
        readme.size = 3
        archive.addfile(readme, io.BytesIO(b"hi\n"))
    return buffer.getvalue()


def random_cifar(n: int, num_classes: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8), rng.integers(0, num_classes, size=n)


def original_code_dir() -> Path | None:
    """The folder named by ``CALIBREPRO_ORIGINAL_CODE_DIR``, else ``../shared/original_code`` beside the
    checkout when it exists (where CI can be given the files), else None."""
    value = os.environ.get(ORIGINAL_CODE_ENV)
    if value:
        return Path(value)
    shared = Path(__file__).resolve().parents[2] / "shared" / "original_code"
    return shared if shared.is_dir() else None


def serve_original_code(server: FileServer, repo: str, commit: str) -> dict[str, str]:
    """Mirror ``https://raw.githubusercontent.com/<repo>/<commit>`` to the local copy of the repository.

    Skips the test when ``CALIBREPRO_ORIGINAL_CODE_DIR`` is unset or lacks the repository.
    """
    root = original_code_dir()
    if root is None:
        pytest.skip(
            f"{ORIGINAL_CODE_ENV} is not set and ../shared/original_code is absent: the original {repo} code files "
            "cannot be downloaded here; set it to a folder laid out as <dir>/<owner>/<repo>/<files at the pinned "
            "commit> to run this test"
        )
    folder = root / repo
    if not folder.is_dir():
        pytest.skip(f"{ORIGINAL_CODE_ENV}={root} has no {repo}/ folder")
    local = server.mount(f"/raw/{repo}/{commit}", folder)
    return {f"https://raw.githubusercontent.com/{repo}/{commit}": local}
