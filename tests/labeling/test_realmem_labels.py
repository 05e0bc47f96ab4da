"""Labeling a RealMem-shaped history: as of each question, its facts counted per path, the report per person."""

import json

import pytest

from labeling.config import LabelConfig
from labeling.evidence import EvidenceConfig, Reading, compute_signals
from labeling.question import LATE_EVIDENCE
from labeling.roles import Roles
from labeling.run import run
from tests.helpers.label_helpers import HashEmbedder
from tests.helpers.realmem_fixture import write
from tiermem.data.records import GoldPoint
from tiermem.settings.config import from_dict

MEMORY = {"tokenizer": "whitespace", "page_tokens": 40, "max_rounds": 1, "pages_per_round": 2}


def _label(tmp_path, **memory):
    data = write(tmp_path / "rm")
    cfg = from_dict(LabelConfig, {"data_path": str(data), "output_dir": str(tmp_path / "out"),
                                  "memory": {**MEMORY, **memory}, "label_rule": "evidence",
                                  "generate_answers": False, "llm": {"answerer": None},
                                  "split": {"ratios": [1, 0, 0]}})
    stats = run(cfg, Roles({}, need_answerer=False), embedder=HashEmbedder())
    records = {r["qid"]: r for r in map(json.loads, (tmp_path / "out" / "all_records.jsonl").read_text().splitlines())}
    return stats, records, (tmp_path / "out" / "report.md").read_text()


@pytest.mark.parametrize("summaries", ["imported", "extractive"])
def test_a_question_whose_fact_comes_after_it_is_dropped_with_its_reason(tmp_path, summaries):
    stats, records, report = _label(tmp_path, summaries=summaries)
    late = records["Q-0002"]  # needs the pass price, said in a session after the question
    assert late["label"] is None and late["drop_reason"] == LATE_EVIDENCE and late["error"] is None
    assert late["router_summaries"] == [] and late["asked_before"] == "S3:1"
    kept = records["Q-0001"]
    assert kept["asked_before"] == "S2:3" and json.loads(kept["question_tags"])["session_type"] == "multi_session"
    assert kept["n_points"] == 1 and kept["points_in_research"] is not None
    if summaries == "imported":  # the pass-price fact (S4) and the sessions after the question are not retrievable
        assert kept["router_summaries"] and not any(u["unit_id"][:3] in ("S3:", "S4:")
                                                     for u in kept["router_summaries"])
    person = stats["coverage"]["by_conversation"]["Aru_Test"]
    assert person["questions"] == 2 and person["dropped"].get(LATE_EVIDENCE) == 1
    assert "Labeled by conversation" in report and LATE_EVIDENCE in report


def test_imported_facts_label_the_question_answer_when_retrieved(tmp_path):
    _, records, _ = _label(tmp_path)
    kept = records["Q-0001"]
    assert "User booked the Kanas lodge for 9 March, room 12." in [u["text"] for u in kept["router_summaries"]]
    assert kept["points_in_summaries"] == 1 and kept["label"] == "ANSWER"


def test_points_share_decides_how_many_facts_are_enough():
    points = [GoldPoint("the lodge room is twelve", ["t1"]), GoldPoint("the guide is Aigerim", ["t2"])]
    units = [{"text": "the lodge room is twelve", "page_ids": ["p1"], "speakers": ["User"]}]
    reading = Reading.of({"p1": ["t1"], "p2": ["t2"]})
    signals = [compute_signals("\n".join(p.text for p in points), "", ["t1", "t2"], units, ["p1"], reading,
                               EvidenceConfig(points_share=share), "realmem", points=points) for share in (1.0, 0.5)]
    assert [(s.points_in_summaries, s.points_in_research) for s in signals] == [(1, 1), (1, 1)]
    assert [(s.s_ok, s.r_ok) for s in signals] == [(False, False), (True, True)]


def test_eval_skips_a_question_asked_before_its_evidence(tmp_path):
    from evaluation.metrics import SKIPPED, classify, load_cases

    _, records, _ = _label(tmp_path)
    late = records["Q-0002"]
    assert late["cost_summary_input_tokens"] is None and classify(late) == SKIPPED
    cases = load_cases(list(records.values()))
    assert [c.qid for c in cases.cases] == ["Q-0001"]


@pytest.mark.parametrize("share", [0.0, -0.5, 1.5])
def test_points_share_must_name_some_facts(share):
    from tiermem.settings.errors import ConfigError

    with pytest.raises(ConfigError, match="points_share"):
        EvidenceConfig(points_share=share)
