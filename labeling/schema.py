"""The label record's `datasets` schema (columns: docs/formats.md); nested JSON as strings."""

from __future__ import annotations

from datasets import Features, List, Value

_S, _F, _I, _B = Value("string"), Value("float64"), Value("int64"), Value("bool")
PATH_COST_FIELDS = ("input_tokens", "output_tokens", "llm_calls", "wall_s", "pages_read", "rounds")

UNIT_TARGET = {"unit_id": _S, "rank": _I, "text": _S, "score": _F, "date": _S, "page_ids": List(_S),
               "speakers": List(_S), "answer_recall": _F, "gold_in_pages": _I, "s_ok": _B,
               "verdict": _S, "span": _S}

ROUTER_SUMMARY = {"unit_id": _S, "text": _S, "score": _F, "date": _S, "page_ids": List(_S), "speakers": List(_S)}

FEATURES = Features({
    "conv_id": _S, "qid": _S, "split": _S, "source": _S, "question": _S, "question_date": _S,
    "gold_answer": _S, "category": _S, "evidence_ids": List(_S),
    "asked_before": _S, "question_tags": _S,
    "n_points": _I, "points_in_summaries": _I, "points_in_research": _I,
    "reply_details": _I, "reply_missing_in_summaries": _I, "reply_missing_after_research": _I,
    "router_summaries": List(ROUTER_SUMMARY),
    "summary_answer": _S, "research_answer": _S, "research_pages": List(_S), "research_stop": _S,
    "research_parse_failures": _I, "summary_f1": _F, "research_f1": _F,
    "judges": _S, "sufficiency": _S,  # JSON strings
    "s_ok_outcome": _B, "r_ok_outcome": _B, "s_ok_evidence": _B, "r_ok_evidence": _B,
    "answer_recall": _F, "gold_in_summary_pages": _I, "gold_in_research_pages": _I, "n_gold": _I,
    "research_recall": _F, "r_ok_by": _S, "person_guard": _S,
    "label_outcome": _S, "drop_reason_outcome": _S, "label_evidence": _S, "drop_reason_evidence": _S,
    "label_rule": _S, "label": _S, "drop_reason": _S, "s_ok": _B, "r_ok": _B, "sufficiency_veto": _B,
    "s_ok_by": _S, "judgment_match": _S, "judgment": _S,
    "answers_generated": _B, "cost_estimated": _B,  # false / true: generator-free labels, research cost estimated
    "teacher": _S, "teacher_agrees": _B, "sft_target": _S, "sft_source": _S,  # teacher: JSON string
    **{f"cost_{path}_{k}": (_F if k == "wall_s" else _I) for path in ("summary", "research") for k in PATH_COST_FIELDS},
    "label_wall_s": _F, "error": _S,
    "augmentation": _S, "augmented_from": _S,
    "unit_targets": List(UNIT_TARGET),
})
