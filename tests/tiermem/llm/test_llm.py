"""The LLM layer: caching, accounting, errors. Plumbing, not answer quality."""

import threading

import pytest

from tiermem.llm import LLMConfig, LLMError, ResponseCache, ScriptedLLM, build_llm
from tiermem.settings.config import ConfigError, from_dict
from tiermem.settings.errors import StoreError

MSG = [{"role": "user", "content": "What is two plus two?"}]


def test_cache_makes_rerun_free(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    llm = ScriptedLLM(lambda m: "four", cache=cache)
    first = llm.chat(MSG)
    again = ScriptedLLM(lambda m: "WRONG", cache=ResponseCache(tmp_path / "c.sqlite")).chat(MSG)
    assert (first.text, first.cached) == ("four", False)
    assert (again.text, again.cached) == ("four", True)
    assert llm.stats["new_calls"] == 1 and llm.stats["cache_hits"] == 0


def test_cache_key_includes_parameters(tmp_path):
    llm = ScriptedLLM(lambda m: "x", cache=ResponseCache(tmp_path / "c.sqlite"))
    llm.chat(MSG, max_tokens=5)
    llm.chat(MSG, max_tokens=6)
    llm.chat(MSG, max_tokens=5)
    assert (llm.stats["new_calls"], llm.stats["cache_hits"]) == (2, 1)


def test_errors_are_returned_not_cached(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    failing = ScriptedLLM(lambda m: RuntimeError("endpoint down"), cache=cache)
    [res] = failing.chat_many([MSG])
    assert isinstance(res, LLMError) and "endpoint down" in str(res)
    with pytest.raises(LLMError):
        failing.chat(MSG)
    assert len(cache) == 0 and failing.stats["errors"] == 2
    assert ScriptedLLM(lambda m: "ok", cache=cache).chat(MSG).cached is False


def test_chat_many_mixes_hits_and_misses_in_order(tmp_path):
    llm = ScriptedLLM(lambda m: m[-1]["content"].upper(), cache=ResponseCache(tmp_path / "c.sqlite"))
    llm.chat([{"role": "user", "content": "b"}])
    out = llm.chat_many([[{"role": "user", "content": c}] for c in "abc"])
    assert [r.text for r in out] == ["A", "B", "C"]
    assert [r.cached for r in out] == [False, True, False]


def test_config_rejects_unknown_backend():
    with pytest.raises(ValueError, match="backend"):
        LLMConfig(backend="magic")


def test_openai_backend_needs_a_key_for_the_official_endpoint(monkeypatch):
    monkeypatch.delenv("TIERMEM_TEST_KEY", raising=False)
    with pytest.raises(LLMError, match="TIERMEM_TEST_KEY"):
        build_llm(LLMConfig(backend="openai", model="gpt-4.1-mini", api_key_env="TIERMEM_TEST_KEY"))


def test_openai_backend_retries_then_records_error():
    """A closed port: the client retries with backoff, then the call is an LLMError, never an answer."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    llm = build_llm(LLMConfig(backend="openai", model="m", base_url=f"http://127.0.0.1:{port}/v1",
                              max_retries=1, timeout_s=2))
    [res] = llm.chat_many([MSG])
    assert isinstance(res, LLMError) and "Connection" in str(res)


def test_max_concurrency_zero_is_refused_instead_of_hanging():
    result: list[BaseException] = []

    def build() -> None:
        try:
            from tiermem.llm import build_llm

            build_llm(from_dict(LLMConfig, {"backend": "openai", "base_url": "http://127.0.0.1:9/v1",
                                            "max_concurrency": 0}))
        except (ConfigError, ValueError) as exc:
            result.append(exc)

    t = threading.Thread(target=build, daemon=True)
    t.start()
    t.join(10)
    assert result and "max_concurrency must be >= 1" in str(result[0])


def test_corrupt_llm_cache_and_records_dir_are_named(tmp_path):
    from labeling.store import RecordStore

    bad = tmp_path / "cache.sqlite"
    bad.write_bytes(b"garbage" * 1000)
    with pytest.raises(StoreError, match=str(bad)):
        ResponseCache(bad)
    (tmp_path / "records.jsonl").mkdir()
    with pytest.raises(StoreError, match="records.jsonl: the record store must be a file"):
        RecordStore(tmp_path / "records.jsonl")


@pytest.mark.slow  # loads and runs the packaged model: ~15 s alone on 2 cores, over a minute on a busy machine
def test_local_backend_decodes_only_what_the_schema_allows():
    """The packaged 135M model, held to the research steps' schemas, writes JSON their parsers take (issue 27:
    unconstrained, it continued the page text instead, on every question tried)."""
    import json

    from tiermem.llm.local import LocalLLM
    from tiermem.memory.policies import PLAN_SCHEMA, parse_plan_reply

    llm = LocalLLM("packaged:smollm2-135m-instruct")
    messages = [{"role": "system", "content": "You plan searches. Reply with JSON."},
                {"role": "user", "content": "Question: Where does Tomas volunteer?\n[s1-1] Tomas: I volunteer."}]
    res = llm.chat(messages, max_tokens=128, json_schema=PLAN_SCHEMA)
    reply = json.loads(res.text)  # whole JSON within 128 tokens: the schema bounds its strings and arrays
    assert set(reply) == {"searches"} and len(reply["searches"]) <= 3
    for item in reply["searches"]:
        assert set(item) == {"type", "query"} and item["type"] in ("summary", "keyword") and len(item["query"]) <= 80
    assert parse_plan_reply(res.text) is not None and res.output_tokens <= 128
