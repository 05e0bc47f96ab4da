"""Generator-free labeling (`generate_answers=false`) and the sufficiency judge's veto on ANSWER labels."""

import json

import pytest

from labeling.config import LabelConfig
from labeling.roles import Roles
from labeling.rules import decide
from labeling.run import run
from tests.helpers.label_helpers import SMALL_MEMORY, HashEmbedder, answer_from_prompt
from tiermem.llm import ScriptedLLM
from tiermem.settings.config import from_dict

ONE_ROUND = {**SMALL_MEMORY, "max_rounds": 1}
SIGNALS = ("router_summaries", "research_pages", "s_ok_evidence", "r_ok_evidence", "answer_recall",
           "gold_in_summary_pages", "gold_in_research_pages", "label_evidence", "drop_reason_evidence", "label")


def _label(tmp_path, name, **extra):
    cfg = from_dict(LabelConfig, {"output_dir": str(tmp_path / name), "memory": ONE_ROUND,
                                  "label_rule": "evidence", **extra})
    llm = ScriptedLLM(answer_from_prompt)
    roles = Roles({"answerer": llm}) if cfg.generate_answers else Roles({}, need_answerer=False)
    stats = run(cfg, roles, embedder=HashEmbedder())
    records = [json.loads(x) for x in (tmp_path / name / "all_records.jsonl").read_text().splitlines()]
    return stats, records, llm


def test_generator_free_labels_equal_the_full_runs_evidence_labels(tmp_path):
    full_stats, full, full_llm = _label(tmp_path, "full")
    free_stats, free, free_llm = _label(tmp_path, "free", generate_answers=False)
    assert full_llm.stats["new_calls"] > 0 and free_llm.stats["new_calls"] == 0  # no generation at all
    assert len(full) == len(free) and full_stats["errors"] == free_stats["errors"] == 0
    assert any(r["label"] == "ESCALATE" for r in free) and any(r["label"] == "ANSWER" for r in free)
    for a, b in zip(full, free, strict=True):
        assert {k: a[k] for k in SIGNALS} == {k: b[k] for k in SIGNALS}, a["qid"]
        assert b["summary_answer"] is None and b["label_outcome"] is None
        assert (a["answers_generated"], a["cost_estimated"]) == (True, False)
        assert (b["answers_generated"], b["cost_estimated"]) == (False, True)
        # estimated research cost counts the same pages' text: positive, and above the summary path's
        assert b["cost_research_input_tokens"] > 0 and b["cost_research_pages_read"] == a["cost_research_pages_read"]
    assert free_stats["answers"].startswith("not generated")
    assert "not generated" in (tmp_path / "free" / "report.md").read_text()


def test_generator_free_needs_the_evidence_rule():
    with pytest.raises(ValueError, match="label_rule=evidence"):
        LabelConfig(generate_answers=False, label_rule="outcome")


@pytest.mark.parametrize("s_ok,r_ok,sufficient,label,vetoed", [
    (True, True, None, "ANSWER", False),
    (True, True, True, "ANSWER", False),
    (True, True, False, "ESCALATE", True),
    (True, False, False, None, True),
    (True, None, False, None, True),
    (False, True, False, "ESCALATE", False),
    (False, False, True, None, False),
])
def test_sufficiency_judge_vetoes_answer_labels(s_ok, r_ok, sufficient, label, vetoed):
    decision = decide(s_ok, r_ok, sufficient)
    assert (decision.label, decision.vetoed) == (label, vetoed)


def test_veto_is_recorded_and_counted(tmp_path):
    never_sufficient = ScriptedLLM(lambda messages: '{"sufficient": false, "reason": "strict"}')
    cfg = from_dict(LabelConfig, {"output_dir": str(tmp_path / "v"), "memory": ONE_ROUND, "label_rule": "evidence",
                                  "generate_answers": False})
    stats = run(cfg, Roles({"sufficiency": never_sufficient}, need_answerer=False), embedder=HashEmbedder())
    records = [json.loads(x) for x in (tmp_path / "v" / "all_records.jsonl").read_text().splitlines()]
    assert not any(r["label"] == "ANSWER" for r in records)
    vetoed = [r for r in records if r["sufficiency_veto"]]
    assert vetoed and all(r["s_ok_evidence"] for r in vetoed)
    assert stats["sufficiency"]["vetoed_answer_labels"] == len(vetoed)


def test_dates_count_only_from_units_about_the_question():
    from labeling.evidence import answer_recall

    units = [{"text": "Caroline went hiking with friends.", "date": "7 May 2023"}]
    assert answer_recall("7 May 2023", units, question="When did Caroline go hiking?") == pytest.approx(1.0)
    assert answer_recall("7 May 2023", units, question="When did Melanie paint a sunset?") == 0.0
