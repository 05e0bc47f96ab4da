import json

import pytest

from labeling.config import LabelConfig
from labeling.roles import Roles
from labeling.run import run
from labeling.stage import main
from tests.helpers.label_helpers import SMALL_MEMORY, HashEmbedder, _label_cfg, answer_from_prompt
from tiermem.llm import LLMError, ScriptedLLM
from tiermem.settings.config import from_dict
from tiermem.settings.errors import EXIT_FAILED, RunError, exit_code


def _cfg(out, **extra) -> LabelConfig:
    return from_dict(LabelConfig, {"output_dir": str(out), "memory": SMALL_MEMORY, "label_rule": "evidence", **extra})


def _records(out) -> list[dict]:
    return [json.loads(line) for line in (out / "all_records.jsonl").read_text().splitlines()]


def _assert_error_record(rec: dict) -> None:
    assert rec["error"] and "LLMError" in rec["error"]
    for key in ("label", "label_outcome", "label_evidence", "s_ok_outcome", "r_ok_outcome", "s_ok_evidence",
                "r_ok_evidence", "s_ok", "r_ok", "sft_target"):
        assert rec[key] is None, key  # an error is never a verdict
    assert rec["drop_reason"] == "error"


def test_always_failing_answerer_gives_error_records_and_no_dataset(tmp_path):
    dead = ScriptedLLM(lambda m: LLMError("endpoint down after retries"))
    with pytest.raises(RuntimeError, match="every record is an error"):
        run(_cfg(tmp_path), Roles({"answerer": dead}), embedder=HashEmbedder())
    records = _records(tmp_path)
    assert records and all(r["error"] for r in records)
    for rec in records:
        _assert_error_record(rec)
    assert not (tmp_path / "dataset").exists()
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["errors"] == stats["records"] == len(records)
    assert "error records" in (tmp_path / "report.md").read_text()


def test_failing_judge_is_an_error_not_wrong(tmp_path):
    judge = ScriptedLLM(lambda m: LLMError("judge quota exceeded"))
    with pytest.raises(RuntimeError):
        run(_cfg(tmp_path), Roles({"answerer": ScriptedLLM(answer_from_prompt), "judge": judge}),
            embedder=HashEmbedder())
    for rec in _records(tmp_path):
        _assert_error_record(rec)
        assert rec["summary_answer"] is not None  # the paths ran; only the verdict is missing


def test_one_failing_question_then_rerun_retries_it(tmp_path):
    target = "Where does Tomas volunteer?"

    def flaky(messages):
        if target in messages[-1]["content"] and messages[0]["content"].startswith("You collect evidence"):
            return LLMError("timeout after retries")
        return answer_from_prompt(messages)

    stats = run(_cfg(tmp_path), Roles({"answerer": ScriptedLLM(flaky)}), embedder=HashEmbedder())
    assert stats["errors"] == 1 and stats["error_examples"][0]["error"].startswith("LLMError: research path")
    bad = [r for r in _records(tmp_path) if r["error"]]
    assert len(bad) == 1 and bad[0]["question"] == target
    _assert_error_record(bad[0])
    assert sum(stats["dataset"].values()) == stats["records"] - 1  # error records stay out of the dataset

    healed = run(_cfg(tmp_path), Roles({"answerer": ScriptedLLM(answer_from_prompt)}), embedder=HashEmbedder())
    records = _records(tmp_path)
    assert healed["errors"] == 0 and not any(r["error"] for r in records)
    assert len({(r["conv_id"], r["qid"]) for r in records}) == len(records) == stats["records"]


def test_cli_errors_are_one_line(tmp_path):
    from tiermem.settings.config import ConfigError

    with pytest.raises(ConfigError, match="unknown key"):
        main([f"output_dir={tmp_path}", "no_such_key=1"])
    with pytest.raises(FileNotFoundError, match="missing.json"):
        main([f"output_dir={tmp_path}", f"data_path={tmp_path}/missing.json"])
    with pytest.raises(ConfigError, match="label_rule"):
        main([f"output_dir={tmp_path}", "label_rule=majority"])


def test_every_record_an_error_is_a_named_error_with_the_first_cause(tmp_path):
    dead = ScriptedLLM(lambda m: LLMError("endpoint down after retries"))
    with pytest.raises(RunError, match="First error: LLMError: summary path: .*endpoint down after retries"):
        run(_label_cfg(tmp_path / "out"), Roles({"answerer": dead}), embedder=HashEmbedder())
    assert exit_code(RunError("x")) == EXIT_FAILED
