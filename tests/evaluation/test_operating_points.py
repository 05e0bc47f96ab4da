"""Calibrate stores extra named thresholds (operating_points) beside the main one; eval reports each as a row of
its own, with intervals, and shows AUROC per conversation."""

from __future__ import annotations

import json

import pytest

from evaluation.calibrate import CalibrateConfig, OperatingPoint
from labeling.schema import PATH_COST_FIELDS
from tests.helpers.router_fixtures import record
from tiermem.runs.run_meta import read_run_meta
from tiermem_cli import cli


def _replayable(i: int, conv: str, s_ok: bool, r_ok: bool) -> dict:
    rec = record(i, conv, s_ok, r_ok, tokens=1000 + 100 * i)
    rec["router_summaries"][0]["score"] = 0.9 - 0.05 * i  # signals that differ from row to row
    for path, tokens in (("summary", 300), ("research", 1000 + 100 * i)):
        rec.update({f"cost_{path}_{k}": 0 for k in PATH_COST_FIELDS})
        rec[f"cost_{path}_input_tokens"], rec[f"cost_{path}_wall_s"] = tokens, 0.5
    rec.update(category="2", split="", error=None, label_rule="evidence")
    return rec


@pytest.fixture()
def dataset(tmp_path):
    from datasets import Dataset, DatasetDict

    flags = [(True, True), (False, True), (True, False), (False, True), (True, True), (False, True)]
    splits = {"train": [_replayable(i, "c1" if i < 3 else "c2", *flags[i]) for i in range(6)],
              "validation": [_replayable(i, "c3", *flags[i - 6]) for i in range(6, 12)],
              "test": [_replayable(i, "c4" if i < 15 else "c5", *flags[i - 12]) for i in range(12, 18)]}
    path = tmp_path / "dataset"
    DatasetDict({k: Dataset.from_list(v) for k, v in splits.items()}).save_to_disk(str(path))
    return path


def test_operating_point_config_is_checked():
    with pytest.raises(ValueError, match="exactly one of value"):
        OperatingPoint(name="x", criterion="token_budget")
    with pytest.raises(ValueError, match="operating point budget_share must be <= 1, got 1.5"):
        OperatingPoint(name="x", criterion="token_budget", budget_share=1.5)
    with pytest.raises(ValueError, match="budget_share applies"):
        OperatingPoint(name="x", criterion="escalation_rate", value=0.5, budget_share=0.5)
    with pytest.raises(ValueError, match="unique"):
        CalibrateConfig(operating_points=[{"name": "a", "criterion": "escalation_rate", "value": 0.5}] * 2)


def test_calibrate_stores_operating_points_and_eval_reports_them(dataset, tmp_path, capsys):
    router = tmp_path / "features"
    assert cli.main(["fit-features", f"data={dataset}", f"output_dir={router}"]) == 0
    assert cli.main(["calibrate", f"router={router}", f"data={dataset}", "split=validation",
                     'operating_points=[{"name": "tokens_80", "criterion": "token_budget", "budget_share": 0.8},'
                     ' {"name": "half", "criterion": "escalation_rate", "value": 0.5}]']) == 0
    calibration = read_run_meta(router).calibration
    points = calibration["operating_points"]
    assert set(points) == {"tokens_80", "half"}
    tokens = points["tokens_80"]
    assert tokens["budget_share"] == 0.8 and tokens["achieved"]["mean_input_tokens"] <= (
        tokens["budget_mean_input_tokens"] + 1e-9)
    assert points["half"]["achieved"]["escalation_rate"] >= 0.5

    out = tmp_path / "eval"
    assert cli.main(["eval", f"data={dataset}", "split=test", "router.kind=features", f"router.path={router}",
                     f"output_dir={out}", "bootstrap.n_boot=20"]) == 0, capsys.readouterr().err
    report = json.loads((out / "eval.json").read_text())
    for name, point in points.items():
        key = f"routed@{name}"
        assert key in report["policies"] and key in report["intervals"]
        assert report["meta"]["operating_points"][key]["threshold_logit"] == point["threshold_logit"]
        assert key not in report["ranking"]  # the same scores as the router's own row
    # the main row keeps the main threshold
    assert report["meta"]["threshold_logit"] == calibration["threshold_logit"]
    per_conv = report["per_conversation"]
    assert set(per_conv) == {"c4", "c5"} and per_conv["c4"]["n_labeled"] == 3
    from tiermem.stats import auroc

    preds = [p for p in map(json.loads, (out / "predictions.jsonl").read_text().split("\n")[:-1])
             if p["router"] == "routed" and p["conv_id"] == "c5" and p["label"]]
    assert per_conv["c5"]["auroc"]["routed"] == pytest.approx(
        auroc([p["score"] for p in preds], [p["label"] == "ESCALATE" for p in preds]))
    md = (out / "eval.md").read_text()
    assert "AUROC per conversation" in md and "routed@tokens_80" in md

    # an explicit threshold asks for one operating point: no extra rows
    out2 = tmp_path / "eval2"
    assert cli.main(["eval", f"data={dataset}", "split=test", "router.kind=features", f"router.path={router}",
                     "router.threshold_logit=0.0", f"output_dir={out2}", "bootstrap.n_boot=0"]) == 0
    assert not any("@" in k for k in json.loads((out2 / "eval.json").read_text())["policies"])
