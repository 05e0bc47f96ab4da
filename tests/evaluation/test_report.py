import json

import pytest

from evaluation import metrics as M
from evaluation import report as R
from evaluation import sweep as S


def rec(qid, s_ok, r_ok, label, cat):
    return {"qid": qid, "category": cat, "label": label, "s_ok": s_ok, "r_ok": r_ok, "error": None,
            "cost_summary_input_tokens": 100, "cost_research_input_tokens": 1000,
            "cost_summary_wall_s": 1.0, "cost_research_wall_s": 10.0}


RECORDS = [rec("A", True, True, "ANSWER", "1"), rec("B", True, False, "ANSWER", "1"),
           rec("C", False, True, "ESCALATE", "2"), rec("D", False, True, "ESCALATE", "2"),
           rec("E", False, False, None, "2")]


@pytest.fixture
def report(tmp_path):
    cases = M.load_cases(RECORDS).cases
    p = [0.1, 0.2, 0.9, 0.8, 0.3]
    escalate = [1.0 if x >= 0.5 else 0.0 for x in p]
    routed = M.replay(cases, escalate, router_tokens=[12] * 5, router_latency_s=[0.2] * 5,
                      parsed_ok=[True, True, False, True, True])
    meta = {"router": "unit-router", "split": "test", "n": len(cases), "correctness_rule": "label_rule",
            "label_rule": "outcome", "threshold_logit": 0.5, "plot": str(tmp_path / "eval.png"),
            "notes": ["hand-built records"]}
    return R.build_report(routed=routed, baselines=M.baselines(cases, routed.escalation_rate),
                          sweep=S.sweep(cases, p), meta=meta)


def test_json_roundtrip(report, tmp_path):
    path = R.write_json(report, tmp_path / "out" / "eval.json")
    data = json.loads(path.read_text())
    assert list(data["policies"]) == ["routed", "summary_only", "raw_only", "oracle", "random"]
    assert data["policies"]["routed"]["accuracy"] == pytest.approx(0.8)  # C and D escalated
    assert data["policies"]["routed"]["unparseable"] == 1
    assert data["policies"]["routed"]["mean_input_tokens"] == pytest.approx(460)  # the router's 12 apart
    assert data["policies"]["routed"]["mean_router_tokens"] == pytest.approx(12)
    assert data["sweep"]["apgr"] == pytest.approx(1.3)
    assert data["sweep"]["points"][0]["threshold_logit"] is None
    assert data["meta"]["router"] == "unit-router"


def test_markdown_table(report, tmp_path):
    text = R.write_markdown(report, tmp_path / "eval.md").read_text()
    assert text.startswith("# Routing evaluation: unit-router on `test`")
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ")}
    for title in ("routed", "summary-only", "raw-only (always escalate)", "oracle (cheapest correct path)",
                  "random at routed rate (expected)"):
        assert title in rows, title
    routed_cells = [c.strip() for c in rows["routed"].split("|")[1:-1]]
    assert routed_cells[1:4] == ["0.800", "0.400", "460.0"]
    assert routed_cells[5:7] == ["12.0", "0.200"]  # the router's own tokens and latency, in their own columns
    assert [c.strip() for c in rows["summary-only"].split("|")[1:3]] == ["summary-only", "0.400"]
    assert "Unparseable router outputs (counted as ESCALATE): 1" in text
    assert "APGR (average gap recovered over escalation rates 0..1; random = 0.5): 1.300" in text
    assert "recover 80% of the gap: 0.160" in text
    assert "| unlabeled | 1 | 0 |" in text  # confusion row for E
    assert "![accuracy vs input tokens](eval.png)" in text
    assert "note: hand-built records" in text


def test_markdown_without_router_or_sweep(report):
    report = dict(report, sweep=None, policies={k: v for k, v in report["policies"].items() if k != "routed"})
    text = R.render_markdown(report)
    assert "Threshold sweep" not in text and "Confusion" not in text
    assert "| summary-only |" in text


def test_plot_png(report, tmp_path):
    import matplotlib.image as mpimg

    path = R.write_plot(report, tmp_path / "plots" / "eval.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = mpimg.imread(path)
    assert img.shape[0] > 300 and img.shape[1] > 500
    assert img[..., :3].std() > 0.05  # something was drawn
