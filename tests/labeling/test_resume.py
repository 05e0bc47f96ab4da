import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from labeling.config import LabelConfig
from labeling.resume import resume_fingerprint
from labeling.roles import Roles
from labeling.run import run
from labeling.store import RecordStore
from tests.helpers.label_helpers import SMALL_MEMORY, HashEmbedder, _label_cfg, answer_from_prompt
from tiermem.llm import ResponseCache, ScriptedLLM
from tiermem.settings.config import from_dict

REPO = Path(__file__).resolve().parents[2]
TIMING = ("label_wall_s", "cost_summary_wall_s", "cost_research_wall_s")

SCRIPT = textwrap.dedent("""
    import json, os, sys
    from labeling.config import LabelConfig
    from labeling.roles import Roles
    from labeling.run import run
    from tests.helpers.label_helpers import SMALL_MEMORY, HashEmbedder, answer_from_prompt
    from tiermem.settings.config import from_dict
    from tiermem.llm import ResponseCache, ScriptedLLM

    out, crash_after = sys.argv[1], int(sys.argv[2])
    calls = 0

    def responder(messages):
        global calls
        calls += 1
        if 0 <= crash_after < calls:
            os._exit(137)  # like kill -9: no cleanup, no flush
        return answer_from_prompt(messages)

    llm = ScriptedLLM(responder, cache=ResponseCache(os.path.join(out, "cache.sqlite")))
    cfg = from_dict(LabelConfig, {"output_dir": out, "memory": SMALL_MEMORY, "label_rule": "evidence"})
    stats = run(cfg, Roles({"answerer": llm}), embedder=HashEmbedder())
    print(json.dumps({"new_calls": llm.stats["new_calls"], "cache_hits": llm.stats["cache_hits"],
                      "records": stats["records"], "resumed": stats["resumed_records"]}))
""")


def _cfg(out: Path) -> LabelConfig:
    return from_dict(LabelConfig, {"output_dir": str(out), "memory": SMALL_MEMORY, "label_rule": "evidence"})


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _strip(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if k not in TIMING}


def test_store_drops_torn_line_and_refuses_duplicates(tmp_path):
    path = tmp_path / "records.jsonl"
    with RecordStore(path) as store:
        store.put({"conv_id": "c", "qid": "q1", "error": None})
        store.put({"conv_id": "c", "qid": "q2", "error": "LLMError: down"})
        with pytest.raises(ValueError, match="already committed"):
            store.put({"conv_id": "c", "qid": "q1", "error": None})
    with open(path, "a") as fh:
        fh.write('{"conv_id": "c", "qid": "q3", "err')  # a write cut by kill -9
    with RecordStore(path) as store:
        assert store.torn_lines == 1 and len(store) == 2
        assert store.done(("c", "q1")) and not store.done(("c", "q2")) and store.done(("c", "q2"), retry_errors=False)
        store.put({"conv_id": "c", "qid": "q2", "error": None})  # a retried error record replaces the old one
    with RecordStore(path) as store:
        assert len(store) == 2 and store.get(("c", "q2"))["error"] is None
    assert path.read_text().endswith("\n")


