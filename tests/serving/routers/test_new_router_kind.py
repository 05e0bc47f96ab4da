"""A new router kind is one module plus one registry line, and then eval, calibrate and serve all build it."""

from __future__ import annotations

import json

import pytest

from serving.routers import registry
from tests.helpers.feature_data import _label_dataset
from tests.helpers.toy_router import WordCountRouter


@pytest.fixture
def word_count_kind(monkeypatch):
    monkeypatch.setitem(registry.ROUTER_KINDS, "word-count", "tests.helpers.toy_router:WordCountRouter")


def test_eval_calibrate_and_serve_build_a_new_kind(tmp_path, word_count_kind):
    from fastapi.testclient import TestClient

    from evaluation.calibrate import main as calibrate_main
    from evaluation.evaluate import main as eval_main
    from serving.routers import RouterSpec, build
    from serving.server import ServeConfig, create_app

    data = _label_dataset(tmp_path)
    run = WordCountRouter().save(tmp_path / "word_count")
    assert calibrate_main([f"router={run}", f"data={data}", "criterion=escalation_rate", "value=0.5"]) == 0
    stored = json.loads((run / "tiermem_router.json").read_text())["calibration"]["threshold_logit"]

    out = tmp_path / "eval"
    assert eval_main([f"data={data}", "split=test", f"router={run}", f"output_dir={out}", "bootstrap.n_boot=0",
                      "compare=[{name: inline, kind: word-count, path: null}]"]) == 0
    report = json.loads((out / "eval.json").read_text())
    assert report["meta"]["router"] == f"word-count:{run}" and report["meta"]["threshold_logit"] == stored
    assert {"routed", "inline"} <= set(report["policies"])

    router = build(RouterSpec(path=str(run)))  # kind auto: what tiermem_router.json names
    assert isinstance(router, WordCountRouter) and router.threshold_logit == stored
    client = TestClient(create_app(router, ServeConfig()))
    long_q = "when exactly did Caroline and Melanie go hiking in the hills together"
    decision = client.post("/route", json={"question": long_q, "summaries": []}).json()
    assert decision["action"] == ("ESCALATE" if len(long_q.split()) - 6 >= stored else "ANSWER")
    assert client.get("/health").json()["router"] == "word-count"


def test_a_kind_missing_from_the_registry_is_refused_by_name():
    from serving.routers import RouterSpec

    with pytest.raises(ValueError, match="unknown router kind 'word-count'"):
        RouterSpec(path=None, kind="word-count")


def test_an_option_a_kind_does_not_read_is_refused(word_count_kind):
    from serving.routers import RouterSpec, build

    with pytest.raises(ValueError, match=r"router.mode does not apply to a word-count router; it takes \["):
        build(RouterSpec(path=None, kind="word-count", mode="generate"))
    from serving.routers import Router

    with pytest.raises(ValueError, match=r"unknown router option\(s\) \['thresold'\]"):
        Router.from_pretrained("runs/x", thresold=0.3)
