"""A bad /route request fails alone: bodies are checked against what the loaded router needs before they join a
batch (422 naming the field), and a batch whose call raises is rerun request by request, so the good requests in
it still get 200 and only the failing one its error (422 for input the router refused, 500 with an error id for an
internal error, its traceback logged and not sent)."""

from __future__ import annotations

import logging
import threading
from typing import Any

from fastapi.testclient import TestClient

from serving.routers import Decision
from serving.routers.features import FeatureRouter
from serving.server import ServeConfig, create_app
from serving.signals import FEATURES
from tests.helpers.live_server import LANES, _post_later, serving, wait_for
from tiermem.models.logistic import LogisticModel
from tiermem.settings.errors import UsageError


def _features_model() -> LogisticModel:
    n = len(FEATURES)
    return LogisticModel(feature_names=list(FEATURES), mean=[0.0] * n, scale=[1.0] * n,
                         weights=[-1.0] + [0.0] * (n - 1), bias=0.0, l2=1.0, class_weight="balanced", n_train=2,
                         train_escalate_share=0.5)


GOOD = {"question": "Where does Tomas volunteer?", "summaries": [{"text": "Tomas volunteers at the shelter.",
                                                                   "date": "2024-01-01", "score": 0.8}]}
NO_SCORE = {"question": "Where does Tomas volunteer?", "summaries": [{"text": "Tomas volunteers at the shelter.",
                                                                       "date": "2024-01-01"}]}


class Gated:
    """route_batch waits on `gate` (set: open) and records each batch's questions in `batches`."""

    def _open_gate(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.batches: list[list[str]] = []

    def _pass_gate(self, questions) -> None:
        self.gate.wait(30)
        self.batches.append(list(questions))


class GatedFeatureRouter(Gated, FeatureRouter):
    """The real features router behind the gate."""

    def __init__(self) -> None:
        super().__init__(_features_model())
        self._open_gate()

    def route_batch(self, questions, summaries, threshold_logit=None):
        self._pass_gate(questions)
        return super().route_batch(questions, summaries, threshold_logit)


class PickyRouter(Gated):
    """route_batch raises when the batch holds the question `bad` (UsageError: refused input) or `boom`
    (RuntimeError: an internal error); otherwise it answers each question with its own text as the reason."""

    kind, mode, threshold_logit, meta = "fake", "fast", 0.0, None

    def __init__(self) -> None:
        self._open_gate()

    def route_batch(self, questions, summaries, threshold_logit=None):
        self._pass_gate(questions)
        if "bad" in questions:
            raise UsageError("question 'bad' is not something this router can read")
        if "boom" in questions:
            raise RuntimeError("the scorer fell over")
        return [Decision("ANSWER", 0.1, q, True, 0.0, 1) for q in questions]


def test_a_summary_without_score_is_422_for_the_features_router():
    client = TestClient(create_app(FeatureRouter(_features_model()), ServeConfig()), raise_server_exceptions=False)
    r = client.post("/route", json=NO_SCORE)
    assert r.status_code == 422
    assert "summaries[0].score is required by the features router" in r.json()["error"]
    assert "Traceback" not in r.text
    assert client.post("/route", json=GOOD).status_code == 200


def _queue_behind_a_blocker(router: Any, base: str, bodies: list[dict[str, Any]]) -> list[Any]:
    """Hold the lane with one request, queue `bodies` behind it, then release: they run as one batch."""
    results: list[Any] = []
    router.gate.clear()
    blocker = _post_later(f"{base}/route", {**GOOD, "question": "first"}, results)
    wait_for(lambda: LANES["route"].in_flight == 1 and not LANES["route"].pending)
    threads = [_post_later(f"{base}/route", body, results) for body in bodies]
    # every body has either joined the queue or been answered (a body refused up front never queues)
    wait_for(lambda: LANES["route"].in_flight - 1 + len(results) == len(bodies))
    router.gate.set()
    for t in [blocker, *threads]:
        t.join(30)
    return [r for r in results if r.sent["question"] != "first"]


def test_n_good_and_one_bad_body_sent_together_to_the_features_router():
    router = GatedFeatureRouter()
    good = [{**GOOD, "question": f"good {i}?"} for i in range(4)]
    with serving(router, ServeConfig(route_batch_size=16)) as base:
        results = _queue_behind_a_blocker(router, base, [*good, {**NO_SCORE, "question": "bad?"}])
    by_q = {r.sent["question"]: r for r in results}
    assert [by_q[b["question"]].status_code for b in good] == [200] * 4
    assert by_q["bad?"].status_code == 422 and "summaries[0].score" in by_q["bad?"].json()["error"]
    assert all("bad?" not in batch for batch in router.batches)  # refused before it joined a batch


def test_a_batch_that_raises_is_rerun_one_by_one_and_only_the_bad_request_fails():
    router = PickyRouter()
    good = [{**GOOD, "question": f"good {i}"} for i in range(3)]
    with serving(router, ServeConfig(route_batch_size=16)) as base:
        results = _queue_behind_a_blocker(router, base, [*good, {**GOOD, "question": "bad"}])
    by_q = {r.sent["question"]: r for r in results}
    assert all(by_q[b["question"]].status_code == 200 and by_q[b["question"]].json()["reason"] == b["question"]
               for b in good)
    bad = by_q["bad"]
    assert bad.status_code == 422 and "not something this router can read" in bad.json()["error"]
    assert sorted(router.batches[1]) == sorted([*(b["question"] for b in good), "bad"])  # they were one batch


def test_an_internal_error_for_one_request_is_a_500_with_an_error_id_and_a_logged_traceback(caplog):
    router = PickyRouter()
    good = [{**GOOD, "question": f"good {i}"} for i in range(3)]
    with caplog.at_level(logging.ERROR, logger="serving.server"), \
            serving(router, ServeConfig(route_batch_size=16)) as base:
        results = _queue_behind_a_blocker(router, base, [*good, {**GOOD, "question": "boom"}])
    by_q = {r.sent["question"]: r for r in results}
    assert [by_q[b["question"]].status_code for b in good] == [200] * 3
    boom = by_q["boom"]
    assert boom.status_code == 500
    error_id = boom.json()["error_id"]
    assert error_id in boom.json()["error"] and "Traceback" not in boom.text and "fell over" not in boom.text
    logged = [rec for rec in caplog.records if error_id in rec.getMessage()]
    assert logged and logged[0].exc_info and "the scorer fell over" in str(logged[0].exc_info[1])
