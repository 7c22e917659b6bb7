"""The real servers acquisition is tested against, on 127.0.0.1 ephemeral ports: a STAC API (`rustac serve`, its
in-memory backend, over an ItemCollection) and an asset server (Starlette's `StaticFiles` under uvicorn: range
requests answered 206) behind an ASGI middleware that injects the faults users hit.

Faults are planned per file path (`AssetServer.plan(path, "429", "stall", …)`), one consumed per request:
`429` (with Retry-After: 1), `503`, `403`, `stall` (half the body, then silence), `truncate` (half the body, then the
connection closes, Content-Length stating the whole), `corrupt` (the whole length, a byte changed), `short` (half the
file, Content-Length stating the half: a file cut short on the server). `AssetServer.requests` counts GETs per path, `Faults.ranges` lists their Range headers.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from urllib.parse import parse_qs

import requests
import uvicorn
from starlette.staticfiles import StaticFiles

STALL_S = 3.0  # a stalled answer's silence: longer than the tests' read timeout
TOKEN = "eoscale-test-token"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Faults:
    """ASGI middleware in front of the files: the planned faults, then the files as they are."""

    def __init__(self, app, root: Path):
        self.app, self.root = app, root
        self.faults: dict[str, list[str]] = defaultdict(list)
        self.requests: Counter[str] = Counter()
        self.ranges: dict[str, list[str | None]] = defaultdict(list)
        self.require_token: set[str] = set()
        self.lock = threading.Lock()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        with self.lock:
            self.requests[path] += 1
            self.ranges[path].append(dict(scope["headers"]).get(b"range", b"").decode() or None)
            fault = self.faults[path].pop(0) if self.faults[path] else None
        token = parse_qs(scope.get("query_string", b"").decode()).get("token", [None])[0]
        if path in self.require_token and token != TOKEN:
            fault = "403"
        if fault is None:
            return await self.app(scope, receive, send)
        body = (self.root / path.lstrip("/")).read_bytes()
        half = len(body) // 2
        if fault in ("429", "503", "403"):
            headers = [(b"retry-after", b"1")] if fault == "429" else []
            return await _answer(send, int(fault), b"fault", headers)
        if fault == "corrupt":
            return await _answer(send, 200, body[:half] + bytes([body[half] ^ 0xFF]) + body[half + 1:])
        if fault == "short":
            return await _answer(send, 200, body[:half])
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body[:half], "more_body": True})
        if fault == "stall":  # silent until the client gives up (it disconnects) or STALL_S pass
            try:
                await asyncio.wait_for(_disconnected(receive), STALL_S)
            except (TimeoutError, asyncio.CancelledError):
                pass
        # truncate (and a stall's end): return with the body unfinished; uvicorn closes the connection


async def _disconnected(receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _answer(send, status: int, body: bytes, headers: list | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", str(len(body)).encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


def proxy(upstream: str):
    """An ASGI app that forwards each request to `upstream` (so `Faults` can stand in front of the STAC API)."""
    from starlette.concurrency import run_in_threadpool

    async def app(scope, receive, send):
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        query = scope.get("query_string", b"").decode()
        url = f"{upstream}{scope['path']}" + (f"?{query}" if query else "")
        headers = {k.decode(): v.decode() for k, v in scope["headers"] if k.lower() not in (b"host", b"content-length")}
        answer = await run_in_threadpool(requests.request, scope["method"], url, data=body, headers=headers, timeout=10)
        content = answer.content.replace(upstream.encode(), f"http://{dict(scope['headers'])[b'host'].decode()}".encode())
        await _answer(send, answer.status_code, content, [(b"content-type", answer.headers.get("content-type",
                                                                                             "").encode())])

    return app


class AssetServer:
    """uvicorn serving `root` through `Faults`, in a thread of this process (or, with `app`, that app: a proxy)."""

    def __init__(self, root: Path | None, app=None):
        self.faults = Faults(app or StaticFiles(directory=str(root)), root)
        self.port = free_port()
        config = uvicorn.Config(self.faults, host="127.0.0.1", port=self.port, log_level="critical",
                                timeout_graceful_shutdown=1, lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def requests(self) -> Counter[str]:
        return self.faults.requests

    def plan(self, path: str, *faults: str) -> None:
        with self.faults.lock:
            self.faults.faults[path] = list(faults)

    def clear(self) -> None:
        with self.faults.lock:
            self.faults.faults.clear()
            self.faults.requests.clear()
            self.faults.ranges.clear()
            self.faults.require_token.clear()

    def __enter__(self) -> AssetServer:
        self.thread.start()
        _wait(lambda: self.server.started, f"the asset server on port {self.port}")
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


class StacApi:
    """`rustac serve` over an ItemCollection file (in-memory backend), in a subprocess."""

    def __init__(self, items: Path):
        self.items, self.port = items, free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> StacApi:
        rustac = shutil.which("rustac") or str(Path(__import__("sys").executable).parent / "rustac")
        self.process = subprocess.Popen([rustac, "serve", str(self.items), "--addr", f"127.0.0.1:{self.port}",
                                         "--create-collections"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

        def answers() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"rustac serve exited: {self.process.stderr.read().decode()[-2000:]}")
            try:
                return requests.get(f"{self.url}/collections", timeout=1).ok
            except requests.ConnectionError:
                return False

        _wait(answers, f"rustac serve on port {self.port}")
        return self

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stderr.close()


def _wait(ready, what: str, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > end:
            raise RuntimeError(f"{what} did not start within {timeout:.0f} s")
        time.sleep(0.05)


def write_item_collection(items: list[dict], path: Path) -> Path:
    path.write_text(json.dumps({"type": "FeatureCollection", "features": items}))
    return path
