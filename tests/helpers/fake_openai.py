"""An OpenAI-compatible chat endpoint on 127.0.0.1 answered by a Python function, for CLI tests that build their
LLM from a config (`llm.backend=openai`, `llm.base_url=...`) yet must stay fast and deterministic."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@contextlib.contextmanager
def fake_openai(responder: Callable[[list[dict[str, Any]]], str | tuple[str, bytes]] | None = None) -> Iterator[str]:
    """Yields the base_url (`http://127.0.0.1:PORT/v1`); by default the labeling tests' scripted answerer. A reply
    given as (content type, body bytes) is sent as it is (a malformed endpoint); a string as a chat completion."""
    if responder is None:
        from tests.helpers.label_helpers import answer_from_prompt

        responder = answer_from_prompt

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            text = responder(body["messages"])
            prompt = sum(len(str(m["content"]).split()) for m in body["messages"])
            ctype, data = text if isinstance(text, tuple) else ("application/json", json.dumps({
                "id": "fake", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": len(text.split()),
                          "total_tokens": prompt + len(text.split())},
            }).encode())
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
