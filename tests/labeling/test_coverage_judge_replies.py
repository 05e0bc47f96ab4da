"""What the live coverage judge keeps of a reply: an unfit one (no JSON, text that is no valid Unicode) is an error
record, and, an error being retried by a rerun, never a cached reply a rerun would read back instead of asking."""

from __future__ import annotations

import json

from labeling.judgments.format import load_judgments
from tests.labeling.test_judgments import _label_live
from tiermem.llm import ResponseCache, ScriptedLLM


def _judge(cache: ResponseCache, bad_for: str | None = None, bad_reply: str = "I cannot decide.") -> ScriptedLLM:
    def reply(messages):
        user = messages[-1]["content"]
        if bad_for and bad_for in user:
            return bad_reply
        units = [line for line in user.split("\n") if line.startswith("[")]
        return json.dumps({"units": [{"rank": i + 1, "verdict": "no", "span": None} for i in range(len(units))],
                           "verdict": "no", "reason": "scripted", "gold_doubtful": False})
    return ScriptedLLM(reply, cache=cache)


def test_a_reply_without_json_is_not_cached_and_a_rerun_asks_again(tmp_path):
    cache_path, path, out = tmp_path / "llm.sqlite", tmp_path / "live.jsonl", tmp_path / "run"
    probe = _label_live(tmp_path / "probe", tmp_path / "probe.jsonl", _judge(ResponseCache(tmp_path / "p.sqlite")))
    question = next(r for r in probe if not r["augmentation"] and not r["error"])["question"]
    first = _label_live(out, path, _judge(ResponseCache(cache_path), bad_for=question))
    assert [r["qid"] for r in first if r["error"]] and all("coverage judge" in r["error"] for r in first if r["error"])
    again = _judge(ResponseCache(cache_path))  # the same response cache; this time the judge replies in JSON
    records = _label_live(out, path, again)  # a rerun labels the error record again
    assert len(again.calls) == 1 and question in again.calls[0][-1]["content"]  # asked, not read from the cache
    assert not any(r["error"] for r in records)
    assert len(load_judgments(path)) == len([r for r in records if not r["augmentation"]])


def test_a_reply_holding_a_lone_surrogate_is_an_error_record_never_written(tmp_path):
    probe = _label_live(tmp_path / "probe", tmp_path / "probe.jsonl", _judge(ResponseCache(tmp_path / "p.sqlite")))
    question = next(r for r in probe if not r["augmentation"] and not r["error"])["question"]
    units = next(r for r in probe if r["question"] == question)["router_summaries"]
    bad = ('{"units": [' + ", ".join(f'{{"rank": {i + 1}, "verdict": "no", "span": null}}' for i in range(len(units)))
           + '], "verdict": "no", "reason": "half \\ud800 a character", "gold_doubtful": false}')
    path = tmp_path / "live.jsonl"
    records = _label_live(tmp_path / "run", path, _judge(ResponseCache(tmp_path / "c.sqlite"), question, bad))
    errors = [r for r in records if r["error"]]
    assert len(errors) == 1 and "field 'reason' holds a lone surrogate" in errors[0]["error"]
    written = load_judgments(path)  # the file reads back: the reply was never appended
    assert len(written) == len([r for r in records if not r["augmentation"] and not r["error"]])
