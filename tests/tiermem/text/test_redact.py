"""Credentials in an endpoint URL never reach a config dump, an error, a log line or a file the run writes."""

from __future__ import annotations

import json
import logging

import pytest

from labeling.run import run
from tests.helpers.label_helpers import HashEmbedder, _label_cfg
from tiermem.llm import ResponseCache
from tiermem.settings.config import to_dict
from tiermem.settings.errors import RunError

SECRET_URL = "http://alice:hunter2@127.0.0.1:{port}/v1"


def test_credentials_in_base_url_are_never_recorded(tmp_path, caplog):
    from tests.helpers.servers import free_port

    url = SECRET_URL.format(port=free_port())
    out = tmp_path / "out"
    cfg = _label_cfg(out, max_questions_per_conversation=1, max_conversations=1,
                     llm={"answerer": {"backend": "openai", "base_url": url, "model": "m", "max_retries": 0,
                                       "timeout_s": 2}})
    assert "hunter2" not in json.dumps(to_dict(cfg))
    caplog.set_level(logging.DEBUG)
    with pytest.raises(RunError) as err:
        run(cfg, embedder=HashEmbedder())
    assert "hunter2" not in str(err.value)
    for path in out.rglob("*"):
        if path.is_file():
            assert b"hunter2" not in path.read_bytes(), path
    assert "***@127.0.0.1" in (out / "config.yaml").read_text()
    assert "hunter2" not in caplog.text


def test_llm_name_cache_and_http_log_are_redacted(tmp_path, caplog):
    import httpx

    from tiermem.llm.remote import OpenAIChatLLM

    llm = OpenAIChatLLM("m", base_url=SECRET_URL.format(port=9), cache=ResponseCache(tmp_path / "c.sqlite"))
    assert "hunter2" not in llm.name and "***@" in llm.name
    caplog.set_level(logging.INFO)
    logging.getLogger("httpx").info('HTTP Request: %s %s "%s"', "POST",
                                    httpx.URL(SECRET_URL.format(port=9) + "/chat/completions"), "200 OK")
    assert "hunter2" not in caplog.text and "***@127.0.0.1" in caplog.text
