import threading
import time

import pytest
from fastapi.testclient import TestClient

from serving.routers.fixed import AlwaysEscalate
from serving.routers.local import LocalRouter
from serving.routers.remote import RemoteRouter
from serving.server import ServeConfig, create_app, main
from tests.helpers.router_fixtures import FIXTURES, make_router_run
from tests.helpers.servers import free_port
from tiermem import contract


@pytest.fixture(scope="module")
def fixed_client():
    return TestClient(create_app(AlwaysEscalate()))


@pytest.fixture(scope="module")
def local_router():
    return LocalRouter.from_pretrained(make_router_run())


def test_health(fixed_client):
    r = fixed_client.get("/health")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok" and body["router"] == "always-escalate"
    assert body["contract_version"] == contract.CONTRACT_VERSION and body["chat_passthrough"] is False


@pytest.mark.parametrize(("body", "status", "needle"), [
    ("not json", 400, "not valid JSON"),
    ([1, 2], 400, "JSON object"),
    ({"summaries": []}, 422, "'question'"),
    ({"question": "  ", "summaries": []}, 422, "'question'"),
    ({"question": "q"}, 422, "'summaries'"),
    ({"question": "q", "summaries": [{"date": "2023"}]}, 422, "summaries[0]"),
    ({"question": "q", "summaries": [{"text": "t", "date": 5}]}, 422, "summaries[0].date"),
    ({"question": "q", "summaries": [{"text": "t"}] * (contract.MAX_SUMMARIES + 1)}, 422, "at most"),
    ({"question": "q" * 2001, "summaries": []}, 413, "limit is 2000"),
    ({"question": "q", "summaries": [{"text": "t" * 4001}]}, 413, "summaries[0].text"),
    ({"question": "q", "summaries": [], "threshold_prob": 2}, 422, "'threshold_prob'"),
    ({"question": "q", "summaries": [], "threshold_prob": True}, 422, "'threshold_prob'"),
    ({"question": "q", "summaries": [], "k": 5}, 422, "unknown field"),
])
def test_route_validation_gives_clear_4xx(fixed_client, body, status, needle):
    r = fixed_client.post("/route", content=body) if isinstance(body, str) else fixed_client.post("/route", json=body)
    assert r.status_code == status, r.text
    assert needle in r.json()["error"]


def test_body_size_limit():
    client = TestClient(create_app(AlwaysEscalate(), ServeConfig(max_body_bytes=100)))
    r = client.post("/route", json={"question": "q" * 200, "summaries": []})
    assert r.status_code == 413 and "bytes" in r.json()["error"]


def test_route_with_a_trained_router_and_override(local_router):
    client = TestClient(create_app(local_router))
    q, s, label = FIXTURES[1]
    r = client.post("/route", json={"question": q, "summaries": s})
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["action"] == label and d["parsed_ok"] is True
    direct = local_router.route(q, s)
    assert d["p_escalate"] == pytest.approx(direct.p_escalate, abs=1e-6)
    assert d["prompt_tokens"] == direct.prompt_tokens
    forced = client.post("/route", json={"question": q, "summaries": s, "threshold_prob": 1.0}).json()
    assert forced["action"] == ("ESCALATE" if direct.p_escalate >= 1.0 else "ANSWER")


def test_chat_passthrough_serves_remote_router_with_logprobs(local_router):
    """RemoteRouter against a real HTTP server on 127.0.0.1: the logprobs strategy must give the local fast path's
    probabilities (same model, same prompt)."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(local_router), host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.1)
        remote = RemoteRouter(base_url=f"http://127.0.0.1:{port}/v1", model="router", max_tokens=24)
        qs, ss = [f[0] for f in FIXTURES], [f[1] for f in FIXTURES]
        got = remote.route_batch(qs, ss)
        want = local_router.route_batch(qs, ss)
        assert remote.used["logprobs"] == len(FIXTURES)
        assert [d.action for d in got] == [d.action for d in want]
        assert [d.p_escalate for d in got] == pytest.approx([d.p_escalate for d in want], abs=1e-4)
        assert all(d.error is None and d.reason for d in got)
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_remote_router_records_endpoint_errors():
    remote = RemoteRouter(base_url=f"http://127.0.0.1:{free_port()}/v1", model="router", max_retries=0, timeout_s=2)
    d = remote.route("q", [])
    assert d.action == "ESCALATE" and not d.parsed_ok and d.error


def test_main_fails_with_one_clear_line(tmp_path, capsys):
    assert main([f"router={tmp_path / 'missing'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing" in err[0]
