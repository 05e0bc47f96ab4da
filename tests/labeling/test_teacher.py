import json

from labeling.teacher import ask_teacher, sft_target, templated_rationale
from tiermem import contract
from tiermem.llm import ScriptedLLM

SUMMARIES = [{"text": "Caroline went to an LGBTQ support group on 7 May 2023.", "date": "8 May 2023"}]


def _teacher(reply: str):
    llm = ScriptedLLM([reply])
    out = ask_teacher(llm, "When did Caroline go to the support group?", SUMMARIES)
    # the teacher sees exactly the router's contract prompt
    assert llm.calls[0] == contract.render_messages("When did Caroline go to the support group?", SUMMARIES)
    return out


def test_agreeing_teacher_output_becomes_the_target():
    teacher = _teacher('{"action": "ANSWER", "reason": "Summary 1 gives the date."}')
    target = sft_target("ANSWER", teacher, 1.0, None)
    assert target.source == "teacher" and target.teacher_agrees is True
    assert json.loads(target.target) == {"action": "ANSWER", "reason": "Summary 1 gives the date."}
    assert contract.parse(target.target).valid_json


def test_disagreeing_teacher_is_replaced_by_label_and_template():
    teacher = _teacher('{"action": "ANSWER", "reason": "looks fine"}')
    target = sft_target("ESCALATE", teacher, 0.0, None)
    assert target.source == "template" and target.teacher_agrees is False
    assert contract.parse(target.target).action == "ESCALATE"
    assert "looks fine" not in target.target


def test_unparseable_teacher_does_not_agree():
    teacher = _teacher("I think we should answer.")
    assert not teacher.parsed_ok and teacher.action == "ESCALATE"
    target = sft_target("ESCALATE", teacher, 0.0, None)
    assert target.teacher_agrees is False and target.source == "template"


def test_no_label_no_target_and_no_teacher_uses_template():
    assert sft_target(None, None, 0.5, None).target is None
    target = sft_target("ANSWER", None, 1.0, None)
    assert target.source == "template" and target.teacher_agrees is None
    assert contract.parse(target.target).action == "ANSWER"


def test_template_uses_sufficiency_reason_only_when_it_agrees():
    agree = {"sufficient": False, "reason": "The year is missing.", "parsed_ok": True}
    assert templated_rationale("ESCALATE", 0.5, agree) == "The year is missing."
    assert templated_rationale("ANSWER", 1.0, agree) != "The year is missing."
    assert "related facts" in templated_rationale("ESCALATE", 0.5, None)
    assert "No retrieved summary" in templated_rationale("ESCALATE", 0.0, None)


def test_run_keeps_teacher_targets_only_where_they_agree(tmp_path):
    from labeling.config import LabelConfig
    from labeling.roles import Roles
    from labeling.run import run
    from tests.helpers.label_helpers import SMALL_MEMORY, HashEmbedder, answer_from_prompt
    from tiermem.settings.config import from_dict

    teacher = ScriptedLLM(lambda m: '{"action": "ESCALATE", "reason": "The year is not stated."}')
    cfg = from_dict(LabelConfig, {"output_dir": str(tmp_path), "memory": SMALL_MEMORY, "label_rule": "evidence"})
    stats = run(cfg, Roles({"answerer": ScriptedLLM(answer_from_prompt), "teacher": teacher}), embedder=HashEmbedder())
    records = [json.loads(line) for line in (tmp_path / "all_records.jsonl").read_text().splitlines()]
    labeled = [r for r in records if r["label"]]
    assert {r["label"] for r in labeled} == {"ANSWER", "ESCALATE"}  # the sample yields both labels
    for rec in labeled:
        parsed = contract.parse(rec["sft_target"])
        assert parsed.valid_json and parsed.action == rec["label"]
        if rec["label"] == "ESCALATE":
            assert rec["teacher_agrees"] and rec["sft_source"] == "teacher"
            assert parsed.reason == "The year is not stated."
        else:
            assert rec["teacher_agrees"] is False and rec["sft_source"] == "template"
    escalate_share = sum(r["label"] == "ESCALATE" for r in labeled) / len(labeled)
    assert stats["teacher"]["agreement_with_label"] == round(escalate_share, 4)
    assert len(teacher.calls) == len(records)