def test_killed_run_resumes_without_loss_or_duplicates(tmp_path):
    reference = ScriptedLLM(answer_from_prompt)
    ref_stats = run(_cfg(tmp_path / "ref"), Roles({"answerer": reference}), embedder=HashEmbedder())
    total_calls = reference.stats["new_calls"]
    ref = {(r["conv_id"], r["qid"]): _strip(r) for r in _records(tmp_path / "ref" / "all_records.jsonl")}
    assert ref_stats["errors"] == 0 and len(ref) == ref_stats["records"] >= 10

    out = tmp_path / "run"
    out.mkdir()
    script = tmp_path / "label_script.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    crash_after = total_calls // 2
    crashed = subprocess.run([sys.executable, str(script), str(out), str(crash_after)], env=env, cwd=REPO,
                             capture_output=True, text=True, timeout=300)
    assert crashed.returncode == 137, crashed.stderr[-2000:]
    committed = _records(out / "records.jsonl")
    assert 0 < len(committed) < len(ref)
    assert not (out / "all_records.jsonl").exists() and not (out / "dataset").exists()  # nothing looks finished
    with open(out / "records.jsonl", "a") as fh:
        fh.write('{"conv_id": "sample-2", "qid": "torn')  # and a torn line, as if killed mid-write

    resumed = subprocess.run([sys.executable, str(script), str(out), "-1"], env=env, cwd=REPO,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    info = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert info["resumed"] == len(committed) and info["records"] == len(ref)
    assert info["cache_hits"] >= 1  # the interrupted question's finished calls came from the cache
    assert info["new_calls"] + crash_after == total_calls  # no call was paid for twice

    final = _records(out / "all_records.jsonl")
    keys = [(r["conv_id"], r["qid"]) for r in final]
    assert len(keys) == len(set(keys)) == len(ref)
    assert {k: _strip(r) for k, r in zip(keys, final, strict=True)} == ref
    store_keys = [(r["conv_id"], r["qid"]) for r in _records(out / "records.jsonl")]
    assert len(store_keys) == len(set(store_keys))
    assert (out / "dataset" / "dataset_dict.json").exists()


def test_rerun_of_finished_run_makes_no_calls(tmp_path):
    cache = ResponseCache(tmp_path / "cache.sqlite")
    first = ScriptedLLM(answer_from_prompt, cache=cache)
    run(_cfg(tmp_path / "a"), Roles({"answerer": first}), embedder=HashEmbedder())
    # same output dir: every record is committed, nothing is asked again
    again = ScriptedLLM(answer_from_prompt, cache=cache)
    stats = run(_cfg(tmp_path / "a"), Roles({"answerer": again}), embedder=HashEmbedder())
    assert again.stats["new_calls"] == 0 and again.stats["cache_hits"] == 0
    assert stats["resumed_records"] == stats["records"]
    # fresh output dir, same cache: every call is a cache hit
    fresh = ScriptedLLM(answer_from_prompt, cache=cache)
    run(_cfg(tmp_path / "b"), Roles({"answerer": fresh}), embedder=HashEmbedder())
    assert fresh.stats["new_calls"] == 0 and fresh.stats["cache_hits"] == first.stats["new_calls"]


def test_output_dir_refuses_records_from_other_settings(tmp_path):
    out = tmp_path / "out"
    llm = ScriptedLLM(answer_from_prompt)
    small = from_dict(LabelConfig, {"output_dir": str(out), "memory": SMALL_MEMORY, "label_rule": "evidence",
                                    "max_questions_per_conversation": 2})
    run(small, Roles({"answerer": llm}), embedder=HashEmbedder())
    grown = from_dict(LabelConfig, {"output_dir": str(out), "memory": SMALL_MEMORY, "label_rule": "evidence"})
    stats = run(grown, Roles({"answerer": llm}), embedder=HashEmbedder())  # a larger subset reuses the records
    assert stats["resumed_records"] == 4 and stats["new_records"] == stats["records"] - 4
    changed = from_dict(LabelConfig, {"output_dir": str(out), "memory": SMALL_MEMORY, "label_rule": "evidence",
                                      "judge_threshold": 0.5})
    with pytest.raises(ValueError, match="judge_threshold"):
        run(changed, Roles({"answerer": llm}), embedder=HashEmbedder())


def test_concurrent_run_matches_sequential(tmp_path):
    seq = run(_cfg(tmp_path / "seq"), Roles({"answerer": ScriptedLLM(answer_from_prompt)}), embedder=HashEmbedder())
    par_cfg = from_dict(LabelConfig, {"output_dir": str(tmp_path / "par"), "memory": SMALL_MEMORY,
                                      "label_rule": "evidence", "concurrency": 4})
    par = run(par_cfg, Roles({"answerer": ScriptedLLM(answer_from_prompt)}), embedder=HashEmbedder())
    assert seq["labels"] == par["labels"]
    a = [_strip(r) for r in _records(tmp_path / "seq" / "all_records.jsonl")]
    b = [_strip(r) for r in _records(tmp_path / "par" / "all_records.jsonl")]
    assert a == b


def test_endpoint_address_is_not_part_of_the_resume_fingerprint(tmp_path):
    a = _label_cfg(tmp_path, llm={"answerer": {"backend": "openai", "base_url": "http://10.0.0.1:8000/v1"}})
    b = _label_cfg(tmp_path, llm={"answerer": {"backend": "openai", "base_url": "http://127.0.0.1:8001/v1"}})
    assert resume_fingerprint(a) == resume_fingerprint(b)
    assert not any("base_url" in key for key in resume_fingerprint(a))
