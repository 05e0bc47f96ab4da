"""A label record in the shape the labeling stage writes, for the eval, calibrate and router tests."""

def rec(qid, conv, s_ok, r_ok, label, split, cat="1", summary="nothing relevant"):
    return {
        "conv_id": conv, "qid": qid, "question": f"question {qid}?", "gold_answer": "x", "category": cat,
        "router_summaries": [{"unit_id": f"u-{qid}", "text": summary, "score": 0.5, "date": "2023-05-07",
                              "page_ids": ["p1"]}],
        "label": label, "label_rule": "evidence", "s_ok": s_ok, "r_ok": r_ok,
        "s_ok_outcome": False, "r_ok_outcome": False, "s_ok_evidence": s_ok, "r_ok_evidence": r_ok,
        "cost_summary_input_tokens": 200, "cost_research_input_tokens": 2000,
        "cost_summary_wall_s": 1.0, "cost_research_wall_s": 8.0, "error": None, "split": split,
    }
