import math

import pytest

from evaluation import metrics as M
from evaluation import sweep as S
from labeling.dataset import RecordError


def rec(qid, s_ok, r_ok, label, cat="1", s_tok=100, r_tok=1000, s_lat=1.0, r_lat=10.0, **extra):
    r = {
        "qid": qid, "category": cat, "label": label, "label_rule": "outcome", "s_ok": s_ok, "r_ok": r_ok,
        "s_ok_outcome": s_ok, "r_ok_outcome": r_ok, "s_ok_evidence": not s_ok, "r_ok_evidence": True,
        "cost_summary_input_tokens": s_tok, "cost_research_input_tokens": r_tok,
        "cost_summary_wall_s": s_lat, "cost_research_wall_s": r_lat, "error": None,
    }
    r.update(extra)
    return r


# A: both right, B: only summary right, C/D: only research right, E: neither (dropped by the rule).
RECORDS = [
    rec("A", True, True, "ANSWER", cat="1"),
    rec("B", True, False, "ANSWER", cat="1"),
    rec("C", False, True, "ESCALATE", cat="2"),
    rec("D", False, True, "ESCALATE", cat="2"),
    rec("E", False, False, None, cat="2"),
]


@pytest.fixture
def cases():
    return M.load_cases(RECORDS).cases


def test_replay_headline_metrics(cases):
    m = M.replay(cases, [1, 0, 1, 0, 0], router_tokens=[10] * 5, router_latency_s=[0.5] * 5)
    assert m.n == 5
    assert m.accuracy == pytest.approx(3 / 5)  # A research ok, B summary ok, C research ok; D, E wrong
    assert m.escalation_rate == pytest.approx(0.4)
    # the answering model's tokens and time on the path taken; the router's own cost apart
    assert m.mean_input_tokens == pytest.approx((1000 + 100 + 1000 + 100 + 100) / 5)
    assert m.mean_latency_s == pytest.approx((10 + 1 + 10 + 1 + 1) / 5)
    assert m.mean_router_tokens == 10 and m.mean_router_latency_s == pytest.approx(0.5)
    assert m.hard_recall == pytest.approx(0.5)  # C escalated, D not
    assert m.false_cache_hits == 1  # D: answered from summaries though only research was right
    assert m.false_cache_misses == 1  # A: escalated though the summary path was right
    assert m.n_escalated == 2
    assert not m.expected_value


def test_repair_and_regress_rates(cases):
    m = M.replay(cases, [1, 1, 1, 0, 1])  # escalate A, B, C, E
    # escalated with summary wrong: C (research right), E (research wrong) -> repair 1/2
    assert m.repair_rate == pytest.approx(0.5)
    # escalated with summary right: A (research right), B (research wrong) -> regress 1/2
    assert m.regress_rate == pytest.approx(0.5)
    none = M.replay(cases, [0] * 5)
    assert none.repair_rate is None and none.regress_rate is None


def test_confusion_and_categories(cases):
    m = M.replay(cases, [1, 0, 1, 0, 0])
    assert m.confusion == {
        "ANSWER": {"ANSWER": 1, "ESCALATE": 1},
        "ESCALATE": {"ANSWER": 1, "ESCALATE": 1},
        "unlabeled": {"ANSWER": 1, "ESCALATE": 0},
    }
    assert set(m.per_category) == {"1", "2"}
    cat2 = m.per_category["2"]
    assert cat2["n"] == 3
    assert cat2["accuracy"] == pytest.approx(1 / 3)  # C right, D and E wrong
    assert cat2["summary_only_accuracy"] == 0
    assert cat2["raw_only_accuracy"] == pytest.approx(2 / 3)
    assert m.per_category["1"]["accuracy"] == 1


def test_unparseable_counted(cases):
    m = M.replay(cases, [1, 1, 0, 0, 0], parsed_ok=[False, True, True, True, False])
    assert m.unparseable == 2


