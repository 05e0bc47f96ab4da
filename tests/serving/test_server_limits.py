"""Server limits: bodies bounded while streaming, chat prompts capped, bounded queues
(503), and /route answering while a chat request runs."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from serving.routers import Decision
from serving.server import ServeConfig, create_app
from tests.helpers.live_server import LANES, _post_later, serving, wait_for


class FakeTokenizer:
    def apply_chat_template(self, messages: list[dict[str, str]], tokenize: bool = False,
                            add_generation_prompt: bool = True) -> str:
        return " ".join(m["content"] for m in messages)

    def __call__(self, text: str, add_special_tokens: bool = False) -> Any:
        return SimpleNamespace(input_ids=text.split())


class SlowRouter:
    """route_batch and generate block until released; every call is recorded."""

    kind, mode, threshold_logit, meta = "fake", "fast", 0.5, None

    def __init__(self) -> None:
        self.tokenizer = FakeTokenizer()
        self.route_gate, self.chat_gate = threading.Event(), threading.Event()
        self.route_gate.set()
        self.chat_gate.set()
        self.batches: list[list[str]] = []
        self.chat_started = threading.Event()

    def route_batch(self, questions, summaries, threshold_logit=None):
        self.route_gate.wait(30)
        self.batches.append(list(questions))
        return [Decision("ANSWER", 0.1, q, True, 0.0, 1) for q in questions]

    def generate(self, prompts, max_new_tokens=None, top_logprobs=0):
        self.chat_started.set()
        self.chat_gate.wait(30)
        return [{"text": "ok", "prompt_tokens": 1, "completion_tokens": 1, "finish_reason": "stop"} for _ in prompts]








ROUTE = {"question": "q", "summaries": []}
CHAT = {"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 1}




def test_route_answers_while_a_chat_request_runs():
    router = SlowRouter()
    router.chat_gate.clear()
    with serving(router) as base:
        chats: list[Any] = []
        t = _post_later(f"{base}/v1/chat/completions", CHAT, chats)
        assert router.chat_started.wait(10)
        started = time.perf_counter()
        r = httpx.post(f"{base}/route", json=ROUTE, timeout=5)  # one shared lock: this waited for the chat
        assert r.status_code == 200 and r.json()["action"] == "ANSWER"
        assert time.perf_counter() - started < 2
        router.chat_gate.set()
        t.join(30)
    assert chats[0].status_code == 200


def test_full_queue_is_refused_fast_with_503():
    router = SlowRouter()
    router.route_gate.clear()
    with serving(router, ServeConfig(max_queue=2, queue_timeout_s=30)) as base:
        results: list[Any] = []
        threads = [_post_later(f"{base}/route", {**ROUTE, "question": f"q{i}"}, results) for i in range(2)]
        wait_for(lambda: LANES["route"].in_flight == 2)
        started = time.perf_counter()
        r = httpx.post(f"{base}/route", json=ROUTE, timeout=5)
        assert r.status_code == 503 and "busy" in r.json()["error"]
        assert time.perf_counter() - started < 2
        router.route_gate.set()
        for t in threads:
            t.join(30)
    assert sorted(r.status_code for r in results) == [200, 200]


def test_request_that_cannot_start_in_time_gets_503():
    router = SlowRouter()
    router.route_gate.clear()
    with serving(router, ServeConfig(queue_timeout_s=0.5)) as base:
        first: list[Any] = []
        t = _post_later(f"{base}/route", ROUTE, first)
        wait_for(lambda: LANES["route"].in_flight == 1 and not LANES["route"].pending)  # running, gate closed
        r = httpx.post(f"{base}/route", json=ROUTE, timeout=5)
        assert r.status_code == 503 and "did not start within 0.5 s" in r.json()["error"]
        router.route_gate.set()
        t.join(30)
    assert first[0].status_code == 200


def test_waiting_route_requests_are_scored_together_in_order():
    router = SlowRouter()
    router.route_gate.clear()
    with serving(router, ServeConfig(route_batch_size=16)) as base:
        results: list[Any] = []
        blocker = _post_later(f"{base}/route", {**ROUTE, "question": "first"}, results)
        wait_for(lambda: LANES["route"].in_flight == 1 and not LANES["route"].pending)
        waiting = [_post_later(f"{base}/route", {**ROUTE, "question": f"w{i}"}, results) for i in range(5)]
        wait_for(lambda: len(LANES["route"].pending) == 5)
        router.route_gate.set()
        for t in [blocker, *waiting]:
            t.join(30)
    assert all(r.status_code == 200 for r in results)
    assert all(r.json()["reason"] == r.sent["question"] for r in results)  # each got its own decision back
    assert router.batches[0] == ["first"] and sorted(router.batches[1]) == [f"w{i}" for i in range(5)]


def test_body_limit_is_enforced_while_streaming():
    """Drive the ASGI app directly with a chunked 64 MB body: it must answer 413 after reading ~100 KB."""
    import asyncio

    app = create_app(SlowRouter(), ServeConfig(max_body_bytes=100_000))
    pulled, sent = [], []

    async def receive() -> dict[str, Any]:
        pulled.append(1)
        return {"type": "http.request", "body": b" " * 65_536, "more_body": len(pulled) < 1000}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/route", "raw_path": b"/route", "query_string": b"", "root_path": "",
             "headers": [(b"transfer-encoding", b"chunked")], "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2)}
    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 413 and b"limit is 100000" in sent[1]["body"]
    assert len(pulled) <= 3  # one chunk past the limit, never the whole body


def test_declared_oversized_body_is_refused_before_reading():
    from fastapi.testclient import TestClient

    client = TestClient(create_app(SlowRouter(), ServeConfig(max_body_bytes=100)))
    assert client.post("/route", content=b"{}").status_code == 422  # small: read and validated
    r = client.post("/route", content=b"x" * 500)  # Content-Length 500: refused before reading
    assert r.status_code == 413 and "limit is 100" in r.json()["error"]


@pytest.mark.parametrize(("body", "status", "needle"), [
    ({"messages": [{"role": "user", "content": "w " * 300}], "max_tokens": 1}, 413, "prompt has 300 tokens"),
    ({**CHAT, "logprobs": True, "top_logprobs": "abc"}, 422, "'top_logprobs'"),
    ({**CHAT, "logprobs": "yes"}, 422, "'logprobs'"),
    ({**CHAT, "max_tokens": 0}, 422, "'max_tokens'"),
    ({**CHAT, "max_tokens": "5"}, 422, "'max_tokens'"),
    ({**CHAT, "temperature": "hot"}, 422, "greedily"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": True}, 422, "'max_tokens'"),
])
def test_chat_bodies_are_validated_and_prompts_capped(body, status, needle):
    from fastapi.testclient import TestClient

    client = TestClient(create_app(SlowRouter(), ServeConfig(max_prompt_tokens=200)))
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == status, r.text
    assert needle in r.json()["error"]
