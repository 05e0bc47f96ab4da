"""Integration: the `openai` backend against a real `transformers serve` of the packaged model."""

import pytest

from tests.helpers.servers import transformers_serve
from tiermem.llm import LLMConfig, build_llm
from tiermem.models.specs import DEFAULT_LM, resolve_model


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    model_dir = resolve_model(DEFAULT_LM)
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with transformers_serve(model_dir, log) as base_url:
        yield base_url, str(model_dir)


def test_openai_backend_through_transformers_serve(served, tmp_path):
    base_url, model = served
    cfg = LLMConfig(backend="openai", model=model, base_url=base_url, max_tokens=8, max_concurrency=2,
                    cache_path=str(tmp_path / "cache.sqlite"))
    llm = build_llm(cfg)
    batch = [[{"role": "user", "content": f"Count to {n}."}] for n in (2, 3)]
    first = llm.chat_many(batch)
    assert all(not isinstance(r, Exception) for r in first), first
    assert all(r.input_tokens > 0 and 0 < r.output_tokens <= 8 and r.text for r in first)
    assert llm.stats["new_calls"] == 2 and llm.stats["usage_missing"] == 0

    rerun = build_llm(cfg)
    again = rerun.chat_many(batch)
    assert [r.text for r in again] == [r.text for r in first]
    assert rerun.stats["new_calls"] == 0 and rerun.stats["cache_hits"] == 2
