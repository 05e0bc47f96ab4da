"""A real uvicorn server on 127.0.0.1 in a thread for the HTTP tests, and helpers to post and wait without
fixed sleeps."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import uvicorn

from serving.server import ServeConfig, create_app
from tests.helpers.servers import free_port

LANES: dict[str, Any] = {}


def wait_for(condition: Any, timeout_s: float = 30.0) -> None:
    """Poll instead of sleeping a fixed time: the test machine may be busy."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


@contextlib.contextmanager
def serving(router: Any, cfg: ServeConfig | None = None) -> Iterator[str]:
    port = free_port()
    app = create_app(router, cfg)
    LANES.update(app.state.lanes)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def _post_later(url: str, body: dict[str, Any], results: list[Any]) -> threading.Thread:
    def go() -> None:
        r = httpx.post(url, json=body, timeout=60)
        r.sent = body
        results.append(r)

    thread = threading.Thread(target=go)
    thread.start()
    return thread
