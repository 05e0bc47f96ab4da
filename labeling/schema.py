"""The label record's `datasets` schema: flat columns; nested JSON (judges, sufficiency, teacher) as strings."""

from __future__ import annotations

from datasets import Features, List, Value

_S, _F, _I, _B = Value("string"), Value("float64"), Value("int64"), Value("bool")
PATH_COST_FIELDS = ("input_tokens", "output_tokens", "llm_calls", "wall_s", "pages_read", "rounds")

# one retrieved unit's own target (labeling/unit_targets.py): the evidence rule over a one-unit summary set
UNIT_TARGET = {"unit_id": _S, "rank": _I, "text": _S, "score": _F, "date": _S, "page_ids": List(_S),
               "speakers": List(_S), "answer_recall": _F, "gold_in_pages": _I, "s_ok": _B,
               # a careful reading of the unit (labeling/judgments/format.py), null where it was not judged: yes / no /
               # partial, and the unit's words that carry the answer
               "verdict": _S, "span": _S}

# speakers: who speaks in the unit's source turns (data the person guard reads; the router reads the text)
ROUTER_SUMMARY = {"unit_id": _S, "text": _S, "score": _F, "date": _S, "page_ids": List(_S), "speakers": List(_S)}

FEATURES = Features({
    "conv_id": _S, "qid": _S, "split": _S, "source": _S, "question": _S, "question_date": _S,
    "gold_answer": _S, "category": _S, "evidence_ids": List(_S),
    # memory as of the question: the turn it was asked at (it reads only what came before); null = the whole history.
    # question_tags: what else the data says of it (RealMem: session_type, topic), a JSON string
    "asked_before": _S, "question_tags": _S,
    # the memory facts it needs (RealMem's memory_used): how many, and how many the summaries / research pages held
    # (labeling/evidence.py point_counts); null when the data names none
    "n_points": _I, "points_in_summaries": _I, "points_in_research": _I,
    # a request with its reply (RealMem): the reply's details the memory as of it states, and how many of them the
    # summaries / the summaries and research pages together miss (labeling/reply_evidence.py); null without a reply
    "reply_details": _I, "reply_missing_in_summaries": _I, "reply_missing_after_research": _I,
    "router_summaries": List(ROUTER_SUMMARY),  # the router's input, verbatim and in rank order
    "summary_answer": _S, "research_answer": _S, "research_pages": List(_S), "research_stop": _S,
    "research_parse_failures": _I, "summary_f1": _F, "research_f1": _F,
    "judges": _S, "sufficiency": _S,  # JSON strings
    "s_ok_outcome": _B, "r_ok_outcome": _B, "s_ok_evidence": _B, "r_ok_evidence": _B,
    "answer_recall": _F, "gold_in_summary_pages": _I, "gold_in_research_pages": _I, "n_gold": _I,
    # research judged by what it read: the answer recall over its pages' text, which signal made r_ok true, and
    # how the question's names were resolved against the conversation's speakers (labeling/evidence.py)
    "research_recall": _F, "r_ok_by": _S, "person_guard": _S,
    "label_outcome": _S, "drop_reason_outcome": _S, "label_evidence": _S, "drop_reason_evidence": _S,
    "label_rule": _S, "label": _S, "drop_reason": _S, "s_ok": _B, "r_ok": _B, "sufficiency_veto": _B,
    # which decided s_ok (and so the label): "judgment" (a careful-reading judgment of these exact units) or
    # "lexical" (the label rule); null when the run read no judgments. judgment_match: why a judgment was or was
    # not used (labeling/judgments/format.py MATCH_OUTCOMES); judgment: its verdicts as a JSON string
    "s_ok_by": _S, "judgment_match": _S, "judgment": _S,
    "answers_generated": _B, "cost_estimated": _B,  # false / true: generator-free labels, research cost estimated
    "teacher": _S, "teacher_agrees": _B, "sft_target": _S, "sft_source": _S,  # teacher: JSON string
    **{f"cost_{path}_{k}": (_F if k == "wall_s" else _I) for path in ("summary", "research") for k in PATH_COST_FIELDS},
    "label_wall_s": _F, "error": _S,
    # minimal pairs (train split only): the variant's kind and the qid of the question it varies; null on natural rows
    "augmentation": _S, "augmented_from": _S,
    # per-unit targets of natural rows: the router units (rank 1..k), then deeper ranks in the train split only;
    # empty on minimal pairs (their question's row has them) and on error records
    "unit_targets": List(UNIT_TARGET),
})