def test_baselines(cases):
    b = M.baselines(cases, random_rate=0.4)
    assert b["summary_only"].accuracy == pytest.approx(0.4)
    assert b["summary_only"].mean_input_tokens == 100
    assert b["raw_only"].accuracy == pytest.approx(0.6)
    assert b["raw_only"].escalation_rate == 1
    assert b["raw_only"].hard_recall == 1
    # oracle: A, B, E from summaries (cheaper / nothing right), C, D escalated
    assert b["oracle"].accuracy == pytest.approx(0.8)
    assert b["oracle"].escalation_rate == pytest.approx(0.4)
    assert b["oracle"].mean_input_tokens == pytest.approx(460)
    rnd = b["random"]
    assert rnd.expected_value
    assert rnd.accuracy == pytest.approx(0.6 * 0.4 + 0.4 * 0.6)
    assert rnd.mean_input_tokens == pytest.approx(0.6 * 100 + 0.4 * 1000)
    assert rnd.hard_recall == pytest.approx(0.4)
    assert rnd.false_cache_hits == pytest.approx(0.6 * 2)
    assert b["summary_only"].mean_router_tokens == 0


def test_oracle_prefers_cheaper_correct_path():
    cs = M.load_cases([rec("x", True, True, "ANSWER", s_tok=500, r_tok=200)]).cases
    assert M.oracle_escalations(cs) == [1.0]


