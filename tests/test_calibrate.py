import json

import pytest

from serving.calibrate import (
    CalibrateConfig,
    calibrate,
    load_labeled,
    main,
    summarize,
    threshold_for_hard_recall,
    threshold_for_rate,
)
from tiermem.config import ConfigError, parse_cli

SCORES = [0.9, 0.1, 0.8, 0.3, 0.7, 0.2, 0.6, 0.4, 0.5, 0.05]
LABELS = ["ESCALATE", "ANSWER", "ESCALATE", "ESCALATE", "ANSWER", "ANSWER", "ESCALATE", "ANSWER", "ANSWER",
          "ANSWER"]


@pytest.mark.parametrize(("rate", "expected", "escalated"), [
    (0.3, 0.7, 3), (0.5, 0.5, 5), (0.25, 0.7, 3), (0.1, 0.9, 1), (1.0, 0.05, 10), (0.01, 0.9, 1)])
def test_threshold_for_rate_hits_the_quantile(rate, expected, escalated):
    t = threshold_for_rate(SCORES, rate)
    assert t == expected
    assert sum(s >= t for s in SCORES) == escalated
    assert sum(s >= t for s in SCORES) >= rate * len(SCORES)  # never under the target


def test_ties_escalate_together():
    assert threshold_for_rate([0.5, 0.5, 0.5, 0.1], 0.5) == 0.5
    assert summarize([0.5, 0.5, 0.5, 0.1], ["ANSWER"] * 4, 0.5)["escalation_rate"] == 0.75


def test_hard_recall_threshold():
    # ESCALATE-labeled scores: 0.9, 0.8, 0.6, 0.3
    assert threshold_for_hard_recall(SCORES, LABELS, 0.5) == 0.8
    assert threshold_for_hard_recall(SCORES, LABELS, 0.75) == 0.6
    assert threshold_for_hard_recall(SCORES, LABELS, 1.0) == 0.3
    out = calibrate(SCORES, LABELS, "hard_recall", 0.75)
    assert out["threshold"] == 0.6
    assert out["achieved"]["hard_recall"] == 0.75
    assert out["achieved"]["escalation_rate"] == 0.4  # 0.9, 0.8, 0.7, 0.6
    assert out["achieved"]["label_accuracy"] == 0.8  # 0.7 wrongly escalated, 0.3 wrongly answered


def test_bad_targets_are_rejected():
    with pytest.raises(ValueError, match="rate"):
        threshold_for_rate(SCORES, 0.0)
    with pytest.raises(ValueError, match="no ESCALATE"):
        threshold_for_hard_recall([0.1], ["ANSWER"], 0.9)
    with pytest.raises(ConfigError, match="target"):
        parse_cli(CalibrateConfig, ["target=cheap"])
    with pytest.raises(ConfigError, match="value"):
        parse_cli(CalibrateConfig, ["value=1.5"])


def test_load_labeled_skips_unlabeled_and_names_bad_records(tmp_path):
    path = tmp_path / "records.jsonl"
    rows = [{"question": "q1", "router_summaries": [], "label": "ANSWER"},
            {"question": "q2", "router_summaries": [], "label": None}]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    assert [r["question"] for r in load_labeled(str(path), "validation")] == ["q1"]
    path.write_text(json.dumps({"question": "q"}))
    with pytest.raises(ValueError, match="record 0: missing field 'router_summaries'"):
        load_labeled(str(path), "validation")


def test_main_reports_one_clear_error_line(tmp_path, capsys):
    assert main([f"data={tmp_path / 'missing'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "label data not found" in err[0]


def test_calibrate_stage_stores_threshold_used_at_load(tmp_path_factory, tmp_path):
    import shutil

    from serving.artifacts import read_run_meta
    from serving.router import LocalRouter
    from tests.router_fixture import FIXTURES, make_router_run

    run_dir = tmp_path / "run"
    shutil.copytree(make_router_run(), run_dir)
    data = tmp_path / "val.jsonl"
    data.write_text("\n".join(json.dumps({"question": q, "router_summaries": s, "label": label})
                              for q, s, label in FIXTURES))
    assert main([f"router={run_dir}", f"data={data}", "target=hard_recall", "value=1.0"]) == 0
    cal = read_run_meta(run_dir).calibration
    assert cal["target"] == {"kind": "hard_recall", "value": 1.0}
    assert cal["achieved"]["hard_recall"] == 1.0 and cal["achieved"]["n"] == len(FIXTURES)
    router = LocalRouter.from_pretrained(run_dir)
    assert router.threshold == cal["threshold"]
    escalated = [d.action == "ESCALATE" for d in router.route_batch([f[0] for f in FIXTURES], [f[1] for f in FIXTURES])]
    assert sum(escalated) / len(FIXTURES) == cal["achieved"]["escalation_rate"]
