"""Integration: RemoteRouter against a real `transformers serve` of a merged router on 127.0.0.1."""

import pytest

from serving.routers.local import LocalRouter
from serving.routers.remote import RemoteRouter
from tests.helpers.router_fixtures import FIXTURES, make_router_run
from tests.helpers.servers import transformers_serve


@pytest.fixture(scope="module")
def merged_router(tmp_path_factory):
    """The fixture router with its adapter merged into the base: what a server without LoRA support serves."""
    router = LocalRouter.load(make_router_run())
    out = tmp_path_factory.mktemp("merged") / "router"
    router.model.save_pretrained(out)
    router.tokenizer.save_pretrained(out)
    return router, out


def test_remote_router_matches_local_through_transformers_serve(merged_router, tmp_path):
    local, model_dir = merged_router
    questions = [q for q, _, _ in FIXTURES]
    summaries = [s for _, s, _ in FIXTURES]
    expected = [d.action for d in local.route_batch(questions, summaries)]
    assert expected == [label for _, _, label in FIXTURES]  # the fixture router is right on its fixtures
    with transformers_serve(model_dir, tmp_path / "serve.log") as base_url:
        remote = RemoteRouter(base_url=base_url, model=str(model_dir), max_tokens=24, max_retries=1)
        decisions = remote.route_batch(questions, summaries)
    assert [d.error for d in decisions] == [None] * len(FIXTURES)
    assert [d.action for d in decisions] == expected
    assert sum(remote.used.values()) == len(FIXTURES)  # every decision went through one of the strategies