def test_sweep_on_known_ranking(cases):
    # ranking C > D > E > B > A: the two repairable cases first
    res = S.sweep(cases, [0.1, 0.2, 0.9, 0.8, 0.3])
    rates = [p.escalation_rate for p in res.points]
    accs = [p.accuracy for p in res.points]
    assert rates == pytest.approx([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    assert accs == pytest.approx([0.4, 0.6, 0.8, 0.8, 0.6, 0.6])
    assert math.isinf(res.points[0].threshold_logit) and res.points[-1].threshold_logit == 0.1
    assert [p.mean_input_tokens for p in res.points] == pytest.approx([100, 280, 460, 640, 820, 1000])
    assert res.gap == pytest.approx(0.2)
    # PGR = 0,1,2,2,1,1 on a 0.2 grid
    assert res.apgr == pytest.approx(1.3)
    assert res.rate_to_recover == {"80": pytest.approx(0.16), "95": pytest.approx(0.19)}
    assert res.auc_accuracy_tokens == pytest.approx(0.66)
    d = res.to_dict()
    assert d["points"][0]["threshold_logit"] is None  # inf is not JSON
    M.dumps(d)


def test_sweep_ties_escalate_together(cases):
    res = S.sweep(cases, [0.5, 0.5, 0.5, 0.1, 0.1])
    assert [p.escalation_rate for p in res.points] == pytest.approx([0, 0.6, 1.0])


def test_apgr_known_curves():
    # random routing: accuracy linear in the escalation rate -> APGR 0.5, 80% at rate 0.8
    rates = [0, 0.25, 0.5, 0.75, 1.0]
    linear = [0.4 + 0.2 * r for r in rates]
    assert S.apgr(rates, linear, 0.4, 0.6) == pytest.approx(0.5)
    assert S.rate_to_recover(rates, linear, 0.4, 0.6, 0.8) == pytest.approx(0.8)
    # a router that recovers the whole gap at 20% escalation, then stays flat
    assert S.apgr([0, 0.2, 1.0], [0.4, 0.6, 0.6], 0.4, 0.6) == pytest.approx(0.9)
    assert S.rate_to_recover([0, 0.2, 1.0], [0.4, 0.6, 0.6], 0.4, 0.6, 0.95) == pytest.approx(0.19)
    # no gap: nothing to recover
    assert S.apgr(rates, linear, 0.6, 0.6) is None
    assert S.rate_to_recover(rates, linear, 0.7, 0.6, 0.8) is None
    with pytest.raises(ValueError, match="rate 0 to 1"):
        S.apgr([0.2, 1.0], [0.5, 0.6], 0.4, 0.6)


def test_auc_normalized():
    assert S.auc_normalized([0, 1, 2], [0, 1, 1]) == pytest.approx(0.75)
    assert S.auc_normalized([2, 0, 1], [1, 0, 1]) == pytest.approx(0.75)  # order-free
    assert S.auc_normalized([5, 5], [0.1, 0.2]) is None


def test_correctness_rule_selects_columns():
    cs = M.load_cases(RECORDS, rule="evidence").cases
    assert [c.s_ok for c in cs] == [False, False, True, True, True]
    assert all(c.r_ok for c in cs)
    with pytest.raises(ValueError, match="correctness rule"):
        M.load_cases(RECORDS, rule="vibes")


def test_error_and_unlabeled_records():
    records = RECORDS + [rec("F", True, True, "ANSWER", error="LLMError: timeout")]
    cs = M.load_cases(records)
    assert cs.n_error == 1 and cs.n_unlabeled == 1 and len(cs.cases) == 5
    labeled = M.load_cases(records, include_unlabeled=False)
    assert [c.qid for c in labeled.cases] == ["A", "B", "C", "D"]


def test_unknown_correctness_is_counted_not_replayed():
    unknown = rec("U", False, None, None)
    cs = M.load_cases(RECORDS + [unknown])
    assert cs.n_unreplayable == 1 and len(cs.cases) == 5 and cs.unreplayable == []


def test_labeled_record_without_a_research_verdict_is_counted_and_kept_for_ranking():
    """What the evidence rule writes for a question without gold evidence ids: ANSWER, r_ok null."""
    no_gold = rec("G", True, None, "ANSWER")
    records = RECORDS + [no_gold]
    cs = M.load_cases(records)
    assert [c.qid for c in cs.cases] == ["A", "B", "C", "D", "E"]  # never replayed as right or wrong
    assert cs.n_unreplayable == 1 and [c.qid for c in cs.unreplayable] == ["G"]
    assert cs.unreplayable[0].r_ok is None and cs.unreplayable_records == [no_gold]
    assert M.classify(no_gold) == M.UNREPLAYABLE and M.classify(RECORDS[0]) == M.REPLAY
    kept, same = M.replayable_records(records)  # the one filter: records and cases stay aligned
    assert [r["qid"] for r in kept] == [c.qid for c in same.cases]
    with pytest.raises(ValueError, match="unknown path verdict"):
        M.replay(cs.unreplayable, [1.0])


@pytest.mark.parametrize("field", ["r_ok", "s_ok"])
def test_a_verdict_of_the_wrong_type_is_still_a_record_error(field):
    bad = rec("W", True, True, "ANSWER")
    bad[field] = "yes"
    with pytest.raises(RecordError, match=rf"record 5 \(qid='W'\): field '{field}' must be true/false/null, "
                                            r"got 'yes'"):
        M.load_cases(RECORDS + [bad])


def test_bad_records_name_the_field():
    bad = rec("Q9", True, True, "ANSWER")
    del bad["cost_research_wall_s"]
    with pytest.raises(RecordError, match=r"Q9.*cost_research_wall_s"):
        M.load_cases([bad])
    with pytest.raises(RecordError, match=r"'s_ok'"):
        M.load_cases([rec("Q1", "yes", True, "ANSWER")])
    with pytest.raises(RecordError, match="label"):
        M.load_cases([rec("Q2", True, True, "MAYBE")])
    with pytest.raises(RecordError, match="non-negative"):
        M.load_cases([rec("Q3", True, True, "ANSWER", s_tok=-1)])


def test_replay_rejects_bad_decisions(cases):
    with pytest.raises(ValueError, match="5 cases"):
        M.replay(cases, [1, 0])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        M.replay(cases, [2, 0, 0, 0, 0])


def test_dumps_refuses_nan():
    with pytest.raises(ValueError):
        M.dumps({"x": float("nan")})
