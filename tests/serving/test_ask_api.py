"""POST /ask (issue 40): the memory runtime served warm: a conversation already ingested or sent inline, a question,
and the route, answer, quote and cost back; malformed bodies and unknown conversations are named 4xx."""

import dataclasses
import json

import pytest
from fastapi.testclient import TestClient

from serving.ask_api import AskServeConfig
from serving.routers.fixed import AlwaysEscalate
from serving.server import ServeConfig, create_app
from tests.helpers.tiny_bert import tiny_reader
from tiermem.data.tiermem_format import EXAMPLE_PATH
from tiermem.memory.memory_config import MemoryConfig
from tiermem.settings.errors import ConfigError


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ask")
    memory = MemoryConfig(page_tokens=120, tokenizer="whitespace", embedder="hashing", answerer="extractive",
                          reader=str(tiny_reader(tmp / "reader")))
    cfg = ServeConfig(ask=AskServeConfig(workdir=str(tmp / "mem"), memory=memory))
    app = create_app(AlwaysEscalate(), cfg)
    return TestClient(app), app, tmp


def _inline():
    doc = json.loads(EXAMPLE_PATH.read_text(encoding="utf-8"))
    conv = next(c for c in doc["conversations"] if c["id"] == "tomas-assistant")
    return {k: v for k, v in conv.items() if k != "questions"}


def test_ask_inline_then_by_id_answers_with_route_quote_and_cost(served):
    client, app, _ = served
    r = client.post("/ask", json={"question": "What breed is Pepper?", "conversation": _inline()})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["conv_id"] == "tomas-assistant" and body["route"] == "ESCALATE" and body["decided_by"] == "router"
    assert body["pages_read"] and body["cost"]["llm_calls"] == 0 and body["cost"]["pages_read"] >= 1
    assert body["stated"] and body["answer"] and body["quote"]["turn_id"] and body["quote"]["text"]
    assert body["reading"]["floor"] == -100.0 and body["seconds"] > 0
    # the same conversation by id: the tiers the inline request built, the reader already loaded
    reader = app.state.ask._reader
    r = client.post("/ask", json={"question": "Where does Tomas volunteer?", "conv_id": "tomas-assistant",
                                  "policy": "summary"})
    assert r.status_code == 200, r.text
    assert r.json()["route"] == "ANSWER" and r.json()["decided_by"] == "fixed:summary"
    assert app.state.ask._reader is reader is not None  # loaded once per process
    assert client.get("/health").json()["ask"]["answered"] >= 2


def test_a_conversation_ingested_before_the_server_started_is_found_by_id(served):
    client, app, tmp = served
    from tiermem.data import load_conversations
    from tiermem.memory.runtime import MemoryRuntime
    from tiermem.memory.summaries import HashingEmbedder

    conv = next(c for c in load_conversations(EXAMPLE_PATH) if c.conv_id != "tomas-assistant")
    MemoryRuntime.open_or_build(tmp / "mem", conv, app.state.ask.cfg.memory, embedder=HashingEmbedder()).close()
    r = client.post("/ask", json={"question": conv.questions[0].question, "conv_id": conv.conv_id})
    assert r.status_code == 200, r.text
    assert r.json()["conv_id"] == conv.conv_id


@pytest.mark.parametrize(("body", "status", "needle"), [
    ("not json", 400, "not valid JSON"),
    ([1], 400, "JSON object"),
    ({"conv_id": "x"}, 422, "'question'"),
    ({"question": "q"}, 422, "exactly one"),
    ({"question": "q", "conv_id": "x", "conversation": {}}, 422, "exactly one"),
    ({"question": "q", "conv_id": 3}, 422, "'conv_id'"),
    ({"question": "q", "conv_id": "x", "policy": "maybe"}, 422, "'policy'"),
    ({"question": "q", "conv_id": "x", "k": 1}, 422, "unknown field"),
    ({"question": "q", "conversation": {"id": "c"}}, 422, "tiermem-format"),
    ({"question": "q" * 2001, "conv_id": "x"}, 413, "limit is 2000"),
    ({"question": "Who?", "conv_id": "no-such-conversation"}, 404, "unknown conversation 'no-such-conversation'"),
])
def test_ask_gives_named_4xx(served, body, status, needle):
    client = served[0]
    r = client.post("/ask", content=body) if isinstance(body, str) else client.post("/ask", json=body)
    assert r.status_code == status, r.text
    assert needle in r.json()["error"]


def test_ask_can_be_turned_off_and_refuses_a_generating_answerer():
    client = TestClient(create_app(AlwaysEscalate(), ServeConfig(ask=AskServeConfig(enabled=False))))
    r = client.post("/ask", json={"question": "q", "conv_id": "x"})
    assert r.status_code == 404 and "ask.enabled=false" in r.json()["error"]
    with pytest.raises(ConfigError, match="extractive"):
        AskServeConfig(memory=dataclasses.replace(MemoryConfig(), answerer="llm"))
